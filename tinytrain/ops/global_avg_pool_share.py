"""A global average pool's gradient kept per channel: v[c] = dL/dy[c] / (H*W).

The pool's backward spreads this value over every pixel of channel c (global_avg_pool_backward
writes all H x W x C of them). passes/pool_grad.py keeps only v when every reader of that
tensor can read v instead (ops/pooled_grad.py). attrs: rows (H*W of the pool input).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size


class GlobalAvgPoolShare(OpDef):
    name = "global_avg_pool_share"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        # the values global_avg_pool_backward broadcasts (float64 quotient, rounded once)
        return [(xs[0].astype(np.float64) / node.attrs["rows"]).astype(np.float32)]

    def in_place(self, node, shapes):
        return True  # v[c] depends on dy[c] alone, read before it is written

    def c_call(self, node, cg):
        return (f"tt_global_avg_pool_share_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {node.attrs['rows']}, "
                f"{size(cg.shape(node.inputs[0]))});")


OPS = (GlobalAvgPoolShare(),)
