"""Straight-through gradient of a saturating int8 output (fused ReLU/ReLU6 and the int8 range).

dx = dy where act_min < y < act_max: where the requantised output was clamped, a small change
of the input does not change it. For a fused ReLU act_min is the zero point, so this is
exactly ReLU's backward; it reads the int8 output, which later layers save anyway.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size
from tinytrain.ops.clip_mask import mask_bytes, mask_rows


class Q8ClampBackward(OpDef):
    name = "q8_clamp_backward"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        dy, y = xs
        y = y.reshape(dy.shape).astype(np.int32)
        keep = (y > node.attrs["lo"]) & (y < node.attrs["hi"])
        return [np.where(keep, dy, np.float32(0)).astype(np.float32)]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        return (f"tt_q8_clamp_backward({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {n}, {node.attrs['lo']}, {node.attrs['hi']});")


class Q8ClampMask(OpDef):
    """The same condition as a 1-bit mask taken at forward time (bit i = lo < y[i] < hi),
    read by mask_backward: 1/8 of the bytes of keeping the int8 output for the backward."""

    name = "q8_clamp_mask"
    has_gradient = False

    def infer(self, node, shapes):
        return [(mask_bytes(size(shapes[0])),)]

    def forward(self, node, xs):
        y = xs[0].reshape(-1).astype(np.int32)
        bits = (y > node.attrs["lo"]) & (y < node.attrs["hi"])
        return [np.packbits(bits, bitorder="little")]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        return (f"{cg.kernel('tt_q8_clamp_mask')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {n}, {node.attrs['lo']}, {node.attrs['hi']});")

    # In a row-streamed stage (passes/stream.py) the mask of row r is taken as the row is
    # made: its bits start at byte r * W * C / 8 of the whole mask (W * C is a multiple of 8).
    def row_inputs(self, node, shapes):
        return mask_rows(shapes[0])

    def row_window(self, node, shapes, row):
        return [(row, row)]

    def row_call(self, node, cg, rings, out, row):
        _, w, c = cg.shape(node.inputs[0])
        return (f"{cg.kernel('tt_q8_clamp_mask')}((uint8_t *){out} + {row} * {w * c // 8}, "
                f"tt_row(&{rings[0]}, {row}), {w * c}, {node.attrs['lo']}, "
                f"{node.attrs['hi']});")


OPS = (Q8ClampBackward(), Q8ClampMask())
