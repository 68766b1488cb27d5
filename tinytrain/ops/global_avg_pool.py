"""Mean over H and W (GlobalAveragePool, ReduceMean over the spatial axes, TFLite MEAN)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size


def _rows(shape) -> int:
    return size(shape[:-1])


class GlobalAvgPool(OpDef):
    name = "global_avg_pool"
    public = True
    source_ops = ("GlobalAveragePool", "ReduceMean", "MEAN")

    def infer(self, node, shapes):
        c = shapes[0][-1]
        return [(1, 1, c) if node.attrs.get("keepdims", 1) else (c,)]

    def forward(self, node, xs):
        x = xs[0].astype(np.float64)
        y = x.reshape(-1, x.shape[-1]).mean(axis=0)
        return [y.reshape(self.infer(node, [x.shape])[0]).astype(np.float32)]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("global_avg_pool_backward", [dy], out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"tt_global_avg_pool_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{_rows(x)}, {x[-1]});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0])


class GlobalAvgPoolBackward(OpDef):
    name = "global_avg_pool_backward"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        shape = tuple(node.attrs["out_shape"])
        dy = xs[0].reshape(-1).astype(np.float64)
        return [np.broadcast_to(dy / _rows(shape), shape).astype(np.float32)]

    def c_call(self, node, cg):
        x = tuple(node.attrs["out_shape"])
        return (f"tt_global_avg_pool_backward_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {_rows(x)}, {x[-1]});")


OPS = (GlobalAvgPool(), GlobalAvgPoolBackward())
