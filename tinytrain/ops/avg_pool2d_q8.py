"""int8 AVERAGE_POOL_2D, bit-exact with TFLite's reference kernel.

Padding taps are excluded from the average (TFLite divides by the in-bounds count); the sum of
raw int8 values is divided rounding half away from zero, then clamped to the fused activation.
TFLite requires the input and output quantisation to be equal.

attrs: the pool geometry of ops/avg_pool2d.py (kernel, stride, pads, dilation) plus
`prepare`'s act_min, act_max, scale, zp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.ops.grad_q8 import mask_range, masked
from tinytrain.ops.pool import pool_geom, pool_infer, windows
from tinytrain.quant import fixedpoint as fp


def prepare(in_q: QuantParams, out_q: QuantParams,
            act: tuple[int, int] = (-128, 127)) -> dict[str, Any]:
    """Pooling Prepare for int8: same scale and zero point in and out; `act` is the fused
    activation's int8 range."""
    scale, zp = fp.scale_zp(in_q)
    if (scale, zp) != fp.scale_zp(out_q):
        raise ValueError("int8 pooling needs equal input and output quantisation")
    return {"act_min": int(act[0]), "act_max": int(act[1]), "scale": scale, "zp": zp}


GEOMETRY = ("kernel", "stride", "pads", "dilation")


def pool_mask(gb, node) -> str | None:
    """dL/dy where the fused activation did not clamp."""
    return masked(gb, node, mask_range(node.attrs))


def rounded_div(acc: np.ndarray, n: int) -> np.ndarray:
    """(acc +- n/2) / n in C integer division: rounds half away from zero."""
    return np.where(acc > 0, fp.cdiv(acc + n // 2, n), fp.cdiv(acc - n // 2, n))


class AvgPool2dQ8(OpDef):
    name = "avg_pool2d_q8"
    public = True
    source_ops = ("AVERAGE_POOL_2D (int8)",)

    def infer(self, node, shapes):
        return [pool_infer(node, shapes[0])]

    def forward(self, node, xs):
        x = xs[0].astype(np.int64)
        y = np.zeros(pool_infer(node, x.shape), np.int64)
        for oy, ox, rows, cols in windows(x.shape, node):
            acc = x[np.ix_(rows, cols)].sum(axis=(0, 1))
            y[oy, ox] = rounded_div(acc, len(rows) * len(cols))
        return [np.clip(y, node.attrs["act_min"], node.attrs["act_max"]).astype(np.int8)]

    def gradient(self, node, gb):
        # real y = mean of the in-bounds taps: avg_pool2d_backward without padding in the count
        dy, x = pool_mask(gb, node), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            geometry = {k: node.attrs[k] for k in GEOMETRY}
            gb.contribute(x, gb.emit("avg_pool2d_backward", [dy], geometry,
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"tt_avg_pool2d_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"&{pool_geom(cg, node, x)}, {node.attrs['act_min']}, {node.attrs['act_max']});")

    def macs(self, node, shapes, out_shapes):
        kh, kw = node.attrs["kernel"]
        return size(out_shapes[0]) * kh * kw


OPS = (AvgPool2dQ8(),)
