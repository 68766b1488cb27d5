"""Elementwise Mul with broadcasting (squeeze-excitation channel scaling)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, broadcast_strides, pad4, reduce_to, size
from tinytrain.ops.binary import Binary, reduced


class Mul(Binary):
    name = "mul"
    source_ops = ("Mul", "MUL", "DIV")  # DIV: a float model's x / constant

    def forward(self, node, xs):
        return [(xs[0] * xs[1]).astype(np.float32)]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        a, b = node.inputs
        for x, other in ((a, b), (b, a)):  # d(a*b)/da = b, summed over broadcast axes
            if gb.needs_grad(x):
                prod = gb.emit("mul", [dy, other], out_shape=gb.shape(dy))
                gb.contribute(x, reduced(gb, prod, gb.shape(x)))

    def macs(self, node, shapes, out_shapes):
        return size(out_shapes[0])


class ReduceTo(OpDef):
    """Sum a broadcast gradient back to the operand's shape."""

    name = "reduce_to"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        return [reduce_to(xs[0], tuple(node.attrs["out_shape"])).astype(np.float32)]

    def c_call(self, node, cg):
        src = cg.shape(node.inputs[0])
        dst = tuple(node.attrs["out_shape"])
        return (f"tt_reduce_to_f32({cg.ptr(node.outputs[0])}, {size(dst)}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ints(pad4(src))}, "
                f"{cg.ints(broadcast_strides(dst, src))});")


OPS: tuple[OpDef, ...] = (Mul(), ReduceTo())
