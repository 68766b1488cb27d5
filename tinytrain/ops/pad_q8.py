"""int8 PAD: constant padding with the output zero point (real 0), as TFLite's PAD does.

TFLite requires equal input and output quantisation, so values are copied unchanged.
attrs: before, after (per axis, as ops/pad.py) plus `prepare`'s value (= zero point), scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, pad4
from tinytrain.quant import fixedpoint as fp


def prepare(in_q: QuantParams, out_q: QuantParams) -> dict[str, Any]:
    scale, zp = fp.scale_zp(in_q)
    if (scale, zp) != fp.scale_zp(out_q):
        raise ValueError("int8 PAD needs equal input and output quantisation")
    return {"value": zp, "scale": scale}


class PadQ8(OpDef):
    name = "pad_q8"
    public = True
    source_ops = ("PAD (int8)",)

    def infer(self, node, shapes):
        b, a = node.attrs["before"], node.attrs["after"]
        return [tuple(s + p + q for s, p, q in zip(shapes[0], b, a))]

    def forward(self, node, xs):
        width = list(zip(node.attrs["before"], node.attrs["after"]))
        return [np.pad(xs[0], width, constant_values=np.int8(node.attrs["value"]))]

    def gradient(self, node, gb):
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("crop", [dy], {"before": node.attrs["before"]},
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x, y = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        before = (0,) * (4 - len(x)) + tuple(node.attrs["before"])
        return (f"tt_pad_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ints(pad4(x))}, {cg.ints(pad4(y))}, {cg.ints(before)}, "
                f"{node.attrs['value']});")


OPS = (PadQ8(),)
