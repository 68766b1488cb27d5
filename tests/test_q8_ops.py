"""int8 forward ops against LiteRT's reference kernels (BUILTIN_REF), bit for bit.

Every case builds a one-op .tflite model (tests/tflite_build.py) with random shapes, scales,
zero points and fused activations, runs it in LiteRT on random int8 inputs (always including
-128 and 127), and requires exact equality with
  - the op's numpy `forward` (the specification of the C kernel), and
  - the C kernel, called through the op's own `c_call` (so the generated call, its static
    parameter tables and the kernel are all checked), compiled by gcc with the strict flags of
    the generated code together with every runtime C file.
Nothing is hard-coded: attrs come from the op module's `prepare`, as the importer does.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from tests.ckernel import RUNTIME_INC, runtime_objects
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
from tinytrain.ops.pool import windows  # noqa: E402
from tinytrain.quant import fixedpoint as fp  # noqa: E402

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wdouble-promotion",
          "-ffp-contract=off"]
NP_TYPES = {"s8": np.int8, "f32": np.float32, "s32": np.int32}
ACTS = ("NONE", "RELU", "RELU6")


# ------------------------------------------------------------------------------ case model


@dataclass
class CUnit:
    """One node to call in C, with the shapes and dtypes of its tensors."""

    node: Node
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    fn: str = ""


@dataclass
class Case:
    """One op on one set of inputs: the TFLite model and the equivalent IR node."""

    id: str
    model: bytes
    feeds: list[np.ndarray]  # graph inputs, TFLite shapes (batch 1)
    node: Node
    shapes: dict[str, tuple[int, ...]]  # IR per-sample shapes
    dtypes: dict[str, str]
    unit: Any = None  # its C call (CUnit)


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


# ------------------------------------------------------------ gradient rules (phase 2)
#
# The gradient of an int8 tensor is float32 w.r.t. its real value. Each rule is checked
# against central finite differences of the real-valued function the int8 op approximates
# (its "dequantised function", with the output clamps it applies), evaluated in float64 at
# the dequantised inputs. dy is zeroed near kinks (clamp bounds, hard-swish's +-3) so the
# differences never straddle one. The backward nodes a rule emits run in numpy (their
# `forward`) and in C (their `c_call`), which must agree.

FD_EPS = 1e-4  # in real units; the functions are linear or gently curved
FD_RTOL, FD_ATOL = 1e-4, 2e-5


class RecordingGB:
    """The GradBuilder autodiff hands to a rule: records the backward nodes it emits."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
                 inputs: tuple[str, ...]) -> None:
        self.shapes, self.dtypes, self.inputs = dict(shapes), dict(dtypes), inputs
        self.nodes: list[Node] = []
        self.contribs: dict[str, list[str]] = {}

    def grad(self, tensor: str) -> str | None:
        return "dy" if tensor == "y" else None

    def needs_grad(self, tensor: str) -> bool:
        return tensor in self.inputs

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.shapes[tensor]

    def emit(self, op: str, inputs, attrs=None, out_shape=None) -> str:
        attrs = dict(attrs or {})
        if out_shape is not None:
            attrs["out_shape"] = tuple(out_shape)
        name = f"g{len(self.nodes)}"
        node = Node(name, op, tuple(inputs), (name,), attrs, phase="backward")
        self.shapes[name] = tuple(get_op(op).infer(node, [self.shapes[i] for i in inputs])[0])
        self.dtypes[name] = "f32"
        self.nodes.append(node)
        return name

    def contribute(self, tensor: str, grad: str) -> None:
        self.contribs.setdefault(tensor, []).append(grad)

    def accumulate_param(self, *args, **kwargs) -> None:
        raise AssertionError("no parameters here")


@dataclass
class GradCase:
    id: str
    node: Node
    xs: list[np.ndarray]  # IR inputs (int8, or float32 for quantize)
    reals: list[np.ndarray]  # their real values (float64)
    f: Callable[[list[np.ndarray]], np.ndarray]  # the dequantised function, float64
    dy: np.ndarray
    units: list[CUnit]  # the emitted backward nodes
    gb: RecordingGB


def real_of(x: np.ndarray, q: tuple[float, int] | None) -> np.ndarray:
    if q is None:
        return x.astype(np.float64)
    return (np.float32(q[0]) * (x.astype(np.int32) - q[1]).astype(np.float32)).astype(np.float64)


def near(v: np.ndarray, points, margin: float) -> np.ndarray:
    return np.any([np.abs(v - p) < margin for p in points], axis=0)


def make_grad_case(id_: str, node: Node, xs: list[np.ndarray], qs: list, out_q, g,
                   bounds: tuple[float, float] | None = None, kinks_in=None,
                   rng=None) -> GradCase:
    """g: the unclamped real function; bounds: the real clamp the op applies to it. dy is
    zeroed where g is near a bound (clamped outputs keep theirs: there the rule must give 0)
    and, for elementwise ops, where the input is near one of kinks_in."""
    names = node.inputs
    shapes = {n: x.shape for n, x in zip(names, xs)}
    dtypes = {n: "s8" if x.dtype == np.int8 else "f32" for n, x in zip(names, xs)}
    y = get_op(node.op).forward(node, xs)[0]
    shapes.update(y=y.shape, dy=y.shape)
    dtypes.update(y="s8", dy="f32")
    reals = [real_of(x, q) for x, q in zip(xs, qs)]
    gy = g(reals)
    dy = rng.uniform(-1, 1, size=y.shape).astype(np.float32)
    if bounds is not None:
        dy[near(gy, bounds, 1.5 * out_q[0])] = 0

    def f(r):
        return g(r) if bounds is None else np.clip(g(r), *bounds)

    if kinks_in is not None:
        dy[near(reals[0].reshape(gy.shape), kinks_in, 3 * FD_EPS + real_q_step(qs[0]))] = 0
    gb = RecordingGB(shapes, dtypes, names)
    get_op(node.op).gradient(node, gb)
    units = [CUnit(n, gb.shapes, gb.dtypes) for n in gb.nodes]
    return GradCase(id_, node, xs, reals, f, dy, units, gb)


def real_q_step(q) -> float:
    return 0.0 if q is None else q[0]


def activation_clamp(act: str, lo: int, hi: int, out_q) -> tuple[dict, tuple[float, float]]:
    """The importer's grad_lo/grad_hi for a fused activation (tflite_ops.grad_range), and
    the real clamp it applies: ReLU's 0 and ReLU6's 6, not int8 saturation."""
    lower, upper = act in ("RELU", "RELU6"), act == "RELU6"
    grad = {"grad_lo": lo if lower else -129, "grad_hi": hi if upper else 128}
    real = (out_q[0] * (lo - out_q[1]) if lower else -np.inf,
            out_q[0] * (hi - out_q[1]) if upper else np.inf)
    return grad, real


def grad_binary(rng, i, opcode):
    h, w, c = (int(v) for v in rng.integers(1, 5, size=3))
    sa, sb = BROADCASTS[i % len(BROADCASTS)](h, w, c)
    a_q, b_q = rand_q(rng, -2.0, -0.5), rand_q(rng, -2.0, -0.5)
    scale = max(a_q[0], b_q[0]) * 1.5 if opcode == "add" else a_q[0] * b_q[0] * 60
    out_q = (fp.f32(scale), int(rng.integers(-60, 60)))
    act = ACTS[i % 3]
    lo, hi = fp.activation_range(act, *out_q)
    module = add_q8 if opcode == "add" else mul_q8
    attrs = module.prepare(qp(*a_q), qp(*b_q), qp(*out_q), (lo, hi))
    grad, bounds = activation_clamp(act, lo, hi, out_q)
    if i < 3:  # the importer's grad_lo/grad_hi; later cases use the rule's fallback
        attrs.update(grad)
    node = Node("n", f"{opcode}_q8", ("x0", "x1"), ("y",), attrs)
    xs = [rand_s8(rng, sa), rand_s8(rng, sb)]
    op = np.add if opcode == "add" else np.multiply
    return make_grad_case(f"{opcode}{i}_{act}", node, xs, [a_q, b_q], out_q,
                          lambda r: op(r[0], r[1]), bounds, rng=rng)


def grad_pool(rng, i, op):
    h, w, c = int(rng.integers(2, 6)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
    k, s = (2, 2), (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    (oh, ow), pads = pool_geometry(h, w, k, s, ("SAME", "VALID")[i % 2])
    q = rand_q(rng, -2.0, -0.5)
    act = ACTS[i % 3]
    lo, hi = fp.activation_range(act, *q)
    grad, bounds = activation_clamp(act, lo, hi, q)
    attrs = {"kernel": k, "stride": s, "pads": pads, "dilation": (1, 1),
             **avg_pool2d_q8.prepare(qp(*q), qp(*q), (lo, hi)), **grad}
    node = Node("n", op, ("x0",), ("y",), attrs)
    # distinct values: max pool has no ties
    x = (rng.permutation(256)[:h * w * c] - 128).astype(np.int8).reshape(h, w, c)

    def f(r):
        y = np.zeros((oh, ow, c))
        for oy, ox, rows, cols in windows(r[0].shape, node):
            win = r[0][np.ix_(rows, cols)]
            y[oy, ox] = win.max(axis=(0, 1)) if op == "max_pool2d_q8" else win.mean(axis=(0, 1))
        return y

    return make_grad_case(f"{op}{i}_{act}", node, [x], [q], q, f, bounds, rng=rng)


def grad_mean(rng, i):
    h, w, c = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    in_q = rand_q(rng, -2.0, -0.5)
    # i odd: an output range narrower than the input's: saturation passes straight through
    out_q = (fp.f32(in_q[0] * (0.25 if i % 2 else 1.5)), int(rng.integers(-30, 30)))
    attrs = mean_q8.prepare(qp(*in_q), qp(*out_q), keep_dims=bool(i % 2))
    node = Node("n", "mean_q8", ("x0",), ("y",), attrs)
    x = rand_s8(rng, (h, w, c))
    shape = (1, 1, c) if i % 2 else (c,)
    return make_grad_case(f"mean{i}", node, [x], [in_q], out_q,
                          lambda r: r[0].reshape(-1, c).mean(axis=0).reshape(shape), rng=rng)


def grad_elementwise(rng, i, op):
    in_q = rand_q(rng, -1.7, -1.0)
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    if op == "logistic_q8":
        out_q = (1 / 256, -128)
        attrs = logistic_q8.prepare(qp(*in_q), qp(*out_q))

        def f(r):
            return 1.0 / (1.0 + np.exp(-r[0]))
        bounds, kinks_in = None, ()
    else:
        # i odd: an output scale too small for the largest outputs (straight through)
        out_q = (fp.f32(in_q[0] * (0.5 if i % 2 else 1.2)), int(rng.integers(-20, 20)))
        attrs = hard_swish_q8.prepare(qp(*in_q), qp(*out_q))

        def f(r):
            return r[0] * np.clip(r[0] / 6 + 0.5, 0, 1)
        bounds, kinks_in = None, (-3.0, 3.0)
    node = Node("n", op, ("x0",), ("y",), attrs)
    return make_grad_case(f"{op}{i}", node, [x], [in_q], out_q, f, bounds, kinks_in,
                          rng=rng)


def grad_layout(rng, i, op):
    q = rand_q(rng, -2.0, -0.5)
    if op == "pad_q8":
        x = rand_s8(rng, (2, 3, 2))
        before, after = (1, 0, 2), (0, 2, 1)
        attrs = {"before": before, "after": after, **pad_q8.prepare(qp(*q), qp(*q))}
        node = Node("n", op, ("x0",), ("y",), attrs)
        return make_grad_case(f"pad{i}", node, [x], [q], q,
                              lambda r: np.pad(r[0], list(zip(before, after))), rng=rng)
    axis = i % 3
    shapes = [[2, 3, 2], [2, 3, 2]]
    shapes[1][axis] = 3
    xs = [rand_s8(rng, tuple(sh)) for sh in shapes]
    attrs = {"axis": axis, **concat_q8.prepare([qp(*q)] * 2, qp(*q))}
    node = Node("n", op, ("x0", "x1"), ("y",), attrs)
    return make_grad_case(f"concat{i}_axis{axis}", node, xs, [q, q], q,
                          lambda r: np.concatenate(r, axis=axis), rng=rng)


def grad_quantize(rng, i):
    out_q = rand_q(rng, -2.0, -1.0)
    if i % 2 == 0:  # from float: reals across and beyond the int8 range
        x = (rng.uniform(-200, 200, size=(4, 6)) * out_q[0]).astype(np.float32)
        attrs, in_q = quantize_q8.prepare(None, qp(*out_q)), None
    else:  # requantise to a narrower range
        in_q = (fp.f32(out_q[0] * 1.7), int(rng.integers(-20, 20)))
        x = rand_s8(rng, (4, 6))
        attrs = quantize_q8.prepare(qp(*in_q), qp(*out_q))
    node = Node("n", "quantize_q8", ("x0",), ("y",), attrs)
    return make_grad_case(f"quantize{i}_{attrs['mode']}", node, [x], [in_q], out_q,
                          lambda r: r[0], rng=rng)


GRAD_MAKERS: dict[str, tuple[Callable[..., GradCase], int]] = {
    "add": (lambda rng, i: grad_binary(rng, i, "add"), 6),
    "mul": (lambda rng, i: grad_binary(rng, i, "mul"), 6),
    "avg_pool": (lambda rng, i: grad_pool(rng, i, "avg_pool2d_q8"), 4),
    "max_pool": (lambda rng, i: grad_pool(rng, i, "max_pool2d_q8"), 4),
    "mean": (grad_mean, 4),
    "logistic": (lambda rng, i: grad_elementwise(rng, i, "logistic_q8"), 2),
    "hard_swish": (lambda rng, i: grad_elementwise(rng, i, "hard_swish_q8"), 4),
    "pad": (lambda rng, i: grad_layout(rng, i, "pad_q8"), 1),
    "concat": (lambda rng, i: grad_layout(rng, i, "concat_q8"), 3),
    "quantize": (grad_quantize, 4),
}


def make_grad_cases() -> list[GradCase]:
    cases = []
    for name, (maker, n) in GRAD_MAKERS.items():
        rng = np.random.default_rng(zlib.crc32(f"grad_{name}".encode()))
        cases += [maker(rng, i) for i in range(n)]
    return cases


GRAD_CASES = make_grad_cases()


# ----------------------------------------------------------------------- C through c_call


class FakeCG(CContext):
    """The codegen context of one test library: buffers are the entries of a `void **b`
    argument (outputs first, then inputs); static tables are shared by all units."""

    def __init__(self) -> None:  # no graph or memory plan
        self.optimized = True  # the kernels a build uses by default, checked against LiteRT
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}
        self.unit: CUnit | None = None

    def shape(self, name: str) -> tuple[int, ...]:
        assert self.unit is not None
        return self.unit.shapes[name]

    def ptr(self, name: str) -> str:
        assert self.unit is not None
        order = list(self.unit.node.outputs) + list(self.unit.node.inputs)
        return f"(({C_TYPES[self.unit.dtypes[name]]} *)b[{order.index(name)}])"


def c_units() -> list[CUnit]:
    units = []
    for case in CASES:
        case.unit = CUnit(case.node, case.shapes, case.dtypes)
        units.append(case.unit)
    for g in GRAD_CASES:
        units += g.units
    return units


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not available")
    cg = FakeCG()
    bodies = []
    for k, unit in enumerate(c_units()):
        cg.unit = unit
        unit.fn = f"unit_{k}"
        bodies.append(f"void unit_{k}(void **b);\n"
                      f"void unit_{k}(void **b) {{ {get_op(unit.node.op).c_call(unit.node, cg)} }}")
    d = tmp_path_factory.mktemp("q8c")
    src = d / "units.c"
    src.write_text('#include "tt_kernels.h"\n\n' + "\n".join(cg.decls) + "\n\n"
                   + "\n".join(bodies) + "\n")
    so = d / "libq8units.so"
    cmd = [gcc, *CFLAGS, "-shared", "-fPIC", *RUNTIME_INC, str(src),
           *runtime_objects(tmp_path_factory, CFLAGS), "-o", str(so), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(so))


def run_c(lib, unit: CUnit, inputs: list[np.ndarray]) -> np.ndarray:
    out = unit.node.outputs[0]
    y = np.zeros(unit.shapes[out], NP_TYPES[unit.dtypes[out]])
    bufs = [y] + [np.ascontiguousarray(x, NP_TYPES[unit.dtypes[n]])
                  for x, n in zip(inputs, unit.node.inputs)]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    getattr(lib, unit.fn)(ptrs)
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
    np.testing.assert_array_equal(run_c(clib, case.unit, ir_inputs), expected,
                                  err_msg="C kernel vs LiteRT")


def test_every_q8_forward_op_is_covered() -> None:
    covered = {c.node.op for c in CASES}
    assert covered >= {"softmax_q8", "logistic_q8", "hard_swish_q8", "add_q8", "mul_q8",
                       "avg_pool2d_q8", "max_pool2d_q8", "mean_q8", "pad_q8", "concat_q8",
                       "quantize_q8", "dequantize_q8"}


def test_concat_rejects_mixed_quantisation() -> None:
    with pytest.raises(ValueError, match="requantise"):
        concat_q8.prepare([qp(0.1, 0), qp(0.2, 0)], qp(0.1, 0))


@pytest.mark.parametrize("gc", GRAD_CASES, ids=[g.id for g in GRAD_CASES])
def test_gradient_rule_matches_finite_differences(gc: GradCase, clib) -> None:
    env: dict[str, np.ndarray] = dict(zip(gc.node.inputs, gc.xs))
    env["y"] = get_op(gc.node.op).forward(gc.node, gc.xs)[0]
    env["dy"] = gc.dy
    for unit in gc.units:  # the emitted backward nodes, in numpy and in C
        ins = [env[i] for i in unit.node.inputs]
        out = get_op(unit.node.op).forward(unit.node, ins)[0]
        np.testing.assert_allclose(run_c(clib, unit, ins), out, rtol=1e-6, atol=1e-7,
                                   err_msg=f"C {unit.node.op} vs numpy")
        env[unit.node.outputs[0]] = np.asarray(out).reshape(unit.shapes[unit.node.outputs[0]])

    dy = gc.dy.astype(np.float64)
    for k, name in enumerate(gc.node.inputs):
        analytic = sum(env[g].astype(np.float64) for g in gc.gb.contribs[name])
        analytic = np.broadcast_to(analytic, gc.xs[k].shape).reshape(-1)
        base = gc.reals[k].reshape(-1)
        for j in range(base.size):
            plus, minus = [r.copy() for r in gc.reals], [r.copy() for r in gc.reals]
            plus[k].reshape(-1)[j] += FD_EPS
            minus[k].reshape(-1)[j] -= FD_EPS
            fd = float((dy * (gc.f(plus) - gc.f(minus))).sum()) / (2 * FD_EPS)
            assert abs(fd - analytic[j]) <= FD_ATOL + FD_RTOL * abs(fd), (
                f"{name}[{j}]: rule {analytic[j]:.6g} vs finite difference {fd:.6g}")


def test_every_q8_gradient_rule_is_covered() -> None:
    covered = {g.node.op for g in GRAD_CASES}
    with_rules = {op.name for op in (get_op(n) for n in covered)}
    assert with_rules >= {"add_q8", "mul_q8", "avg_pool2d_q8", "max_pool2d_q8", "mean_q8",
                          "logistic_q8", "hard_swish_q8", "pad_q8", "concat_q8", "quantize_q8"}
    emitted = {u.node.op for g in GRAD_CASES for u in g.units}
    assert emitted >= {"q8_clamp_backward", "lut_backward_q8", "mul_backward_q8",
                       "max_pool2d_backward_q8", "avg_pool2d_backward",
                       "global_avg_pool_backward", "reduce_to", "crop", "slice_part"}
