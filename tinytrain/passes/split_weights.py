"""Keep only the trained input channels of a partially updated int8 weight in SRAM.

A partial update (TTE's weight_update_ratio, or a TOML plan's channels) trains k of a layer's
I input channels. The whole weight used to be trainable state, so all I channels took SRAM.
Here the weight keeps just its k trained channels (packed, in `channels` order) and the
other I - k move to a frozen parameter in flash. The layer's forward reads the whole weight
from a transient arena copy that merge_channels assembles right before it. Its input gradient
needs no whole weight: input channels do not mix in dx = W^T dy, so each part gives its own
channels of dx (summed in the same order as before) and merge_channels puts dx together.
The weight update writes the packed channels directly (packed_cin), with the stochastic-
rounding seeds of the whole weight, so the numbers do not change.

Kept only if SRAM (arena + trainable parameters) goes down: the planner decides.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ir import ACTIVATION, PARAM, Graph, Node, Tensor
from tinytrain.passes.memory_plan import plan_memory

READERS = {"conv2d_q8": 1, "dense_q8": 1, "conv2d_backward_input_q8": 1,
           "dense_backward_input_q8": 1}  # op -> input slot of the weight, read whole
UPDATERS = {"conv2d_weight_sgd_q8": 2, "dense_weight_sgd_q8": 2, "sgd_q8": 0}


def _splittable(g: Graph, w: str) -> bool:
    t = g.t(w)
    if t.dtype != "s8" or t.kind != PARAM or not t.trainable:
        return False
    for n in g.nodes:
        for k, i in enumerate(n.inputs):
            if i == w and READERS.get(n.op) != k and UPDATERS.get(n.op) != k:
                return False  # read some other way: leave it whole
    return True


def split_weight(g: Graph, w: str, channels: list[int]) -> Graph:
    t = g.t(w)
    full_c = t.shape[-1]
    rest = [c for c in range(full_c) if c not in set(channels)]
    rest_name = f"{w}_frozen"
    tensors = dict(g.tensors)
    data = np.asarray(t.data)
    tensors[w] = t.replace(shape=t.shape[:-1] + (len(channels),),
                           data=np.ascontiguousarray(data[..., channels]))
    tensors[rest_name] = Tensor(rest_name, t.shape[:-1] + (len(rest),), PARAM, dtype="s8",
                                data=np.ascontiguousarray(data[..., rest]), quant=t.quant)
    nodes: list[Node] = []
    for n in g.nodes:
        if (n.op == "conv2d_backward_input_q8" and n.inputs[1] == w
                and n.attrs.get("groups", 1) == 1):
            nodes += _split_input_grad(n, tensors, rest_name, channels, rest)
            continue
        if n.op in READERS and READERS[n.op] < len(n.inputs) and n.inputs[READERS[n.op]] == w:
            whole = f"{w}_whole_{n.name}"
            tensors[whole] = Tensor(whole, t.shape, ACTIVATION, dtype="s8", quant=t.quant)
            nodes.append(Node(f"{n.name}_merge", "merge_channels", (w, rest_name), (whole,),
                              {"channels": tuple(channels), "rest": tuple(rest)}, n.phase))
            ins = list(n.inputs)
            ins[READERS[n.op]] = whole
            n = Node(n.name, n.op, tuple(ins), n.outputs, n.attrs, n.phase)
        elif n.op in UPDATERS and n.inputs[UPDATERS[n.op]] == w:
            n = Node(n.name, n.op, n.inputs, n.outputs, {**n.attrs, "packed_cin": full_c},
                     n.phase)
        nodes.append(n)
    split = {**g.meta.get("split_weights", {}),
             w: {"channels": list(channels), "rest": rest_name, "full_shape": list(t.shape)}}
    return g.replace(nodes=tuple(nodes), tensors=tensors, meta={**g.meta, "split_weights": split})


def _split_input_grad(n: Node, tensors: dict[str, Tensor], rest_name: str,
                      channels: list[int], rest: list[int]) -> list[Node]:
    """dx = W^T dy per part: the trained channels from the packed weight, the others from
    the frozen part, then merged."""
    dx = tensors[n.outputs[0]]
    parts = []
    for tag, w_part, ch in (("trained", n.inputs[1], channels), ("frozen", rest_name, rest)):
        name = f"{n.outputs[0]}_{tag}"
        shape = dx.shape[:-1] + (len(ch),)
        tensors[name] = dx.replace(name=name, shape=shape)
        parts.append(Node(f"{n.name}_{tag}", n.op, (n.inputs[0], w_part), (name,),
                          {**n.attrs, "out_shape": shape}, n.phase))
    return parts + [Node(f"{n.name}_merge", "merge_channels", tuple(p.outputs[0] for p in parts),
                         n.outputs, {"channels": tuple(channels), "rest": tuple(rest)},
                         n.phase)]


def _sram(g: Graph) -> int:
    return plan_memory(g).arena_size + sum(t.nbytes for t in g.params(trainable=True))


def split_partial_weights(g: Graph) -> Graph:
    out = g
    for w, channels in sorted(g.meta.get("partial_channels", {}).items()):
        if (channels is not None and w in g.tensors and _splittable(g, w)
                and w not in g.meta.get("partial_axis", {})):  # depthwise rows: kept whole
            out = split_weight(out, w, list(channels))
    return out if out is not g and _sram(out) < _sram(g) else g
