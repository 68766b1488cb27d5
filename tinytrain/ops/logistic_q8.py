"""int8 LOGISTIC (sigmoid) as TFLite's reference kernel does it: a 256-entry lookup table.

The table is built at compile time exactly as LiteRT's LUTPopulate builds it: float32
dequantise, 1/(1 + expf(-x)) in float32, roundf(./out_scale) + zero point, clamp. expf is the
host C library's (the one LiteRT calls), so the table is bit-identical; the device only
indexes it. Output scale 1/256, zero point -128 (TFLite's requirement).

attrs (from `prepare`): lut (256 ints, indexed by the input's uint8 bit pattern), in_scale,
in_zp, out_scale, out_zp.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.ops.grad_q8 import derivative_table, elementwise_gradient
from tinytrain.quant import fixedpoint as fp


@cache
def _expf() -> Callable[[np.float32], np.float32]:
    """The C library's expf; without one, exp in double rounded to float (may differ in the
    last bit for rare inputs)."""
    name = ctypes.util.find_library("m")
    if name is not None:
        try:
            f = ctypes.CDLL(name).expf
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
            return lambda v: np.float32(f(float(v)))
        except (OSError, AttributeError):
            pass
    return lambda v: np.float32(math.exp(float(v)))


def lut_populate(in_q: QuantParams, out_q: QuantParams,
                 transform: Callable[[np.float32], np.float32]) -> tuple[int, ...]:
    """LUTPopulate<int8_t>: table[(uint8)q] for every int8 q, in float32 arithmetic."""
    in_scale, in_zp = fp.scale_zp(in_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    table = [0] * 256
    for q in range(-128, 128):
        real = np.float32(in_scale) * np.float32(q - in_zp)
        rescaled = fp.round_half_away_f32(transform(real) / np.float32(out_scale))
        v = int(np.float32(rescaled) + np.float32(out_zp))
        table[q & 0xFF] = min(127, max(-128, v))
    return tuple(table)


def prepare(in_q: QuantParams, out_q: QuantParams) -> dict[str, Any]:
    out_scale, out_zp = fp.scale_zp(out_q)
    if out_scale != 1 / 256 or out_zp != -128:
        raise ValueError("int8 LOGISTIC needs output scale 1/256 and zero point -128")
    expf = _expf()
    one = np.float32(1)
    lut = lut_populate(in_q, out_q, lambda v: one / (one + expf(-v)))
    in_scale, in_zp = fp.scale_zp(in_q)
    return {"lut": lut, "in_scale": in_scale, "in_zp": in_zp, "out_scale": out_scale,
            "out_zp": out_zp}


def lookup(x: np.ndarray, lut) -> np.ndarray:
    return np.asarray(lut, np.int8)[np.asarray(x, np.int8).view(np.uint8)]


def lut_decl(cg, lut) -> str:
    body = ", ".join(str(int(v)) for v in lut)
    return cg.static(f"static const int8_t {{name}}[256] = {{{{{body}}}}};")


class LogisticQ8(OpDef):
    name = "logistic_q8"
    public = True
    source_ops = ("LOGISTIC (int8)",)

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [lookup(xs[0], node.attrs["lut"])]

    def gradient(self, node, gb):
        # sigma'(real x), tabulated
        a = node.attrs

        def dsigmoid(v):
            s = 1.0 / (1.0 + np.exp(-v))
            return s * (1.0 - s)

        elementwise_gradient(gb, node, derivative_table(a["in_scale"], a["in_zp"], dsigmoid))

    def c_call(self, node, cg):
        return (f"tt_lut_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(cg.shape(node.inputs[0]))}, {lut_decl(cg, node.attrs['lut'])});")


OPS = (LogisticQ8(),)
