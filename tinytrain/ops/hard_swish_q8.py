"""int8 HARD_SWISH, bit-exact with TFLite's reference kernel (int16 fixed point).

TFLite's HardSwishPrepare computes both multipliers in float32 (hires_input_scale =
input_scale / 128, output_scale, 3/32768 are floats), not double, before QuantizeMultiplier and
the int16 downscale; `prepare` does the same.

attrs (from `prepare`): in_zp, out_zp, reluish_mult, reluish_exp, out_mult, out_exp (the
multipliers are int16 fixed point), in_scale, out_scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.ops.grad_q8 import derivative_table, elementwise_gradient
from tinytrain.quant import fixedpoint as fp

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1


def downscale_to_int16(m: int) -> int:
    """DownScaleInt32ToInt16Multiplier: round a q31 multiplier to q15."""
    return INT16_MAX if m >= fp.INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16


def prepare(in_q: QuantParams, out_q: QuantParams) -> dict[str, Any]:
    in_scale, in_zp = fp.scale_zp(in_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    hires_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)
    out_m, out_exp = fp.quantize_multiplier(float(hires_scale / np.float32(out_scale)))
    if out_exp > 0:
        raise ValueError("int8 HARD_SWISH needs output_scale >= input_scale / 128")
    rel_m, rel_exp = fp.quantize_multiplier(float(hires_scale / reluish_scale))
    return {"in_zp": in_zp, "out_zp": out_zp, "reluish_mult": downscale_to_int16(rel_m),
            "reluish_exp": rel_exp, "out_mult": downscale_to_int16(out_m), "out_exp": out_exp,
            "in_scale": in_scale, "out_scale": out_scale}


def _sat16(v: np.ndarray) -> np.ndarray:
    return np.clip(v, INT16_MIN, INT16_MAX)


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    ab = a * b
    r = fp.cdiv(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 1 << 15)
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, r)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SaturatingDoublingHighMul: rounds toward zero."""
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, fp.cdiv(a * b, 1 << 15))


def hard_swish(x: np.ndarray, a: dict) -> np.ndarray:
    hires = (np.asarray(x, np.int64) - a["in_zp"]) * 128
    preshift_out = _srdhm16(hires, a["out_mult"])
    reluish = hires
    if a["reluish_exp"] > 0:
        reluish = _sat16(reluish << (a["reluish_exp"] - 1))
    reluish = _srdhm16(reluish, a["reluish_mult"])
    if a["reluish_exp"] > 0:
        reluish = _sat16(reluish * 2)
    if a["reluish_exp"] < 0:
        reluish = fp.rounding_divide_by_pot(reluish, -a["reluish_exp"])
    reluish = (reluish + (1 << 15)) >> 1
    out = fp.rounding_divide_by_pot(_sdhm16(reluish, preshift_out), -a["out_exp"])
    out = (out + a["out_zp"] + (1 << 15)) % (1 << 16) - (1 << 15)  # int16 add wraps
    return np.clip(out, -128, 127).astype(np.int8)


def params_decl(cg, a: dict) -> str:
    body = ", ".join(str(a[k]) for k in ("in_zp", "out_zp", "reluish_mult", "reluish_exp",
                                         "out_mult", "out_exp"))
    return cg.static(f"static const tt_q8_hard_swish {{name}} = {{{{{body}}}}};")


class HardSwishQ8(OpDef):
    name = "hard_swish_q8"
    public = True
    source_ops = ("HARD_SWISH (int8)",)

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [hard_swish(xs[0], node.attrs)]

    def gradient(self, node, gb):
        # hard_swish'(real x), tabulated with PyTorch's convention at -3 and 3
        a = node.attrs

        def dhard_swish(v):
            return np.where(v <= -3, 0.0, np.where(v >= 3, 1.0, v / 3.0 + 0.5))

        elementwise_gradient(gb, node, derivative_table(a["in_scale"], a["in_zp"], dhard_swish))

    def c_call(self, node, cg):
        return (f"tt_hard_swish_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(cg.shape(node.inputs[0]))}, &{params_decl(cg, node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0])


OPS = (HardSwishQ8(),)
