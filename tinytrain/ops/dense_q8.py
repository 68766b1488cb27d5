"""int8 fully connected layer (TFLite FULLY_CONNECTED), and its fp32 backward.

attrs as conv2d_q8: in_offset, out_offset, act_min, act_max, mult/shift (per output, a
per-tensor multiplier is repeated), x_scale, x_zp, w_scale (per output). Weights are
symmetric (zero point 0), as TFLite requires for int8 FULLY_CONNECTED. With attr `master`
the last input is the weight's shadow, read as conv2d_q8 reads it.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, size
from tinytrain.ops.conv2d_q8 import (
    bias_input,
    clamp_range,
    dequant_x,
    floats,
    master_acc,
    real_weight,
    requant_decl,
    requantize,
    shadow_input,
    weight_values,
)


class DenseQ8(OpDef):
    name = "dense_q8"
    public = True
    source_ops = ("FULLY_CONNECTED (int8)", "QDQ Gemm/MatMul")

    def infer(self, node, shapes):
        return [(shapes[1][0],)]

    def forward(self, node, xs):
        return [requantize(master_acc(*dense_acc(node, xs)), node.attrs)]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        dy = gb.emit("q8_clamp_backward", [dy, node.outputs[0]], clamp_range(dict(node.attrs)))
        dense_gradient(node, gb, dy)

    def c_call(self, node, cg):
        out, inp = cg.shape(node.inputs[1])
        b = bias_input(node)
        b = cg.ptr(b) if b else "NULL"
        sh = shadow_input(node)
        if sh:  # the master's kernel (tt_q8_master.c, tt_q8_conv_opt.c)
            return (f"{cg.kernel('tt_dense_s8_master')}({cg.ptr(node.outputs[0])}, "
                    f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {cg.ptr(sh)}, {b}, "
                    f"{inp}, {out}, &{requant_decl(cg, node.attrs)});")
        return (f"{cg.kernel('tt_dense_s8')}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {b}, {inp}, {out}, &{requant_decl(cg, node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[1])


def dense_acc(node, xs: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """An int8 dense layer's exact accumulators sum (x + in_offset) w + b, int64, and their
    unit in LSBs of w (256 when it reads the master, see weight_values)."""
    x = xs[0].reshape(-1).astype(np.int64) + node.attrs["in_offset"]
    w, unit = weight_values(node, xs)
    acc = w @ x
    if bias_input(node):
        acc = acc + xs[2].astype(np.int64) * unit
    return acc, unit


def dense_gradient(node, gb, dy: str) -> None:
    """The input, weight and bias gradients of an int8 dense layer (dense_q8 or
    dense_logits_q8) from dy, the gradient w.r.t. its real-valued output."""
    x, w = node.inputs[0], node.inputs[1]
    a = dict(node.attrs)
    if gb.needs_grad(x):
        gb.contribute(x, gb.emit("dense_backward_input_q8", [dy, w], a, out_shape=gb.shape(x)))
    if gb.needs_grad(w):
        gb.accumulate_param(w, "dense_backward_weight_q8", [dy, x], a)
    b = bias_input(node)
    if b is not None and gb.needs_grad(b):
        gb.accumulate_param(b, "bias_backward", [dy])


class DenseBackwardInputQ8(OpDef):
    name = "dense_backward_input_q8"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dx = real_weight(node, xs).astype(np.float64).T @ xs[0].astype(np.float64)
        return [dx.astype(np.float32).reshape(node.attrs["out_shape"])]

    def c_call(self, node, cg):
        out, inp = cg.shape(node.inputs[1])
        sh = shadow_input(node)
        if sh:
            return (f"tt_dense_backward_input_s8_master({cg.ptr(node.outputs[0])}, "
                    f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {cg.ptr(sh)}, "
                    f"{floats(cg, node.attrs['w_scale'])}, {inp}, {out});")
        return (f"tt_dense_backward_input_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"{floats(cg, node.attrs['w_scale'])}, {inp}, {out});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[1])


class DenseBackwardWeightQ8(OpDef):
    name = "dense_backward_weight_q8"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, x = xs
        return [np.outer(dy, dequant_x(x.reshape(-1), node.attrs)).astype(np.float32)]

    def c_call(self, node, cg):
        out, inp = cg.shape(node.outputs[0])
        a = node.attrs
        return (f"tt_dense_backward_weight_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_float(a['x_scale'])}, "
                f"{a['x_zp']}, {inp}, {out});")

    def macs(self, node, shapes, out_shapes):
        return size(out_shapes[0])


OPS = (DenseQ8(), DenseBackwardInputQ8(), DenseBackwardWeightQ8())
