"""The int8 classifier's logits as float32 real values, straight from its int32 accumulators:
what the training loss reads.

The int8 logits themselves are 8 bits over the head's output range, and a `--new-head`
classifier's range is widened to +-16 (passes/new_head.py): one LSB is 1/8 of a logit. The
loss's gradient, softmax(z) - onehot, then sees logits rounded to 1/8; in PyTorch through
the build's fake-quantised forward (bench/int8_forward.py) that rounding cost 0.1-0.5 point on
bench/auto_plan.py's MobileNetV2 (the int8 builds themselves moved by -0.2 to +0.4 over 8
networks, within their standard errors). This op recomputes the head's
accumulators (a few hundred MACs) and scales them to reals without the requantisation: the
loss sees what the int32 sums hold. The int8 head stays the model's output for inference.

Inputs and attrs are the head's (dense_q8: x, w[, b][, shadow with attr master]); output
y[o] = float(acc[o]) * x_scale * w_scale[o] (with the master, acc counts 1/256 LSBs and the
scale carries the 1/256). Its gradient is the head's without the saturation mask: the real
logits do not saturate.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size
from tinytrain.ops.conv2d_q8 import bias_input, floats, shadow_input
from tinytrain.ops.dense_q8 import dense_acc, dense_gradient


def real_scales(a: dict, unit: int) -> np.ndarray:
    """float32 x_scale * w_scale[o] / unit: one accumulator unit in real logit units."""
    s = np.float32(a["x_scale"]) * np.asarray(a["w_scale"], np.float32)
    return (s * np.float32(1.0 / unit)).astype(np.float32)


class DenseLogitsQ8(OpDef):
    name = "dense_logits_q8"

    def infer(self, node, shapes):
        return [(shapes[1][0],)]

    def forward(self, node, xs):
        acc, unit = dense_acc(node, xs)
        return [(acc.astype(np.float32) * real_scales(node.attrs, unit)).astype(np.float32)]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        if dy is not None:
            dense_gradient(node, gb, dy)

    def c_call(self, node, cg):
        out, inp = cg.shape(node.inputs[1])
        b = bias_input(node)
        sh = shadow_input(node)
        unit = 256 if sh else 1
        return (f"tt_dense_s8_logits({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {cg.ptr(sh) if sh else 'NULL'}, "
                f"{cg.ptr(b) if b else 'NULL'}, {inp}, {out}, {node.attrs['in_offset']}, "
                f"{floats(cg, real_scales(node.attrs, unit))});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[1])


OPS = (DenseLogitsQ8(),)
