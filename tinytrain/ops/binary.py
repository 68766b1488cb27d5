"""Shared shape of broadcasting binary ops (Add, Mul) over rank-4 strided views."""

from __future__ import annotations

from tinytrain.ops.base import OpDef, broadcast_shape, broadcast_strides, pad4


class Binary(OpDef):
    public = True

    def infer(self, node, shapes):
        return [broadcast_shape(shapes[0], shapes[1])]

    def c_call(self, node, cg):
        y = cg.shape(node.outputs[0])
        a, b = cg.shape(node.inputs[0]), cg.shape(node.inputs[1])
        return (f"tt_{self.name}_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {cg.ints(pad4(y))}, "
                f"{cg.ints(broadcast_strides(a, y))}, {cg.ints(broadcast_strides(b, y))});")


def reduced(gb, grad: str, shape) -> str:
    """The gradient summed down to `shape` when the operand was broadcast."""
    if tuple(gb.shape(grad)) == tuple(shape):
        return grad
    return gb.emit("reduce_to", [grad], out_shape=tuple(shape))
