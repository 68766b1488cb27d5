"""Row streaming of the backward: a stem that trains its biases runs its backward row by row.

When the early, high-resolution layers train (bias-only, TinyTL's cheapest update), their
backward materialises float gradients at full resolution: on MobileNetV2 at 128x128 the
gradient of a 64x64x8 tensor is 128 KB, and the depthwise input gradients are wider still.
But every op there is local in rows: a 1x1 conv's input gradient row r needs its output
gradient's row r, a depthwise one the few rows whose taps reach r, a ReLU mask or a residual
sum is elementwise, and a bias gradient is a sum over rows. So the region runs like the row-
streamed forward stem (passes/stream.py), in reverse: the gradient entering it is whole, each
gradient inside lives in a ring of the rows still to be read, each bias adds every row of its
gradient to a running sum as the row is made, and the biases are updated once all rows are in.

The region is a tail of the backward pass (the stem's layers come last) of ops that can run
by rows (row_inputs/row_window/row_call on the op), which exactly one gradient enters and none
leaves: nothing outside reads the gradients made inside. Every possible start is tried and the
memory planner decides, after the passes that follow (`finish`), as for the forward stem: the
smallest arena, the graph left alone if no start shrinks it.
"""

from __future__ import annotations

from collections.abc import Callable

from tinytrain.ir import ACTIVATION, GRAD, PARAM, Graph, Node, Tensor
from tinytrain.ops import get_op
from tinytrain.passes.memory_plan import align, plan_memory
from tinytrain.passes.stream import MAX_ROWS, MAX_STAGE_NODES, RowPuller, _ring_rows

ROW_OPS = ("mask_backward", "conv2d_backward_input_q8", "accumulate", "bias_sgd_q8")
SINKS = ("bias_sgd_q8",)  # consume rows, write a parameter once every row is in


def _grad_rows(g: Graph, t: str) -> bool:
    x = g.t(t)
    return (x.kind == GRAD and x.dtype == "f32" and len(x.shape) == 3 and not x.alias_of
            and x.shape[0] <= MAX_ROWS)


def _row_capable(g: Graph, n: Node) -> bool:
    if n.phase != "backward" or n.op not in ROW_OPS:
        return False
    op = get_op(n.op)
    ins = op.row_inputs(n, [g.t(i).shape for i in n.inputs])
    if ins is None or not all(_grad_rows(g, n.inputs[i]) for i in ins):
        return False
    if n.op in SINKS:
        return g.t(n.outputs[0]).kind == PARAM
    return len(n.outputs) == 1 and _grad_rows(g, n.outputs[0])


def _region(g: Graph, region: list[Node]) -> str | None:
    """The one gradient entering `region`, when nothing outside reads what it makes."""
    made = {o for n in region if n.op not in SINKS for o in n.outputs}
    names = {n.name for n in region}
    if any(i in made for n in g.nodes if n.name not in names for i in n.inputs):
        return None
    if set(g.outputs) & made or not any(n.op == "conv2d_backward_input_q8" for n in region):
        return None
    entering = set()
    for n in region:
        shapes = [g.t(i).shape for i in n.inputs]
        for k in get_op(n.op).row_inputs(n, shapes) or ():
            if n.inputs[k] not in made:
                entering.add(n.inputs[k])
    return next(iter(entering)) if len(entering) == 1 else None


def _schedule(g: Graph, region: list[Node], entry: str) -> list[tuple[int, int]]:
    """Rows in the order the region's ends need them: each gradient's rows in order, each
    pulling the rows under its window first; a bias adds a row as soon as it is made."""
    producer = {n.outputs[0]: (k, n) for k, n in enumerate(region) if n.op not in SINKS}
    sinks: dict[str, list[int]] = {}
    readers: set[str] = set()
    for k, n in enumerate(region):
        if n.op in SINKS:
            sinks.setdefault(n.inputs[0], []).append(k)
        else:
            readers.update(n.inputs)
    puller = RowPuller(g, producer, sinks)
    sched = puller.sched
    sched.extend((m, r) for m in sinks.get(entry, ()) for r in range(g.t(entry).shape[0]))
    ends = [t for t in producer if t not in readers] + list(sinks)
    for t in ends:
        puller.pull(t, g.t(t).shape[0] - 1)
    return sched


def stream_region(g: Graph, start: int, entry: str) -> Graph:
    """The graph with the backward nodes from `start` on replaced by one row_stream_backward
    node."""
    backward = [n for n in g.nodes if n.phase == "backward"]
    region = backward[start:]
    sched = _schedule(g, region, entry)
    rows = _ring_rows(g, region, sched)
    rings: dict[str, tuple[int, int, int]] = {}
    offset = 0
    for n in region:
        if n.op in SINKS:
            continue
        t = n.outputs[0]
        h, w, c = g.t(t).shape
        rings[t] = (offset, rows.get(t, 1), w * c * 4)
        offset = align(offset + rows.get(t, 1) * w * c * 4)
    sums = {}
    for k, n in enumerate(region):
        if n.op in SINKS:
            sums[k] = offset
            offset = align(offset + 4 * g.t(n.inputs[0]).shape[-1])
    inputs: list[str] = [entry]
    params: list[str] = []
    for n in region:
        for i in n.inputs:
            if i not in inputs and i not in rings:
                inputs.append(i)
        if n.op in SINKS:
            params.extend(o for o in n.outputs if o not in params)
    shapes = {t: tuple(g.t(t).shape) for n in region for t in (*n.inputs, *n.outputs)}
    scratch = f"{region[0].name}_rows"
    node = Node(f"{region[0].name}_stream", "row_stream_backward", tuple(inputs),
                (scratch, *params),
                {"entry": entry, "_nodes": tuple(region), "_schedule": tuple(sched),
                 "_rings": rings, "_sums": sums, "_shapes": shapes, "scratch": max(offset, 1),
                 "steps": len(sched), "layers": len(region)}, "backward")
    tensors = dict(g.tensors)  # the gradients inside stay described but get no buffer
    tensors[scratch] = Tensor(scratch, (max(offset, 1),), ACTIVATION, dtype="u8")
    first = next(k for k, n in enumerate(g.nodes) if n.name == region[0].name)
    names = {n.name for n in region}
    nodes = [n for n in g.nodes[:first]] + [node] + [n for n in g.nodes[first:]
                                                      if n.name not in names]
    return g.replace(nodes=tuple(nodes), tensors=tensors)


def candidates(g: Graph) -> list[tuple[int, str]]:
    """(start in the backward pass, entering gradient) of every region the pass could make."""
    backward = [n for n in g.nodes if n.phase == "backward"]
    start = len(backward)
    while start > 0 and _row_capable(g, backward[start - 1]):
        start -= 1
    start = max(start, len(backward) - MAX_STAGE_NODES)
    found = []
    for s in range(start, len(backward) - 1):
        entry = _region(g, backward[s:])
        if entry is not None:
            found.append((s, entry))
    # a region is worth starting where the gradient entering it is narrow (a block's output
    # gradient, not an expanded one): keep the starts no larger than their neighbours
    size = [g.t(e).nbytes for _, e in found]
    return [f for k, f in enumerate(found)
            if (k == 0 or size[k] <= size[k - 1]) and (k + 1 == len(found)
                                                        or size[k] <= size[k + 1])]


SHORTLIST = 3  # starts judged by the planner after `finish`, of those the backward peak ranks


def stream_gradients(g: Graph, finish: Callable[[Graph], Graph],
                     rank: Callable[[Graph], int] | None = None) -> Graph:
    """The region whose graph, after `finish`, has the smallest arena; g if none shrinks it.
    Every start is ranked by `rank` (cheap: the backward's peak once the channel regions are
    formed) and the best SHORTLIST are judged exactly."""
    found = candidates(g)
    if not found:
        return g
    cands = [stream_region(g, start, entry) for start, entry in found]
    if rank is not None and len(cands) > SHORTLIST:
        cands = sorted(cands, key=rank)[:SHORTLIST]
    best, best_arena = g, plan_memory(finish(g)).arena_size
    for cand in cands:
        arena = plan_memory(finish(cand)).arena_size
        if arena < best_arena:
            best, best_arena = cand, arena
    return best
