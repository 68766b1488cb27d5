"""Concatenation along one axis; backward slices the gradient back apart."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size


def _split(shape, axis: int) -> tuple[int, int]:
    """(outer, inner) element counts around `axis` (inner includes the axis itself)."""
    return size(shape[:axis]), size(shape[axis:])


class Concat(OpDef):
    name = "concat"
    public = True
    source_ops = ("Concat", "CONCATENATION")

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
            calls.append(f"tt_concat_part_f32({cg.ptr(node.outputs[0])}, {cg.ptr(x)}, {outer}, "
                         f"{inner_x}, {inner_y}, {off});")
            off += inner_x
        return " ".join(calls)


class SlicePart(OpDef):
    name = "slice_part"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        ax, off, shape = node.attrs["axis"], node.attrs["offset"], node.attrs["out_shape"]
        sl = [slice(None)] * len(shape)
        sl[ax] = slice(off, off + shape[ax])
        return [np.ascontiguousarray(xs[0][tuple(sl)])]

    def c_call(self, node, cg):
        ax, dy, x = node.attrs["axis"], cg.shape(node.inputs[0]), node.attrs["out_shape"]
        outer, inner_y = _split(dy, ax)
        _, inner_x = _split(x, ax)
        off = node.attrs["offset"] * size(x[ax + 1:])
        return (f"tt_slice_part_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{outer}, {inner_x}, {inner_y}, {off});")


OPS = (Concat(), SlicePart())
