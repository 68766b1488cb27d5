"""Contribution analysis (TTE's, on the user's own data): what each part of a plan is worth.

From the pretrained model, short fine-tuning runs on part of the user's samples, each scored
on the rest (held out):
- the biases of the last k layers (k on the space's grid; k = 1 is the classifier alone);
- each searchable layer's weight at each channel ratio, on top of the biases of every
  searchable layer (the plans the weights would join).
A plan's predicted score is then the bias term plus the sum of its weights' gains (TTE's
additive model); the search maximises it and the best candidates are measured for real.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tinytrain.errors import DataError

from .engines import Engines, Measurement, Split
from .space import Scheme, Space

MIN_SAMPLES = 10  # below this a held-out split cannot tell plans apart


@dataclass(frozen=True)
class AnalysisConfig:
    depth: int = 8  # layers before the classifier whose weights are measured and searched
    epochs: int = 2  # fine-tuning passes over the training part per measurement
    holdout: float = 0.3  # fraction of the samples held out for scoring
    max_train: int = 500  # samples fine-tuned on, at most (bounds each run)
    max_eval: int = 300  # held-out samples, at most
    seed: int = 0  # the split and the sample order
    engine: str = "auto"  # "auto", "sim" (numpy simulation) or "host" (compiled C)
    validate: int = 4  # best searched plans fine-tuned for real before choosing
    orders: int = 3  # sample orders each validated candidate is fine-tuned with (mean decides)


def split_data(x: np.ndarray, y: np.ndarray, cfg: AnalysisConfig) -> Split:
    if len(x) < MIN_SAMPLES:
        raise DataError(f"--update auto needs at least {MIN_SAMPLES} labelled samples in --data "
                        f"to compare plans on held-out samples, got {len(x)}")
    order = np.random.default_rng(cfg.seed).permutation(len(x))
    n_eval = min(cfg.max_eval, max(1, round(cfg.holdout * len(x))))
    ev, tr = order[:n_eval], order[n_eval:][:cfg.max_train]
    return Split(x[tr], y[tr], x[ev], y[ev], cfg.epochs, cfg.seed)


def data_hash(x: np.ndarray, y: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (x, y):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclass
class Contributions:
    before: float  # held-out score of the pretrained model, untrained
    bias: dict[int, float]  # n_bias -> score
    weight: dict[tuple[int, float], float]  # (layer, ratio) -> score with bias[weight_base]
    weight_base: int
    runs: dict[str, Measurement]  # spec -> measurement

    def gain(self, layer: int, ratio: float) -> float:
        """A weight's measured gain; 0 for one the analysis did not measure."""
        score = self.weight.get((layer, ratio))
        return 0.0 if score is None else score - self.bias[self.weight_base]

    def predict(self, s: Scheme) -> float:
        """The additive prediction (for a bias depth off the grid: the grid's next lower)."""
        k = max((d for d in self.bias if d <= s.n_bias), default=min(self.bias))
        return self.bias[k] + sum(self.gain(i, r) for i, r in s.weights)

    def to_json(self) -> dict[str, Any]:
        return {"runs": {k: asdict(v) for k, v in self.runs.items()}}


def analysis_plans(space: Space) -> list[Scheme]:
    """Every plan the analysis fine-tunes, cheapest first."""
    plans = [Scheme(k) for k in space.bias_depths]
    for i in sorted(space.ratios, reverse=True):  # nearest the classifier first
        plans += [Scheme(space.weight_base, ((i, r),)) for r in space.ratios[i]]
    return plans


def analyse(space: Space, engines: Engines, known: dict[str, Measurement],
            log: Callable[[str], None] = lambda s: None) -> Contributions:
    """Measure every analysis plan (those in `known` are not run again)."""
    runs = dict(known)
    plans = [Scheme(0)] + analysis_plans(space)  # Scheme(0): "none", the untrained model
    specs = ["none" if s.n_bias == 0 else s.spec for s in plans]
    todo = [(spec, s) for spec, s in zip(specs, plans) if spec not in runs]
    # the weight plans all start training at the same layer: they share one frozen prefix
    jobs = [(spec, s.n_bias > 0, sum(1 for _, o in todo[k:] if o.n_bias == s.n_bias), ())
            for k, (spec, s) in enumerate(todo)]
    count = [sum(spec in runs for spec in specs)]

    def done(spec: str, m: Measurement) -> None:
        count[0] += 1
        log(f"  [{count[0]}/{len(plans)}] {spec}: held-out {m.score:.4f} "
            f"({m.engine}, {m.seconds:.1f} s)")

    runs.update(engines.measure_all(jobs, done))
    bias = {k: runs[Scheme(k).spec].score for k in space.bias_depths}
    weight = {(i, r): runs[Scheme(space.weight_base, ((i, r),)).spec].score
              for i, rs in space.ratios.items() for r in rs}
    return Contributions(runs["none"].score, bias, weight, space.weight_base, runs)
