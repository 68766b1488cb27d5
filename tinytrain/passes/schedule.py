"""Order the backward pass so buffers are freed (and fused updates applied) as early as possible.

Two list schedulers over the backward nodes: a greedy one (among the nodes whose dependencies
are met, run the one that frees the most arena bytes net of what it allocates; ties: original
order) and an apply-early one (original order, but nodes that allocate nothing, such as fused
updates, run as soon as they are ready).
The forward pass keeps its order. A new order is kept only if the memory planner's arena
is smaller (or, when the forward pass sets the arena, if the backward's own peak is): the
planner's numbers are the judge, not this heuristic.
"""

from __future__ import annotations

from tinytrain.ir import OPT_STATE, PARAM, PARAM_GRAD, Graph, Node
from tinytrain.passes.inplace import run_in_place
from tinytrain.passes.memory_plan import ARENA_KINDS, peak_live, plan_memory

STATEFUL = (PARAM, PARAM_GRAD, OPT_STATE)


def _deps(nodes: list[Node], g: Graph) -> list[set[int]]:
    """RAW on every tensor; for parameters, gradients and optimizer state also WAR and WAW,
    so a fused update never overtakes a reader of the old weights and accumulation order
    (hence every float result) is unchanged."""
    deps: list[set[int]] = [set() for _ in nodes]
    last_write: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if i in last_write:
                deps[k].add(last_write[i])
            readers.setdefault(i, []).append(k)
        for o in n.outputs:
            if g.t(o).kind in STATEFUL:
                deps[k].update(r for r in readers.get(o, []) if r != k)
                if o in last_write:
                    deps[k].add(last_write[o])
            last_write[o] = k
    return deps


def _root(g: Graph, name: str) -> str:
    while g.tensors[name].alias_of:
        name = g.tensors[name].alias_of  # type: ignore[assignment]
    return name


def _greedy(g: Graph, nodes: list[Node], early: bool = False) -> list[Node]:
    """early=False: run the ready node that frees the most net bytes. early=True: keep the
    original order except that nodes allocating nothing (updates, in-place steps) run as
    soon as they are ready, TTE's apply-as-early-as-possible order."""
    deps = _deps(nodes, g)
    arena = {t for t in g.tensors if g.t(t).kind in ARENA_KINDS}
    remaining: dict[str, int] = {}
    for n in nodes:
        for i in set(n.inputs):
            if i in arena:
                remaining[_root(g, i)] = remaining.get(_root(g, i), 0) + 1
    done: set[int] = set()
    order: list[Node] = []
    while len(order) < len(nodes):
        best, best_key = -1, None
        for k, n in enumerate(nodes):
            if k in done or not deps[k] <= done:
                continue
            freed = sum(g.t(r).nbytes for r in {_root(g, i) for i in n.inputs if i in arena}
                        if remaining.get(r) == 1)
            alloc = sum(g.t(o).nbytes for o in n.outputs
                        if o in arena and not g.t(o).alias_of)
            key = (int(alloc > 0), k) if early else (alloc - freed, k)
            if best_key is None or key < best_key:
                best, best_key = k, key
        done.add(best)
        order.append(nodes[best])
        for r in {_root(g, i) for i in nodes[best].inputs if i in arena}:
            remaining[r] -= 1
    return order


def _cost(g: Graph) -> tuple[int, int]:
    """The arena first; when the forward pass sets the arena, the backward's own peak. Both
    after the in-place pass that follows, since an order can matter only through it (a bias
    update that runs first lets a depthwise backward overwrite its dy)."""
    g = run_in_place(g)
    return plan_memory(g).arena_size, peak_live(g, "backward")


def schedule_backward(g: Graph) -> Graph:
    head = [n for n in g.nodes if n.phase in ("forward", "loss")]
    backward = [n for n in g.nodes if n.phase == "backward"]
    tail = [n for n in g.nodes if n.phase not in ("forward", "loss", "backward")]
    best, best_cost = g, _cost(g)
    for early in (False, True):
        candidate = g.replace(nodes=tuple(head + _greedy(g, backward, early) + tail))
        cost = _cost(candidate)
        if cost < best_cost:
            best, best_cost = candidate, cost
    return best.replace(meta={**g.meta, "scheduled": best is not g})
