"""MaxPool (padding never wins, dilation allowed); backward recomputes the argmax from x."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size
from tinytrain.ops.pool import empty_grad, pool_geom, pool_infer, windows


def _argmax(x, rows, cols):
    win = x[np.ix_(rows, cols)]  # (r, c, C): first maximum in row-major scan order
    flat = win.reshape(-1, win.shape[-1])
    k = flat.argmax(axis=0)
    return [rows[i // len(cols)] for i in k], [cols[i % len(cols)] for i in k]


class MaxPool2d(OpDef):
    name = "max_pool2d"
    public = True
    source_ops = ("MaxPool", "MAX_POOL_2D")

    def infer(self, node, shapes):
        return [pool_infer(node, shapes[0])]

    def forward(self, node, xs):
        x = xs[0]
        y = np.zeros(pool_infer(node, x.shape), np.float32)
        for oy, ox, rows, cols in windows(x.shape, node):
            y[oy, ox] = x[np.ix_(rows, cols)].max(axis=(0, 1))
        return [y]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("max_pool2d_backward", [dy, x], dict(node.attrs),
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"{cg.kernel('tt_max_pool2d_f32')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, &{pool_geom(cg, node, x)});")

    def macs(self, node, shapes, out_shapes):
        kh, kw = node.attrs["kernel"]
        return size(out_shapes[0]) * kh * kw


class MaxPool2dBackward(OpDef):
    name = "max_pool2d_backward"

    def infer(self, node, shapes):
        return [shapes[1]]

    def forward(self, node, xs):
        dy, x = xs
        dx = empty_grad(x.shape)
        chans = np.arange(x.shape[2])
        for oy, ox, rows, cols in windows(x.shape, node):
            r, c = _argmax(x, rows, cols)
            np.add.at(dx, (r, c, chans), dy[oy, ox])
        return [dx.astype(np.float32)]

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[1])
        return (f"{cg.kernel('tt_max_pool2d_backward_f32')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"&{pool_geom(cg, node, x)});")


OPS = (MaxPool2d(), MaxPool2dBackward())
