"""QUANTIZE to int8: from float32 (AffineQuantize) or from int8 (requantise), as TFLite.

float32 -> int8: roundf(x / scale) + zero point, clamped (float32 division, half away from
zero). int8 -> int8: MultiplyByQuantizedMultiplier(x - in_zp) by in_scale/out_scale (double)
+ out_zp, clamped.

attrs (from `prepare`): mode ("f32" or "s8"); f32: scale, zp; s8: in_zp, out_zp, mult, shift,
in_scale, out_scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, c_float, size
from tinytrain.quant import fixedpoint as fp


def prepare(in_q: QuantParams | None, out_q: QuantParams) -> dict[str, Any]:
    """`in_q` None: the input is float32."""
    out_scale, out_zp = fp.scale_zp(out_q)
    if in_q is None:
        return {"mode": "f32", "scale": out_scale, "zp": out_zp}
    in_scale, in_zp = fp.scale_zp(in_q)
    mult, shift = fp.quantize_multiplier(in_scale / out_scale)
    return {"mode": "s8", "in_zp": in_zp, "out_zp": out_zp, "mult": mult, "shift": shift,
            "in_scale": in_scale, "out_scale": out_scale}


def quantize_f32(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        r = fp.round_half_away_f32(np.asarray(x, np.float32) / np.float32(scale))
    r = np.clip(np.nan_to_num(r), -256, 255).astype(np.int64)  # as tt_quantize_input_s8
    return np.clip(r + zp, -128, 127).astype(np.int8)


def requantize(x: np.ndarray, a: dict) -> np.ndarray:
    v = np.asarray(x, np.int64) - a["in_zp"]
    y = fp.mbqm_double_rounding(v, a["mult"], a["shift"]) + a["out_zp"]
    return np.clip(y, -128, 127).astype(np.int8)


class QuantizeQ8(OpDef):
    name = "quantize_q8"
    public = True
    source_ops = ("QUANTIZE (to int8)",)

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        a = node.attrs
        if a["mode"] == "f32":
            return [quantize_f32(xs[0], a["scale"], a["zp"])]
        return [requantize(xs[0], a)]

    def gradient(self, node, gb):
        # straight through: real y ~ real x (saturation included, as the convention is)
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, dy)

    def c_call(self, node, cg):
        a, n = node.attrs, size(cg.shape(node.inputs[0]))
        y, x = cg.ptr(node.outputs[0]), cg.ptr(node.inputs[0])
        if a["mode"] == "f32":
            return f"tt_quantize_input_s8({y}, {x}, {n}, {c_float(a['scale'])}, {a['zp']});"
        return (f"tt_requantize_s8({y}, {x}, {n}, {a['in_zp']}, {a['out_zp']}, {a['mult']}, "
                f"{a['shift']});")


OPS = (QuantizeQ8(),)
