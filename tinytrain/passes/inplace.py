"""Run elementwise ops in place when their input dies at that op.

The output becomes a view of the input (alias_of), so the planner gives both one buffer.
Every kernel listed reads element i before writing element i, which makes this legal; other
ops say when their kernel can run in place (OpDef.in_place, e.g. a depthwise conv's backward,
or a recurrent layer, whose first output, the gates, may overwrite its input projection).
"""

from __future__ import annotations

from tinytrain.ir import ACTIVATION, GRAD, Graph
from tinytrain.ops import get_op
from tinytrain.passes.memory_plan import lifetimes, step_nodes

INPLACE_OPS = {
    "clip", "leaky_relu", "sigmoid", "tanh", "hard_sigmoid", "hard_swish", "add", "mul",
    "accumulate", "clip_backward", "leaky_relu_backward", "sigmoid_backward", "tanh_backward",
    "hard_sigmoid_backward", "hard_swish_backward", "mask_backward", "q8_clamp_backward",
}


def run_in_place(g: Graph) -> Graph:
    buffers, views = lifetimes(g)
    last = {b.name: b.last for b in buffers}
    first = {b.name: b.first for b in buffers}
    alias: dict[str, str] = dict(views)  # tensor -> root
    outputs = set(g.outputs)
    tensors = dict(g.tensors)
    for k, n in enumerate(step_nodes(g)):
        # a node of several outputs may write its first over its first input if it says so
        if n.op not in INPLACE_OPS and not get_op(n.op).in_place(
                n, [tensors[i].shape for i in n.inputs]):
            continue
        if len(n.outputs) != 1 and n.op in INPLACE_OPS:
            continue
        x, y = n.inputs[0], n.outputs[0]
        tx, ty = tensors[x], tensors[y]
        if tx.kind not in (ACTIVATION, GRAD) or ty.alias_of or y in outputs or x in outputs:
            continue
        if tx.nbytes != ty.nbytes or tx.dtype != ty.dtype or tx.shape != ty.shape:
            continue
        rx = alias.get(x, x)
        if last.get(rx) != k or first.get(rx, k) >= k or y not in last:
            continue
        tensors[y] = ty.replace(alias_of=x)
        alias[y] = rx
        last[rx] = max(last[rx], last.pop(y))
        first.pop(y, None)
    return g.replace(tensors=tensors)
