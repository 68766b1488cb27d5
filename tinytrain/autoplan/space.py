"""The plans the automatic search chooses among: TTE's sparse-update shape.

A scheme trains the biases of the last `n_bias` layers (at least the classifier's), the
classifier's weight, and the weights of some of the last `depth` layers, each at one of the
channel ratios 1/8, 1/4, 1/2, 1 (as `--update tte:...` does: the first k input channels, a
weight-trained layer also trains its bias). Schemes are written as the `tte:` spec the
compiler already parses, so every scheme is a plan a user can type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinytrain.ir import Graph
from tinytrain.passes.update_plan import Layer, layers

RATIOS = (0.125, 0.25, 0.5, 1.0)  # TTE's weight_update_ratio values
# bias depths measured and searched: dense near the classifier, sparser towards the input
BIAS_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


@dataclass(frozen=True, order=True)
class Scheme:
    n_bias: int  # biases of the last n_bias layers (1: the classifier's only)
    weights: tuple[tuple[int, float], ...] = ()  # (layer index, ratio), by index

    @property
    def spec(self) -> str:
        if not self.weights:
            return f"tte:n_bias={self.n_bias}"
        return (f"tte:n_bias={self.n_bias},idx={'-'.join(str(i) for i, _ in self.weights)},"
                f"ratio={'-'.join(f'{r:g}' for _, r in self.weights)}")

    def ratio(self, layer: int) -> float:
        return dict(self.weights).get(layer, 0.0)

    def covers(self, other: Scheme) -> bool:
        """Trains at least everything `other` trains."""
        return self.n_bias >= other.n_bias and all(self.ratio(i) >= r for i, r in other.weights)


@dataclass(frozen=True)
class Space:
    n_layers: int  # conv/dense layers; the last is the classifier
    bias_depths: tuple[int, ...]
    ratios: dict[int, tuple[float, ...]]  # weight-searchable layer -> its distinct ratios

    @property
    def weight_layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.ratios))

    @property
    def weight_base(self) -> int:
        """The bias depth weight contributions are measured on top of: the biases of every
        searchable layer and of the classifier."""
        return self.n_layers - min(self.ratios) if self.ratios else 1

    def last(self, k: int) -> Scheme:
        """`--update last:K` as a scheme."""
        n = self.n_layers
        return Scheme(k, tuple((i, 1.0) for i in range(n - k, n - 1)))

    def size(self) -> int:
        return len(self.bias_depths) * math.prod(len(r) + 1 for r in self.ratios.values())


def _ratios(ly: Layer, partial_ok: bool) -> tuple[float, ...]:
    """The ratios that give distinct channel counts (a 1-channel stem has only 1)."""
    if not partial_ok:
        return (1.0,)
    out, seen = [], set()
    for r in sorted(RATIOS, reverse=True):  # the largest ratio naming each channel count
        k = max(1, math.ceil(r * ly.in_channels))
        if k not in seen:
            seen.add(k)
            out.append(r)
    return tuple(sorted(out))


def plan_space(g: Graph, depth: int) -> Space:
    """The search space for the imported model `g`: weight choices for the `depth` layers
    before the classifier."""
    lys = layers(g)
    n = len(lys)
    ratios = {}
    for ly in lys[max(0, n - 1 - depth):n - 1]:
        groups = ly.node.attr("groups", 1)
        ratios[ly.index] = _ratios(ly, groups == 1 or ly.depthwise)
    depths = sorted({d for d in BIAS_DEPTHS if d <= n} | {n, min(n, depth + 1)})
    return Space(n, tuple(depths), ratios)
