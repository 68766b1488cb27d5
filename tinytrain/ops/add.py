"""Elementwise Add with broadcasting (residual connections, bias adds)."""

from __future__ import annotations

from tinytrain.ops.base import OpDef, size
from tinytrain.ops.binary import Binary, reduced


class Add(Binary):
    name = "add"
    source_ops = ("Add", "ADD", "SUB")  # SUB: a float model's x - constant

    def forward(self, node, xs):
        return [xs[0] + xs[1]]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        for x in node.inputs:
            if gb.needs_grad(x):
                gb.contribute(x, reduced(gb, dy, gb.shape(x)))

    def macs(self, node, shapes, out_shapes):
        return size(out_shapes[0])


class Accumulate(OpDef):
    """Sum of two gradient contributions of the same shape (fan-in)."""

    name = "accumulate"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [xs[0] + xs[1]]

    def c_call(self, node, cg):
        n = size(cg.shape(node.outputs[0]))
        y, a, b = cg.ptr(node.outputs[0]), cg.ptr(node.inputs[0]), cg.ptr(node.inputs[1])
        if cg.same_buffer(node.outputs[0], node.inputs[0]):
            return f"tt_accumulate_f32({y}, {b}, {n});"
        return f"tt_copy_f32({y}, {a}, {n}); tt_accumulate_f32({y}, {b}, {n});"

    # a row of a backward region run row by row (passes/stream_backward.py)
    def row_inputs(self, node, shapes):
        return (0, 1) if len(shapes[0]) == 3 and shapes[0] == shapes[1] else None

    def row_window(self, node, shapes, row):
        return [(row, row), (row, row)]

    def row_call(self, node, cg, rings, out, row):
        _, w, c = cg.shape(node.inputs[0])
        y = f"(float *)tt_row(&{out}, {row})"
        return (f"tt_copy_f32({y}, (const float *)tt_row(&{rings[0]}, {row}), {w * c}); "
                f"tt_accumulate_f32({y}, (const float *)tt_row(&{rings[1]}, {row}), {w * c});")


class AccumulateParam(OpDef):
    """dst += src: a gradient arriving at a trainable parameter used as a plain operand."""

    name = "accumulate_param"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        return [xs[0]]  # the interpreter adds it to the parameter's gradient

    def c_call(self, node, cg):
        n = size(cg.shape(node.outputs[0]))
        return f"tt_accumulate_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, {n});"


OPS: tuple[OpDef, ...] = (Add(), Accumulate(), AccumulateParam())
