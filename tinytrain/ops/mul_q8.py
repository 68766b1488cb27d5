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
from tinytrain.ops.base import OpDef, broadcast_strides, c_float, pad4
from tinytrain.ops.binary import Binary, reduced
from tinytrain.ops.grad_q8 import mask_range, masked
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

    def gradient(self, node, gb):
        # d(a * b)/da = real b (dequantised on the fly), summed over broadcast axes
        a = node.attrs
        dy = masked(gb, node, mask_range(a))
        if dy is None:
            return
        (x0, x1), q = node.inputs, {0: ("b_scale", "b_offset"), 1: ("a_scale", "a_offset")}
        for k, (x, other) in enumerate(((x0, x1), (x1, x0))):
            if gb.needs_grad(x):
                scale, offset = q[k]
                prod = gb.emit("mul_backward_q8", [dy, other],
                               {"scale": a[scale], "zp": -a[offset]}, out_shape=gb.shape(dy))
                gb.contribute(x, reduced(gb, prod, gb.shape(x)))

    def c_call(self, node, cg):
        return binary_call("tt_mul_s8", "tt_q8_mul", _PARAMS, node, cg)

    def macs(self, node, shapes, out_shapes):
        return int(np.prod(out_shapes[0], dtype=np.int64))


class MulBackwardQ8(OpDef):
    """dx = dy * scale * (other - zp), other broadcast to dy's shape."""

    name = "mul_backward_q8"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        dy, other = xs
        real = np.float32(node.attrs["scale"]) * (other.astype(np.int32) - node.attrs["zp"])
        return [(dy * np.broadcast_to(real.astype(np.float32), dy.shape)).astype(np.float32)]

    def c_call(self, node, cg):
        y, o = cg.shape(node.inputs[0]), cg.shape(node.inputs[1])
        return (f"tt_mul_backward_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {cg.ints(pad4(y))}, "
                f"{cg.ints(broadcast_strides(o, y))}, {c_float(node.attrs['scale'])}, "
                f"{node.attrs['zp']});")


OPS = (MulQ8(), MulBackwardQ8())
