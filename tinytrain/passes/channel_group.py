"""Channel groups: a channel-streamed region's int8 1x1 weight updates, four rows at a time.

A region (passes/channel_stream.py) runs its sub-ops one mid channel c at a time. Row c of an
int8 1x1 weight update reads channel c's gradient plane and the layer's whole saved int8 input
x (H x W x k), and converts every element of x to float again: on a Cortex-M the conversion
(sign-extend, move to the FPU, convert) costs more than the multiply-accumulate it feeds.
passes/x_float.py removes it with a float copy of x (k planes of scratch) where the arena has
room; this pass is the cheap alternative for the other regions. The region keeps the update's
gradient planes of four consecutive channels (channel c writes plane c mod 4, three planes more
than before) and updates rows c-3..c once, after channel c's sub-ops, when the group is
complete (or the channels run out): each element of x is converted once for four rows
(tt_cs_pw_weight_sgd_s8_g).

Each row's sums and rounding are unchanged; only the update runs later. That is the same
result when no sub-op after the update in a channel's sequence touches the weight or its
state, and none before it writes them: the region's other sub-ops touch other tensors, or read
their own row (a sink reads row c before row c is updated, which is now later still).

Kept, like x_float, only where the planner's arena does not grow.
"""

from __future__ import annotations

from tinytrain.ir import OPT_STATE, PARAM, PARAM_GRAD, Graph, Node
from tinytrain.passes.channel_stream import _pointwise
from tinytrain.passes.memory_plan import plan_memory

GROUP = 4  # rows per update: 16 accumulators, the S registers s16-s31 of the kernel
STATE = (PARAM, PARAM_GRAD, OPT_STATE)


def _state(g: Graph, ts) -> set[str]:
    """The parameters and optimiser state among ts (a region's per-channel tensors are not in
    the graph)."""
    return {t for t in ts if t in g.tensors and g.t(t).kind in STATE}


def _groupable(g: Graph, node: Node, k: int, members: list[Node]) -> bool:
    """members[k] is an int8 1x1 weight update whose x has no float copy, and running it
    after later channels' sub-ops changes nothing: no other sub-op writes what it reads or
    writes, and none reads what it writes, except a 1x1 input gradient before it that reads
    the weight (channel c's sink reads row c only, and before row c's update)."""
    n, a = members[k], node.attrs
    if not (n.op == "conv2d_weight_sgd_q8" and _pointwise(n) and g.t(n.inputs[1]).dtype == "s8"
            and n.inputs[1] not in a.get("x_float", {}) and n.inputs[0] in a["_slots"]):
        return False
    reads, writes = _state(g, n.inputs), _state(g, n.outputs)
    for i, m in enumerate(members):
        if i == k:
            continue
        if _state(g, m.outputs) & (reads | writes):
            return False
        sink = i < k and m.op == "conv2d_backward_input_q8" and _pointwise(m) \
            and m.inputs[1] == n.inputs[2] and not m.attrs.get("master")
        if _state(g, m.inputs) & writes and not sink:
            return False
    return True


def _grouped(g: Graph, node: Node) -> Graph | None:
    """node with its groupable updates deferred and their gradient planes kept, or None."""
    a = node.attrs
    members = [n for n in a["_nodes"] if n.op != "merge_channels"]
    names = [m.name for k, m in enumerate(members) if _groupable(g, node, k, members)]
    if not names:
        return None
    scratch = g.t(a["scratch"])
    off, held = scratch.size, {}
    for m in members:
        if m.name in names and m.inputs[0] not in held:
            held[m.inputs[0]] = off
            off += GROUP * a["plane"]
    k = node.outputs.index(a["scratch"])
    shapes = list(a["out_shapes"])
    shapes[k] = (off,)
    new = Node(node.name, node.op, node.inputs, node.outputs,
               {**a, "group": GROUP, "_held": held, "_grouped": tuple(names),
                "out_shapes": tuple(shapes)}, node.phase)
    nodes = tuple(new if m.name == node.name else m for m in g.nodes)
    return g.replace(nodes=nodes).with_tensors([scratch.replace(shape=(off,))])


def group_update_rows(g: Graph) -> Graph:
    """Group the int8 1x1 weight updates of each channel-streamed region where the arena stays
    the same size (one region at a time, in order)."""
    arena = None
    for node in [n for n in g.nodes if n.op == "channel_stream" and "group" not in n.attrs]:
        trial = _grouped(g, node)
        if trial is None:
            continue
        if arena is None:
            arena = plan_memory(g).arena_size
        if plan_memory(trial).arena_size <= arena:
            g = trial
    return g
