"""AveragePool with ONNX's count_include_pad choice."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size
from tinytrain.ops.pool import empty_grad, pool_geom, pool_infer, windows


def _divisor(node, rows, cols) -> int:
    kh, kw = node.attrs["kernel"]
    return kh * kw if node.attrs.get("count_include_pad", 0) else len(rows) * len(cols)


class AvgPool2d(OpDef):
    name = "avg_pool2d"
    public = True
    source_ops = ("AveragePool", "AVERAGE_POOL_2D")

    def infer(self, node, shapes):
        return [pool_infer(node, shapes[0])]

    def forward(self, node, xs):
        x = xs[0].astype(np.float64)
        y = np.zeros(pool_infer(node, x.shape))
        for oy, ox, rows, cols in windows(x.shape, node):
            y[oy, ox] = x[np.ix_(rows, cols)].sum(axis=(0, 1)) / _divisor(node, rows, cols)
        return [y.astype(np.float32)]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("avg_pool2d_backward", [dy], dict(node.attrs),
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"tt_avg_pool2d_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"&{pool_geom(cg, node, x)}, {int(node.attrs.get('count_include_pad', 0))});")

    def macs(self, node, shapes, out_shapes):
        kh, kw = node.attrs["kernel"]
        return size(out_shapes[0]) * kh * kw


class AvgPool2dBackward(OpDef):
    name = "avg_pool2d_backward"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy = xs[0]
        x_shape = tuple(node.attrs["out_shape"])
        dx = empty_grad(x_shape)
        for oy, ox, rows, cols in windows(x_shape, node):
            dx[np.ix_(rows, cols)] += dy[oy, ox] / _divisor(node, rows, cols)
        return [dx.astype(np.float32)]

    def c_call(self, node, cg):
        x = tuple(node.attrs["out_shape"])
        return (f"tt_avg_pool2d_backward_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, &{pool_geom(cg, node, x)}, "
                f"{int(node.attrs.get('count_include_pad', 0))});")


OPS = (AvgPool2d(), AvgPool2dBackward())
