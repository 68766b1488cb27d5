"""A conv's input, weight or bias gradient (fused update included) whose dy is a global
average pool's gradient kept per channel (passes/pool_grad.py), never stored.

dy[y, x, c] = v[c] where the activation between the conv and the pool lets the gradient
through (the `gate`: a 1-bit mask, the saved int8 output, a saved float), else 0. The node
stands for the op named by `inner` reading that dy: its numpy reference rebuilds dy and runs
`inner`'s reference, and its C kernel (runtime_c/reference/tt_pooled_grad.c) is `inner`'s kernel
reading dy element by element through a tt_pooled, in the same order, so results are
bit-identical to materialising dy.

inputs: (v[, gate]) + `inner`'s inputs after its dy. attrs: `inner`'s attrs plus inner,
gate (none | mask | s8 | f32), lo/hi (s8, f32: the gradient passes where lo < gate < hi)
and dy_shape.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ir import Node
from tinytrain.ops.base import OpDef, c_float, get_op, size
from tinytrain.ops.conv2d import geom_decl
from tinytrain.ops.conv2d_q8 import floats
from tinytrain.ops.fused_update import _hyper, _m
from tinytrain.ops.fused_update import _idx as _channels
from tinytrain.ops.q8_update import _shadow, _update

GATES = {"none": "TT_POOLED_ALL", "mask": "TT_POOLED_MASK", "s8": "TT_POOLED_S8",
         "f32": "TT_POOLED_F32"}
OWN_ATTRS = ("inner", "gate", "lo", "hi", "dy_shape")
DY = "<pooled dy>"  # stands for the never-stored dy in the inner node's inputs


def first_rest(node: Node) -> int:
    """Index of the first of `inner`'s inputs after dy."""
    return 1 if node.attrs["gate"] == "none" else 2


def inner_node(node: Node, dy: str = DY) -> Node:
    """The node this one stands for, reading `dy`."""
    attrs = {k: v for k, v in node.attrs.items() if k not in OWN_ATTRS}
    return Node(node.name, node.attrs["inner"], (dy,) + node.inputs[first_rest(node):],
                node.outputs, attrs, node.phase)


def pooled_dy(node: Node, xs) -> np.ndarray:
    """dy as the gate op (mask_backward, q8_clamp_backward, clip_backward's C) would store it."""
    a = node.attrs
    shape = tuple(a["dy_shape"])
    dy = np.broadcast_to(np.asarray(xs[0], np.float32).reshape(-1), shape)
    if a["gate"] == "none":  # laid out as global_avg_pool_backward's (numpy sums follow it)
        return dy.astype(np.float32)
    on = np.asarray(xs[1])
    if a["gate"] == "mask":
        keep = np.unpackbits(on, bitorder="little")[: size(shape)].reshape(shape) == 1
    else:
        y = on.reshape(shape).astype(np.int32 if a["gate"] == "s8" else np.float32)
        keep = (y > a["lo"]) & (y < a["hi"])
    return np.where(keep, dy, np.float32(0)).astype(np.float32)


def _pooled(cg, node: Node) -> str:
    """A tt_pooled compound literal for the call."""
    a = node.attrs
    on = "NULL" if a["gate"] == "none" else cg.ptr(node.inputs[1])
    lo8, hi8 = (int(a["lo"]), int(a["hi"])) if a["gate"] == "s8" else (0, 0)
    lo, hi = (a["lo"], a["hi"]) if a["gate"] == "f32" else (0.0, 0.0)
    return (f"&(tt_pooled){{{cg.ptr(node.inputs[0])}, {on}, {GATES[a['gate']]}, {lo8}, {hi8}, "
            f"{c_float(lo)}, {c_float(hi)}}}")


def _call(node: Node, cg) -> str:
    """The C call of `inner` with the tt_pooled in place of its dy array."""
    n, a, p = inner_node(node), node.attrs, _pooled(cg, node)
    dy = tuple(a["dy_shape"])
    ins, out = n.inputs, cg.ptr(node.outputs[0])
    if n.op in ("conv2d_backward_input", "conv2d_backward_input_q8"):
        g = geom_decl(cg, n, cg.shape(node.outputs[0]), dy)
        if n.op == "conv2d_backward_input":
            return (f"{cg.kernel('tt_conv2d_backward_input_pooled_f32')}({out}, {p}, "
                    f"{cg.ptr(ins[1])}, &{g});")
        return (f"tt_conv2d_backward_input_pooled_s8({out}, {p}, {cg.ptr(ins[1])}, "
                f"{floats(cg, a['w_scale'])}, &{g});")
    if n.op == "conv2d_backward_weight":
        g = geom_decl(cg, n, cg.shape(ins[1]), dy)
        return (f"{cg.kernel('tt_conv2d_backward_weight_pooled_f32')}({out}, {p}, "
                f"{cg.ptr(ins[1])}, &{g});")
    if n.op == "conv2d_backward_weight_q8":
        g = geom_decl(cg, n, cg.shape(ins[1]), dy)
        return (f"tt_conv2d_backward_weight_pooled_s8({out}, {p}, {cg.ptr(ins[1])}, "
                f"{c_float(a['x_scale'])}, {a['x_zp']}, &{g});")
    if n.op == "conv2d_weight_sgd":
        g = geom_decl(cg, n, cg.shape(ins[1]), dy)
        return (f"{cg.kernel('tt_conv2d_backward_weight_sgd_pooled_f32')}({cg.ptr(ins[2])}, "
                f"{_m(cg, n, 3)}, "
                f"{p}, {cg.ptr(ins[1])}, &{g}, {cg.shape(ins[2])[-1]}, {_channels(cg, a)}, "
                f"{_hyper(cg, a)});")
    if n.op == "conv2d_weight_sgd_q8":
        g = geom_decl(cg, n, cg.shape(ins[1]), dy)
        return (f"tt_conv2d_weight_sgd_pooled_s8({cg.ptr(ins[2])}, {_shadow(cg, n, 4)}, {p}, "
                f"{cg.ptr(ins[1])}, {c_float(a['x_scale'])}, {a['x_zp']}, &{g}, "
                f"{a.get('packed_cin') or cg.shape(ins[2])[-1]}, {_channels(cg, a)}, "
                f"{floats(cg, a['step'])}, {_update(cg, n, 3)});")
    rows, c = size(dy[:-1]), dy[-1]
    if n.op == "bias_backward":
        return f"tt_bias_backward_pooled_f32({out}, {p}, {rows}, {c});"
    if n.op == "bias_sgd":
        return (f"tt_bias_backward_sgd_pooled_f32({cg.ptr(ins[1])}, {_m(cg, n, 2)}, {p}, "
                f"{rows}, {c}, {_hyper(cg, a)});")
    if n.op == "bias_sgd_q8":
        return (f"tt_bias_sgd_pooled_s32({cg.ptr(ins[1])}, {p}, {rows}, {c}, "
                f"{floats(cg, a['step'])}, {_update(cg, n, 2)});")
    raise NotImplementedError(f"pooled_grad has no kernel for {n.op}")


INNER = ("conv2d_backward_input", "conv2d_backward_input_q8", "conv2d_backward_weight",
         "conv2d_backward_weight_q8", "conv2d_weight_sgd", "conv2d_weight_sgd_q8",
         "bias_backward", "bias_sgd", "bias_sgd_q8")  # the ops _call covers


class PooledGrad(OpDef):
    name = "pooled_grad"

    def _shapes(self, node, shapes):
        return [tuple(node.attrs["dy_shape"])] + list(shapes[first_rest(node):])

    def infer(self, node, shapes):
        return get_op(node.attrs["inner"]).infer(inner_node(node), self._shapes(node, shapes))

    def forward(self, node, xs):
        ins = [pooled_dy(node, xs)] + list(xs[first_rest(node):])
        return get_op(node.attrs["inner"]).forward(inner_node(node), ins)

    def c_call(self, node, cg):
        return _call(node, cg)

    def macs(self, node, shapes, out_shapes):
        return get_op(node.attrs["inner"]).macs(inner_node(node), self._shapes(node, shapes),
                                                out_shapes)


OPS = (PooledGrad(),)
