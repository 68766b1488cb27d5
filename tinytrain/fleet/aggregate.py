"""Averaging sparse updates over a fleet: each element over the devices that trained it.

Devices of one fleet may train different parts of the model (bias-only on the smallest,
last layers on larger ones, some channels of a weight): a reply speaks only for the elements
its plan trains. The server keeps a float master copy of every tensor the fleet trains, in
the tensor's own units (int8 / int32 codes for an int8 model, values for fp32). A round moves
each element by the sample-weighted average of the changes of the devices that trained it,

    master[e] += sum_i n_i * (reply_i[e] - sent[e]) / sum_i n_i        (i trains e)

so an average finer than one code (three devices moving a weight by 0, 0 and +1) is kept in
the master and reaches the devices once it adds up to a code, instead of being rounded away
every round. What the devices receive is the master requantised to each tensor's own scale
and range (round half to even, as numpy's rint). An element no device trains never moves:
it goes out exactly as it came in.

Optionally the server steps like FedAvgM (Hsu et al., 2019): the round's average change d
feeds a server velocity v = momentum * v + d and the master moves by lr * v (lr 1 and
momentum 0, the default, is plain FedAvg). Elements no device ever trained keep v = 0. Or
like FedAdam, each element at Adam's pace (fleet/server_step.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import DataError
from tinytrain.fleet.server_step import ServerState, ServerStep
from tinytrain.fleet.tensors import INT_RANGES, NP_DTYPES, Trained


@dataclass(frozen=True)
class Reply:
    """One device's round: the trained elements of each tensor it trains (`Trained.take`
    of its parameters), what it trains, and how many samples it learned from; with SCAFFOLD
    the change of its control variate (trained parts, fleet/correction.py)."""

    parts: Mapping[str, np.ndarray]
    plan: list[Trained]
    samples: int
    control: Mapping[str, np.ndarray] | None = None


class Master:
    """The server's float copy of the fleet's tensors (see the module docstring)."""

    def __init__(self, start: Mapping[str, np.ndarray], kinds: Mapping[str, Trained],
                 step: ServerStep | None = None) -> None:
        self.kinds, self.step = dict(kinds), step or ServerStep()
        self.values = {n: np.asarray(a).astype(np.float64) for n, a in start.items()}
        self.state = {n: ServerState(v.shape) for n, v in self.values.items()}
        self.rounds = 0  # updates applied
        for n, a in self.values.items():
            if n not in self.kinds or a.shape != self.kinds[n].shape:
                raise DataError(f"tensor '{n}': no description or a shape other than "
                                f"{a.shape}")

    def sent(self) -> dict[str, np.ndarray]:
        """The master requantised: what the devices receive (and train from)."""
        return {n: quantise(v, self.kinds[n].dtype) for n, v in self.values.items()}

    def update(self, replies: Iterable[Reply]) -> dict[str, np.ndarray]:
        """Apply one round's replies; returns the new `sent()`."""
        sent = self.sent()
        num = {n: np.zeros_like(v) for n, v in self.values.items()}
        den = {n: np.zeros_like(v) for n, v in self.values.items()}
        for r in replies:
            if r.samples <= 0:
                continue
            for t in r.plan:
                if t.name not in self.values:
                    raise DataError(f"a device trains '{t.name}', which the fleet's model "
                                    "does not hold")
                mine = self.kinds[t.name]
                part = np.asarray(r.parts[t.name], np.float64).reshape(t.part_shape())
                part = rescale(part, t, mine)
                full = t.put(sent[t.name], part)
                m = t.mask()
                num[t.name][m] += r.samples * (full[m] - sent[t.name][m])
                den[t.name][m] += r.samples
        self.rounds += 1
        for n, v in self.values.items():
            hit = den[n] > 0
            d = np.zeros_like(v)
            d[hit] = num[n][hit] / den[n][hit]
            self.state[n].step(self.step, v, d, hit, self.rounds, code_value(self.kinds[n]))
        return self.sent()


class Controls:
    """SCAFFOLD's server control variate c (fleet/correction.py), per element the mean of
    the devices' own c_i over every device that trains it: each reply's change is added
    divided by that count, so a device that misses a round keeps its share and c stays the
    mean. In the units of the server's tensors (a device's are rescaled, as its tensors)."""

    def __init__(self, kinds: Mapping[str, Trained], plans: Mapping[int, list[Trained]]) -> None:
        self.kinds = dict(kinds)
        self.values = {n: np.zeros(k.shape) for n, k in self.kinds.items()}
        self.count = {n: np.zeros(k.shape) for n, k in self.kinds.items()}
        for plan in plans.values():
            for t in plan:
                if t.name in self.count:
                    self.count[t.name][t.mask()] += 1

    def sent(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """c of the named tensors, as float32 (what a train message carries)."""
        return {n: self.values[n].astype(np.float32) for n in names if n in self.values}

    def update(self, replies: Iterable[Reply]) -> None:
        for r in replies:
            if r.control is None:
                continue
            for t in r.plan:
                if t.name not in self.values or t.name not in r.control:
                    continue
                part = np.asarray(r.control[t.name], np.float64).reshape(t.part_shape())
                m = t.mask()
                full = t.put(np.zeros(t.shape), rescale(part, t, self.kinds[t.name]))
                n = np.maximum(self.count[t.name], 1)
                self.values[t.name][m] += full[m] / n[m]


def code_value(t: Trained) -> np.ndarray | float:
    """What one unit of the server's copy of `t` is worth: its scale (per output channel,
    broadcast along axis 0) for int codes, 1 for float values."""
    if t.scale is None:
        return 1.0
    s = np.asarray(t.scale, np.float64)
    return s.reshape([-1] + [1] * (len(t.shape) - 1)) if s.size > 1 else float(s[0])


def quantise(v: np.ndarray, dtype: str) -> np.ndarray:
    """Float master values to the tensor's dtype: int codes rounded and clamped to range."""
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return np.clip(np.rint(v), lo, hi).astype(NP_DTYPES[dtype])
    return v.astype(NP_DTYPES[dtype])


def rescale(part: np.ndarray, src: Trained, dst: Trained) -> np.ndarray:
    """A device's codes in the server's scale for that tensor: the same real values (two
    builds of one model may have quantised it with different scales)."""
    if src.dtype != dst.dtype:
        raise DataError(f"tensor '{src.name}' is {src.dtype} on a device and {dst.dtype} in "
                        "the fleet's model; federate builds of one model with one --quantize")
    if src.scale is None or dst.scale is None or src.scale == dst.scale:
        return part
    s_src, s_dst = np.asarray(src.scale), np.asarray(dst.scale)
    if src.channels is not None and src.axis in (0, -len(src.shape)) and s_src.size > 1:
        s_src, s_dst = s_src[list(src.channels)], s_dst[list(src.channels)]
    shape = [1] * part.ndim
    if s_src.size > 1:  # per output channel: axis 0 of weights, the only axis of biases
        shape[0] = -1
    return part * (s_src / s_dst).reshape(shape)
