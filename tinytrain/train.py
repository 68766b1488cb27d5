"""`tinytrain run` and `tinytrain infer` on top of a running program."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from tinytrain.data import load_npz, to_logical
from tinytrain.runner import HostProgram

Progress = Callable[[int], None]


@dataclass
class EpochStats:
    epoch: int
    mean_loss: float
    accuracy: float | None
    steps: int


def sample_order(n: int, epoch: int, shuffle: bool, seed: int) -> np.ndarray:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def train(prog: HostProgram, x: np.ndarray, y: np.ndarray, epochs: int = 1, shuffle: bool = False,
          seed: int = 0, metrics: TextIO | None = None,
          progress: Progress | None = None) -> list[EpochStats]:
    ce = prog.info["loss"] == "ce"
    stats, step = [], 0
    for epoch in range(epochs):
        losses, correct = [], 0
        for i in sample_order(len(x), epoch, shuffle, seed):
            loss, pred, _ = prog.train(x[i], y[i])
            losses.append(loss)
            label = int(y[i]) if ce else None
            correct += int(ce and pred == label)
            if metrics:
                rec = {"step": step, "epoch": epoch, "sample": int(i), "loss": float(loss),
                       "label": label, "pred": int(pred) if ce else None}
                metrics.write(json.dumps(rec) + "\n")
            step += 1
            if progress:
                progress(1)
        prog.apply_update()  # a partial last batch is applied, as PyTorch's DataLoader does
        stats.append(EpochStats(epoch, float(np.mean(losses)),
                                correct / len(x) if ce else None, len(x)))
    return stats


def infer_all(prog: HostProgram, x: np.ndarray, progress: Progress | None = None) -> np.ndarray:
    outs = []
    for s in x:
        outs.append(prog.infer(s))
        if progress:
            progress(1)
    return to_logical(np.stack(outs), prog.info)


def accuracy(prog: HostProgram, path: Path, progress: Progress | None = None) -> float:
    x, y = load_npz(path, prog.info)
    out = infer_all(prog, x, progress)
    return float(np.mean(out.reshape(len(out), -1).argmax(axis=1) == y))
