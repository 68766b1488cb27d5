"""DEQUANTIZE: int8 -> float32 real values, scale * (q - zero_point).

Also where training leaves the int8 domain: the loss reads dequantised logits. Its gradient is
the identity, because gradients of int8 tensors are already taken w.r.t. real values.
attrs: scale, zp.
"""

from __future__ import annotations

from tinytrain.ops.base import OpDef, c_float, size
from tinytrain.quant.fixedpoint import dequantize


class DequantizeQ8(OpDef):
    name = "dequantize_q8"
    public = True
    source_ops = ("DEQUANTIZE", "DequantizeLinear")

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [dequantize(xs[0], node.attrs["scale"], node.attrs["zp"])]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, dy)

    def c_call(self, node, cg):
        return (f"tt_dequantize_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(cg.shape(node.inputs[0]))}, {c_float(node.attrs['scale'])}, "
                f"{node.attrs['zp']});")


OPS = (DequantizeQ8(),)
