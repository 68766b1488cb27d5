"""Channel streaming: the backward of an inverted-residual block one mid channel at a time.

The backward of `1x1 expand (+ReLU6) -> kxk depthwise (+ReLU6) -> 1x1 project` turns the
small gradient of the block's output (H x W x Cout) into the small gradient of its input
(H x W x Cin), but in between it materialises fp32 gradients of the expanded tensor, six
times wider: at 8x8 with 192 channels, 48 KB. Everything in between is per mid channel c:
  - the projection's input gradient, channel c: sum over its outputs o of dy[:, o] * Wp[o, c];
  - the ReLU6 masks, the depthwise input gradient and the depthwise weight gradient (a
    depthwise conv never mixes channels), every bias gradient;
  - the expand conv's weight gradient row c, and its input gradient, to which channel c adds
    g[:, c] * We[c, :] (a 1x1 conv: the pixels do not mix either).
So one node loops over c and keeps only a plane or two of fp32 (before and after the
depthwise) plus the input-gradient accumulator. Each sub-op runs its own per-channel slice in
the original order, so the weight a later sub-op reads is updated no earlier than before, and
every float is summed in the order of the unfused kernels (the expand's input gradient adds
channel c's contribution to each element in increasing c, as its kernel does): results are
bit-identical.

A region starts at a pointwise conv's input gradient whose output is read only by per-channel
ops (masks, depthwise input gradients, bias and weight updates fused with their gradient) and
by at most one pointwise input gradient (or its two halves of a split weight, merged), which
ends it. Anything else (batch accumulation, other ops, partial depthwise updates) leaves the
nodes alone. Kept only when the planner's arena, or else the backward's peak, shrinks.
"""

from __future__ import annotations

from collections.abc import Callable

from tinytrain.ir import GRAD, OPT_STATE, PARAM, PARAM_GRAD, Graph, Node, Tensor
from tinytrain.passes.inplace import run_in_place
from tinytrain.passes.memory_plan import peak_live, plan_memory

CONV_INPUT = ("conv2d_backward_input", "conv2d_backward_input_q8")
CONV_WEIGHT = ("conv2d_weight_sgd", "conv2d_weight_sgd_q8")
MASKS = ("mask_backward", "q8_clamp_backward", "clip_backward")  # dx = dy or 0, elementwise
BIAS = ("bias_sgd", "bias_sgd_q8")
STATEFUL = (PARAM, PARAM_GRAD, OPT_STATE)


def _pointwise(n: Node) -> bool:
    a = n.attrs
    return (tuple(a.get("kernel", ())) == (1, 1) and tuple(a.get("stride", ())) == (1, 1)
            and tuple(a.get("pads", ())) == (0, 0, 0, 0) and a.get("groups", 1) == 1)


def _depthwise(g: Graph, n: Node, t: str) -> bool:
    """A depthwise conv (channel multiplier 1) over t's channels, read through input w."""
    c = g.t(t).shape[-1]
    w = g.t(n.inputs[1] if n.op in CONV_INPUT else n.inputs[2])
    return c > 1 and n.attrs.get("groups", 1) == c and w.shape[0] == c and w.shape[-1] == 1


def _plain_update(n: Node) -> bool:
    """A whole-parameter update (a partial one is per input channel, handled for 1x1 only)."""
    return n.attrs.get("channel_axis") is None


def _classify(g: Graph, n: Node, t: str) -> str | None:
    """What a reader n of the per-channel tensor t is: 'map' (t -> a new per-channel tensor),
    'update' (writes only parameters), 'sink' (a 1x1 input gradient: channel c adds into its
    output), or None (not per channel: the region is declined)."""
    if not n.inputs or n.inputs[0] != t or t in n.inputs[1:] or n.phase != "backward":
        return None
    if n.attrs.get("master") and not (n.op in CONV_INPUT and _pointwise(n)):
        return None  # a master is read per channel by the 1x1 input-gradient kernels only
    if n.op in MASKS:
        return "map"
    if n.op in CONV_INPUT:
        if _pointwise(n):
            return "sink"
        if _depthwise(g, n, t):
            return "map"
        return None
    if n.op in BIAS and n.attrs.get("channels") is None:
        return "update"
    if n.op in CONV_WEIGHT and _plain_update(n):
        if _pointwise(n):
            return "update"
        if _depthwise(g, n, t) and n.attrs.get("channels") is None \
                and not n.attrs.get("packed_cin"):
            return "update"
    return None


def find_region(g: Graph, src: Node, consumers: dict[str, list[Node]]) -> list[Node] | None:
    """The nodes streamed with the 1x1 input gradient `src`, or None."""
    t0 = src.outputs[0]
    if g.t(t0).kind != GRAD or len(g.t(t0).shape) != 3 or t0 in g.outputs:
        return None
    region = [src]
    frontier = [t0]
    internal = {t0}
    sinks: list[Node] = []
    while frontier:
        t = frontier.pop()
        readers = consumers.get(t, [])
        if not readers:
            return None
        for n in readers:
            kind = _classify(g, n, t)
            if kind is None:
                return None
            region.append(n)
            if kind == "map":
                out = n.outputs[0]
                if g.t(out).kind != GRAD or out in g.outputs or g.t(out).alias_of:
                    return None
                internal.add(out)
                frontier.append(out)
            elif kind == "sink":
                sinks.append(n)
    if len(sinks) > 1 and not _split_sinks(g, sinks, consumers, region, internal):
        return None
    if any(i in internal for n in region if n.op != "merge_channels" for i in n.inputs[1:]):
        return None  # only the first input of a sub-op is read one channel at a time
    for t in internal:
        if any(v.alias_of == t for v in g.tensors.values()):
            return None  # a view of a per-channel tensor: read whole somewhere
    return region


def _split_sinks(g: Graph, sinks: list[Node], consumers: dict[str, list[Node]],
                 region: list[Node], internal: set[str]) -> bool:
    """Two 1x1 input gradients of one split weight (trained part, frozen part) whose outputs
    only a merge_channels reads: the merge joins the region and the parts become per-channel."""
    if len(sinks) != 2:
        return False
    outs = [s.outputs[0] for s in sinks]
    merges = [consumers.get(o, []) for o in outs]
    if any(len(m) != 1 for m in merges) or merges[0][0] is not merges[1][0]:
        return False
    merge = merges[0][0]
    if merge.op != "merge_channels" or set(merge.inputs) != set(outs) or len(merge.inputs) != 2:
        return False
    region.append(merge)
    internal.update(outs)
    return True


def _position_ok(g: Graph, region: list[Node], pos: dict[str, int],
                 producer: dict[str, Node]) -> bool:
    """The fused node runs where the region's first node ran: every tensor it reads from
    outside must exist there, and each sub-op must see the parameter values it saw before.
    So a node outside that runs in between and writes a parameter the region touches must
    come after every sub-op touching it, and one that reads a parameter the region updates
    must come after the update."""
    names = {n.name for n in region}
    start, end = pos[region[0].name], max(pos[n.name] for n in region)
    made = {o for n in region for o in n.outputs}
    for n in region:
        for i in n.inputs:
            p = producer.get(i)
            if (i not in made and g.t(i).kind not in STATEFUL and p is not None
                    and p.name not in names and pos[p.name] > start):
                return False
    touch: dict[str, int] = {}  # state tensor -> position of the last sub-op touching it
    write: dict[str, int] = {}  # state tensor -> position of the last sub-op writing it
    for n in region:
        for t in (*n.inputs, *n.outputs):
            if g.t(t).kind in STATEFUL:
                touch[t] = max(touch.get(t, -1), pos[n.name])
        for t in n.outputs:
            if g.t(t).kind in STATEFUL:
                write[t] = max(write.get(t, -1), pos[n.name])
    for k in range(start + 1, end):
        n = g.nodes[k]
        if n.name in names:
            continue
        if any(touch.get(o, -1) > k for o in n.outputs):
            return False
        if any(write.get(i, -1) > k for i in n.inputs):
            return False
    return True


def fuse_region(g: Graph, region: list[Node], pos: dict[str, int]) -> Graph:
    """Replace the region's nodes with one channel_stream node at the first one's place."""
    order = sorted(region, key=lambda n: pos[n.name])
    made = [o for n in order for o in n.outputs]
    produced_inside = set(made)
    readers_outside: set[str] = set()
    names = {n.name for n in order}
    for n in g.nodes:
        if n.name not in names:
            readers_outside.update(n.inputs)
    internal = {o for o in made if g.t(o).kind == GRAD and o not in readers_outside
                and o not in g.outputs}
    outputs = [o for o in dict.fromkeys(made) if o not in internal and g.t(o).kind == GRAD]
    params = [o for o in dict.fromkeys(made) if g.t(o).kind in STATEFUL]
    inputs = [i for n in order for i in n.inputs if i not in produced_inside or i in params]
    inputs = list(dict.fromkeys(inputs))
    src = order[0]
    channels = g.t(src.outputs[0]).shape[-1]
    # plane slots: each per-channel tensor gets a slot; a mask may overwrite its input's slot
    # when nothing later in the channel's sequence reads the input
    last_read: dict[str, int] = {}
    for k, n in enumerate(order):
        for i in n.inputs:
            last_read[i] = k
    slots: dict[str, int] = {}
    free: list[int] = []
    nslots = 0
    shapes = {t: tuple(g.t(t).shape) for n in order for t in (*n.inputs, *n.outputs)}
    for k, n in enumerate(order):
        for o in n.outputs:
            if o not in internal or n.op == "merge_channels":
                continue
            if n.op in CONV_INPUT and _pointwise(n) and n is not src:
                continue  # a sink part: adds straight into the merged output
            src_in = n.inputs[0]
            if n.op in MASKS and last_read.get(src_in) == k and src_in in slots:
                slots[o] = slots[src_in]
                continue
            if free:
                slots[o] = free.pop(0)
            else:
                slots[o], nslots = nslots, nslots + 1
        for i in set(n.inputs):
            if i in slots and last_read.get(i) == k and not any(
                    slots[i] == slots[o] for o in n.outputs if o in slots):
                free.append(slots[i])
    plane = max(shapes[t][0] * shapes[t][1] for t in slots)
    scratch = f"{src.name}_planes"
    tensors = {k: t for k, t in g.tensors.items() if k not in internal}
    tensors[scratch] = Tensor(scratch, (nslots * plane,), GRAD)
    outs = tuple(outputs) + (scratch,) + tuple(params)
    node = Node(f"{src.name}_channels", "channel_stream", tuple(inputs), outs,
                {"channels": channels, "plane": plane, "scratch": scratch,
                 "out_shapes": tuple(tuple(tensors[o].shape) for o in outs),
                 "_nodes": tuple(order), "_slots": slots, "_shapes": shapes},
                "backward")
    nodes = []
    for n in g.nodes:
        if n.name == src.name:
            nodes.append(node)
        elif n.name not in names:
            nodes.append(n)
    return g.replace(nodes=tuple(nodes), tensors=tensors)


def _saved_bytes(g: Graph, region: list[Node]) -> int:
    """Bytes of the per-channel tensors the region never materialises."""
    names = {n.name for n in region}
    outside = {i for n in g.nodes if n.name not in names for i in n.inputs}
    return sum(g.t(o).nbytes for n in region for o in n.outputs
               if g.t(o).kind == GRAD and o not in outside)


def regions(g: Graph) -> list[list[Node]]:
    """Disjoint regions, the largest saving first (a 1x1 input gradient can end one region
    and start another; it goes to the one that saves more)."""
    consumers = g.consumers()
    producer = g.producers()
    pos = {n.name: k for k, n in enumerate(g.nodes)}
    found = []
    for n in g.nodes:
        if n.phase != "backward" or n.op not in CONV_INPUT or not _pointwise(n):
            continue
        r = find_region(g, n, consumers)
        if r is not None and len(r) >= 2 and _position_ok(g, r, pos, producer):
            found.append(r)
    found.sort(key=lambda r: (-_saved_bytes(g, r), pos[r[0].name]))
    out: list[list[Node]] = []
    taken: set[str] = set()
    for r in found:
        if not taken & {m.name for m in r}:
            out.append(r)
            taken.update(m.name for m in r)
    return sorted(out, key=lambda r: pos[r[0].name])


def each_region_within_arena(g: Graph, change: Callable[[Graph, Node], Graph | None]) -> Graph:
    """g with change(g, region) applied to each channel-streamed region in order, where it
    returns a graph (None: nothing to change) whose planner arena is no larger than g's: the
    speed passes' rule (passes/x_float.py, passes/channel_group.py)."""
    arena = None
    for node in [n for n in g.nodes if n.op == "channel_stream"]:
        trial = change(g, node)
        if trial is None:
            continue
        if arena is None:
            arena = plan_memory(g).arena_size
        if plan_memory(trial).arena_size <= arena:
            g = trial
    return g


def _cost(g: Graph) -> tuple[int, int]:
    g = run_in_place(g)
    return plan_memory(g).arena_size, peak_live(g, "backward")


def stream_channels(g: Graph) -> Graph:
    found = regions(g)
    if not found:
        return g
    out, done = g, []
    for r in found:  # each checked again where the regions fused before it now run
        pos = {n.name: k for k, n in enumerate(out.nodes)}
        if _position_ok(out, r, pos, out.producers()):
            out = fuse_region(out, r, pos)
            done.append(r[0].name)
    if not done or _cost(out) >= _cost(g):
        return g
    return out.replace(meta={**out.meta, "channel_streamed": done})
