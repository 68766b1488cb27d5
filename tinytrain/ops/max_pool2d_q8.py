"""int8 MAX_POOL_2D, bit-exact with TFLite's reference kernel (padding taps never win).

attrs: the pool geometry of ops/max_pool2d.py plus `prepare`'s act_min, act_max, scale, zp
(avg_pool2d_q8.prepare: input and output quantisation must be equal).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.avg_pool2d_q8 import GEOMETRY, pool_mask, prepare
from tinytrain.ops.base import OpDef, size
from tinytrain.ops.max_pool2d import MaxPool2dBackward
from tinytrain.ops.pool import pool_geom, pool_infer, windows

__all__ = ["prepare", "OPS"]


class MaxPool2dQ8(OpDef):
    name = "max_pool2d_q8"
    public = True
    source_ops = ("MAX_POOL_2D (int8)",)

    def infer(self, node, shapes):
        return [pool_infer(node, shapes[0])]

    def forward(self, node, xs):
        x = xs[0]
        y = np.zeros(pool_infer(node, x.shape), np.int64)
        for oy, ox, rows, cols in windows(x.shape, node):
            y[oy, ox] = x[np.ix_(rows, cols)].max(axis=(0, 1))
        return [np.clip(y, node.attrs["act_min"], node.attrs["act_max"]).astype(np.int8)]

    def gradient(self, node, gb):
        dy, x = pool_mask(gb, node), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            geometry = {k: node.attrs[k] for k in GEOMETRY}
            gb.contribute(x, gb.emit("max_pool2d_backward_q8", [dy, x], geometry,
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"tt_max_pool2d_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"&{pool_geom(cg, node, x)}, {node.attrs['act_min']}, {node.attrs['act_max']});")

    def macs(self, node, shapes, out_shapes):
        kh, kw = node.attrs["kernel"]
        return size(out_shapes[0]) * kh * kw


class MaxPool2dBackwardQ8(MaxPool2dBackward):
    """dy routed to the first maximal tap of each window, recomputed from the int8 input."""

    name = "max_pool2d_backward_q8"

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[1])
        return (f"tt_max_pool2d_backward_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"&{pool_geom(cg, node, x)});")


OPS = (MaxPool2dQ8(), MaxPool2dBackwardQ8())
