"""Rematerialisation: drop saved activations after the forward pass, recompute them in the backward.

A trained layer's weight gradient needs its input, so every trained block keeps its
activations from the forward pass until its backward runs; in an inverted-bottleneck network the
six-fold expanded ones dominate the arena. This pass lets such a tensor die with its last
forward reader and recomputes it just before its first backward reader, from a checkpoint that
is kept anyway (Chen et al.'s segments): the forward nodes on the way are cloned into the
backward phase with their outputs renamed `<name>_rc`. A clone runs the same kernel on the same
inputs as the original, so int8 results are bit-identical and fp32 ones identical (same
operation order); the weights it reads are still the forward's, since every update of them
comes after it (passes/schedule keeps writers of parameters behind their readers, and
`rematerialise` checks it).

Segments are the blocks between articulation tensors of the forward pass (a cut that exactly
one activation crosses: in MobileNetV2 the output of each inverted-residual block). Recomputing
block i drops the saved tensors made inside it (masks excepted: a bit per element is cheaper to
keep than to recompute) and recomputes them from the tensor entering the block. Which blocks to
recompute is searched with the memory planner as the judge, after the passes that follow
(`finish`): the fewest recompute MACs that meet an arena target, or the smallest arena within
a MACs allowance. The planner's number decides, not the size estimate that orders the search.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tinytrain.errors import OptionError
from tinytrain.ir import ACTIVATION, OPT_STATE, PARAM, PARAM_GRAD, Graph, Node
from tinytrain.ops import get_op
from tinytrain.passes.memory_plan import plan_memory

SUFFIX = "_rc"  # a recomputed tensor's (and clone node's) name: the original's + SUFFIX
STATEFUL = (PARAM, PARAM_GRAD, OPT_STATE)


@dataclass(frozen=True)
class Segment:
    """One block that can be recomputed: `drop` are its saved tensors, rebuilt from
    `checkpoint` by `nodes` (forward nodes, in order) for `macs` multiply-accumulates (an op
    without any counts the elements it writes)."""

    checkpoint: str
    drop: tuple[str, ...]
    nodes: tuple[str, ...]
    macs: int
    saved_bytes: int
    # the block's parameters: the backward enters the block at the first node reading one
    # (or a dropped tensor), and the recompute runs just before it
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """What the search aims at: `arena` (bytes): the fewest recompute MACs that reach it;
    `max_macs`: the smallest arena whose recompute stays within this many MACs."""

    arena: int | None = None
    max_macs: int | None = None


def parse_remat(spec: str) -> float | str:
    """`--remat`: "auto", "off", or "N%" (the most recompute, as a share of the training step's
    MACs, for the smallest arena). Returns the mode or the fraction."""
    s = str(spec).strip().lower()
    if s in ("auto", "off"):
        return s
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", s)
    if not m:
        raise OptionError(f"--remat must be auto, off or a percentage such as 15% (the most "
                          f"extra compute for the smallest arena), got {spec!r}")
    return float(m.group(1)) / 100.0


def _node_macs(g: Graph, n: Node) -> int:
    return get_op(n.op).macs(n, [g.t(i).shape for i in n.inputs],
                             [g.t(o).shape for o in n.outputs])


def _forward(g: Graph) -> list[Node]:
    return [n for n in g.nodes if n.phase == "forward"]


def _backward_reads(g: Graph) -> set[str]:
    return {i for n in g.nodes if n.phase == "backward" for i in n.inputs}


def _names_in_attrs(n: Node) -> str:
    return repr(sorted((k, v) for k, v in n.attrs.items()))


def _clonable(n: Node) -> bool:
    """A forward node whose clone computes the same thing: not one that fetches the sample
    from the input source, nor a fused region (their inner names cannot be rewired)."""
    return not n.attrs.get("fetch") and n.op not in ("row_stream", "channel_stream")


def segments(g: Graph) -> list[Segment]:
    """The blocks whose saved tensors could be recomputed, in forward order."""
    fwd = _forward(g)
    produced_at = {i: -1 for i in g.inputs}
    for k, n in enumerate(fwd):
        for o in n.outputs:
            produced_at[o] = k
    last_fwd_read: dict[str, int] = {}
    for k, n in enumerate(fwd):
        for i in n.inputs:
            if i in produced_at:
                last_fwd_read[i] = k
    # cut c (after node c): the activations made at or before c and read after it
    starts: dict[int, list[str]] = {}
    for t, k in produced_at.items():
        if last_fwd_read.get(t, -1) > k:
            starts.setdefault(k, []).append(t)
    live: set[str] = set()
    cuts: list[tuple[int, str]] = []
    for c in range(-1, len(fwd)):
        live |= set(starts.get(c, []))
        live = {t for t in live if last_fwd_read[t] > c}
        if len(live) == 1:
            cuts.append((c, next(iter(live))))
    saved = _backward_reads(g)
    producer = {o: n for n in fwd for o in n.outputs}
    attr_text = {n.name: _names_in_attrs(n) for n in g.nodes if n.phase == "backward"}
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        if n.phase == "backward":
            for i in n.inputs:
                readers.setdefault(i, []).append(n)
    narrow = _block_ends(cuts, [g.t(t).nbytes for _, t in cuts])
    out = []
    for (c0, ck), (c1, exit_) in zip(narrow, narrow[1:]):
        block = fwd[c0 + 1:c1 + 1]
        if not all(_clonable(n) for n in block):
            continue
        drop = []
        for n in block:
            for o in n.outputs:
                t = g.t(o)
                if (o == exit_ or o not in saved or t.kind != ACTIVATION or t.dtype == "u8"
                        or o in g.outputs or t.alias_of):
                    continue
                # a backward node that names it inside its attributes (a fused region) cannot
                # be rewired by its inputs alone
                if any(o in attr_text[r.name] for r in readers[o]):
                    continue
                drop.append(o)
        if not drop:
            continue
        need = _closure(g, drop, {ck} | (saved - set(drop)), producer)
        params = tuple(dict.fromkeys(i for n in block for i in n.inputs
                                     if g.t(i).kind == PARAM))
        out.append(Segment(ck, tuple(drop), tuple(n.name for n in block if n.name in need),
                           sum(_work(g, n) for n in block if n.name in need),
                           sum(g.t(t).nbytes for t in drop), params))
    return out


def _block_ends(cuts: list[tuple[int, str]], size: list[int]) -> list[tuple[int, str]]:
    """Blocks end where the network is narrow: at an articulation no larger than the next one
    (a block's output, which the next block expands), taking the last of a run of equal
    tensors made one after another (a conv and the activation that follows it). The first and
    the last articulation always end one."""
    ends = []
    for k, cut in enumerate(cuts):
        last = k + 1 == len(cuts)
        if not last and size[k + 1] == size[k] and cuts[k + 1][0] == cut[0] + 1:
            continue  # not the last of its run
        if k == 0 or last or size[k] <= size[k + 1]:
            ends.append(cut)
    return ends


def _work(g: Graph, n: Node) -> int:
    """What recomputing n costs, in MACs; an op without any (an activation, an add) counts
    the elements it writes."""
    return max(_node_macs(g, n), sum(g.t(o).size for o in n.outputs))


def _available(g: Graph, t: str, keep: set[str]) -> bool:
    """Readable in the backward as it is: not an activation (parameters, constants, the
    sample, the label), or an activation kept for the backward."""
    return g.t(t).kind != ACTIVATION or t in keep


def _closure(g: Graph, drop: Iterable[str], keep: set[str],
             producer: dict[str, Node]) -> set[str]:
    """Names of the forward nodes that recompute `drop` from what `keep` holds."""
    need: set[str] = set()
    stack = list(drop)
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        n = producer[t]
        need.add(n.name)
        stack.extend(i for i in n.inputs if not _available(g, i, keep))
    return need


def rematerialise(g: Graph, segs: Iterable[Segment]) -> Graph:
    """The graph in which the dropped tensors of `segs` are read by no backward node: each
    segment is recomputed, all of it, just before the backward enters its block (the first
    backward node that reads one of its parameters or dropped tensors), so that the block's
    backward stays contiguous for the passes after; from its checkpoint (which then lives
    until there) and the tensors kept for the backward."""
    segs = list(segs)
    group_of = {t: k for k, sg in enumerate(segs) for t in sg.drop}
    trigger: dict[str, list[int]] = {}
    for k, sg in enumerate(segs):
        for t in (*sg.drop, *sg.params):
            trigger.setdefault(t, []).append(k)
    if not group_of:
        return g
    fwd = _forward(g)
    producer = {o: n for n in fwd for o in n.outputs}
    order = {o: k for k, n in enumerate(fwd) for o in n.outputs}
    keep = (_backward_reads(g) | {sg.checkpoint for sg in segs}) - set(group_of)
    tensors = dict(g.tensors)
    made: set[str] = set()  # tensors whose clone is already emitted
    out: list[Node] = []
    written: set[str] = set()  # stateful tensors written so far in the backward

    def emit(t: str) -> None:
        n = producer[t]
        if t in made:
            return
        for i in n.inputs:
            if not _available(g, i, keep):
                emit(i)
        for i in n.inputs:
            if i in written:
                raise ValueError(f"recomputing {t} would read {i} after its update")
        clone = Node(n.name + SUFFIX, n.op,
                     tuple(i + SUFFIX if i in made else i for i in n.inputs),
                     tuple(o + SUFFIX for o in n.outputs),
                     {**n.attrs, "remat_of": n.name}, "backward")
        for o in n.outputs:
            view = g.t(o).alias_of  # a view (reshape) of a recomputed tensor views the clone
            tensors[o + SUFFIX] = g.t(o).replace(
                name=o + SUFFIX, alias_of=view + SUFFIX if view in made else view)
            made.add(o)
        out.append(clone)

    for n in g.nodes:
        if n.phase == "backward":
            for k in dict.fromkeys(k for i in n.inputs for k in trigger.get(i, ())):
                for t in sorted(segs[k].drop, key=order.__getitem__):
                    emit(t)
            if any(i in group_of for i in n.inputs):
                n = Node(n.name, n.op, tuple(i + SUFFIX if i in group_of else i
                                             for i in n.inputs), n.outputs, n.attrs, n.phase)
            written.update(o for o in n.outputs if g.t(o).kind in STATEFUL)
        out.append(n)
    return g.replace(nodes=tuple(out), tensors=tensors,
                     meta={**g.meta, "remat": sorted(group_of)})


def rematerialise_all(g: Graph) -> Graph:
    """Every block recomputed (but one whose clone would read an updated weight): the auto
    planner's cheap bound on how small a plan can get, one planner run instead of a search."""
    segs = segments(g)
    try:
        return rematerialise(g, segs)
    except ValueError:
        ok: list[Segment] = []
        for sg in segs:
            try:
                rematerialise(g, [*ok, sg])
            except ValueError:
                continue
            ok.append(sg)
        return rematerialise(g, ok)


def choose(g: Graph, finish: Callable[[Graph], Graph], target: Target,
           done: Graph | None = None) -> Graph:
    """The rematerialised graph (before `finish`) that best meets `target`, judged by the
    arena of finish(graph); `g` itself when no recompute helps. `done`: finish(g), when the
    caller has it already."""
    segs = segments(g)
    if not segs:
        return g
    cache: dict[frozenset[int], tuple[int, int, Graph | None]] = {}
    if done is not None:
        cache[frozenset()] = (plan_memory(done).arena_size, 0, g)

    def judge(chosen: frozenset[int]) -> tuple[int, int, Graph | None]:
        if chosen not in cache:
            try:
                cand = rematerialise(g, [segs[k] for k in sorted(chosen)])
            except ValueError:  # a clone would read an updated weight: not this set
                cache[chosen] = (1 << 62, 0, None)
                return cache[chosen]
            arena = plan_memory(finish(cand)).arena_size
            cache[chosen] = (arena, sum(segs[k].macs for k in chosen), cand)
        return cache[chosen]

    # most bytes dropped per MAC first; then prefixes of that order, judged by the planner
    order = sorted(range(len(segs)), key=lambda k: (-segs[k].saved_bytes / max(segs[k].macs, 1),
                                                    k))
    base = judge(frozenset())
    prefixes = [frozenset(order[:m]) for m in range(1, len(order) + 1)]
    allowed = [s for s in prefixes
               if target.max_macs is None or sum(segs[k].macs for k in s) <= target.max_macs]
    if not allowed:
        return g
    if target.arena is not None and base[0] <= target.arena:
        return g
    # the shortest prefix that meets the arena target (planned one by one, in order) ...
    best = next((s for s in allowed if target.arena is not None
                 and judge(s)[0] <= target.arena), None)
    goal = target.arena
    if best is None:  # ... or, when none does, the smallest arena, then the least recompute
        best = min(allowed, key=lambda s: (judge(s)[0], judge(s)[1]))
        goal = judge(best)[0]
    if judge(best)[0] >= base[0]:
        return g
    # drop segments that the goal does not need, the costliest first
    for k in sorted(best, key=lambda k: (-segs[k].macs, k)):
        trial = best - {k}
        if trial and judge(trial)[0] <= goal:
            best = trial
    graph = judge(best)[2]
    return g if graph is None else graph
