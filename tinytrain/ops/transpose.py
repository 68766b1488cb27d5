"""A materialised layout change (e.g. HWC -> CHW before a Flatten of a feature map)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, pad4


def _perm4(perm) -> tuple[int, ...]:
    k = 4 - len(perm)
    return tuple(range(k)) + tuple(p + k for p in perm)


class Transpose(OpDef):
    name = "transpose"
    public = True
    source_ops = ("Transpose",)

    def infer(self, node, shapes):
        return [tuple(shapes[0][p] for p in node.attrs["perm"])]

    def forward(self, node, xs):
        return [np.ascontiguousarray(np.transpose(xs[0], node.attrs["perm"]))]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            inv = tuple(int(i) for i in np.argsort(node.attrs["perm"]))
            gb.contribute(x, gb.emit("transpose", [dy], {"perm": inv}, out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        return (f"tt_transpose_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ints(pad4(x))}, {cg.ints(_perm4(node.attrs['perm']))});")


OPS = (Transpose(),)
