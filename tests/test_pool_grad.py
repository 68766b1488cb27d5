"""A global average pool's gradient kept per channel (passes/pool_grad.py).

The pool's backward used to write dL/dy[c] / (H*W) to every pixel (H x W x C floats, 80 KB on
MobileNetV2's 4 x 4 x 1280 feature-mix output); the readers now take the C-float vector and the
ReLU6 gate instead. Oracles: the plain kernels on the materialised gradient (bit for bit, every
gate and reader), PyTorch autograd + SGD (fp32 training), and the --no-memory-passes build
(int8 and fp32 training, bit for bit).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from tests.ckernel import RUNTIME_INC, runtime_objects
from tinytrain.codegen.context import C_TYPES, CContext
from tinytrain.ir import GRAD, Node
from tinytrain.ops import get_op
from tinytrain.passes.memory_plan import peak_live
from tinytrain.passes.pipeline import Options, compile_model

torch = pytest.importorskip("torch")

from tests.test_torch_parity import digits, torch_param_for, torch_train  # noqa: E402
from tests.torch_models import MobileNetV2, export  # noqa: E402
from tinytrain.device.state_file import read as read_saved  # noqa: E402

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wdouble-promotion",
          "-ffp-contract=off"]
NP = {"f32": np.float32, "s8": np.int8, "s32": np.int32, "u8": np.uint8}
LOSS_RTOL = 1e-4  # the bar: per-step loss within 1e-4 relative (fp32 sums reordered)
WEIGHT_ATOL = 1e-4  # final trained weights vs PyTorch; fp32 accumulation order differs
STEPS = 24  # optimizer steps compared with PyTorch
# fused plain-SGD dense updates vs the unfused ones: a rounding per update over STEPS steps
PLAIN_SGD_RTOL = 1e-4
PLAIN_SGD_ATOL = 1e-6  # parameters near zero
TTE_MBV2 = "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"


# ------------------------------------------------------------ kernels: pooled vs materialised

# (x shape, conv attrs, weight shape): a 1x1 conv, a strided padded 3x3 and a depthwise 3x3;
# all give a 3 x 3 x 6 output, the pool's input
GEOMS = {
    "1x1": ((3, 3, 4), dict(kernel=(1, 1), stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1),
                            groups=1), (6, 1, 1, 4)),
    "3x3s2": ((5, 5, 4), dict(kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1),
                              dilation=(1, 1), groups=1), (6, 3, 3, 4)),
    "dw3x3": ((3, 3, 6), dict(kernel=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1),
                              dilation=(1, 1), groups=6), (6, 3, 3, 1)),
}
DY = (3, 3, 6)
GATES = ("none", "mask", "s8", "f32")
S8_RANGE = {"lo": -20, "hi": 40}  # a fused ReLU6's bounds in the int8 domain
F32_RANGE = {"lo": 0.0, "hi": 6.0}  # ReLU6


@dataclass
class KCase:
    id: str
    plain: list[Node]  # global_avg_pool_backward, the gate, the reader
    pooled: list[Node]  # global_avg_pool_share, pooled_grad
    arrays: dict[str, np.ndarray]  # every tensor's initial value (dtype = its C type)


def _reader(op: str, geom: str, variant: str, rng) -> tuple[tuple[str, ...], tuple[str, ...],
                                                           dict, dict[str, np.ndarray]]:
    """(inputs after dy, outputs, attrs, arrays) of one reader of the pool's gradient.
    variant (weight updates): whole, partial (trains input channels 2 and 0 of 4: x is
    their gathered copy), packed (partial, the weight holds just those two: a split weight),
    shadow (int8: 1-byte fractions)."""
    xs, conv, ws = GEOMS[geom]
    a: dict[str, np.ndarray] = {}
    q8 = op.endswith("_q8")
    attrs = dict(conv)
    part = (2, 0) if variant in ("partial", "packed") else None
    if part:
        xs = xs[:-1] + (len(part),)
    if q8:
        attrs.update(w_scale=tuple(rng.uniform(0.01, 0.02, 6).tolist()), x_scale=0.05, x_zp=-3,
                     mode="stochastic", salt=1234567, step=tuple(rng.uniform(5, 50, 6).tolist()))
    a["x"] = (rng.integers(-128, 128, xs).astype(np.int8) if q8
              else rng.standard_normal(xs).astype(np.float32))
    a["w"] = (rng.integers(-127, 128, ws).astype(np.int8) if q8
              else rng.standard_normal(ws).astype(np.float32))
    a["m"] = rng.standard_normal(ws).astype(np.float32)
    a["b"] = (rng.integers(-5000, 5000, 6).astype(np.int32) if q8
              else rng.standard_normal(6).astype(np.float32))
    a["bm"] = rng.standard_normal(6).astype(np.float32)
    a["step_n"] = np.array([7], np.int32)
    sgd = dict(lr=0.05, momentum=0.9, wd=0.01, channels=None)
    if op in ("conv2d_backward_input", "conv2d_backward_input_q8"):
        a["dx"] = np.full(xs, 7.0, np.float32)  # overwritten
        return ("w",), ("dx",), {**attrs, "out_shape": xs}, a
    if op in ("conv2d_backward_weight", "conv2d_backward_weight_q8"):
        a["dw"] = rng.standard_normal(ws).astype(np.float32)  # accumulated into
        return ("x",), ("dw",), {**attrs, "out_shape": ws}, a
    if op == "conv2d_weight_sgd":
        a["m"] = rng.standard_normal(ws[:-1] + (len(part or range(ws[-1])),)).astype(np.float32)
        return ("x", "w", "m"), ("w",), {**attrs, **sgd, "channels": part}, a
    if op == "conv2d_weight_sgd_q8":
        attrs["channels"] = part
        if variant == "packed":
            a["w"] = np.ascontiguousarray(a["w"][..., list(part)])
            attrs["packed_cin"] = ws[-1]
        if variant == "shadow":
            attrs["mode"] = "shadow"
            a["sh"] = rng.integers(0, 256, ws).astype(np.uint8)
            return ("x", "w", "step_n", "sh"), ("w",), attrs, a
        return ("x", "w", "step_n"), ("w",), attrs, a
    if op == "bias_backward":
        a["db"] = rng.standard_normal(6).astype(np.float32)
        return (), ("db",), {"out_shape": (6,)}, a
    if op == "bias_sgd":
        return ("b", "bm"), ("b",), sgd, a
    assert op == "bias_sgd_q8"
    return ("b", "step_n"), ("b",), {k: attrs[k] for k in ("mode", "salt", "step")}, a


def _kcase(op: str, geom: str, variant: str, gate: str, seed: int) -> KCase:
    rng = np.random.default_rng(seed)
    rest, outs, attrs, arrays = _reader(op, geom, variant, rng)
    arrays["dp"] = rng.standard_normal((1, 1, DY[2])).astype(np.float32) * 10
    arrays["mask"] = rng.integers(0, 256, -(-int(np.prod(DY)) // 8)).astype(np.uint8)
    arrays["y8"] = rng.integers(-25, 45, DY).astype(np.int8)  # some on, some past the bounds
    yf = rng.uniform(-1, 7, DY).astype(np.float32)
    yf.reshape(-1)[:3] = (0.0, 6.0, 3.0)  # exactly at the clip points: no gradient there
    arrays["yf"] = yf
    gate_in = {"mask": "mask", "s8": "y8", "f32": "yf"}.get(gate)
    extra = S8_RANGE if gate == "s8" else F32_RANGE if gate == "f32" else {}
    plain = [Node("pool", "global_avg_pool_backward", ("dp",), ("G",), {"out_shape": DY})]
    dy = "G"
    if gate != "none":
        op_gate = {"mask": "mask_backward", "s8": "q8_clamp_backward",
                   "f32": "clip_backward"}[gate]
        plain.append(Node("gate", op_gate, ("G", gate_in), ("M",), dict(extra)))
        dy = "M"
    plain.append(Node("rd", op, (dy,) + rest, outs, attrs))
    ins = ("v",) + ((gate_in,) if gate_in else ())
    pooled = [Node("share", "global_avg_pool_share", ("dp",), ("v",), {"rows": DY[0] * DY[1]}),
              Node("rd", "pooled_grad", ins + rest, outs,
                   {**attrs, "inner": op, "gate": gate, "dy_shape": DY, **extra})]
    return KCase(f"{op}-{geom}-{variant}-{gate}", plain, pooled, arrays)


def _kcases() -> list[KCase]:
    cases = []
    readers = {"conv2d_backward_input": GEOMS, "conv2d_backward_input_q8": GEOMS,
               "conv2d_backward_weight": GEOMS, "conv2d_backward_weight_q8": GEOMS,
               "conv2d_weight_sgd": GEOMS, "conv2d_weight_sgd_q8": GEOMS,
               "bias_backward": ("1x1",), "bias_sgd": ("1x1",), "bias_sgd_q8": ("1x1",)}
    variants = {"conv2d_weight_sgd": ("whole", "partial"),
                "conv2d_weight_sgd_q8": ("whole", "partial", "packed", "shadow")}
    for op, geoms in readers.items():
        for geom in geoms:
            for variant in variants.get(op, ("whole",)):
                if variant != "whole" and GEOMS[geom][1]["groups"] > 1:
                    continue  # depthwise weights have one input channel
                for gate in GATES:
                    cases.append(_kcase(op, geom, variant, gate, len(cases)))
    return cases


KCASES = _kcases()


class _CG(CContext):
    """Buffers of one unit are the entries of its `void **b` argument (each name once)."""

    def __init__(self, dtypes: dict[str, str], shapes: dict[str, tuple[int, ...]]) -> None:
        self.optimized = True  # the kernels a default build calls
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}
        self.dtypes, self.shapes = dtypes, shapes
        self.names: list[str] = []

    def shape(self, name):
        return self.shapes[name]

    def ptr(self, name):
        return f"(({C_TYPES[self.dtypes[name]]} *)b[{self.names.index(name)}])"


def _buffers(n: Node) -> list[str]:
    return list(dict.fromkeys(n.outputs + n.inputs))


def _dtypes(c: KCase) -> dict[str, str]:
    inv = {v: k for k, v in NP.items()}
    out = {k: inv[v.dtype.type] for k, v in c.arrays.items()}
    out.update(G="f32", M="f32", v="f32")
    return out


@pytest.fixture(scope="module")
def klib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")
    cg = _CG({}, {})
    bodies = []
    for k, c in enumerate(KCASES):
        cg.dtypes = _dtypes(c)
        cg.shapes = {name: a.shape for name, a in c.arrays.items()}
        cg.shapes.update(G=DY, M=DY, v=c.arrays["dp"].shape)
        for tag, nodes in (("plain", c.plain), ("pooled", c.pooled)):
            for j, n in enumerate(nodes):
                cg.names = _buffers(n)
                fn = f"{tag}_{k}_{j}"
                bodies.append(f"void {fn}(void **b);\nvoid {fn}(void **b) "
                              f"{{ {get_op(n.op).c_call(n, cg)} }}")
    d = tmp_path_factory.mktemp("pooled")
    src = d / "units.c"
    src.write_text('#include <math.h>\n#include "tt_kernels.h"\n\n' + "\n".join(cg.decls)
                   + "\n\n" + "\n".join(bodies) + "\n")
    so = d / "libpooled.so"
    res = subprocess.run(["gcc", *CFLAGS, "-shared", "-fPIC", *RUNTIME_INC, str(src),
                          *runtime_objects(tmp_path_factory, CFLAGS), "-o", str(so), "-lm"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(so))


def _run(lib, tag: str, k: int, c: KCase, nodes: list[Node], env: dict[str, np.ndarray],
         in_c: bool) -> dict[str, np.ndarray]:
    env = {name: a.copy() for name, a in env.items()}
    for j, n in enumerate(nodes):
        if not in_c:
            outs = get_op(n.op).forward(n, [env[i] for i in n.inputs])
            for o, v in zip(n.outputs, outs):
                accumulate = o in ("dw", "db")  # gradient kernels add (interp.run's rule)
                env[o] = (env[o] + v) if accumulate else np.asarray(v).reshape(
                    env[o].shape if o in env else v.shape)
            continue
        for o in n.outputs:
            if o not in env:
                env[o] = np.zeros(DY, np.float32)
        bufs = [np.ascontiguousarray(env[name]) for name in _buffers(n)]
        for name, buf in zip(_buffers(n), bufs):
            env[name] = buf
        getattr(lib, f"{tag}_{k}_{j}")((ctypes.c_void_p * len(bufs))(*[b.ctypes.data
                                                                        for b in bufs]))
    return env


@pytest.mark.parametrize("k", range(len(KCASES)), ids=[c.id for c in KCASES])
def test_pooled_kernels_equal_the_materialised_gradient(klib, k):
    """Bit for bit: each reader fed by (v, gate) gives what it gives after the pool's backward
    and the gate wrote the H x W x C gradient, in C and in the numpy references."""
    c = KCASES[k]
    out = c.plain[-1].outputs[0]
    plain = _run(klib, "plain", k, c, c.plain, c.arrays, in_c=True)
    pooled = _run(klib, "pooled", k, c, c.pooled, c.arrays, in_c=True)
    for name in c.arrays:  # the output and any state updated on the way (momentum, shadow)
        assert plain[name].tobytes() == pooled[name].tobytes(), name
    assert not np.array_equal(pooled[out], c.arrays[out])  # it did work
    ref_plain = _run(klib, "plain", k, c, c.plain, c.arrays, in_c=False)
    ref_pooled = _run(klib, "pooled", k, c, c.pooled, c.arrays, in_c=False)
    np.testing.assert_array_equal(ref_pooled[out], ref_plain[out])


def test_every_reader_and_gate_is_covered():
    from tinytrain.ops.pooled_grad import GATES as OP_GATES
    from tinytrain.ops.pooled_grad import INNER

    assert {c.pooled[-1].attrs["inner"] for c in KCASES} == set(INNER)
    assert {c.pooled[-1].attrs["gate"] for c in KCASES} == set(OP_GATES)


# -------------------------------------------------- fp32 training: PyTorch and no-passes build


class MixHead(torch.nn.Module):
    """A 3x3 stem, then a 1x1 "feature mix" conv + ReLU6 into a global average pool."""

    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.mix = torch.nn.Conv2d(8, 64, 1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        h = torch.nn.functional.relu6(self.stem(x))
        h = torch.nn.functional.relu6(self.mix(h))
        return self.fc(torch.flatten(h.mean(dim=(2, 3)), 1))


FP32_CASES = {  # name: (--update, batch, lr, momentum, weight decay, pooled kernels expected)
    # the mix conv's weight and bias (fused updates); the stem is frozen: no input gradient
    "last2_b1": ("last:2", 1, 0.05, 0.0, 0.0,
                 {"tt_conv2d_backward_weight_sgd_pooled_f32", "tt_bias_backward_sgd_pooled_f32"}),
    # everything, with momentum: the mix conv's input gradient reads the vector too
    "full_b1_momentum": ("full", 1, 0.02, 0.9, 0.0,
                         {"tt_conv2d_backward_weight_sgd_pooled_f32",
                          "tt_bias_backward_sgd_pooled_f32",
                          "tt_conv2d_backward_input_pooled_f32"}),
    # a batch: gradients accumulate before the update (no fusion)
    "full_b4_momentum_wd": ("full", 4, 0.05, 0.9, 1e-3,
                            {"tt_conv2d_backward_weight_pooled_f32",
                             "tt_bias_backward_pooled_f32",
                             "tt_conv2d_backward_input_pooled_f32"}),
}


def _build_run(cli, onnx_path, data, out, update, batch, lr, momentum, wd, *extra):
    cli("build", onnx_path, "--out", out, "--update", update, "--batch", batch, "--lr", lr,
        "--momentum", momentum, "--weight-decay", wd, *extra)
    cli("run", out, "--data", data, "--metrics", out / "m.jsonl", "--save", out / "state.npz")
    losses = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    return losses, read_saved(out / "state.npz").params


@pytest.mark.parametrize("name", sorted(FP32_CASES))
def test_fp32_feature_mix_training_matches_pytorch(name, tmp_path, cli):
    update, batch, lr, momentum, wd, kernels = FP32_CASES[name]
    torch.manual_seed(0)
    model = MixHead()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(model, tmp_path / "mix.onnx")
    x, y = digits(MixHead, STEPS * batch)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    ours, state = _build_run(cli, path, tmp_path / "train.npz", tmp_path / "a", update, batch,
                             lr, momentum, wd)
    c = (tmp_path / "a" / "model.c").read_text()
    assert "tt_global_avg_pool_share_f32" in c and "tt_global_avg_pool_backward_f32" not in c
    assert all(k in c for k in kernels), [k for k in kernels if k not in c]

    trained = {"last:2": ("mix.", "fc."), "full": ("stem.", "mix.", "fc.")}[update]
    for k, p in model.named_parameters():
        p.requires_grad_(k.startswith(trained))
    model.train()
    ref = torch_train(model, x, y, batch, lr, momentum, wd)
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    info = json.loads((tmp_path / "a" / "program.json").read_text())
    params = dict(model.named_parameters())
    onnx_model = onnx.load(str(path))
    for p in info["trainable"]:
        torch_name = torch_param_for(onnx_model, p)
        mine = state[p["name"]]
        mine = mine.transpose(0, 3, 1, 2) if mine.ndim == 4 else mine
        np.testing.assert_allclose(mine, params[torch_name].detach().numpy(), atol=WEIGHT_ATOL,
                                   rtol=0, err_msg=torch_name)

    # the passes change no bit (the pooled kernels add in the plain kernels' order), except
    # that a fused plain-SGD dense update (batch 1, no momentum or weight decay) rounds lr*dy
    # first in the optimised kernels (tt_f32_opt.c): a rounding per update
    plain, plain_state = _build_run(cli, path, tmp_path / "train.npz", tmp_path / "b", update,
                                    batch, lr, momentum, wd, "--no-memory-passes")
    assert "tt_global_avg_pool_backward_f32" in (tmp_path / "b" / "model.c").read_text()
    if batch == 1 and momentum == 0 and wd == 0:
        np.testing.assert_allclose(ours, plain, rtol=PLAIN_SGD_RTOL)
        for k in state:
            np.testing.assert_allclose(state[k], plain_state[k], rtol=PLAIN_SGD_RTOL,
                                       atol=PLAIN_SGD_ATOL, err_msg=k)
        return
    assert ours == plain
    for k in state:
        np.testing.assert_array_equal(state[k], plain_state[k], err_msg=k)


# ------------------------------------------- int8 MobileNetV2 + feature mix: no-passes build

INT8_STEPS = 4
# TTE's scheme plus half of the feature-mix conv's input channels (layer 51): its weight
# update reads the vector too, packed when split_weights keeps the trained half in SRAM
INT8_CASES = {
    "tte_b1": (TTE_MBV2, 1, "stochastic",
               {"tt_bias_sgd_pooled_s32", "tt_conv2d_backward_input_pooled_s8"}),
    "tte_fm_weight_b1": (TTE_MBV2.replace("48,ratio", "48-51,ratio") + "-0.5", 1, "stochastic",
                         {"tt_bias_sgd_pooled_s32", "tt_conv2d_backward_input_pooled_s8",
                          "tt_conv2d_weight_sgd_pooled_s8"}),
    "tte_fm_weight_b2_shadow": (TTE_MBV2.replace("48,ratio", "48-51,ratio") + "-0.5", 2,
                                "shadow", {"tt_bias_backward_pooled_f32",
                                           "tt_conv2d_backward_input_pooled_s8",
                                           "tt_conv2d_backward_weight_pooled_s8"}),
}


@pytest.fixture(scope="module")
def mbv2_fm48(tmp_path_factory):
    """MobileNetV2-w0.35 with the 1280-channel feature mix at 48x48 (pool input 2x2x1280)."""
    d = tmp_path_factory.mktemp("mbv2fm")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(MobileNetV2(0.35, 48, 10, feature_mix=1280), d / "fm.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", x=rng.uniform(0, 1, (4, 3, 48, 48)).astype(np.float32))
    x = rng.uniform(0, 1, (INT8_STEPS, 3, 48, 48)).astype(np.float32)
    np.savez(d / "train.npz", x=x, y=rng.integers(0, 10, INT8_STEPS))
    return path, d


@pytest.mark.parametrize("name", sorted(INT8_CASES))
def test_int8_feature_mix_trains_bit_identically(mbv2_fm48, tmp_path, cli, name):
    path, d = mbv2_fm48
    update, batch, rounding, kernels = INT8_CASES[name]
    runs = {}
    for tag, extra in (("a", ()), ("b", ("--no-memory-passes",))):
        out = tmp_path / tag
        runs[tag] = _build_run(cli, path, d / "train.npz", out, update, batch, 0.01, 0, 0,
                               "--quantize", "int8", "--calib", d / "calib.npz",
                               "--rounding", rounding, *extra)
    c = (tmp_path / "a" / "model.c").read_text()
    assert "tt_global_avg_pool_backward_f32" not in c
    assert all(k in c for k in kernels), [k for k in kernels if k not in c]
    assert "tt_global_avg_pool_backward_f32" in (tmp_path / "b" / "model.c").read_text()
    (fast, fast_p), (plain, plain_p) = runs["a"], runs["b"]
    assert len(fast) == INT8_STEPS and fast == plain
    assert fast_p.keys() == plain_p.keys()
    for k in fast_p:
        np.testing.assert_array_equal(fast_p[k], plain_p[k], err_msg=k)


# ------------------------------------------ the acceptance bar: MobileNetV2 at 128x128, int8

FM = 1280
POOL_HW = 4 * 4  # the pool input at 128x128
FM_MASK_BYTES = POOL_HW * FM // 8  # the feature mix's ReLU6 mask
FM_OUTPUT_BYTES = POOL_HW * FM  # its int8 output, which the forward pool reads


@pytest.fixture(scope="module")
def mbv2_128(tmp_path_factory):
    d = tmp_path_factory.mktemp("mbv2_128")
    np.savez(d / "calib.npz",
             x=np.random.default_rng(0).uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
    out = {}
    for fm in (None, FM):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = export(MobileNetV2(0.35, 128, 10, feature_mix=fm), d / f"fm{fm}.onnx")
        out[fm] = compile_model(path, Options(update=TTE_MBV2, quantize="int8",
                                              calib=d / "calib.npz"))
    return out


def _sram(g, plan) -> int:
    return plan.arena_size + sum(t.nbytes for t in g.params(trainable=True))


def test_feature_mix_pool_gradient_costs_no_sram(mbv2_128):
    """The 1280-channel variant with TTE's 99 KB scheme plans no pool gradient: its backward
    peaks where the other variant's does (plus at most its ReLU6 mask), and its arena +
    trainable parameters exceed the other's only by what the feature mix itself adds: the
    larger classifier and the conv's int32 biases (trainable), its int8 output (read by the
    forward pool) and its mask. Without this pass the 80 KB gradient set the arena (208,728 B
    of arena + trainable parameters against 123,928 B; with it, 143,464 B)."""
    (g, plan), (g0, plan0) = mbv2_128[FM], mbv2_128[None]
    assert g.meta.get("pooled_grads")
    assert not [t for t in g.tensors.values()
                if t.kind == GRAD and t.size >= POOL_HW * FM]  # no H x W x 1280 gradient
    assert peak_live(g, "backward") <= peak_live(g0, "backward") + FM_MASK_BYTES
    trainable = sum(t.nbytes for t in g.params(trainable=True))
    trainable0 = sum(t.nbytes for t in g0.params(trainable=True))
    growth = _sram(g, plan) - _sram(g0, plan0)
    assert growth <= trainable - trainable0 + FM_OUTPUT_BYTES + FM_MASK_BYTES, growth
