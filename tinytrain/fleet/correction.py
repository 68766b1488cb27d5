"""Drift correction for a fleet whose devices each see a few classes: SCAFFOLD, FedProx and
FedRS's restricted softmax.

A device built with `--fleet-correction` runs p -= lr * (mu * p + b) after each step's
updates (passes/fleet_correction.py). This module is the host side of one round: what b and
mu are for the method the fleet's run chose, and SCAFFOLD's control variates.

- prox (FedProx, Li et al. 2020): mu > 0 and b = -mu * w_global, so each step also pulls the
  weights toward the round's start by lr * mu * (p - w_global).
- scaffold (SCAFFOLD, Karimireddy et al. 2020): b = c - c_i, the server's control variate
  less the device's. After the round (option II of the paper),

      c_i+ = c_i - c + (w_global - w) / (K * lr)        K: the round's optimizer steps

  and the device replies with c_i+ - c_i. It keeps c_i between rounds (the ClientApp's
  context.state), so a device that misses a round keeps its variate and the server's
  c, updated from the replies it got (aggregate.Controls), stays the mean of all c_i.
- restricted (FedRS, Li & Zhan 2021): the loss is taken on logits scaled by alpha for the
  classes the device has no samples of this round, so its few classes stop pushing the
  others' logits down. Costs one float per class on the device.

Methods combine (correction=scaffold+restricted): their terms add.

An Adam build (--optimizer adam) takes b and mu into its gradient, ahead of the moments, and
its SCAFFOLD variate is the round's mean gradient, c_i+ = (sum of the K steps' gradients) / K,
which the device sums in `<p>_fleet_gsum` (option II's formula above assumes SGD's step). The
fleet starts each round of an Adam build with fresh moments (round_start): the local optimizer
of the round's start, as FedAvg with Adam clients has it.

Everything is in the parameter's own units, as the device stores them: values for fp32 and
codes for int8 weights and int32 biases. lr is the device's effective rate: the build's lr,
over (1 - momentum) for fp32 (the rate at which a term that is constant through a round moves
heavy-ball SGD, which is how the device applies b).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytrain.errors import DataError, OptionError
from tinytrain.fleet.tensors import Trained
from tinytrain.ops.adam import MOMENTS
from tinytrain.ops.adam import STEP as ADAM_STEP
from tinytrain.ops.fleet_correction import effective_lr as ops_effective_lr
from tinytrain.ops.interp import NP_TYPES
from tinytrain.passes.fleet_correction import (  # the build's state names
    B_SUFFIX,
    DAMP,
    GSUM_SUFFIX,
    MU,
)

ADAM_STATE = (*MOMENTS, GSUM_SUFFIX)  # per trained tensor, zeroed each round

METHODS = ("scaffold", "prox", "restricted")  # `correction`: one, several joined by '+', none


@dataclass(frozen=True)
class Correction:
    """The run's methods (`method`: none, or METHODS joined by '+'), FedProx's mu and the
    restricted softmax's alpha (the scale of the logits of classes a device lacks)."""

    method: str = "none"
    mu: float = 0.0
    alpha: float = 1.0

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        if bad or (self.method != "none" and not self.methods):
            raise OptionError(f"correction must be none or one or more of {', '.join(METHODS)} "
                              f"joined by '+' (scaffold+restricted), not '{self.method}'")
        if not (np.isfinite(self.mu) and self.mu >= 0):
            raise OptionError(f"mu must be a finite number >= 0, not {self.mu}")
        if ("prox" in self.methods) != (self.mu > 0):
            raise OptionError("correction=prox needs mu > 0 (FedProx's proximal weight)"
                              if self.mu == 0 else "mu is FedProx's: add prox to correction")
        if not (np.isfinite(self.alpha) and 0 <= self.alpha <= 1):
            raise OptionError(f"alpha must be in [0, 1], not {self.alpha}")
        if ("restricted" in self.methods) != (self.alpha < 1):
            raise OptionError("correction=restricted needs alpha < 1 (the scale of the "
                              "logits of classes a device lacks)" if self.alpha == 1 else
                              "alpha is the restricted softmax's: add restricted to "
                              "correction")

    @property
    def methods(self) -> frozenset[str]:
        return frozenset() if self.method == "none" else \
            frozenset(m.strip() for m in self.method.split("+"))

    @property
    def on(self) -> bool:
        return bool(self.methods)

    @property
    def scaffold(self) -> bool:
        return "scaffold" in self.methods


def corrects(info: Mapping[str, Any]) -> bool:
    """Whether the build has the correction term (built with --fleet-correction)."""
    return bool(info.get("fleet_correction"))


def effective_lr(sgd: Mapping[str, float]) -> float:
    """The rate b moves the device's weights at per step: lr, over 1 - momentum for fp32.
    `sgd`: the SGD scalars in force (the link's `Device.sgd()`, or a build's info["sgd"])."""
    return float(ops_effective_lr(sgd["lr"], sgd.get("momentum", 0.0)))


def uses_adam(info: Mapping[str, Any]) -> bool:
    """Whether the build's optimizer is Adam (built with --optimizer adam)."""
    return (info.get("sgd") or {}).get("optimizer") == "adam"


def round_start(info: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """An Adam build's state a round starts from: its moments, step counter and gradient sums
    zeroed (nothing for an SGD build, whose momentum carries over as before)."""
    if not uses_adam(info):
        return {}
    return {e["name"]: np.zeros(e["shape"], NP_TYPES[e["dtype"]]) for e in info.get("state", [])
            if e["name"] == ADAM_STEP or e["name"].endswith(ADAM_STATE)}


def steps(info: Mapping[str, Any], samples: int, epochs: int) -> int:
    """Optimizer steps in a round of `epochs` passes over `samples` (a partial last batch
    is a step of its own, as the device applies it)."""
    batch = int((info.get("sgd") or {}).get("batch", 1))
    return epochs * -(-samples // batch)


def device_terms(info: Mapping[str, Any], plan: list[Trained], corr: Correction,
                 w_global: Mapping[str, np.ndarray], c: Mapping[str, np.ndarray] | None,
                 c_i: Mapping[str, np.ndarray] | None,
                 labels: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The state entries to write before a round: mu, each trained tensor's b and the
    classes' damping (zero for a method that does not use them). w_global and c are whole
    tensors, c_i trained parts, labels the device's samples' (the classes it has)."""
    if not corrects(info):
        raise DataError("the fleet's run asks for a drift correction, but this device's build "
                        "has none: build it with --fleet-correction")
    out = {MU: np.array([corr.mu], np.float32)}
    damp = next((e for e in info.get("state", []) if e["name"] == DAMP), None)
    if damp is not None:
        d = np.zeros(int(np.prod(damp["shape"])), np.float32)
        if "restricted" in corr.methods:
            d[:] = 1.0 - corr.alpha
            have = np.unique(np.asarray(labels if labels is not None else [], np.int64))
            d[have[(have >= 0) & (have < d.size)]] = 0.0
        out[DAMP] = d
    elif "restricted" in corr.methods:
        raise DataError("correction=restricted damps a cross-entropy loss's logits; this "
                        "device's build has another loss (--loss mse)")
    for t in plan:
        b = np.zeros(t.part_shape(), np.float64)
        if corr.scaffold and c is not None and t.name in c:
            b += _part(t, np.asarray(c[t.name], np.float64)) - _own(t, c_i)
        if corr.mu and t.name in w_global:
            b -= corr.mu * t.take(w_global[t.name]).astype(np.float64)
        out[f"{t.name}{B_SUFFIX}"] = b.astype(np.float32)
    return out


def control_update(plan: list[Trained], start: Mapping[str, np.ndarray],
                   end: Mapping[str, np.ndarray], c: Mapping[str, np.ndarray] | None,
                   c_i: Mapping[str, np.ndarray] | None, k: int, lr: float
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """SCAFFOLD's c_i+ and the reply's c_i+ - c_i, per trained tensor (trained parts):
    `start` and `end` are the trained parts before and after the round's k steps."""
    new, delta = {}, {}
    for t in plan:
        shape = t.part_shape()
        old = _own(t, c_i)
        cc = np.zeros(shape) if c is None or t.name not in c else \
            _part(t, np.asarray(c[t.name], np.float64))
        moved = (np.asarray(start[t.name], np.float64) - np.asarray(end[t.name], np.float64))
        d = (-cc + moved.reshape(shape) / (max(k, 1) * lr)).astype(np.float32)  # the wire's
        new[t.name], delta[t.name] = old + d, d  # c_i moves by what the server adds up
    return new, delta


def control_update_adam(plan: list[Trained], gsum: Mapping[str, np.ndarray],
                        c_i: Mapping[str, np.ndarray] | None, k: int
                        ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """An Adam build's c_i+ = the round's mean gradient (its `<p>_fleet_gsum` state over the
    k steps) and the reply's c_i+ - c_i, per trained tensor (trained parts)."""
    new, delta = {}, {}
    for t in plan:
        old = _own(t, c_i)
        mean = np.asarray(gsum[f"{t.name}{GSUM_SUFFIX}"], np.float64).reshape(old.shape)
        d = (mean / max(k, 1) - old).astype(np.float32)  # the wire's
        new[t.name], delta[t.name] = old + d, d
    return new, delta


def _part(t: Trained, c: np.ndarray) -> np.ndarray:
    """The trained elements of the server's control variate for t, sent whole or as those
    elements (float64: Trained.take keeps the tensor's dtype, which would round it to int8
    codes)."""
    return t.part(t.widen(c, np.zeros(t.shape)))


def _own(t: Trained, c_i: Mapping[str, np.ndarray] | None) -> np.ndarray:
    """The device's c_i for t (trained part); zero before its first round, or when the
    device's plan for t has changed since (a rebuilt device starts its variate afresh)."""
    shape = t.part_shape()
    a = None if c_i is None else c_i.get(t.name)
    if a is None or np.asarray(a).size != int(np.prod(shape)):
        return np.zeros(shape)
    return np.asarray(a, np.float64).reshape(shape)

