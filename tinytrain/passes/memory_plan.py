"""Static memory planning: every transient buffer gets a compile-time offset in one arena.

Input: buffers with (size, first step, last step). Output: offsets and the arena size. The
order is deterministic (largest first, then earliest, then name) and placement is first-fit
over the buffers already placed whose lifetimes overlap. Views (reshape) share their root's
storage, so their lifetimes are merged into the root's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinytrain.ir import ACTIVATION, GRAD, INPUT, LABEL, LOSS, Graph

ALIGN = 16  # bytes; keeps every buffer aligned for 128-bit loads on Cortex-M and the host
ARENA_KINDS = (INPUT, LABEL, ACTIVATION, GRAD, LOSS)


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int  # bytes
    first: int  # first step that writes (or -1: written before the program runs)
    last: int  # last step that reads (inclusive)
    kind: str = ""


@dataclass(frozen=True)
class Plan:
    offsets: dict[str, int]
    arena_size: int
    buffers: tuple[Buffer, ...]
    views: dict[str, str] = field(default_factory=dict)  # view tensor -> root tensor

    def offset(self, tensor: str) -> int:
        return self.offsets[self.views.get(tensor, tensor)]


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def plan_buffers(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
    """First-fit placement in a deterministic order. Returns offsets and arena size."""
    order = sorted(buffers, key=lambda b: (-b.size, b.first, b.name))
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    offsets: dict[str, int] = {}
    for b in order:
        live = sorted((o, e) for o, e, p in placed if p.first <= b.last and b.first <= p.last)
        off = 0
        for o, e in live:
            if off + b.size <= o:
                break
            off = max(off, align(e))
        offsets[b.name] = off
        placed.append((off, off + b.size, b))
    size = max((align(o + b.size) for o, _, b in placed), default=0)
    return offsets, size


def check_overlaps(buffers: list[Buffer], offsets: dict[str, int]) -> list[tuple[str, str]]:
    """Pairs of buffers that are live at the same time and share bytes (must be empty)."""
    bad = []
    bs = sorted(buffers, key=lambda b: b.name)
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            oa, ob = offsets[a.name], offsets[b.name]
            live_together = a.first <= b.last and b.first <= a.last
            if live_together and oa < ob + b.size and ob < oa + a.size:
                bad.append((a.name, b.name))
    return bad


def step_nodes(g: Graph):
    """The nodes of one training step, in execution order (the update runs separately)."""
    return [n for n in g.nodes if n.phase != "update"]


def lifetimes(g: Graph) -> tuple[list[Buffer], dict[str, str]]:
    def root(name: str) -> str:
        while g.tensors[name].alias_of:
            name = g.tensors[name].alias_of  # type: ignore[assignment]
        return name

    nodes = step_nodes(g)
    end = len(nodes)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    views: dict[str, str] = {}
    fetched = {n.attrs["fetch"] for n in nodes if n.attrs.get("fetch")}
    for name, t in g.tensors.items():
        if t.kind in ARENA_KINDS:
            r = root(name)
            if r != name:
                views[name] = r
            if t.kind in (INPUT, LABEL) and name not in fetched:
                first[r] = -1
    for k, n in enumerate(nodes):
        for o in n.outputs:
            if g.tensors[o].kind in ARENA_KINDS:
                r = root(o)
                first.setdefault(r, k)
                last[r] = max(last.get(r, k), k)
        for i in n.inputs:
            if i in fetched:  # a row-streamed sample: its rows live in the stage's ring
                continue
            if g.tensors[i].kind in ARENA_KINDS:
                r = root(i)
                last[r] = max(last.get(r, k), k)
    for o in ("loss", "pred"):  # returned to the caller after the step
        if o in first:
            last[o] = end
    fwd_end = max((k for k, n in enumerate(nodes) if n.phase == "forward"), default=0)
    for o in g.outputs:  # inference reads the outputs after the whole forward pass
        r = root(o)
        last[r] = max(last.get(r, 0), first.get(r, 0), fwd_end)
    buffers = [Buffer(r, g.tensors[r].nbytes, first[r], last.get(r, first[r]), g.tensors[r].kind)
               for r in sorted(first)]
    return buffers, views


def peak_live(g: Graph, phase: str) -> int:
    """Most bytes live at once during the steps of one phase (ignores fragmentation): how
    passes that only touch one phase break ties between plans with the same arena size."""
    buffers, _ = lifetimes(g)
    steps = [k for k, n in enumerate(step_nodes(g)) if n.phase == phase]
    return max((sum(b.size for b in buffers if b.first <= k <= b.last) for k in steps),
               default=0)


def plan_memory(g: Graph) -> Plan:
    buffers, views = lifetimes(g)
    offsets, size = plan_buffers(buffers)
    return Plan(offsets, size, tuple(buffers), views)
