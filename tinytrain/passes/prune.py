"""Prune the backward graph to the gradients an update plan needs, then dead-code eliminate.

Frozen layers lose their weight-gradient nodes, and with them the saved activations those
nodes read; layers before the first trained one lose their input-gradient chain (nothing
reads it). Frozen layers between trained ones still back-propagate input gradients. A
partial-channel weight update gathers just the needed input channels at forward time, so the
full saved activation is not kept for it. For a depthwise conv those are its trained channels;
its weight gradient (ops/dw_partial.py) reads them from the gathered input and from the whole
output gradient, and has just the trained channels' rows of the weight.
"""

from __future__ import annotations

from tinytrain.ir import ACTIVATION, PARAM, PARAM_GRAD, Graph, Node, Tensor
from tinytrain.passes.update_plan import UpdatePlan, layers

PARTIAL_OPS = ("conv2d_backward_weight", "dense_backward_weight", "conv2d_backward_weight_q8",
               "dense_backward_weight_q8")
DEPTHWISE_PARTIAL = {"conv2d_backward_weight": "dw_backward_weight_partial",
                     "conv2d_backward_weight_q8": "dw_backward_weight_partial_q8"}


def trained_params(g: Graph, plan: UpdatePlan) -> dict[str, tuple[int, ...] | None]:
    """param name -> trained input channels (None = all) for every parameter that learns."""
    out: dict[str, tuple[int, ...] | None] = {}
    for ly, up in zip(layers(g), plan.layers, strict=True):
        if up.weight:
            out[ly.weight] = up.channels
        if up.bias and ly.bias:
            out[ly.bias] = None
    return out


def _grad_owner(g: Graph) -> dict[str, str]:
    return {f"{p.name}_grad": p.name for p in g.params() if f"{p.name}_grad" in g.tensors}


def apply_update_plan(g: Graph, plan: UpdatePlan) -> Graph:
    train = trained_params(g, plan)
    tensors = {n: (t.replace(trainable=n in train) if t.kind == PARAM else t)
               for n, t in g.tensors.items()}
    owner = _grad_owner(g)
    producers = g.producers()
    gathers: dict[tuple[str, tuple[int, ...]], Node] = {}  # (saved activation, channels)
    backward: list[Node] = []
    partial: dict[str, list[int]] = {}
    depthwise = {ly.weight for ly in layers(g) if ly.depthwise}
    axis: dict[str, int] = {}  # partial weights whose channels index axis 0 (depthwise)
    for n in g.nodes:
        if n.phase != "backward":
            continue
        p = owner.get(n.outputs[0])
        if p is not None and p not in train:
            continue  # gradient of a frozen parameter: not computed
        channels = train.get(p) if p else None
        if channels is not None and n.op in PARTIAL_OPS:
            x = n.inputs[1]
            if (x, channels) not in gathers:  # layers reading one x may train other channels
                tag, k = f"{len(channels)}", 0
                while f"{x}_ch{tag}" in tensors:
                    k += 1
                    tag = f"{len(channels)}_{k}"
                xs = f"{x}_ch{tag}"
                # a dense layer reads its input flattened (TFLite's FULLY_CONNECTED on an HWC
                # tensor): its "channels" index that flat vector, not the last axis
                flat = n.op.startswith("dense") and len(tensors[x].shape) > 1
                keep = () if flat else tensors[x].shape[:-1]
                tensors[xs] = Tensor(xs, keep + (len(channels),), ACTIVATION,
                                     dtype=tensors[x].dtype, quant=tensors[x].quant)
                gathers[(x, channels)] = Node(f"{x}_gather{tag}", "gather_channels", (x,),
                                              (xs,), {"channels": channels, "flat": flat})
            xs = gathers[(x, channels)].outputs[0]
            op, attrs = n.op, {**n.attrs}
            if p in depthwise:  # the trained channels' rows of the (C, kh, kw, 1) weight
                out_shape = (len(channels),) + tensors[p].shape[1:]
                op, attrs["channels"] = DEPTHWISE_PARTIAL[n.op], channels
                axis[p] = 0
            else:
                out_shape = tensors[p].shape[:-1] + (len(channels),)
            tensors[n.outputs[0]] = tensors[n.outputs[0]].replace(shape=out_shape)
            n = Node(n.name, op, (n.inputs[0], xs), n.outputs, {**attrs, "out_shape": out_shape},
                     n.phase)
            partial[p] = list(channels)
        backward.append(n)

    # dead-code elimination over the backward nodes, from the parameter gradients back
    needed = {o for n in backward for o in n.outputs if tensors[o].kind == PARAM_GRAD}
    kept: list[Node] = []
    for n in reversed(backward):
        if any(o in needed for o in n.outputs):
            kept.append(n)
            needed.update(n.inputs)
    kept.reverse()

    forward: list[Node] = []
    gathers_of: dict[str, list[Node]] = {}
    for (x, _), gn in gathers.items():
        gathers_of.setdefault(x, []).append(gn)
    for x, gns in gathers_of.items():  # gather right after x is produced (first, for the input)
        if x not in producers:
            forward += gns
    for n in g.nodes:
        if n.phase in ("forward", "loss"):
            forward.append(n)
            for o in n.outputs:
                forward += gathers_of.get(o, [])
    loss = [n for n in forward if n.phase == "loss"]
    forward = [n for n in forward if n.phase != "loss"]
    others = [n for n in g.nodes if n.phase not in ("forward", "loss", "backward")]
    nodes = tuple(forward + loss + kept + others)
    used = {t for n in nodes for t in n.inputs + n.outputs} | set(g.inputs) | set(g.outputs)
    tensors = {k: t for k, t in tensors.items()
               if k in used or t.kind in (PARAM, "const", "input", "label")}
    meta = {**g.meta, "update": plan.spec, "partial_channels": partial}
    if axis:
        meta["partial_axis"] = axis
    return g.replace(tensors=tensors, nodes=nodes, meta=meta)
