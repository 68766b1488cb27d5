"""int8 hard sigmoid, y = clip(alpha * x + beta, 0, 1), as a 256-entry lookup table.

TFLite has no HARD_SIGMOID builtin (converters expand it); tinytrain's quantiser maps an fp32
hard_sigmoid (e.g. a squeeze-excite gate) here. Output quantisation is LOGISTIC's: scale
1/256, zero point -128. attrs (from `prepare`): lut, alpha, beta, in_scale, in_zp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.ops.grad_q8 import derivative_table, elementwise_gradient
from tinytrain.ops.logistic_q8 import lookup, lut_decl, lut_populate
from tinytrain.quant import fixedpoint as fp

OUT_Q = QuantParams((1 / 256,), (-128,))


def prepare(in_q: QuantParams, alpha: float, beta: float) -> dict[str, Any]:
    a, b = np.float32(alpha), np.float32(beta)
    lut = lut_populate(in_q, OUT_Q, lambda v: np.float32(min(max(a * v + b, 0.0), 1.0)))
    in_scale, in_zp = fp.scale_zp(in_q)
    return {"lut": lut, "alpha": float(alpha), "beta": float(beta), "in_scale": in_scale,
            "in_zp": in_zp}


class HardSigmoidQ8(OpDef):
    name = "hard_sigmoid_q8"
    public = True
    source_ops = ("HardSigmoid (--quantize int8)",)

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [lookup(xs[0], node.attrs["lut"])]

    def gradient(self, node, gb):
        a = node.attrs

        def slope(v):  # PyTorch's convention: alpha strictly inside the linear part
            z = a["alpha"] * v + a["beta"]
            return np.where((z > 0) & (z < 1), a["alpha"], 0.0)

        elementwise_gradient(gb, node, derivative_table(a["in_scale"], a["in_zp"], slope))

    def c_call(self, node, cg):
        return (f"tt_lut_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(cg.shape(node.inputs[0]))}, {lut_decl(cg, node.attrs['lut'])});")


OPS = (HardSigmoidQ8(),)
