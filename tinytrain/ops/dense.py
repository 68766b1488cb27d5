"""Fully connected layer: y = W x + b with W stored (out, in)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef, size


class Dense(OpDef):
    name = "dense"
    public = True
    source_ops = ("Gemm", "MatMul", "FULLY_CONNECTED")

    def infer(self, node, shapes):
        x, w = shapes[0], shapes[1]
        if len(w) != 2 or int(np.prod(x, dtype=np.int64)) != w[1]:
            raise ValueError(f"the weight must be (outputs, inputs) with inputs = the input's "
                             f"{int(np.prod(x, dtype=np.int64))} values; it is {list(w)}")
        if len(shapes) > 2 and tuple(shapes[2]) != (w[0],):
            raise ValueError(f"the bias must have shape [{w[0]}], not {list(shapes[2])}")
        return [(w[0],)]

    def forward(self, node, xs):
        x, w = xs[0].reshape(-1).astype(np.float64), xs[1].astype(np.float64)
        y = w @ x
        if len(xs) > 2:
            y = y + xs[2]
        return [y.astype(np.float32)]

    def gradient(self, node, gb):
        x, w = node.inputs[0], node.inputs[1]
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        if gb.needs_grad(x):
            gb.contribute(x, gb.emit("dense_backward_input", [dy, w], out_shape=gb.shape(x)))
        if gb.needs_grad(w):
            gb.accumulate_param(w, "dense_backward_weight", [dy, x])
        if len(node.inputs) > 2 and gb.needs_grad(node.inputs[2]):
            gb.accumulate_param(node.inputs[2], "bias_backward", [dy])

    def c_call(self, node, cg):
        out, inp = cg.shape(node.inputs[1])
        b = cg.ptr(node.inputs[2]) if len(node.inputs) > 2 else "NULL"
        return (f"{cg.kernel('tt_dense_f32')}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {b}, {inp}, {out});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[1])


class DenseBackwardInput(OpDef):
    name = "dense_backward_input"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, w = xs
        dx = w.astype(np.float64).T @ dy.astype(np.float64)
        return [dx.astype(np.float32).reshape(node.attrs["out_shape"])]

    def c_call(self, node, cg):
        out, inp = cg.shape(node.inputs[1])
        return (f"{cg.kernel('tt_dense_backward_input_f32')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {inp}, {out});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[1])


class DenseBackwardWeight(OpDef):
    name = "dense_backward_weight"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, x = xs
        return [np.outer(dy, x.reshape(-1)).astype(np.float32)]

    def c_call(self, node, cg):
        out, inp = cg.shape(node.outputs[0])
        return (f"{cg.kernel('tt_dense_backward_weight_f32')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {inp}, {out});")

    def macs(self, node, shapes, out_shapes):
        return size(out_shapes[0])


OPS: Sequence[OpDef] = (Dense(), DenseBackwardInput(), DenseBackwardWeight())
