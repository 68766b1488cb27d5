"""Constant padding (ONNX Pad mode=constant, TFLite PAD); backward crops the gradient."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, pad4

# attrs: before (per axis), after (per axis), value


class Pad(OpDef):
    name = "pad"
    public = True
    source_ops = ("Pad", "PAD", "PADV2")

    def infer(self, node, shapes):
        b, a = node.attrs["before"], node.attrs["after"]
        return [tuple(s + p + q for s, p, q in zip(shapes[0], b, a))]

    def forward(self, node, xs):
        width = list(zip(node.attrs["before"], node.attrs["after"]))
        return [np.pad(xs[0], width, constant_values=node.attrs.get("value", 0.0))]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("crop", [dy], {"before": node.attrs["before"]},
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x, y = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        before = (0,) * (4 - len(x)) + tuple(node.attrs["before"])
        return (f"tt_pad_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ints(pad4(x))}, {cg.ints(pad4(y))}, {cg.ints(before)}, "
                f"{c_float(node.attrs.get('value', 0.0))});")


class Crop(OpDef):
    name = "crop"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        shape = node.attrs["out_shape"]
        sl = tuple(slice(b, b + n) for b, n in zip(node.attrs["before"], shape))
        return [np.ascontiguousarray(xs[0][sl])]

    def c_call(self, node, cg):
        x, y = cg.shape(node.outputs[0]), cg.shape(node.inputs[0])
        before = (0,) * (4 - len(x)) + tuple(node.attrs["before"])
        return (f"tt_crop_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ints(pad4(x))}, {cg.ints(pad4(y))}, {cg.ints(before)});")


OPS = (Pad(), Crop())
