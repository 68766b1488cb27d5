"""Search: the plans with the highest predicted score whose real SRAM fits the budget.

The predicted score is additive over independent choices: the bias depth, and one ratio
(or none) per searchable layer. Branch and bound over those choices, depth first, best option
first: a partial plan (the choices made so far, no weight elsewhere) is sized by the real
planner (`MemoryOracle`, cached), and

- when it is over the budget, nothing below it is visited: every completion adds weights to
  further layers, so it trains all the partial plan trains and needs at least its SRAM;
- when even the best remaining options cannot lift its score above the `want`-th best plan
  found so far, nothing below it is visited either.

What remains is exact: the plans returned are the `want` best of the predicted score among
all plans the planner puts within the budget (checked against brute force in the tests), and
each was sized by the planner itself. Ratios of one layer are never compared with each other
by size (a whole int8 weight can need less SRAM than half of it: a partial one keeps its
packed channels, a gathered input and a transient whole-weight buffer), only weights added to
untouched layers and deeper biases are taken to add SRAM.

With rematerialisation allowed (`recompute`: the most extra MACs per step, as a share of the
step's), a plan over the budget is pruned only when its floor (every block recomputed) is over
it too; a complete plan that fits only with recompute is sized by the least recompute that
meets the budget, and counts when that stays within the allowance. The predicted score is
unchanged: recomputing is bit-exact, so a plan learns the same with or without it.

The search is bounded by a number of visits, not by seconds: the same contributions and
bound give the same plans on any machine, however busy (a time bound made the plan depend
on the load), and a planner cache makes it faster, never different.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .planner import Footprint, MemoryOracle
from .space import Scheme, Space


@dataclass
class Tried:
    """What one search (or several) looked at, for the report."""
    visited: int = 0  # partial and complete plans reached
    pruned: int = 0  # ... whose subtree was cut (over the budget, or cannot win)
    sized: int = 0  # ... sized by the planner (or its cache)
    stopped: bool = False  # the visit bound ran out before the search was exhaustive


@dataclass(frozen=True)
class Found:
    scheme: Scheme
    predicted: float
    sram: int
    recompute: float = 0.0  # extra MACs per training step, a share of the step's


class _Bound(Exception):
    pass


def _dimensions(space: Space, value: Callable[[int, float], float],
                bias_value: Callable[[int], float]) -> list[list[tuple[float, object]]]:
    """Each choice's options as (value, option), best first; ties go to the cheaper option.
    The bias depth first, then the weight layers from the classifier backwards."""
    dims: list[list[tuple[float, object]]] = [
        sorted(((bias_value(k), k) for k in space.bias_depths), key=lambda o: (-o[0], o[1]))]
    for i in sorted(space.weight_layers, reverse=True):
        opts = [(0.0, (i, 0.0))] + [(value(i, r), (i, r)) for r in space.ratios[i]]
        dims.append(sorted(opts, key=lambda o: (-o[0], o[1][1])))
    return dims


def search(space: Space, predict_bias: Callable[[int], float],
           gain: Callable[[int, float], float], oracle: MemoryOracle, budget: int,
           want: int = 1, max_visits: int | None = None, max_flash: int | None = None,
           tried: Tried | None = None, recompute: float | None = None) -> list[Found]:
    """The `want` best plans within `budget` bytes of SRAM (and `max_flash`), best predicted
    first; with rematerialisation when `recompute` is not None (see the module's text). When
    `tried.visited` reaches `max_visits` it stops with what it has found."""
    tried = tried if tried is not None else Tried()
    dims = _dimensions(space, gain, predict_bias)
    rest = [0.0] * (len(dims) + 1)  # the best the choices from d on can still add
    for d in range(len(dims) - 1, -1, -1):
        rest[d] = rest[d + 1] + max(v for v, _ in dims[d])
    found: list[Found] = []

    def fits(fp: Footprint) -> bool:
        return fp.sram is not None and fp.sram <= budget and \
            (max_flash is None or (fp.flash is not None and fp.flash <= max_flash))

    def visit(d: int, score: float, k: int, weights: tuple[tuple[int, float], ...]) -> None:
        if max_visits is not None and tried.visited >= max_visits:
            raise _Bound
        tried.visited += 1
        if len(found) >= want and score + rest[d] <= found[-1].predicted:
            tried.pruned += 1  # cannot beat the plans found
            return
        s = Scheme(k, tuple(sorted(weights)))
        fp = oracle(s.spec)
        tried.sized += 1
        if not fits(fp) and (recompute is None or not fits(oracle.floor(s.spec))):
            tried.pruned += 1  # every completion trains more: over the budget too
            return
        if d == len(dims):
            if any(s.covers(f.scheme) and score <= f.predicted for f in found):
                return  # trains all of a plan found already, for no more predicted gain
            if not fits(fp):  # fits only by recomputing: how much does it take?
                fp = oracle.fit(s.spec, budget, recompute)
                if not fits(fp):
                    return
            found.append(Found(s, score, int(fp.sram),  # type: ignore[arg-type]
                               fp.recompute / max(fp.macs, 1)))
            found.sort(key=lambda f: -f.predicted)
            del found[want:]
            return
        for v, (i, r) in dims[d]:  # type: ignore[misc]
            visit(d + 1, score + v, k, weights + (((i, r),) if r else ()))

    try:
        for v, k in dims[0]:
            visit(1, v, int(k), ())  # type: ignore[call-overload]
    except _Bound:
        tried.stopped = True
    return found


def frontier(space: Space, predict_bias: Callable[[int], float],
             gain: Callable[[int, float], float], oracle: MemoryOracle, budgets: list[int],
             max_visits: int | None = None, max_flash: int | None = None,
             tried: Tried | None = None,
             recompute: float | None = None) -> list[tuple[int, Found | None]]:
    """The best plan at each budget (ascending): the accuracy/memory frontier, each budget's
    search bounded by `max_visits`."""
    out = []
    tried = tried if tried is not None else Tried()
    for b in sorted(budgets):
        one = Tried()
        best = search(space, predict_bias, gain, oracle, b, 1, max_visits, max_flash, one,
                      recompute)
        tried.visited += one.visited
        tried.pruned += one.pruned
        tried.sized += one.sized
        tried.stopped |= one.stopped
        out.append((b, best[0] if best else None))
    return out
