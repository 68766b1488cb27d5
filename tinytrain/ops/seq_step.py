"""One step of a sequence: y = x[step] for x (1, T, C) stored step by step. PyTorch's
`out[:, -1]` after a recurrent layer, and ONNX's final hidden state Y_h (the last step of Y).
Its backward writes dy into that step and zeros elsewhere."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ir import DTYPE_BYTES
from tinytrain.ops.base import OpDef


class SeqStep(OpDef):
    name = "seq_step"
    public = True
    source_ops = ("Gather", "STRIDED_SLICE")

    def infer(self, node, shapes):
        x = shapes[0]
        if len(x) != 3 or x[0] != 1 or not 0 <= int(node.attrs["step"]) < x[1]:
            raise ValueError(f"step {node.attrs['step']} of a sequence of shape {list(x)}")
        return [(x[2],)]

    def forward(self, node, xs):
        return [xs[0][0, int(node.attrs["step"])].copy()]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        x = node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("seq_step_backward", [dy], {"step": node.attrs["step"]},
                                     out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        _, _, c = cg.shape(node.inputs[0])
        size = DTYPE_BYTES[cg.g.t(node.inputs[0]).dtype]  # int8 steps of an int8 LSTM too
        return (f"memcpy({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])} + "
                f"{int(node.attrs['step']) * c}, {size * c});")


class SeqStepBackward(OpDef):
    name = "seq_step_backward"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dx = np.zeros(node.attrs["out_shape"], np.float32)
        dx[0, int(node.attrs["step"])] = xs[0]
        return [dx]

    def c_call(self, node, cg):
        _, steps, c = cg.shape(node.outputs[0])
        out = cg.ptr(node.outputs[0])
        return (f"memset({out}, 0, {4 * steps * c}); memcpy({out} + "
                f"{int(node.attrs['step']) * c}, {cg.ptr(node.inputs[0])}, {4 * c});")


OPS: Sequence[OpDef] = (SeqStep(), SeqStepBackward())
