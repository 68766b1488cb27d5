"""The standard plan shapes `--update auto` always measures beside its searched plans.

The additive model the search maximises cannot see plans whose layers only pay off together,
nor layers deeper than the analysis depth. So the validated pool also holds the plans a user
would try by hand, whichever fit the budget:
- the classifier alone, `bias`, and `last:K` (spread over the K that fit);
- TTE's published shape (Lin et al., 2022): the first pointwise conv of each of the last m
  blocks at one channel ratio, biases down to the first of them. For each ratio, the largest m
  that fits. "Blocks" are found structurally: 1x1 convs that feed a depthwise conv (inverted
  residuals); a network without them uses its 1x1 convs, and then any conv.
"""

from __future__ import annotations

from collections.abc import Callable

from tinytrain.ir import Graph
from tinytrain.passes.update_plan import layers

from .space import RATIOS, Scheme, Space

MAX_LAST = 6  # last:K candidates at most (each costs a build and a few fine-tuning runs)


def block_entries(g: Graph) -> list[int]:
    """The layers TTE's shape trains, by index, input side first."""
    lys = layers(g)
    convs = [ly for ly in lys[:-1] if not ly.depthwise and len(g.t(ly.weight).shape) == 4]
    pointwise = [ly for ly in convs if g.t(ly.weight).shape[1:3] == (1, 1)]
    expand = [ly for ly in pointwise
              if ly.index + 1 < len(lys) - 1 and lys[ly.index + 1].depthwise]
    return [ly.index for ly in (expand or pointwise or convs)]


def tte_shaped(n_layers: int, idx: list[int], ratio: float) -> Scheme:
    return Scheme(n_layers - idx[0], tuple((i, ratio) for i in idx))


def _spread(ks: list[int], most: int) -> list[int]:
    """At most `most` of the sorted `ks`, evenly spread, always keeping the largest."""
    if len(ks) <= most:
        return ks
    step = (len(ks) - 1) / (most - 1)
    return sorted({ks[round(j * step)] for j in range(most)})


def standard_plans(g: Graph, space: Space, fits: Callable[[Scheme], bool]
                   ) -> list[tuple[str, Scheme]]:
    """(name, scheme) of every standard shape that fits, smallest first within a family."""
    n = space.n_layers
    out = [("classifier only (last:1)", Scheme(1))]
    if fits(Scheme(n)):
        out.append(("bias", Scheme(n)))
    ks = []
    for k in range(2, n + 1):
        if not fits(space.last(k)):
            break
        ks.append(k)
    out += [(f"last:{k}", space.last(k)) for k in _spread(ks, MAX_LAST)]
    entries = block_entries(g)
    for r in sorted(RATIOS, reverse=True):
        # the plans of one ratio grow with m: the largest that fits, by bisection
        lo, hi = 0, len(entries)
        while lo < hi:
            m = (lo + hi + 1) // 2
            if fits(tte_shaped(n, entries[-m:], r)):
                lo = m
            else:
                hi = m - 1
        if lo:
            out.append((f"TTE-shaped {lo}x{r:g}", tte_shaped(n, entries[-lo:], r)))
    return out
