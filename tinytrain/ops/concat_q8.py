"""int8 CONCATENATION: a plain copy.

TFLite's int8 CONCATENATION refuses inputs whose scale or zero point differ from the output's
("no re-scaling needed for Int8 quantized kernel"); converters insert a QUANTIZE (requantise,
ops/quantize_q8.py) in front of such inputs instead. `prepare` enforces the same rule.
attrs: axis (as ops/concat.py) plus `prepare`'s scale, zp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef
from tinytrain.ops.concat import _split
from tinytrain.quant import fixedpoint as fp


def prepare(in_qs: Sequence[QuantParams], out_q: QuantParams) -> dict[str, Any]:
    scale, zp = fp.scale_zp(out_q)
    if any(fp.scale_zp(q) != (scale, zp) for q in in_qs):
        raise ValueError("int8 CONCATENATION needs every input quantised as the output "
                         "(requantise the others with quantize_q8 first)")
    return {"scale": scale, "zp": zp}


class ConcatQ8(OpDef):
    name = "concat_q8"
    public = True
    source_ops = ("CONCATENATION (int8)",)

    def infer(self, node, shapes):
        ax = node.attrs["axis"]
        out = list(shapes[0])
        out[ax] = sum(s[ax] for s in shapes)
        return [tuple(out)]

    def forward(self, node, xs):
        return [np.concatenate(xs, axis=node.attrs["axis"])]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        ax, offset = node.attrs["axis"], 0
        for x in node.inputs:
            if gb.needs_grad(x):
                gb.contribute(x, gb.emit("slice_part", [dy], {"axis": ax, "offset": offset},
                                         out_shape=gb.shape(x)))
            offset += gb.shape(x)[ax]

    def c_call(self, node, cg):
        ax, y = node.attrs["axis"], cg.shape(node.outputs[0])
        outer, inner_y = _split(y, ax)
        calls, off = [], 0
        for x in node.inputs:
            _, inner_x = _split(cg.shape(x), ax)
            calls.append(f"tt_concat_part_s8({cg.ptr(node.outputs[0])}, {cg.ptr(x)}, {outer}, "
                         f"{inner_x}, {inner_y}, {off});")
            off += inner_x
        return " ".join(calls)


OPS = (ConcatQ8(),)
