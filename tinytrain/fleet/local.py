"""One device's part of a federated round, without Flower: open the device, resume its
training state, load the fleet's tensors, train on its own samples over the link, read back
what it trained. The Flower ClientApp (client_app.py) is a thin adapter around this, and the
tests drive it directly too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.device.data import load_npz
from tinytrain.device.link.device import Device, state_mismatch
from tinytrain.device.online import check_state
from tinytrain.device.runner import load_program_info, open_program
from tinytrain.device.train import evaluate, train
from tinytrain.errors import DataError
from tinytrain.fleet.correction import (
    Correction,
    control_update,
    control_update_adam,
    corrects,
    device_terms,
    effective_lr,
    round_start,
    steps,
    uses_adam,
)
from tinytrain.fleet.partition import split
from tinytrain.fleet.tensors import NP_DTYPES, Trained, received_tensors, trained_tensors


@dataclass(frozen=True)
class Node:
    """A device of the fleet: its build, its samples and how to reach it.

    data: an .npz with x and y (`tinytrain run`'s format); in a simulation every node names
    the same pooled file and `part`/`parts`/`partition` say which share of it is this node's.
    qemu / port: the firmware build's twin or the board (neither: the host build)."""

    build: Path
    data: Path
    part: int = 0
    parts: int = 1
    partition: str = "iid"
    seed: int = 0
    epochs: int = 1
    qemu: bool = False
    port: str | None = None
    timeout: float | None = None

    def info(self) -> dict:
        return load_program_info(self.build)

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        x, y = load_npz(self.data, self.info())
        if self.parts > 1:
            idx = split(y, self.parts, self.partition, self.seed)[self.part]
            x, y = x[idx], y[idx]
        return x, y

    def open(self):
        return open_program(self.build, port=self.port, qemu=self.qemu, timeout=self.timeout)

    def round_seed(self, server_round: int) -> int:
        """The seed of this node's sample order in `server_round` (distinct per node and
        round, the same on every rerun)."""
        return self.seed * 1_000_003 + self.part * 1009 + server_round


@dataclass
class RoundResult:
    """What a device did in one round: the trained elements of each tensor it trains, its
    plan, the samples it learned from, their mean loss and its training state afterwards;
    with SCAFFOLD its new control variate and the change the server adds up (trained parts)."""

    parts: dict[str, np.ndarray]
    plan: list[Trained]
    samples: int
    loss: float
    state: dict[str, np.ndarray] | None = field(default=None, repr=False)
    control: dict[str, np.ndarray] | None = field(default=None, repr=False)
    control_delta: dict[str, np.ndarray] | None = field(default=None, repr=False)


def describe(node: Node) -> tuple[list[Trained], dict[str, np.ndarray]]:
    """The node's plan and its starting tensors (whole), read from the device itself."""
    with node.open() as dev:
        return trained_tensors(dev.info), dev.get_params()


def train_round(node: Node, tensors: Mapping[str, np.ndarray],
                state: Mapping[str, np.ndarray] | None, server_round: int,
                correction: Correction | None = None,
                control: Mapping[str, np.ndarray] | None = None,
                own_control: Mapping[str, np.ndarray] | None = None,
                lr: float | None = None, epochs: int | None = None) -> RoundResult:
    """Load `tensors` (the fleet's, whole: those this build trains, and those it receives,
    built with --receive; others are ignored) and `state` (this device's training state from
    its last round), train `node.epochs`
    epochs on the node's samples, and return what changed. `correction`: the run's drift
    correction, with SCAFFOLD's server variate `control` (whole tensors) and this device's
    `own_control` from its last round (trained parts; None before its first). `lr` and
    `epochs`: this round's learning rate (set on the device over the link; None: as it is)
    and local epochs (None: node.epochs), from the server's schedule."""
    corr = correction or Correction()
    epochs = node.epochs if epochs is None else epochs
    if epochs < 1 or (lr is not None and not (np.isfinite(lr) and lr > 0)):
        raise DataError(f"a round needs local epochs >= 1 and a learning rate > 0, not "
                        f"{epochs} and {lr}")
    x, y = node.samples()
    with node.open() as dev:
        if lr is not None:
            dev.sgd(lr=lr)
        plan = trained_tensors(dev.info)
        kept = dict(state) if state is not None and \
            state_mismatch(dev.info, dict(state)) is None else None
        if not any(t.name in tensors for t in plan):
            raise DataError(f"the fleet's model holds none of the tensors {node.build} "
                            "trains: is every device a build of the same model?")
        before = load_tensors(dev, plan, tensors)
        receive_tensors(dev, tensors)
        terms = round_start(dev.info)  # each round's local Adam starts afresh (SGD: nothing)
        if corr.on or corrects(dev.info):  # a build's b from an earlier run must not linger
            terms |= device_terms(dev.info, plan, corr, before, control, own_control, y)
        if terms:
            kept = kept if kept is not None else dev.get_state() or {}
            kept.update(terms)
        if kept is not None:  # one write: the kept state with this round's terms
            dev.set_state(kept)
        stats = train(dev, x, y, epochs=epochs, shuffle=True,
                      seed=node.round_seed(server_round))
        after = dev.get_params()
        parts = {t.name: t.take(after[t.name]) for t in plan}
        new = delta = None
        state = dev.get_state()
        k = steps(dev.info, len(y), epochs)
        if corr.scaffold and uses_adam(dev.info):
            new, delta = control_update_adam(plan, state or {}, own_control, k)
        elif corr.scaffold:
            start = {t.name: t.take(before[t.name]) for t in plan}
            new, delta = control_update(plan, start, parts, control, own_control, k,
                                        effective_lr(dev.sgd()))
        return RoundResult(parts, plan, int(len(y)) * epochs,
                           float(np.mean([s.mean_loss for s in stats])) if stats else float("nan"),
                           state, new, delta)


def load_tensors(dev: Device, plan: list[Trained], tensors: Mapping[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """Write the fleet's `tensors` that the device trains into it, whole or their trained
    elements (a trained tensor the fleet does not hold keeps the device's value); returns
    what was written, whole tensors."""
    current = dev.get_params()
    written = check_state({t.name: t.widen(tensors[t.name], current[t.name])
                           if t.name in tensors else current[t.name] for t in plan}, dev.info)
    dev.set_params(written)
    return written


def receive_tensors(dev: Device, tensors: Mapping[str, np.ndarray]) -> bool:
    """Send the device the fleet's values of the tensors it receives (a build with
    --receive), when they differ from what it runs: the others are its own. Whether it did
    (a receive writes a flash slot, so unchanged values are not sent again)."""
    entries = received_tensors(dev.info)
    if not any(t.name in tensors for t in entries):
        return False
    current = dev.get_received()
    new = {t.name: np.asarray(tensors[t.name], NP_DTYPES[t.dtype]).reshape(t.shape)
           if t.name in tensors else current[t.name] for t in entries}
    if all(np.array_equal(new[n], current[n]) for n in new):
        return False
    dev.receive(new)
    return True


def accuracy(build: Path, tensors: Mapping[str, np.ndarray], data: Path) -> float:
    """Held-out accuracy of the host build `build` with the fleet's `tensors` loaded (those
    it trains or receives; the rest of it is as built)."""
    with open_program(Path(build)) as dev:
        x, y = load_npz(Path(data), dev.info)
        load_tensors(dev, trained_tensors(dev.info), tensors)
        receive_tensors(dev, tensors)
        acc = evaluate(dev, x, y)
    assert acc is not None
    return acc
