"""Reshape/Flatten: a view. The output aliases the input's storage; no code runs."""

from __future__ import annotations

from tinytrain.ops.base import OpDef


class Reshape(OpDef):
    name = "reshape"
    public = True
    source_ops = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "RESHAPE", "SQUEEZE",
                  "EXPAND_DIMS")

    def infer(self, node, shapes):
        return [tuple(node.attrs["shape"])]

    def forward(self, node, xs):
        return [xs[0].reshape(node.attrs["shape"])]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("reshape", [dy], {"shape": tuple(gb.shape(x))},
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        return f"/* {node.name}: reshape is a view, nothing to do */"


OPS = (Reshape(),)
