"""Check the portable fp32 C reference kernels (runtime_c/reference/*.c) against PyTorch.

All runtime C files (reference and optimized) are compiled with the strict flags the generated code
uses into a shared library that is loaded with ctypes.  Every kernel is
compared with an independent oracle: PyTorch functional ops (and autograd for
the backward kernels) evaluated in float64 on the same float32 inputs, with
the layouts converted (NCHW <-> HWC, OIHW <-> OHWI).  Activation edge cases
are compared with PyTorch's own float32 autograd, bit for bit.
"""

import ctypes
import itertools
import shutil
import subprocess
import zlib

import numpy as np
import pytest

from tests.ckernel import RUNTIME_INC, RUNTIME_SOURCES, runtime_objects

torch = pytest.importorskip("torch")
F = torch.nn.functional

CFLAGS = [
    "-std=c99",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wshadow",
    "-Wdouble-promotion",
    "-ffp-contract=off",
]

# fp32 sums in a different order (and precision) than the float64 PyTorch oracle.
FP32_KERNEL_ATOL = 1e-5
FP32_KERNEL_RTOL = 1e-5

c_float = ctypes.c_float
c_i32 = ctypes.c_int32
c_ptr = ctypes.c_void_p


class Geom(ctypes.Structure):
    """Mirror of tt_conv_geom."""

    _fields_ = [
        (name, ctypes.c_int32)
        for name in [
            "h",
            "w",
            "cin",
            "oh",
            "ow",
            "cout",
            "kh",
            "kw",
            "sh",
            "sw",
            "pt",
            "pl",
            "dh",
            "dw",
            "groups",
        ]
    ]


GP = ctypes.POINTER(Geom)

SIGNATURES = {
    "tt_conv2d_f32": ([c_ptr, c_ptr, c_ptr, c_ptr, GP], None),
    "tt_conv2d_backward_input_f32": ([c_ptr, c_ptr, c_ptr, GP], None),
    "tt_conv2d_backward_weight_f32": ([c_ptr, c_ptr, c_ptr, GP], None),
    "tt_bias_backward_f32": ([c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_dense_f32": ([c_ptr, c_ptr, c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_dense_backward_input_f32": ([c_ptr, c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_dense_backward_weight_f32": ([c_ptr, c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_clip_f32": ([c_ptr, c_ptr, c_i32, c_float, c_float], None),
    "tt_clip_backward_f32": ([c_ptr, c_ptr, c_ptr, c_i32, c_float, c_float], None),
    "tt_leaky_relu_f32": ([c_ptr, c_ptr, c_i32, c_float], None),
    "tt_leaky_relu_backward_f32": ([c_ptr, c_ptr, c_ptr, c_i32, c_float], None),
    "tt_sigmoid_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_sigmoid_backward_f32": ([c_ptr, c_ptr, c_ptr, c_i32], None),
    "tt_tanh_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_tanh_backward_f32": ([c_ptr, c_ptr, c_ptr, c_i32], None),
    "tt_hard_sigmoid_f32": ([c_ptr, c_ptr, c_i32, c_float, c_float], None),
    "tt_hard_sigmoid_backward_f32": (
        [c_ptr, c_ptr, c_ptr, c_i32, c_float, c_float],
        None,
    ),
    "tt_hard_swish_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_hard_swish_backward_f32": ([c_ptr, c_ptr, c_ptr, c_i32], None),
    "tt_add_f32": ([c_ptr] * 6, None),
    "tt_mul_f32": ([c_ptr] * 6, None),
    "tt_reduce_to_f32": ([c_ptr, c_i32, c_ptr, c_ptr, c_ptr], None),
    "tt_copy_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_accumulate_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_avg_pool2d_f32": ([c_ptr, c_ptr, GP, c_i32], None),
    "tt_avg_pool2d_backward_f32": ([c_ptr, c_ptr, GP, c_i32], None),
    "tt_max_pool2d_f32": ([c_ptr, c_ptr, GP], None),
    "tt_max_pool2d_backward_f32": ([c_ptr, c_ptr, c_ptr, GP], None),
    "tt_global_avg_pool_f32": ([c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_global_avg_pool_backward_f32": ([c_ptr, c_ptr, c_i32, c_i32], None),
    "tt_pad_f32": ([c_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_float], None),
    "tt_crop_f32": ([c_ptr] * 5, None),
    "tt_transpose_f32": ([c_ptr] * 4, None),
    "tt_concat_part_f32": ([c_ptr, c_ptr, c_i32, c_i32, c_i32, c_i32], None),
    "tt_slice_part_f32": ([c_ptr, c_ptr, c_i32, c_i32, c_i32, c_i32], None),
    "tt_expf": ([c_float], c_float),
    "tt_logf": ([c_float], c_float),
    "tt_softmax_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_log_softmax_f32": ([c_ptr, c_ptr, c_i32], None),
    "tt_softmax_ce_f32": ([c_ptr, c_ptr, c_i32, c_i32, c_float, c_ptr], c_float),
    "tt_softmax_ce_damped_f32": ([c_ptr, c_ptr, c_i32, c_i32, c_float, c_ptr, c_ptr], c_float),
    "tt_mse_f32": ([c_ptr, c_ptr, c_ptr, c_i32, c_float], c_float),
    "tt_sgd_f32": (
        [c_ptr, c_ptr, c_ptr, c_i32, c_float, c_float, c_float, c_float],
        None,
    ),
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not available")
    assert RUNTIME_SOURCES, "no kernel sources in runtime_c/"
    so = tmp_path_factory.mktemp("ttk") / "libttkernels.so"
    cmd = [gcc, *CFLAGS, "-shared", "-fPIC", *RUNTIME_INC,
           *runtime_objects(tmp_path_factory, CFLAGS)]
    cmd += ["-o", str(so), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    dll = ctypes.CDLL(str(so))
    for name, (argtypes, restype) in SIGNATURES.items():
        fn = getattr(dll, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return dll


# ---------------------------------------------------------------- helpers


def P(a):
    """Pointer to a C-contiguous float32/int32 array (None stays NULL)."""
    if a is None:
        return None
    assert a.flags.c_contiguous and a.dtype in (np.float32, np.int32)
    return a.ctypes.data_as(c_ptr)


def i4(*v):
    return np.array(v, dtype=np.int32)


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return f32(rng.uniform(lo, hi, size=shape))


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def close(actual, expected):
    expected = expected.detach().numpy() if torch.is_tensor(expected) else expected
    np.testing.assert_allclose(
        actual, expected, rtol=FP32_KERNEL_RTOL, atol=FP32_KERNEL_ATOL
    )


def nchw_to_hwc(t):
    return t.detach()[0].permute(1, 2, 0).numpy()


def hwc_to_nchw(a):
    # .contiguous(): torch 2.13 CPU gives a wrong float64 grouped-conv weight
    # gradient for this permuted batch-1 view combined with a permuted weight
    return t64(a).permute(2, 0, 1).unsqueeze(0).contiguous()


# ------------------------------------------------------------ convolution

# (name, h, w, cin, cout, (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw), groups, bias)
CONV_CASES = [
    ("regular", 7, 6, 3, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    ("grouped", 8, 8, 4, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, True),
    ("depthwise", 6, 7, 3, 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3, True),
    ("depthwise_mult2", 6, 7, 3, 6, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3, False),
    ("pointwise", 5, 5, 4, 7, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),
    ("strided", 9, 8, 3, 4, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1, True),
    ("dilated", 9, 9, 2, 3, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, True),
    ("asym_pad", 7, 8, 3, 4, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1), 1, True),
    ("rect_mixed", 8, 9, 4, 4, (2, 3), (2, 1), (1, 0, 2, 1), (2, 1), 2, False),
]


def conv_oracle(x, w, b, strides, pads, dils, groups, dy_seed):
    """float64 PyTorch conv (explicit F.pad for asymmetric padding) + autograd."""
    pt, pb, pl, pr = pads
    xt = hwc_to_nchw(x).detach().requires_grad_(True)
    wt = t64(w).permute(0, 3, 1, 2).contiguous().requires_grad_(True)  # OHWI -> OIHW
    bt = t64(b, grad=True) if b is not None else None
    if pt == pb and pl == pr:  # symmetric: let conv2d pad
        y = F.conv2d(xt, wt, bt, strides, (pt, pl), dils, groups)
    else:
        y = F.conv2d(F.pad(xt, (pl, pr, pt, pb)), wt, bt, strides, 0, dils, groups)
    dy = torch.tensor(
        np.random.default_rng(dy_seed).uniform(-1, 1, size=y.shape).astype(np.float32),
        dtype=torch.float64,
    )
    y.backward(dy)
    return {
        "y": nchw_to_hwc(y),
        "dy": f32(nchw_to_hwc(dy)),
        "dx": nchw_to_hwc(xt.grad),
        "dw": wt.grad.permute(0, 2, 3, 1).numpy(),  # OIHW -> OHWI
        "db": bt.grad.numpy() if bt is not None else None,
    }


@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv2d(lib, case):
    _, h, w, cin, cout, (kh, kw), (sh, sw), pads, (dh, dw), groups, bias = case
    rng = np.random.default_rng(zlib.crc32(case[0].encode()))
    x = rand(rng, h, w, cin)
    wt = rand(rng, cout, kh, kw, cin // groups)
    b = rand(rng, cout) if bias else None
    ref = conv_oracle(x, wt, b, (sh, sw), pads, (dh, dw), groups, dy_seed=1)
    oh, ow, _ = ref["y"].shape
    g = Geom(h, w, cin, oh, ow, cout, kh, kw, sh, sw, pads[0], pads[2], dh, dw, groups)

    y = np.full((oh, ow, cout), np.nan, dtype=np.float32)
    lib.tt_conv2d_f32(P(y), P(x), P(wt), P(b), ctypes.byref(g))
    close(y, ref["y"])

    dy = ref["dy"]
    dx = np.full_like(x, np.nan)  # must be overwritten
    lib.tt_conv2d_backward_input_f32(P(dx), P(dy), P(wt), ctypes.byref(g))
    close(dx, ref["dx"])

    # *_backward_weight accumulates: two calls give twice the gradient
    dwt = np.zeros_like(wt)
    lib.tt_conv2d_backward_weight_f32(P(dwt), P(dy), P(x), ctypes.byref(g))
    close(dwt, ref["dw"])
    lib.tt_conv2d_backward_weight_f32(P(dwt), P(dy), P(x), ctypes.byref(g))
    close(dwt, 2 * ref["dw"])

    if bias:
        db = np.zeros_like(b)
        lib.tt_bias_backward_f32(P(db), P(dy), oh * ow, cout)
        close(db, ref["db"])
        lib.tt_bias_backward_f32(P(db), P(dy), oh * ow, cout)
        close(db, 2 * ref["db"])


# ------------------------------------------------------------------ dense


@pytest.mark.parametrize("bias", [True, False])
def test_dense(lib, bias):
    rng = np.random.default_rng(3)
    n_in, n_out = 13, 7
    x, w = rand(rng, n_in), rand(rng, n_out, n_in)
    b = rand(rng, n_out) if bias else None
    dy = rand(rng, n_out)
    xt, wt = t64(x, grad=True), t64(w, grad=True)
    y_ref = F.linear(xt, wt, t64(b) if bias else None)
    y_ref.backward(t64(dy))

    y = np.full(n_out, np.nan, dtype=np.float32)
    lib.tt_dense_f32(P(y), P(x), P(w), P(b), n_in, n_out)
    close(y, y_ref)
    dx = np.full(n_in, np.nan, dtype=np.float32)
    lib.tt_dense_backward_input_f32(P(dx), P(dy), P(w), n_in, n_out)
    close(dx, xt.grad)
    dw = np.zeros_like(w)
    lib.tt_dense_backward_weight_f32(P(dw), P(dy), P(x), n_in, n_out)
    close(dw, wt.grad)
    lib.tt_dense_backward_weight_f32(P(dw), P(dy), P(x), n_in, n_out)
    close(dw, 2 * wt.grad)


# ------------------------------------------------------------ activations

# Points where PyTorch's gradient conventions matter, plus random values.
EDGES = [-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, -0.0]


def act_input(seed):
    rng = np.random.default_rng(seed)
    edges = np.array(EDGES, dtype=np.float32)
    near = np.concatenate(
        [
            np.nextafter(edges, np.float32(-np.inf)),
            np.nextafter(edges, np.float32(np.inf)),
        ]
    )
    return f32(np.concatenate([edges, near, rng.uniform(-8, 8, 200)]))


def torch_fwd_bwd(fn, x, dy):
    """PyTorch float32 forward and autograd input gradient."""
    xt = torch.tensor(x, requires_grad=True)
    y = fn(xt)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy()


def check_activation(y, dx, y_ref, dx_ref, x):
    close(y, y_ref)
    close(dx, dx_ref)
    # at the edge points the gradient convention must match exactly
    edge = np.isin(x, np.array(EDGES, dtype=np.float32))
    np.testing.assert_array_equal(dx[edge] == 0, dx_ref[edge] == 0)


CLIP_CASES = [
    ("relu", 0.0, float("inf"), F.relu),
    ("relu6", 0.0, 6.0, F.relu6),
    ("hardtanh", -1.0, 1.0, lambda t: F.hardtanh(t, -1.0, 1.0)),
]


@pytest.mark.parametrize("case", CLIP_CASES, ids=[c[0] for c in CLIP_CASES])
def test_clip(lib, case):
    _, lo, hi, fn = case
    x = act_input(5)
    dy = f32(np.random.default_rng(6).uniform(0.5, 1.5, x.size))
    y_ref, dx_ref = torch_fwd_bwd(fn, x, dy)
    y, dx = np.empty_like(x), np.empty_like(x)
    lib.tt_clip_f32(P(y), P(x), x.size, lo, hi)
    lib.tt_clip_backward_f32(P(dx), P(dy), P(x), x.size, lo, hi)
    check_activation(y, dx, y_ref, dx_ref, x)
    # PyTorch: no gradient exactly at the clip limits (relu'(0) == 0)
    assert np.all(dx[(x == lo) | (x == hi)] == 0)


def test_leaky_relu(lib):
    x = act_input(7)
    dy = f32(np.random.default_rng(8).uniform(0.5, 1.5, x.size))
    alpha = 0.1
    y_ref, dx_ref = torch_fwd_bwd(lambda t: F.leaky_relu(t, alpha), x, dy)
    y, dx = np.empty_like(x), np.empty_like(x)
    lib.tt_leaky_relu_f32(P(y), P(x), x.size, alpha)
    lib.tt_leaky_relu_backward_f32(P(dx), P(dy), P(x), x.size, alpha)
    check_activation(y, dx, y_ref, dx_ref, x)
    # PyTorch: the negative slope applies at x == 0
    np.testing.assert_array_equal(dx[x == 0], dx_ref[x == 0])
    close(dx[x == 0], dy[x == 0] * np.float32(alpha))


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_sigmoid_tanh(lib, name):
    x = f32(np.concatenate([act_input(9), [-100.0, 100.0]]))
    dy = f32(np.random.default_rng(10).uniform(-1, 1, x.size))
    fn = torch.sigmoid if name == "sigmoid" else torch.tanh
    xt = t64(x, grad=True)
    y_ref = fn(xt)
    y_ref.backward(t64(dy))
    y, dx = np.empty_like(x), np.empty_like(x)
    getattr(lib, f"tt_{name}_f32")(P(y), P(x), x.size)
    assert np.all(np.isfinite(y))
    getattr(lib, f"tt_{name}_backward_f32")(P(dx), P(dy), P(y), x.size)
    close(y, y_ref)
    close(dx, xt.grad)


def test_hard_sigmoid_pytorch(lib):
    x = act_input(11)
    dy = f32(np.random.default_rng(12).uniform(0.5, 1.5, x.size))
    y_ref, dx_ref = torch_fwd_bwd(F.hardsigmoid, x, dy)
    y, dx = np.empty_like(x), np.empty_like(x)
    alpha, beta = 1.0 / 6.0, 0.5
    lib.tt_hard_sigmoid_f32(P(y), P(x), x.size, alpha, beta)
    lib.tt_hard_sigmoid_backward_f32(P(dx), P(dy), P(x), x.size, alpha, beta)
    check_activation(y, dx, y_ref, dx_ref, x)
    # PyTorch: zero gradient at x == -3 and x == 3
    assert np.all(dx[np.abs(x) == 3] == 0)


def test_hard_sigmoid_onnx_default(lib):
    # ONNX HardSigmoid default alpha=0.2, beta=0.5 (linear on -2.5 < x < 2.5)
    x = f32(np.concatenate([act_input(13), [-2.5, 2.5]]))
    dy = f32(np.random.default_rng(14).uniform(-1, 1, x.size))
    alpha, beta = 0.2, 0.5
    # float64 oracle on the float32 parameters, so the region edges are exact
    t = np.float64(np.float32(alpha)) * x.astype(np.float64) + beta
    y_ref = np.clip(t, 0, 1)
    dx_ref = np.where((t > 0) & (t < 1), dy * np.float32(alpha), 0)
    assert dx_ref[x == 2.5] == 0 and dx_ref[x == -2.5] == 0
    y, dx = np.empty_like(x), np.empty_like(x)
    lib.tt_hard_sigmoid_f32(P(y), P(x), x.size, alpha, beta)
    lib.tt_hard_sigmoid_backward_f32(P(dx), P(dy), P(x), x.size, alpha, beta)
    close(y, y_ref)
    close(dx, dx_ref)


def test_hard_swish(lib):
    x = act_input(15)
    dy = f32(np.random.default_rng(16).uniform(0.5, 1.5, x.size))
    y_ref, dx_ref = torch_fwd_bwd(F.hardswish, x, dy)
    y, dx = np.empty_like(x), np.empty_like(x)
    lib.tt_hard_swish_f32(P(y), P(x), x.size)
    lib.tt_hard_swish_backward_f32(P(dx), P(dy), P(x), x.size)
    check_activation(y, dx, y_ref, dx_ref, x)
    # PyTorch: slope 0 at x == -3 (not -0.5) and 1 at x == 3 (not 1.5)
    np.testing.assert_array_equal(dx[x == -3], 0)
    np.testing.assert_array_equal(dx[x == 3], dy[x == 3])
    np.testing.assert_array_equal(dx[x == -3], dx_ref[x == -3])
    np.testing.assert_array_equal(dx[x == 3], dx_ref[x == 3])


# ---------------------------------------------------------- binary / reduce


def strides_for(shape, full):
    """Element strides reading a contiguous `shape` broadcast to `full`."""
    st, acc = [0] * 4, 1
    for k in range(3, -1, -1):
        st[k] = 0 if shape[k] == 1 and full[k] != 1 else acc
        acc *= shape[k]
    return i4(*st)


BCAST_CASES = [
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    ((2, 3, 4, 5), (1, 3, 1, 5)),
    ((2, 1, 4, 1), (1, 3, 1, 5)),
    ((1, 1, 1, 1), (1, 1, 6, 4)),
]


@pytest.mark.parametrize("sa,sb", BCAST_CASES)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary(lib, op, sa, sb):
    rng = np.random.default_rng(17)
    a, b = rand(rng, *sa), rand(rng, *sb)
    full = tuple(np.broadcast_shapes(sa, sb))
    ref = a.astype(np.float64) + b if op == "add" else a.astype(np.float64) * b
    y = np.full(full, np.nan, dtype=np.float32)
    getattr(lib, f"tt_{op}_f32")(
        P(y),
        P(a),
        P(b),
        P(i4(*full)),
        P(strides_for(sa, full)),
        P(strides_for(sb, full)),
    )
    close(y, ref)


@pytest.mark.parametrize(
    "full,dst_shape",
    [
        ((2, 3, 4, 5), (1, 3, 1, 5)),
        ((2, 3, 4, 5), (1, 1, 1, 1)),
        ((1, 3, 4, 5), (1, 3, 4, 5)),
    ],
)
def test_reduce_to(lib, full, dst_shape):
    rng = np.random.default_rng(18)
    src = rand(rng, *full)
    axes = tuple(k for k in range(4) if dst_shape[k] == 1 and full[k] != 1)
    ref = src.astype(np.float64).sum(axis=axes, keepdims=True)
    dst = np.full(dst_shape, 123.0, dtype=np.float32)  # must be zeroed first
    lib.tt_reduce_to_f32(
        P(dst), dst.size, P(src), P(i4(*full)), P(strides_for(dst_shape, full))
    )
    close(dst, ref)


def test_copy_accumulate(lib):
    rng = np.random.default_rng(19)
    a, b = rand(rng, 37), rand(rng, 37)
    dst = np.zeros_like(a)
    lib.tt_copy_f32(P(dst), P(a), a.size)
    np.testing.assert_array_equal(dst, a)
    lib.tt_accumulate_f32(P(dst), P(b), b.size)
    np.testing.assert_array_equal(dst, a + b)


# ---------------------------------------------------------------- pooling

# (name, h, w, c, (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw))
POOL_CASES = [
    ("k2s2", 8, 6, 3, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
    ("k3s2p1", 9, 7, 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ("k3s1p1", 5, 6, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ("rect", 7, 9, 2, (2, 3), (1, 2), (1, 1, 0, 0), (1, 1)),
    ("asym", 7, 8, 3, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1)),
]


def pool_geom(x_shape, y_shape, k, s, pads, d):
    (h, w, c), (oh, ow, _) = x_shape, y_shape
    return Geom(
        h, w, c, oh, ow, c, k[0], k[1], s[0], s[1], pads[0], pads[2], d[0], d[1], 1
    )


def sym(pads):
    pt, pb, pl, pr = pads
    return pt == pb and pl == pr


def avg_oracle(xt, k, s, pads, include_pad):
    pt, pb, pl, pr = pads
    if sym(pads):
        return F.avg_pool2d(xt, k, s, (pt, pl), count_include_pad=include_pad)
    # asymmetric: pool the zero-padded input, then fix the divisor if needed
    pooled = F.avg_pool2d(F.pad(xt, (pl, pr, pt, pb)), k, s)
    if include_pad:
        return pooled
    ones = F.pad(torch.ones_like(xt), (pl, pr, pt, pb))
    return pooled / F.avg_pool2d(ones, k, s)


@pytest.mark.parametrize("include_pad", [1, 0])
@pytest.mark.parametrize("case", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_avg_pool(lib, case, include_pad):
    _, h, w, c, k, s, pads, d = case
    rng = np.random.default_rng(20)
    x = rand(rng, h, w, c)
    xt = hwc_to_nchw(x).detach().requires_grad_(True)
    y_ref = avg_oracle(xt, k, s, pads, bool(include_pad))
    dy = rand(rng, *nchw_to_hwc(y_ref).shape)
    y_ref.backward(hwc_to_nchw(dy))
    g = pool_geom(x.shape, dy.shape, k, s, pads, d)

    y = np.full(dy.shape, np.nan, dtype=np.float32)
    lib.tt_avg_pool2d_f32(P(y), P(x), ctypes.byref(g), include_pad)
    close(y, nchw_to_hwc(y_ref))
    dx = np.full_like(x, np.nan)
    lib.tt_avg_pool2d_backward_f32(P(dx), P(dy), ctypes.byref(g), include_pad)
    close(dx, nchw_to_hwc(xt.grad))


MAX_POOL_CASES = POOL_CASES + [
    ("dilated", 9, 9, 2, (3, 3), (1, 1), (1, 1, 1, 1), (2, 2)),
    ("dilated_asym", 9, 8, 2, (3, 3), (2, 1), (2, 1, 0, 2), (2, 2)),
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("case", MAX_POOL_CASES, ids=[c[0] for c in MAX_POOL_CASES])
def test_max_pool(lib, case, ties):
    _, h, w, c, k, s, pads, d = case
    rng = np.random.default_rng(21)
    # small integers make equal maxima common, exercising the first-max rule
    x = f32(rng.integers(-2, 2, (h, w, c))) if ties else rand(rng, h, w, c)
    xt = hwc_to_nchw(x).detach().requires_grad_(True)
    pt, pb, pl, pr = pads
    if sym(pads):
        y_ref = F.max_pool2d(xt, k, s, (pt, pl), d)
    else:  # -inf padding is never selected, like the C kernel's skipped taps
        xp = F.pad(xt, (pl, pr, pt, pb), value=-np.inf)
        y_ref = F.max_pool2d(xp, k, s, 0, d)
    dy = rand(rng, *nchw_to_hwc(y_ref).shape)
    y_ref.backward(hwc_to_nchw(dy))
    g = pool_geom(x.shape, dy.shape, k, s, pads, d)

    y = np.full(dy.shape, np.nan, dtype=np.float32)
    lib.tt_max_pool2d_f32(P(y), P(x), ctypes.byref(g))
    np.testing.assert_array_equal(y, nchw_to_hwc(y_ref))
    dx = np.full_like(x, np.nan)
    lib.tt_max_pool2d_backward_f32(P(dx), P(dy), P(x), ctypes.byref(g))
    close(dx, nchw_to_hwc(xt.grad))


def test_global_avg_pool(lib):
    rng = np.random.default_rng(22)
    rows, c = 15, 6
    x, dy = rand(rng, rows, c), rand(rng, c)
    xt = t64(x, grad=True)
    y_ref = xt.mean(dim=0)
    y_ref.backward(t64(dy))
    y = np.empty(c, dtype=np.float32)
    lib.tt_global_avg_pool_f32(P(y), P(x), rows, c)
    close(y, y_ref)
    dx = np.full_like(x, np.nan)
    lib.tt_global_avg_pool_backward_f32(P(dx), P(dy), rows, c)
    close(dx, xt.grad)


# ----------------------------------------------------------------- layout


@pytest.mark.parametrize(
    "in_shape,before,after",
    [
        ((1, 5, 4, 3), (0, 1, 2, 0), (0, 2, 1, 0)),
        ((2, 3, 4, 5), (1, 0, 0, 2), (0, 2, 1, 1)),
        ((1, 1, 1, 7), (0, 0, 0, 0), (0, 0, 0, 0)),
    ],
)
def test_pad_crop(lib, in_shape, before, after):
    rng = np.random.default_rng(23)
    x = rand(rng, *in_shape)
    out_shape = tuple(n + b + a for n, b, a in zip(in_shape, before, after))
    flat_pad = [v for k in range(3, -1, -1) for v in (before[k], after[k])]
    xt = t64(x, grad=True)
    y_ref = F.pad(xt, flat_pad, value=-0.75)
    dy = rand(rng, *out_shape)
    y_ref.backward(t64(dy))

    y = np.full(out_shape, np.nan, dtype=np.float32)
    lib.tt_pad_f32(
        P(y), P(x), P(i4(*in_shape)), P(i4(*out_shape)), P(i4(*before)), -0.75
    )
    np.testing.assert_array_equal(y, y_ref.detach().numpy())
    dx = np.full_like(x, np.nan)
    lib.tt_crop_f32(P(dx), P(dy), P(i4(*in_shape)), P(i4(*out_shape)), P(i4(*before)))
    np.testing.assert_array_equal(dx, xt.grad.numpy())


def test_transpose_all_perms(lib):
    rng = np.random.default_rng(24)
    shape = (2, 3, 4, 5)
    x = rand(rng, *shape)
    for perm in itertools.permutations(range(4)):
        ref = torch.from_numpy(x).permute(*perm).contiguous().numpy()
        y = np.full(ref.shape, np.nan, dtype=np.float32)
        lib.tt_transpose_f32(P(y), P(x), P(i4(*shape)), P(i4(*perm)))
        np.testing.assert_array_equal(y, ref, err_msg=f"perm={perm}")


def test_concat_slice(lib):
    rng = np.random.default_rng(25)
    parts = [rand(rng, 2, n, 4) for n in (3, 1, 5)]  # concat on axis 1
    ref = torch.cat([torch.from_numpy(p) for p in parts], dim=1).numpy()
    outer, inner_y = 2, ref.shape[1] * 4
    y = np.full(ref.shape, np.nan, dtype=np.float32)
    offset = 0
    for p in parts:
        inner_x = p.shape[1] * 4
        lib.tt_concat_part_f32(P(y), P(p), outer, inner_x, inner_y, offset)
        offset += inner_x
    np.testing.assert_array_equal(y, ref)

    # the backward of concat slices the gradient back into its parts
    dy = rand(rng, *ref.shape)
    offset = 0
    for dy_part in torch.split(
        torch.from_numpy(dy), [p.shape[1] for p in parts], dim=1
    ):
        dx = np.full(tuple(dy_part.shape), np.nan, dtype=np.float32)
        inner_x = dx.shape[1] * 4
        lib.tt_slice_part_f32(P(dx), P(dy), outer, inner_x, inner_y, offset)
        np.testing.assert_array_equal(dx, dy_part.numpy())
        offset += inner_x


# ----------------------------------------------------------------- losses

LOGIT_CASES = {
    "random": lambda rng: rand(rng, 10, lo=-3, hi=3),
    "large": lambda rng: f32([1000.0, 999.0, -1000.0, 998.5, 0.0]),
    "tie": lambda rng: f32([0.5, 2.0, -1.0, 2.0, 2.0]),
}


@pytest.mark.parametrize("case", list(LOGIT_CASES))
def test_softmax_family(lib, case):
    rng = np.random.default_rng(26)
    x = LOGIT_CASES[case](rng)
    n = x.size
    y = np.empty_like(x)
    lib.tt_softmax_f32(P(y), P(x), n)
    close(y, torch.softmax(t64(x), 0))
    lib.tt_log_softmax_f32(P(y), P(x), n)
    close(y, torch.log_softmax(t64(x), 0))

    scale = 0.25
    for label in (0, n - 1, int(np.argmax(x))):
        xt = t64(x, grad=True)
        loss_ref = F.cross_entropy(xt.unsqueeze(0), torch.tensor([label]))
        (loss_ref * scale).backward()
        dl = np.full_like(x, np.nan)
        pred = np.full(1, -1, dtype=np.int32)
        loss = lib.tt_softmax_ce_f32(P(dl), P(x), n, label, scale, P(pred))
        assert loss == pytest.approx(loss_ref.item(), rel=1e-5, abs=FP32_KERNEL_ATOL)
        close(dl, xt.grad)
        assert pred[0] == int(np.argmax(x))  # numpy argmax is the first maximum


@pytest.mark.parametrize("case", sorted(LOGIT_CASES))
def test_restricted_softmax_ce(lib, case):
    """FedRS's damped loss (the fleet's restricted softmax) against autograd through
    cross_entropy(logits * (1 - damp)); with damp zero, tt_softmax_ce_f32's bits."""
    rng = np.random.default_rng(28)
    x = LOGIT_CASES[case](rng)
    n, scale = x.size, 0.25
    damp = np.where(rng.random(n) < 0.6, 0.5, 0.0).astype(np.float32)
    for label in (0, n - 1, int(np.argmax(x))):
        damp[label] = 0.0  # a device's own sample's class is never damped
        xt = t64(x, grad=True)
        loss_ref = F.cross_entropy((xt * t64(1 - damp)).unsqueeze(0), torch.tensor([label]))
        (loss_ref * scale).backward()
        dl = np.full_like(x, np.nan)
        pred = np.full(1, -1, dtype=np.int32)
        loss = lib.tt_softmax_ce_damped_f32(P(dl), P(x), n, label, scale, P(pred), P(damp))
        assert loss == pytest.approx(loss_ref.item(), rel=1e-5, abs=FP32_KERNEL_ATOL)
        close(dl, xt.grad)
        assert pred[0] == int(np.argmax(x))  # the undamped logits' prediction
        plain, zero = np.empty_like(x), np.zeros_like(x)
        lp = lib.tt_softmax_ce_f32(P(plain), P(x), n, label, scale, P(pred))
        assert lib.tt_softmax_ce_damped_f32(P(dl), P(x), n, label, scale, P(pred),
                                            P(zero)) == lp
        assert np.array_equal(dl, plain)


def test_mse(lib):
    rng = np.random.default_rng(27)
    n, scale = 11, 0.5
    y, target = rand(rng, n), rand(rng, n)
    yt = t64(y, grad=True)
    loss_ref = F.mse_loss(yt, t64(target))
    (loss_ref * scale).backward()
    dy = np.full_like(y, np.nan)
    loss = lib.tt_mse_f32(P(dy), P(y), P(target), n, scale)
    assert loss == pytest.approx(loss_ref.item(), rel=1e-5, abs=FP32_KERNEL_ATOL)
    close(dy, yt.grad)


# -------------------------------------------------------------- optimizer


@pytest.mark.parametrize(
    "momentum,wd,use_m", [(0.9, 1e-3, True), (0.0, 0.0, False), (0.0, 5e-3, False)]
)
def test_sgd(lib, momentum, wd, use_m):
    rng = np.random.default_rng(28)
    n, lr, grad_scale = 17, 0.05, 0.25
    p = rand(rng, n)
    m = np.zeros(n, dtype=np.float32) if use_m else None
    p_ref = torch.tensor(p.copy(), requires_grad=True)
    opt = torch.optim.SGD([p_ref], lr=lr, momentum=momentum, weight_decay=wd)
    for _ in range(4):
        g_acc = rand(rng, n)  # accumulated (summed) gradient of a batch
        p_ref.grad = torch.tensor(g_acc * np.float32(grad_scale))
        opt.step()
        g = g_acc.copy()
        lib.tt_sgd_f32(P(p), P(g), P(m), n, lr, momentum, wd, grad_scale)
        np.testing.assert_array_equal(g, 0)  # gradient cleared for the next batch
        close(p, p_ref.detach().numpy())


# tt_expf/tt_logf replace libm so host and Cortex-M builds agree bit for bit; they must stay
# as accurate as a libm: within this many float32 ulps of the exact (float64) value.
MATH_ULPS = 2


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    want32 = want.astype(np.float32)
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want32)).astype(np.float64)


def test_expf_logf_are_accurate_over_the_float_range(lib):
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(-103.9, 88.7, 20000), rng.uniform(-1, 1, 5000),
                         [0.0, -0.0, 1e-30, 88.72, -87.3, -100.0]]).astype(np.float32)
    got = np.array([lib.tt_expf(float(x)) for x in xs], np.float32)
    want = np.exp(xs.astype(np.float64))
    normal = want >= np.finfo(np.float32).tiny  # subnormal results: absolute error instead
    assert _ulps(got[normal], want[normal]).max() <= MATH_ULPS
    assert np.abs(got[~normal] - want[~normal]).max() <= 2 * np.finfo(np.float32).smallest_subnormal
    assert lib.tt_expf(89.0) == np.inf and lib.tt_expf(-104.0) == 0.0
    ys = np.concatenate([np.exp(rng.uniform(-87, 88, 20000)), rng.uniform(0.5, 2, 5000),
                         [1.0, 1e-40, 3.4e38]]).astype(np.float32)
    got = np.array([lib.tt_logf(float(y)) for y in ys], np.float32)
    want = np.log(ys.astype(np.float64))
    nz = ys != 1.0
    assert _ulps(got[nz], want[nz]).max() <= MATH_ULPS and lib.tt_logf(1.0) == 0.0
    assert lib.tt_logf(0.0) == -np.inf and np.isnan(lib.tt_logf(-1.0))
