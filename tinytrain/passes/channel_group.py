"""Channel groups: a channel-streamed region's int8 1x1 updates and sinks, four channels per pass.

A region (passes/channel_stream.py) runs its sub-ops one mid channel c at a time. Two of them
pay per channel for what four channels could share:
  - row c of an int8 1x1 weight update reads channel c's gradient plane and the layer's whole
    saved int8 input x (H x W x k), and converts every element of x to float again: on a
    Cortex-M the conversion (sign-extend, move to the FPU, convert) costs more than the
    multiply-accumulate it feeds. passes/x_float.py removes it with a float copy of x (k
    planes of scratch) where the arena has room; grouping is the cheap alternative;
  - a 1x1 sink adds channel c's share into every element of its dx (H x W x k): a load and a
    store of dx per multiply-accumulate, shared by four channels when they come together.
The region keeps their gradient planes of four consecutive channels (channel c writes plane
c mod 4: three planes more than before) and runs them once after channel c's sub-ops when a
group is complete (or the channels run out), through tt_cs_pw_weight_sgd_s8_g and
tt_cs_pw_input_add_s8_g. Each element's sums, in their order, and each weight's rounding are
the reference's; only the time a sub-op runs moves (see _deferred for when that is safe).

The region's source (the projection's input gradient, its first sub-op) goes the other way:
it runs at each group's first channel for the group's four channels (tt_cs_pw_input_s8_g,
four more kept planes), so each dy element it reads is loaded once for four sums.

Kept, like x_float, only where the planner's arena does not grow.
"""

from __future__ import annotations

from tinytrain.ir import Graph, Node
from tinytrain.passes.channel_stream import (
    CONV_INPUT,
    CONV_WEIGHT,
    _pointwise,
    each_region_within_arena,
)

GROUP = 4  # channels per pass: 16 accumulators (4 rows x 4 columns), s16-s31 of the kernels


def _candidate(g: Graph, node: Node, n: Node) -> bool:
    """An int8 1x1 weight update whose x has no float copy, or an int8 1x1 sink, reading a
    per-channel plane of the region."""
    a = node.attrs
    if n.inputs[0] not in a["_slots"] or not _pointwise(n) or n.attrs.get("master"):
        return False
    if n.op == "conv2d_weight_sgd_q8":
        return g.t(n.inputs[1]).dtype == "s8" and n.inputs[1] not in a.get("x_float", {})
    return n.op == "conv2d_backward_input_q8"


def _row_op(n: Node, t: str) -> bool:
    """n touches weight t one row per channel: row c of a 1x1 sink's weight is read, row c of a
    1x1 update's written."""
    if not _pointwise(n) or n.attrs.get("master"):
        return False
    return (n.op in CONV_INPUT and n.inputs[1] == t) or (n.op in CONV_WEIGHT and n.inputs[2] == t)


def _whole(node: Node, ts) -> set[str]:
    """The tensors among ts the region reads or writes whole (not one plane per channel)."""
    slots = node.attrs["_slots"]
    return {t for t in ts if t not in slots}


def _deferred(node: Node, members: list[Node], chosen: set[str]) -> set[str]:
    """The largest subset of `chosen` that can run once per group, after the group's last
    channel, with the same results. Deferring d moves it after later channels' sub-ops and
    after the sub-ops that follow it in a channel, so every other sub-op m that shares a whole
    tensor with d, either of them writing it, must be a row-wise op on that weight as d is
    (rows of other channels do not meet) and must come before d in a channel's sequence."""
    order = {m.name: k for k, m in enumerate(members)}
    done = False
    while not done:
        done = True
        for d in [m for m in members if m.name in chosen]:
            d_in, d_out = _whole(node, d.inputs), _whole(node, d.outputs)
            for m in members:
                if m.name in chosen:
                    continue
                m_in, m_out = _whole(node, m.inputs), _whole(node, m.outputs)
                shared = (m_out & (d_in | d_out)) | (m_in & d_out)
                if shared and not (order[m.name] < order[d.name]
                                   and all(_row_op(m, t) and _row_op(d, t) for t in shared)):
                    chosen.discard(d.name)
                    done = False
                    break
    return chosen


def _keeping(g: Graph, node: Node, tensors: list[str], attrs: dict) -> Graph:
    """g with region `node` keeping GROUP planes of each of `tensors` (appended to its
    scratch) and `attrs` set."""
    a = node.attrs
    scratch = g.t(a["scratch"])
    off, held = scratch.size, dict(a.get("_held", {}))
    for t in tensors:
        if t not in held:
            held[t] = off
            off += GROUP * a["plane"]
    k = node.outputs.index(a["scratch"])
    shapes = list(a["out_shapes"])
    shapes[k] = (off,)
    new = Node(node.name, node.op, node.inputs, node.outputs,
               {**a, "group": GROUP, "_held": held, "_grouped": a.get("_grouped", ()),
                **attrs, "out_shapes": tuple(shapes)}, node.phase)
    nodes = tuple(new if m.name == node.name else m for m in g.nodes)
    return g.replace(nodes=nodes).with_tensors([scratch.replace(shape=(off,))])


def _grouped(g: Graph, node: Node) -> Graph | None:
    """node with its groupable updates deferred and their gradient planes kept, or None."""
    a = node.attrs
    members = [n for n in a["_nodes"] if n.op != "merge_channels"]
    chosen = _deferred(node, members, {m.name for m in members if _candidate(g, node, m)})
    names = [m.name for m in members if m.name in chosen]
    if not names:
        return None
    inputs = list(dict.fromkeys(m.inputs[0] for m in members if m.name in names))
    return _keeping(g, node, inputs, {"_grouped": tuple(names)})


def _hoisted(g: Graph, node: Node) -> Graph | None:
    """node with its source computed for four channels at once, at each group's first
    channel, into kept planes (tt_cs_pw_input_s8_g: each dy element loaded once for four
    channels' sums), or None. The source is the region's first sub-op and reads only whole
    tensors (the block's dy and the projection's weight) that no sub-op writes, so running
    channels c+1..c+3's share before channel c's other sub-ops changes no value."""
    a = node.attrs
    members = [n for n in a["_nodes"] if n.op != "merge_channels"]
    if a.get("_hoisted") or not _hoistable(node, members, g.t(members[0].inputs[1]).dtype):
        return None
    return _keeping(g, node, [members[0].outputs[0]], {"_hoisted": members[0].name})


def _hoistable(node: Node, members: list[Node], weight_dtype: str) -> bool:
    """The region's first sub-op is an int8 1x1 source reading the whole dy (no 16-bit master)
    and no other sub-op writes what it reads."""
    src = members[0]
    if (src.op != "conv2d_backward_input_q8" or not _pointwise(src) or src.attrs.get("master")
            or src.inputs[0] in node.attrs["_slots"] or weight_dtype != "s8"):
        return False
    return not {o for m in members[1:] for o in m.outputs} & set(src.inputs)


def group_update_rows(g: Graph) -> Graph:
    """Group the int8 1x1 updates and sinks of each channel-streamed region, then its source,
    where the arena stays the same size (one region and one step at a time, in order: a
    source that does not fit leaves the groups that do)."""
    g = each_region_within_arena(
        g, lambda g, node: None if "group" in node.attrs else _grouped(g, node))
    return each_region_within_arena(g, _hoisted)
