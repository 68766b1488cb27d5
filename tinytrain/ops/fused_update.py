"""Weight/bias gradients fused with their in-place SGD update (batch 1).

Each gradient element is applied as soon as it is summed, so the gradient tensor is never
materialised. inputs: (dy, x, param[, momentum]) or (dy, param[, momentum]) for biases;
output: the param itself. attrs: the layer's attrs plus lr, momentum, wd and `channels`
(trained input channels of a partial update, None for all).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size, trained_index
from tinytrain.ops.conv2d import conv_backward_weight, geom, geom_decl


def sgd_apply(p: np.ndarray, grad: np.ndarray, m: np.ndarray | None, a: dict) -> np.ndarray:
    """numpy reference of tt_sgd_elem over the (possibly partial) slice of p."""
    p = p.astype(np.float32).copy()
    ix = trained_index(a)
    g = grad.astype(np.float32) + np.float32(a["wd"]) * p[ix]
    if m is not None:
        m[...] = np.float32(a["momentum"]) * m + g
        g = m
    p[ix] = p[ix] - np.float32(a["lr"]) * g
    return p


def _hyper(cg, a: dict) -> str:
    """lr, momentum, wd: the model's run-time SGD scalars (see CContext.sgd_scalars)."""
    return cg.sgd_scalars(a)


def _idx(cg, a: dict) -> str:
    ch = a.get("channels")
    if ch is None or tuple(ch) == tuple(range(len(ch))):
        return "NULL"
    return cg.ints(ch)


def _m(cg, node, k: int) -> str:
    return cg.ptr(node.inputs[k]) if len(node.inputs) > k else "NULL"


class Conv2dWeightSGD(OpDef):
    name = "conv2d_weight_sgd"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        dy, x, w = xs[0], xs[1], xs[2]
        grad = conv_backward_weight(dy, x, geom(node, x.shape, dy.shape))
        return [sgd_apply(w, grad, xs[3] if len(xs) > 3 else None, node.attrs)]

    def c_call(self, node, cg):
        x, dy, w = (cg.shape(node.inputs[k]) for k in (1, 0, 2))
        return (f"{cg.kernel('tt_conv2d_backward_weight_sgd_f32')}({cg.ptr(node.inputs[2])}, "
                f"{_m(cg, node, 3)}, {cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"&{geom_decl(cg, node, x, dy)}, {w[-1]}, {_idx(cg, node.attrs)}, "
                f"{_hyper(cg, node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        oh, ow, cout = shapes[0]
        return oh * ow * cout * size(shapes[1][-1:]) * node.attrs["kernel"][0] * \
            node.attrs["kernel"][1] // node.attrs.get("groups", 1)


class DenseWeightSGD(OpDef):
    name = "dense_weight_sgd"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        dy, x, w = xs[0], xs[1], xs[2]
        grad = np.outer(dy, x.reshape(-1)).astype(np.float32)
        return [sgd_apply(w, grad, xs[3] if len(xs) > 3 else None, node.attrs)]

    def c_call(self, node, cg):
        out, w_in = cg.shape(node.inputs[2])
        k = size(cg.shape(node.inputs[1]))
        return (f"{cg.kernel('tt_dense_backward_weight_sgd_f32')}({cg.ptr(node.inputs[2])}, "
                f"{_m(cg, node, 3)}, {cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {k}, "
                f"{out}, {w_in}, "
                f"{_idx(cg, node.attrs)}, {_hyper(cg, node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0]) * size(shapes[1])


class BiasSGD(OpDef):
    name = "bias_sgd"

    def infer(self, node, shapes):
        return [shapes[1]]

    def forward(self, node, xs):
        dy, b = xs[0], xs[1]
        grad = dy.reshape(-1, dy.shape[-1]).sum(axis=0)
        return [sgd_apply(b, grad, xs[2] if len(xs) > 2 else None, node.attrs)]

    def c_call(self, node, cg):
        s = cg.shape(node.inputs[0])
        return (f"{cg.kernel('tt_bias_backward_sgd_f32')}({cg.ptr(node.inputs[1])}, "
                f"{_m(cg, node, 2)}, {cg.ptr(node.inputs[0])}, {size(s[:-1])}, {s[-1]}, "
                f"{_hyper(cg, node.attrs)});")


OPS = (Conv2dWeightSGD(), DenseWeightSGD(), BiasSGD())
