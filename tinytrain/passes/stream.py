"""Row streaming: run the frozen high-resolution stem of the network row by row.

In an inverted-bottleneck network the forward peak sits in the first blocks: a 1x1 conv
expands a 64x64 tensor six-fold and the depthwise conv that follows needs it whole. None of
those layers train in a sparse plan, so nothing of theirs is kept for the backward, and their
output rows can be produced on demand: to compute row y of a layer, first compute the rows of
its inputs under y's window. Each intermediate tensor then only needs the rows still to be
read (a ring of about kernel-height rows), and the expansion never exists whole.

When the stage is the only reader of the sample, the sample streams too: its rows are fetched
from the caller's input source (a pointer, or the serial link as the frame arrives) into a
ring as the stage first needs them, so the input image never exists whole in SRAM either.

The stage is a prefix of the forward pass whose ops can stream (an op says so through
row_inputs/row_window/row_call) and whose intermediates nothing outside reads; it ends at a
tensor that is the only one crossing the cut. Its layers may train when their backward needs
none of those intermediates: a bias gradient needs only the layer's output gradient and the
1-bit mask of its clamp, and the mask nodes stream too (each row of the output writes its
bits into the whole mask, an output of the stage kept for the backward). A layer whose weight
trains reads its input in the backward, so no valid cut leaves that input inside the stage as
a ring (it can be the sample, or the stage's exit). Every possible end is
tried and the memory planner decides (as for the backward schedule): the smallest arena, then
the smallest forward peak; the graph is left alone if no end improves on it. The schedule,
ring sizes and scratch layout are all fixed here, at compile time.
"""

from __future__ import annotations

from tinytrain.ir import ACTIVATION, CONST, INPUT, PARAM, Graph, Node, Tensor
from tinytrain.ops import get_op
from tinytrain.passes.memory_plan import align, peak_live, plan_memory

MAX_STAGE_NODES = 255  # the C schedule names a layer with a uint8_t
MAX_ROWS = 65535  # and a row with a uint16_t


def _row_mask(g: Graph, n: Node) -> bool:
    """A 1-bit mask of an HWC int8 tensor whose rows start on whole bytes: it can be written
    row by row into the whole mask."""
    if n.op != "q8_clamp_mask" or n.phase != "forward":
        return False
    shape = g.t(n.inputs[0]).shape
    return len(shape) == 3 and shape[1] * shape[2] % 8 == 0


def _streamable(g: Graph, n: Node) -> bool:
    if _row_mask(g, n):
        return g.t(n.inputs[0]).kind == ACTIVATION and not g.t(n.inputs[0]).alias_of
    if n.phase != "forward" or len(n.outputs) != 1 or len(g.t(n.outputs[0]).shape) != 3:
        return False
    if g.t(n.outputs[0]).shape[0] > MAX_ROWS:
        return False
    ins = get_op(n.op).row_inputs(n, [g.t(i).shape for i in n.inputs])
    if ins is None:
        return False
    for k, i in enumerate(n.inputs):
        t = g.t(i)
        if k in ins:
            if t.kind not in (INPUT, ACTIVATION) or t.alias_of:
                return False
        elif t.kind not in (PARAM, CONST):
            return False  # (a trained layer's backward needs its input: _exits refuses it)
    return True


def _exits(g: Graph, prefix: list[Node]) -> list[tuple[int, str]]:
    """(cut, exit tensor) for every cut of the prefix that one tensor crosses."""
    readers: dict[str, int] = {}  # tensor -> index of the last node that reads it
    for k, n in enumerate(g.nodes):
        for i in n.inputs:
            readers[i] = k
    out = []
    produced: list[str] = []
    masks = {n.outputs[0] for n in prefix if n.op == "q8_clamp_mask"}  # whole stage outputs
    for c, n in enumerate(prefix, start=1):
        produced.extend(n.outputs)
        crossing = [t for t in produced if (readers.get(t, -1) >= c or t in g.outputs)
                    and t not in masks]
        if c >= 2 and len(crossing) == 1 and crossing[0] == n.outputs[0]:
            out.append((c, crossing[0]))
    return out


def _fetched_input(g: Graph, stage: list[Node]) -> str | None:
    """The sample, when only the stage reads it and its rows can be fetched into a ring."""
    x = g.inputs[0]
    t = g.t(x)
    inside = {id(n) for n in stage}
    readers = [n for n in g.nodes if x in n.inputs]
    if (t.dtype != "s8" or len(t.shape) != 3 or x in g.outputs or not readers
            or any(id(n) not in inside for n in readers)):
        return None
    return x


class RowPuller:
    """Builds a row schedule: pull(t, last) appends the steps that make rows of t up to
    `last`, each row first pulling the rows of its inputs under its window. `producer` maps a
    tensor to (node index, node); `readers` maps a tensor to the nodes that consume each of
    its rows as it is made (masks, bias sums); `fetch` is the step index of a fetched input."""

    def __init__(self, g: Graph, producer: dict[str, tuple[int, Node]],
                 readers: dict[str, list[int]], fetched: str | None = None,
                 fetch: int = -1) -> None:
        self.g, self.producer, self.readers = g, producer, readers
        self.fetched, self.fetch = fetched, fetch
        self.done: dict[str, int] = {}  # tensor -> rows made so far
        self.sched: list[tuple[int, int]] = []

    def pull(self, t: str, last: int) -> None:
        done, sched = self.done, self.sched
        if t == self.fetched:
            while done.get(t, 0) <= last:
                sched.append((self.fetch, done.get(t, 0)))
                done[t] = done.get(t, 0) + 1
            return
        if t not in self.producer:
            return  # a whole tensor from outside
        k, n = self.producer[t]
        op = get_op(n.op)
        shapes = [self.g.t(i).shape for i in n.inputs]
        ins = op.row_inputs(n, shapes) or ()
        while done.get(t, 0) <= last:
            row = done.get(t, 0)
            for i, (lo, hi) in zip(ins, op.row_window(n, shapes, row)):
                if lo <= hi:
                    self.pull(n.inputs[i], hi)
            sched.append((k, row))
            sched.extend((m, row) for m in self.readers.get(t, ()))  # while the row is there
            done[t] = row + 1


def _schedule(g: Graph, stage: list[Node], exit_: str,
              fetched: str | None = None) -> list[tuple[int, int]]:
    """Pull the exit's rows in order; each row first pulls the input rows under its window,
    and a mask takes its bits of a row as soon as it is made. Rows of `fetched` (the sample)
    are fetched in order as step (len(stage), row)."""
    producer = {n.outputs[0]: (k, n) for k, n in enumerate(stage) if n.op != "q8_clamp_mask"}
    masks: dict[str, list[int]] = {}  # tensor -> mask nodes that read each of its rows
    for k, n in enumerate(stage):
        if n.op == "q8_clamp_mask":
            masks.setdefault(n.inputs[0], []).append(k)
    puller = RowPuller(g, producer, masks, fetched, len(stage))
    puller.pull(exit_, g.t(exit_).shape[0] - 1)
    return puller.sched


def _ring_rows(g: Graph, stage: list[Node], sched: list[tuple[int, int]],
               fetched: str | None = None) -> dict[str, int]:
    """Rows each intermediate must keep so that writing row r (slot r % rows) never
    overwrites a row that is still to be read."""
    made: dict[str, dict[int, int]] = {}  # tensor -> row -> step that writes it
    last_read: dict[str, dict[int, int]] = {}
    for s, (k, row) in enumerate(sched):
        if k == len(stage):  # a fetched row of the sample
            made.setdefault(str(fetched), {})[row] = s
            continue
        n = stage[k]
        made.setdefault(n.outputs[0], {})[row] = s
        op = get_op(n.op)
        shapes = [g.t(i).shape for i in n.inputs]
        for i, (lo, hi) in zip(op.row_inputs(n, shapes) or (), op.row_window(n, shapes, row)):
            reads = last_read.setdefault(n.inputs[i], {})
            for r in range(lo, hi + 1):
                reads[r] = s
    rows = {}
    for t, steps in made.items():
        reads = last_read.get(t, {})
        need, lo = 1, 0  # lo: the oldest row still to be read (never moves back: rows die
        for r in sorted(steps):  # in order)
            while lo < r and reads.get(lo, -1) <= steps[r]:
                lo += 1
            need = max(need, r - lo + 1)
        rows[t] = min(need, g.t(t).shape[0])
    return rows


def stream_stage(g: Graph, cut: int, exit_: str) -> Graph:
    """The graph with its first `cut` nodes replaced by one row_stream node ending at exit_."""
    stage = list(g.nodes[:cut])
    fetched = _fetched_input(g, stage)
    sched = _schedule(g, stage, exit_, fetched)
    masks = [n.outputs[0] for n in stage if n.op == "q8_clamp_mask"]
    inner = ([fetched] if fetched else []) + [n.outputs[0] for n in stage
                                                if n.outputs[0] != exit_ and
                                                n.outputs[0] not in masks]
    rows = _ring_rows(g, stage, sched, fetched)
    rings: dict[str, tuple[int, int, int]] = {}
    offset = 0
    for t in inner:
        h, w, c = g.t(t).shape
        rings[t] = (offset, rows.get(t, 1), w * c)
        offset = align(offset + rows.get(t, 1) * w * c)
    inputs: list[str] = [fetched] if fetched else []  # the sample: for the numpy reference
    for n in stage:
        for i in n.inputs:
            if i not in inputs and i not in rings and i != exit_:
                inputs.append(i)
    shapes = {t: tuple(g.t(t).shape) for n in stage for t in (*n.inputs, *n.outputs)}
    scratch = f"{exit_}_rows"
    node = Node(f"{exit_}_stream", "row_stream", tuple(inputs), (exit_, scratch, *masks),
                {"_nodes": tuple(stage), "_schedule": tuple(sched), "_rings": rings,
                 "_shapes": shapes, "scratch": max(offset, 1), "steps": len(sched),
                 "layers": len(stage), "fetch": fetched})
    tensors = dict(g.tensors)  # the intermediates stay described (shapes, quantisation) but,
    # produced by no node, get no buffer of their own
    tensors[scratch] = Tensor(scratch, (max(offset, 1),), ACTIVATION, dtype="u8")
    return g.replace(nodes=(node, *g.nodes[cut:]), tensors=tensors)


def stream_rows(g: Graph) -> Graph:
    prefix: list[Node] = []
    for n in g.nodes:
        if not _streamable(g, n) or len(prefix) >= MAX_STAGE_NODES:
            break
        prefix.append(n)
    best, best_cost = g, _cost(g)
    for cut, exit_ in _exits(g, prefix):
        cand = stream_stage(g, cut, exit_)
        cost = _cost(cand)
        if cost < best_cost:
            best, best_cost = cand, cost
    return best


def _cost(g: Graph) -> tuple[int, int]:
    """The arena first; when the backward sets the arena, the forward's own peak."""
    return plan_memory(g).arena_size, peak_live(g, "forward")
