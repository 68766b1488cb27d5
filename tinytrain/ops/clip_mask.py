"""1-bit masks for ReLU/ReLU6/Clip backward: 1/32 of the bytes of the saved activation."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, size


def mask_bytes(n: int) -> int:
    return (n + 7) // 8


def mask_rows(shape) -> tuple[int, ...] | None:
    """row_inputs of an op that reads or writes the mask of an HWC tensor row by row: (0,)
    when each row's bits start on a whole byte (W * C a multiple of 8), else None."""
    return (0,) if len(shape) == 3 and shape[1] * shape[2] % 8 == 0 else None


class ClipMask(OpDef):
    """mask bit i = lo < x[i] < hi, packed little-endian within each byte."""

    name = "clip_mask"
    has_gradient = False

    def infer(self, node, shapes):
        return [(mask_bytes(size(shapes[0])),)]

    def forward(self, node, xs):
        x = xs[0].reshape(-1)
        bits = (x > node.attrs["lo"]) & (x < node.attrs["hi"])
        return [np.packbits(bits, bitorder="little")]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        return (f"tt_clip_mask_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, {n}, "
                f"{c_float(node.attrs['lo'])}, {c_float(node.attrs['hi'])});")


class MaskBackward(OpDef):
    """dx = dy where the mask bit is set."""

    name = "mask_backward"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        dy, mask = xs
        bits = np.unpackbits(mask, bitorder="little")[: dy.size].reshape(dy.shape)
        return [np.where(bits == 1, dy, np.float32(0)).astype(np.float32)]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        fn = cg.kernel("tt_mask_backward_f32")
        return (f"{fn}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {n});")

    # In a backward region run row by row (passes/stream_backward.py): row r's bits start at
    # byte r * W * C / 8 of the whole mask (W * C is a multiple of 8).
    def row_inputs(self, node, shapes):
        return mask_rows(shapes[0])

    def row_window(self, node, shapes, row):
        return [(row, row)]

    def row_call(self, node, cg, rings, out, row):
        _, w, c = cg.shape(node.inputs[0])
        fn = cg.kernel("tt_mask_backward_f32")
        return (f"{fn}((float *)tt_row(&{out}, {row}), "
                f"(const float *)tt_row(&{rings[0]}, {row}), "
                f"{cg.ptr(node.inputs[1])} + {row} * {w * c // 8}, {w * c});")


OPS = (ClipMask(), MaskBackward())
