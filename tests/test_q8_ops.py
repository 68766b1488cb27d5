"""int8 forward ops against LiteRT's reference kernels (BUILTIN_REF), bit for bit.

Every case builds a one-op .tflite model (tests/tflite_build.py) with random shapes, scales,
zero points and fused activations, runs it in LiteRT on random int8 inputs (always including
-128 and 127), and requires exact equality with
  - the op's numpy `forward` (the specification of the C kernel), and
  - the C kernel, called through the op's own `c_call` (so the generated call, its static
    parameter tables and the kernel are all checked), compiled by gcc with the strict flags of
    the generated code together with every runtime_c/*.c file.
Nothing is hard-coded: attrs come from the op module's `prepare`, as the importer does.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from tests.tflite_build import ModelBuilder, Options, run_reference  # noqa: E402
from tinytrain.codegen.context import C_TYPES, CContext  # noqa: E402
from tinytrain.ir import Node, QuantParams  # noqa: E402
from tinytrain.ops import (  # noqa: E402
    add_q8,
    avg_pool2d_q8,
    concat_q8,
    get_op,
    hard_swish_q8,
    logistic_q8,
    mean_q8,
    mul_q8,
    pad_q8,
    quantize_q8,
    softmax_q8,
)
from tinytrain.quant import fixedpoint as fp  # noqa: E402

RUNTIME_C = Path(__file__).resolve().parent.parent / "runtime_c"
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wdouble-promotion",
          "-ffp-contract=off"]
NP_TYPES = {"s8": np.int8, "f32": np.float32, "s32": np.int32}
ACTS = ("NONE", "RELU", "RELU6")


# ------------------------------------------------------------------------------ case model


@dataclass
class Case:
    """One op on one set of inputs: the TFLite model and the equivalent IR node."""

    id: str
    model: bytes
    feeds: list[np.ndarray]  # graph inputs, TFLite shapes (batch 1)
    node: Node
    shapes: dict[str, tuple[int, ...]]  # IR per-sample shapes
    dtypes: dict[str, str]
    fn: str = field(default="")  # its C entry point


def qp(scale: float, zp: int) -> QuantParams:
    return QuantParams((fp.f32(scale),), (int(zp),))


def rand_q(rng: np.random.Generator, lo: float = -3.0, hi: float = 0.0) -> tuple[float, int]:
    return fp.f32(10 ** rng.uniform(lo, hi)), int(rng.integers(-128, 128))


def rand_s8(rng: np.random.Generator, shape) -> np.ndarray:
    x = rng.integers(-128, 128, size=shape).astype(np.int8)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size)] = -128  # the ends of the range, every time
    flat[rng.integers(0, flat.size)] = 127
    return x


def all_s8(shape_prefix=(1,)) -> np.ndarray:
    """Every int8 value once (exhaustive check of an elementwise op)."""
    return np.arange(-128, 128, dtype=np.int8).reshape(*shape_prefix, 16, 16)


class Build:
    """Collects a one-op model and the matching IR node (names x0.., y)."""

    def __init__(self) -> None:
        self.mb = ModelBuilder()
        self.graph_in: list[int] = []
        self.feeds: list[np.ndarray] = []
        self.names: list[str] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}

    def input(self, data: np.ndarray, q: tuple[float, int] | None) -> int:
        name = f"x{len(self.names)}"
        dtype = "int8" if data.dtype == np.int8 else "float32"
        scale, zp = q if q is not None else (None, None)
        t = self.mb.tensor(data.shape, dtype, scale=scale, zero_point=zp, name=name)
        self.graph_in.append(t)
        self.feeds.append(data)
        self.names.append(name)
        self.shapes[name] = data.shape[1:]
        self.dtypes[name] = "s8" if dtype == "int8" else "f32"
        return t

    def const(self, data: np.ndarray, dtype: str = "int32") -> int:
        return self.mb.tensor(data.shape, dtype, data=data)

    def case(self, id_: str, opcode: str, inputs: list[int], out_shape: tuple[int, ...],
             out_q: tuple[float, int] | None, ir_op: str, attrs: dict[str, Any],
             options: Options | None = None) -> Case:
        out_dtype = "float32" if out_q is None else "int8"
        scale, zp = out_q if out_q is not None else (None, None)
        y = self.mb.tensor(out_shape, out_dtype, scale=scale, zero_point=zp, name="y")
        self.mb.op(opcode, inputs, [y], options)
        model = self.mb.build(self.graph_in, [y])
        node = Node("n", ir_op, tuple(self.names), ("y",), attrs)
        self.shapes["y"] = out_shape[1:]
        self.dtypes["y"] = "f32" if out_q is None else "s8"
        return Case(id_, model, self.feeds, node, dict(self.shapes), dict(self.dtypes))


# --------------------------------------------------------------------------- case makers


def softmax_case(rng, i):
    rows, depth = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    if i == 0:
        rows, depth = 1, 4  # micro_speech's head
    elif i == 1:
        rows, depth = 1, 1001  # MobileNet's head
    shape = (1, rows, depth) if rows > 1 else (1, depth)
    in_q, beta = rand_q(rng, -2.5, 0.3), float(rng.choice([1.0, 1.0, 0.5, 1.7]))
    x = rand_s8(rng, shape)
    if i % 3 == 0:  # values near the row maximum: many terms count
        x = np.clip(x // 16 + 100, -128, 127).astype(np.int8)
    b = Build()
    t = b.input(x, in_q)
    out_q = (1 / 256, -128)
    attrs = softmax_q8.prepare(qp(*in_q), qp(*out_q), beta)
    return b.case(f"softmax{i}", "SOFTMAX", [t], shape, out_q, "softmax_q8", attrs,
                  Options("SoftmaxOptions", beta=beta))


def logistic_case(rng, i):
    in_q, out_q = rand_q(rng, -2.5, 0.0), (1 / 256, -128)
    b = Build()
    t = b.input(all_s8(), in_q)
    attrs = logistic_q8.prepare(qp(*in_q), qp(*out_q))
    return b.case(f"logistic{i}", "LOGISTIC", [t], (1, 16, 16), out_q, "logistic_q8", attrs)


def hard_swish_case(rng, i):
    in_q = rand_q(rng, -2.5, 0.0)
    out_q = (fp.f32(in_q[0] * rng.uniform(0.3, 2.0)), int(rng.integers(-128, 128)))
    b = Build()
    t = b.input(all_s8(), in_q)
    attrs = hard_swish_q8.prepare(qp(*in_q), qp(*out_q))
    return b.case(f"hard_swish{i}", "HARD_SWISH", [t], (1, 16, 16), out_q, "hard_swish_q8",
                  attrs)


# broadcast patterns of (a, b) over an (h, w, c) output
BROADCASTS = (
    lambda h, w, c: ((h, w, c), (h, w, c)),
    lambda h, w, c: ((h, w, c), (1, 1, c)),
    lambda h, w, c: ((1, 1, c), (h, w, c)),
    lambda h, w, c: ((h, 1, c), (1, w, c)),
    lambda h, w, c: ((h, w, c), (h, 1, 1)),
)


def binary_case(rng, i, opcode):
    h, w, c = (int(v) for v in rng.integers(1, 6, size=3))
    sa, sb = BROADCASTS[i % len(BROADCASTS)](h, w, c)
    a_q, b_q = rand_q(rng, -2.5, 0.0), rand_q(rng, -2.5, 0.0)
    if opcode == "ADD":
        out_scale = max(a_q[0], b_q[0]) * rng.uniform(0.7, 3.0)
    else:
        out_scale = a_q[0] * b_q[0] * rng.uniform(10.0, 300.0)
    out_q = (fp.f32(out_scale), int(rng.integers(-128, 128)))
    act = ACTS[i % 3]
    bld = Build()
    ta = bld.input(rand_s8(rng, (1, *sa)), a_q)
    tb = bld.input(rand_s8(rng, (1, *sb)), b_q)
    act_range = fp.activation_range(act, *out_q)
    module = add_q8 if opcode == "ADD" else mul_q8
    attrs = module.prepare(qp(*a_q), qp(*b_q), qp(*out_q), act_range)
    options = Options("AddOptions" if opcode == "ADD" else "MulOptions",
                      fused_activation_function=act)
    return bld.case(f"{opcode.lower()}{i}_{act}", opcode, [ta, tb],
                    (1, *np.broadcast_shapes(sa, sb)), out_q, f"{opcode.lower()}_q8", attrs,
                    options)


def binary_all_pairs_case(rng, i, opcode):
    """Every (a, b) int8 pair: a (256, 1, 1) broadcast against b (1, 256, 1)."""
    a_q, b_q = rand_q(rng, -2.5, 0.0), rand_q(rng, -2.5, 0.0)
    if opcode == "ADD":
        out_scale = max(a_q[0], b_q[0]) * rng.uniform(0.7, 3.0)
    else:
        out_scale = a_q[0] * b_q[0] * rng.uniform(10.0, 300.0)
    out_q = (fp.f32(out_scale), int(rng.integers(-128, 128)))
    a = np.arange(-128, 128, dtype=np.int8).reshape(1, 256, 1, 1)
    bld = Build()
    ta, tb = bld.input(a, a_q), bld.input(a.reshape(1, 1, 256, 1), b_q)
    module = add_q8 if opcode == "ADD" else mul_q8
    attrs = module.prepare(qp(*a_q), qp(*b_q), qp(*out_q))
    return bld.case(f"{opcode.lower()}_all_pairs{i}", opcode, [ta, tb], (1, 256, 256, 1), out_q,
                    f"{opcode.lower()}_q8", attrs,
                    Options("AddOptions" if opcode == "ADD" else "MulOptions"))


def pool_geometry(h, w, k, s, padding):
    """TFLite's output size and padding as the IR's explicit pads (pt, pl, pb, pr)."""
    if padding == "VALID":
        return ((h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1), (0, 0, 0, 0)
    out = (-(-h // s[0]), -(-w // s[1]))
    tot = [max((o - 1) * st + kk - n, 0) for o, st, kk, n in zip(out, s, k, (h, w))]
    return out, (tot[0] // 2, tot[1] // 2, tot[0] - tot[0] // 2, tot[1] - tot[1] // 2)


def pool_case(rng, i, opcode):
    h, w, c = int(rng.integers(2, 9)), int(rng.integers(2, 9)), int(rng.integers(1, 5))
    k = (int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    padding = ("SAME", "VALID")[i % 2]
    if i % 4 == 3:  # a global pool: one window over everything
        k, s = (h, w), (1, 1)
    act = ACTS[i % 3]
    q = rand_q(rng, -2.0, 0.0)
    (oh, ow), pads = pool_geometry(h, w, k, s, padding)
    bld = Build()
    t = bld.input(rand_s8(rng, (1, h, w, c)), q)
    attrs = {"kernel": k, "stride": s, "pads": pads, "dilation": (1, 1),
             **avg_pool2d_q8.prepare(qp(*q), qp(*q), fp.activation_range(act, *q))}
    ir_op = "avg_pool2d_q8" if opcode == "AVERAGE_POOL_2D" else "max_pool2d_q8"
    options = Options("Pool2DOptions", padding=padding, stride_w=s[1], stride_h=s[0],
                      filter_width=k[1], filter_height=k[0], fused_activation_function=act)
    return bld.case(f"{ir_op}{i}_{padding}_{act}", opcode, [t], (1, oh, ow, c), q, ir_op,
                    attrs, options)


def mean_case(rng, i):
    big = i % 5 == 4  # MobileNet-like 7x7 .. 16x16 maps
    lo, hi = (7, 17) if big else (1, 9)
    h, w, c = int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(1, 6))
    keep = i % 2 == 0
    in_q = rand_q(rng, -2.0, 0.0)
    out_q = in_q if i % 4 >= 2 else rand_q(rng, -2.0, 0.0)
    bld = Build()
    t = bld.input(rand_s8(rng, (1, h, w, c)), in_q)
    axis = bld.const(np.array([1, 2] if i % 3 else [2, 1], np.int32))
    attrs = mean_q8.prepare(qp(*in_q), qp(*out_q), keep)
    out_shape = (1, 1, 1, c) if keep else (1, c)
    return bld.case(f"mean{i}_keep{int(keep)}_same{int(out_q == in_q)}", "MEAN", [t, axis],
                    out_shape, out_q, "mean_q8", attrs, Options("ReducerOptions",
                                                                keep_dims=keep))


def pad_case(rng, i):
    h, w, c = (int(v) for v in rng.integers(1, 6, size=3))
    pads = rng.integers(0, 3, size=(3, 2))
    q = rand_q(rng, -2.0, 0.0)
    bld = Build()
    t = bld.input(rand_s8(rng, (1, h, w, c)), q)
    paddings = bld.const(np.vstack([[0, 0], pads]).astype(np.int32))
    attrs = {"before": tuple(int(v) for v in pads[:, 0]),
             "after": tuple(int(v) for v in pads[:, 1]), **pad_q8.prepare(qp(*q), qp(*q))}
    out_shape = (1, *(n + int(p.sum()) for n, p in zip((h, w, c), pads)))
    return bld.case(f"pad{i}", "PAD", [t, paddings], out_shape, q, "pad_q8", attrs,
                    Options("PadOptions"))


def concat_case(rng, i):
    axis = 1 + i % 3  # H, W or C (TFLite axis; the IR axis is one less)
    n = 2 + i % 2
    base = [int(v) for v in rng.integers(1, 5, size=3)]
    q = rand_q(rng, -2.0, 0.0)
    bld = Build()
    shapes, ts = [], []
    for _ in range(n):
        s = list(base)
        s[axis - 1] = int(rng.integers(1, 5))
        shapes.append(s)
        ts.append(bld.input(rand_s8(rng, (1, *s)), q))
    out = list(base)
    out[axis - 1] = sum(s[axis - 1] for s in shapes)
    attrs = {"axis": axis - 1, **concat_q8.prepare([qp(*q)] * n, qp(*q))}
    return bld.case(f"concat{i}_axis{axis}", "CONCATENATION", ts, (1, *out), q, "concat_q8",
                    attrs, Options("ConcatenationOptions", axis=axis if i % 2 else axis - 4))


def quantize_f32_case(rng, i):
    out_q = rand_q(rng, -2.5, 0.0)
    scale = np.float32(out_q[0])
    k = rng.integers(-200, 200, size=64).astype(np.float32)
    # exact ties, values just below a tie, and plain random reals
    x = np.concatenate([(k[:24] + np.float32(0.5)) * scale,
                        np.nextafter((k[24:40] + np.float32(0.5)) * scale, np.float32(0)),
                        rng.uniform(-150, 150, size=24).astype(np.float32) * scale,
                        np.float32([0.49999997, -0.49999997, 0.5, -0.5]) * scale])
    x = x.astype(np.float32).reshape(1, -1)
    bld = Build()
    t = bld.input(x, None)
    attrs = quantize_q8.prepare(None, qp(*out_q))
    return bld.case(f"quantize_f32_{i}", "QUANTIZE", [t], x.shape, out_q, "quantize_q8", attrs)


def requantize_case(rng, i):
    in_q, out_q = rand_q(rng, -2.5, 0.0), rand_q(rng, -2.5, 0.0)
    bld = Build()
    t = bld.input(all_s8(), in_q)
    attrs = quantize_q8.prepare(qp(*in_q), qp(*out_q))
    return bld.case(f"requantize{i}", "QUANTIZE", [t], (1, 16, 16), out_q, "quantize_q8",
                    attrs)


def dequantize_case(rng, i):
    in_q = rand_q(rng, -3.0, 1.0)
    bld = Build()
    t = bld.input(all_s8(), in_q)
    attrs = {"scale": in_q[0], "zp": in_q[1]}
    return bld.case(f"dequantize{i}", "DEQUANTIZE", [t], (1, 16, 16), None, "dequantize_q8",
                    attrs)


MAKERS: dict[str, tuple[Callable[..., Case], int]] = {
    "softmax": (softmax_case, 15),
    "logistic": (logistic_case, 8),
    "hard_swish": (hard_swish_case, 10),
    "add": (lambda rng, i: binary_case(rng, i, "ADD"), 15),
    "mul": (lambda rng, i: binary_case(rng, i, "MUL"), 15),
    "add_all_pairs": (lambda rng, i: binary_all_pairs_case(rng, i, "ADD"), 3),
    "mul_all_pairs": (lambda rng, i: binary_all_pairs_case(rng, i, "MUL"), 3),
    "avg_pool": (lambda rng, i: pool_case(rng, i, "AVERAGE_POOL_2D"), 12),
    "max_pool": (lambda rng, i: pool_case(rng, i, "MAX_POOL_2D"), 12),
    "mean": (mean_case, 20),
    "pad": (pad_case, 8),
    "concat": (concat_case, 6),
    "quantize_f32": (quantize_f32_case, 6),
    "requantize": (requantize_case, 8),
    "dequantize": (dequantize_case, 6),
}


def make_cases() -> list[Case]:
    cases = []
    for name, (maker, n) in MAKERS.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        cases += [maker(rng, i) for i in range(n)]
    return cases


CASES = make_cases()


# ----------------------------------------------------------------------- C through c_call


class FakeCG(CContext):
    """The codegen context of one test library: buffers are the entries of a `void **b`
    argument (outputs first, then inputs); static tables are shared by all cases."""

    def __init__(self) -> None:  # no graph or memory plan
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}
        self.case: Case | None = None

    def shape(self, name: str) -> tuple[int, ...]:
        assert self.case is not None
        return self.case.shapes[name]

    def ptr(self, name: str) -> str:
        assert self.case is not None
        order = list(self.case.node.outputs) + list(self.case.node.inputs)
        return f"(({C_TYPES[self.case.dtypes[name]]} *)b[{order.index(name)}])"


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not available")
    cg = FakeCG()
    bodies = []
    for k, case in enumerate(CASES):
        cg.case = case
        call = get_op(case.node.op).c_call(case.node, cg)
        case.fn = f"case_{k}"
        bodies.append(f"void case_{k}(void **b) {{ {call} }}")
    d = tmp_path_factory.mktemp("q8c")
    src = d / "cases.c"
    src.write_text('#include "tt_kernels.h"\n\n' + "\n".join(cg.decls) + "\n\n"
                   + "".join(f"void case_{k}(void **b);\n" for k in range(len(CASES)))
                   + "\n".join(bodies) + "\n")
    so = d / "libq8cases.so"
    cmd = [gcc, *CFLAGS, "-shared", "-fPIC", "-I", str(RUNTIME_C), str(src),
           *sorted(str(p) for p in RUNTIME_C.glob("*.c")), "-o", str(so), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(so))


def run_c(lib, case: Case, ir_inputs: list[np.ndarray]) -> np.ndarray:
    y = np.zeros(case.shapes["y"], NP_TYPES[case.dtypes["y"]])
    bufs = [y] + [np.ascontiguousarray(x) for x in ir_inputs]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    getattr(lib, case.fn)(ptrs)
    return y


# --------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bit_exact_with_litert(case: Case, clib) -> None:
    ref = run_reference(case.model, case.feeds)[0]
    ir_inputs = [f.reshape(case.shapes[n]) for f, n in zip(case.feeds, case.node.inputs)]
    expected = ref.reshape(case.shapes["y"])

    got = get_op(case.node.op).forward(case.node, ir_inputs)[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected, err_msg="numpy forward vs LiteRT")
    np.testing.assert_array_equal(run_c(clib, case, ir_inputs), expected,
                                  err_msg="C kernel vs LiteRT")


def test_every_q8_forward_op_is_covered() -> None:
    covered = {c.node.op for c in CASES}
    assert covered >= {"softmax_q8", "logistic_q8", "hard_swish_q8", "add_q8", "mul_q8",
                       "avg_pool2d_q8", "max_pool2d_q8", "mean_q8", "pad_q8", "concat_q8",
                       "quantize_q8", "dequantize_q8"}


def test_concat_rejects_mixed_quantisation() -> None:
    with pytest.raises(ValueError, match="requantise"):
        concat_q8.prepare([qp(0.1, 0), qp(0.2, 0)], qp(0.1, 0))
