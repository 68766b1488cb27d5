"""int8 SOFTMAX over the last axis, bit-exact with TFLite's reference kernel (gemmlowp).

The output is fixed by TFLite: scale 1/256, zero point -128. Like the fp32 softmax it is an
inference head (training folds it into the loss), so it has no gradient rule.

attrs (from `prepare`): in_mult, in_left_shift, diff_min.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.quant import fixedpoint as fp

DIFF_BITS = 5  # input differences in Q5.26
ACCUM_BITS = 12  # sum of exps in Q12.19


def prepare(in_q: QuantParams, out_q: QuantParams, beta: float = 1.0) -> dict[str, Any]:
    """SoftmaxPrepare<kReference>: PreprocessSoftmaxScaling in double from float32 beta and
    input scale (capped at 2^31 - 1), then diff_min = -CalculateInputRadius."""
    in_scale, _ = fp.scale_zp(in_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    if out_zp != -128 or abs(out_scale - 1 / 256) > 0.001 / 256:
        raise ValueError("int8 SOFTMAX needs output scale 1/256 and zero point -128")
    real = min(fp.f32(beta) * in_scale * (1 << (31 - DIFF_BITS)), float((1 << 31) - 1))
    mult, left_shift = fp.quantize_multiplier_greater_than_one(real)
    return {"in_mult": mult, "in_left_shift": left_shift,
            "diff_min": -fp.calculate_input_radius(DIFF_BITS, left_shift)}


def softmax_rows(x: np.ndarray, mult: int, left_shift: int, diff_min: int) -> np.ndarray:
    """The reference arithmetic on int8 rows (rows x depth) -> int8."""
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    valid = diff >= diff_min
    exps = fp.exp_on_negative_values(fp.mbqm_greater_than_one(diff, mult, left_shift),
                                     DIFF_BITS)
    total = fp.wrap32(np.where(valid, fp.rounding_divide_by_pot(exps, ACCUM_BITS), 0)
                      .sum(axis=1, keepdims=True))
    recip, bits_over_unit = fp.get_reciprocal(total, ACCUM_BITS)
    out = fp.rounding_divide_by_pot(fp.srdhm(recip, exps), bits_over_unit + 31 - 8) - 128
    return np.where(valid, np.clip(out, -128, 127), -128).astype(np.int8)


class SoftmaxQ8(OpDef):
    name = "softmax_q8"
    public = True
    source_ops = ("SOFTMAX (int8)",)
    has_gradient = False

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        x = xs[0]
        a = node.attrs
        y = softmax_rows(x.reshape(-1, x.shape[-1] if x.ndim else 1), a["in_mult"],
                         a["in_left_shift"], a["diff_min"])
        return [y.reshape(x.shape)]

    def c_call(self, node, cg):
        shape = cg.shape(node.inputs[0])
        depth = shape[-1] if shape else 1
        a = node.attrs
        return (f"tt_softmax_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(shape) // depth}, {depth}, {a['in_mult']}, {a['in_left_shift']}, "
                f"{a['diff_min']});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0])


OPS = (SoftmaxQ8(),)
