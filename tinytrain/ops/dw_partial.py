"""Partial weight updates of a depthwise conv (channel multiplier 1): the gradient of, and the
fused SGD update of, the trained channels' rows of its (C, kh, kw, 1) weight.

Weight channel c sees only input channel c and feeds only output channel c, so the k trained
channels need only those channels of the saved input (gathered at forward time, prune.py)
and of the output gradient dy, read in place from the whole dy (channel stride C). The
result has k rows, in `channels` order; the update writes rows channels[j] of the whole
weight, seeding stochastic rounding with the whole weight's element indices.

inputs: dw_backward_weight_partial(_q8) (dy, x_k); dw_weight_sgd_partial (dy, x_k, w[, m]);
dw_weight_sgd_partial_q8 (dy, x_k, w, rng_step[, shadow]). attrs: the conv's attrs,
`channels`, and for the fused forms those of the update (fused_update.py, q8_update.py).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ir import Node
from tinytrain.ops.base import OpDef, c_float
from tinytrain.ops.conv2d import conv_backward_weight, geom, geom_decl
from tinytrain.ops.conv2d_q8 import dequant_x, floats
from tinytrain.ops.fused_update import sgd_apply
from tinytrain.ops.q8_update import _apply_s8, _shadow, _update


def _k_node(node: Node) -> Node:
    """The node as a depthwise conv over just its k trained channels."""
    k = len(node.attrs["channels"])
    return Node(node.name, node.op, node.inputs, node.outputs, {**node.attrs, "groups": k},
                node.phase)


def _grad(dy: np.ndarray, x: np.ndarray, node: Node) -> np.ndarray:
    """(k, kh, kw, 1) weight gradient of the trained channels; x holds just those."""
    ch = list(node.attrs["channels"])
    dyk = np.ascontiguousarray(dy[..., ch])
    return conv_backward_weight(dyk, x, geom(_k_node(node), x.shape, dyk.shape))


def _args(node: Node, cg) -> str:
    """`&geometry, dy channels, idx`: the k-channel geometry, dy's channel stride, and the
    trained channels (NULL for 0..k-1)."""
    x, dy = cg.shape(node.inputs[1]), cg.shape(node.inputs[0])
    ch = node.attrs["channels"]
    g = geom_decl(cg, _k_node(node), x, tuple(dy[:-1]) + (len(ch),))
    idx = "NULL" if tuple(ch) == tuple(range(len(ch))) else cg.ints(ch)
    return f"&{g}, {dy[-1]}, {idx}"


def _macs(node: Node, shapes) -> int:
    oh, ow, _ = shapes[0]
    kh, kw = node.attrs["kernel"]
    return oh * ow * len(node.attrs["channels"]) * kh * kw


class DwBackwardWeightPartial(OpDef):
    name = "dw_backward_weight_partial"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        return [_grad(xs[0], xs[1], node)]

    def c_call(self, node, cg):
        return (f"tt_dw_backward_weight_partial_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {_args(node, cg)});")

    def macs(self, node, shapes, out_shapes):
        return _macs(node, shapes)


class DwBackwardWeightPartialQ8(OpDef):
    name = "dw_backward_weight_partial_q8"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        return [_grad(xs[0], dequant_x(xs[1], node.attrs), node)]

    def c_call(self, node, cg):
        a = node.attrs
        return (f"tt_dw_backward_weight_partial_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_float(a['x_scale'])}, "
                f"{a['x_zp']}, {_args(node, cg)});")

    def macs(self, node, shapes, out_shapes):
        return _macs(node, shapes)


class DwWeightSGDPartial(OpDef):
    name = "dw_weight_sgd_partial"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        grad = _grad(xs[0], xs[1], node)
        return [sgd_apply(xs[2], grad, xs[3] if len(xs) > 3 else None, node.attrs)]

    def c_call(self, node, cg):
        a = node.attrs
        m = cg.ptr(node.inputs[3]) if len(node.inputs) > 3 else "NULL"
        return (f"tt_dw_weight_sgd_partial_f32({cg.ptr(node.inputs[2])}, {m}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {_args(node, cg)}, "
                f"{cg.sgd_scalars(a)});")

    def macs(self, node, shapes, out_shapes):
        return _macs(node, shapes)


class DwWeightSGDPartialQ8(OpDef):
    name = "dw_weight_sgd_partial_q8"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        grad = _grad(xs[0], dequant_x(xs[1], node.attrs), node)
        step = int(xs[3].reshape(-1)[0])
        return [_apply_s8(xs[2], grad, node.attrs, step, xs[4] if len(xs) > 4 else None)]

    def c_call(self, node, cg):
        a = node.attrs
        return (f"tt_dw_weight_sgd_partial_s8({cg.ptr(node.inputs[2])}, {_shadow(cg, node, 4)}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_float(a['x_scale'])}, "
                f"{a['x_zp']}, {_args(node, cg)}, {floats(cg, a['step'])}, "
                f"{_update(cg, node, 3)});")

    def macs(self, node, shapes, out_shapes):
        return _macs(node, shapes)


OPS = (DwBackwardWeightPartial(), DwBackwardWeightPartialQ8(), DwWeightSGDPartial(),
       DwWeightSGDPartialQ8())
