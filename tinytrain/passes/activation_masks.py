"""ReLU/ReLU6/Clip backward without keeping the float pre-activation alive.

The backward of y = clip(x, lo, hi) only needs to know where lo < x < hi. If the output y is
saved for the backward anyway (it usually is: it feeds the next layer's weight gradient), the
backward reads y instead (lo < y < hi is the same set). Otherwise a 1-bit mask is taken at
forward time. Either way x no longer lives until the backward pass.

int8 outputs with a fused activation (q8_clamp_backward reads the int8 output y) get the same
treatment: when nothing else in the backward reads y, a 1-bit mask is taken right after y is
produced, so y dies with its last forward reader instead of living until the backward.
"""

from __future__ import annotations

from tinytrain.ir import ACTIVATION, Graph, Node, Tensor
from tinytrain.ops.clip_mask import mask_bytes


def use_activation_masks(g: Graph) -> Graph:
    backward_readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        if n.phase == "backward":
            for i in n.inputs:
                backward_readers.setdefault(i, []).append(n)
    fwd_clip = {(n.inputs[0], n.attrs["lo"], n.attrs["hi"]): n
                for n in g.nodes if n.phase == "forward" and n.op == "clip"}
    tensors = dict(g.tensors)
    rewritten: dict[str, Node] = {}
    masks: dict[str, Node] = {}  # forward clip name -> mask node to insert before it
    for n in g.nodes:
        if n.op != "clip_backward":
            continue
        dy, x = n.inputs
        f = fwd_clip.get((x, n.attrs["lo"], n.attrs["hi"]))
        if f is None or any(r is not n for r in backward_readers.get(x, [])):
            continue  # x is saved for another reason: reading it costs nothing extra
        y = f.outputs[0]
        if backward_readers.get(y):
            rewritten[n.name] = Node(n.name, n.op, (dy, y), n.outputs, n.attrs, n.phase)
            continue
        mname = f"{y}_mask"
        tensors[mname] = Tensor(mname, (mask_bytes(g.t(x).size),), ACTIVATION, dtype="u8")
        masks[f.name] = Node(f"{f.name}_mask", "clip_mask", (x,), (mname,),
                             {"lo": n.attrs["lo"], "hi": n.attrs["hi"]})
        rewritten[n.name] = Node(n.name, "mask_backward", (dy, mname), n.outputs,
                                 {"out_shape": n.attrs.get("out_shape")}, n.phase)
    producer = {o: n for n in g.nodes if n.phase == "forward" for o in n.outputs}
    after: dict[str, Node] = {}  # forward node name -> q8 mask node to insert after it
    for n in g.nodes:
        if n.op != "q8_clamp_backward":
            continue
        dy, y = n.inputs
        p = producer.get(y)
        if p is None or any(r is not n for r in backward_readers.get(y, [])):
            continue  # y is saved for another reason (e.g. the next weight gradient)
        mname = f"{y}_mask"
        tensors[mname] = Tensor(mname, (mask_bytes(g.t(y).size),), ACTIVATION, dtype="u8")
        after[p.name] = Node(f"{y}_q8_mask", "q8_clamp_mask", (y,), (mname,),
                             {"lo": n.attrs["lo"], "hi": n.attrs["hi"]})
        rewritten[n.name] = Node(n.name, "mask_backward", (dy, mname), n.outputs,
                                 {"out_shape": n.attrs.get("out_shape")}, n.phase)
    nodes: list[Node] = []
    for n in g.nodes:
        if n.name in masks:  # before the clip, so the clip may still run in place on x
            nodes.append(masks[n.name])
        nodes.append(rewritten.get(n.name, n))
        if n.name in after:
            nodes.append(after[n.name])
    return g.replace(nodes=tuple(nodes), tensors=tensors)
