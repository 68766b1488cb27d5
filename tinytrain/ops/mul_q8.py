"""int8 MUL with broadcasting and a fused activation, bit-exact with TFLite's reference kernel.

TFLite's MulPrepare forms the multiplier in float32 (input1_scale * input2_scale /
output_scale are float operations) before QuantizeMultiplier; `prepare` does the same.

attrs (from `prepare`): a_offset, b_offset, out_offset, out_mult, out_shift, act_min, act_max,
and the scales a_scale, b_scale, out_scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.add_q8 import binary_call
from tinytrain.ops.binary import Binary
from tinytrain.quant import fixedpoint as fp

_PARAMS = ("a_offset", "b_offset", "out_offset", "out_mult", "out_shift", "act_min", "act_max")


def prepare(a_q: QuantParams, b_q: QuantParams, out_q: QuantParams,
            act: tuple[int, int] = (-128, 127)) -> dict[str, Any]:
    a_scale, a_zp = fp.scale_zp(a_q)
    b_scale, b_zp = fp.scale_zp(b_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    real = np.float32(a_scale) * np.float32(b_scale) / np.float32(out_scale)
    out_mult, out_shift = fp.quantize_multiplier(float(real))
    return {"a_offset": -a_zp, "b_offset": -b_zp, "out_offset": out_zp, "out_mult": out_mult,
            "out_shift": out_shift, "act_min": int(act[0]), "act_max": int(act[1]),
            "a_scale": a_scale, "b_scale": b_scale, "out_scale": out_scale}


def mul(a: np.ndarray, b: np.ndarray, p: dict) -> np.ndarray:
    prod = ((np.asarray(a, np.int64) + p["a_offset"]) * (np.asarray(b, np.int64) + p["b_offset"]))
    y = fp.mbqm_double_rounding(prod, p["out_mult"], p["out_shift"]) + p["out_offset"]
    return np.clip(y, p["act_min"], p["act_max"]).astype(np.int8)


class MulQ8(Binary):
    name = "mul_q8"
    source_ops = ("MUL (int8)",)

    def forward(self, node, xs):
        return [mul(xs[0], xs[1], node.attrs)]

    def c_call(self, node, cg):
        return binary_call("tt_mul_s8", "tt_q8_mul", _PARAMS, node, cg)

    def macs(self, node, shapes, out_shapes):
        return int(np.prod(out_shapes[0], dtype=np.int64))


OPS = (MulQ8(),)
