"""`tinytrain run` and `tinytrain infer` on top of a running program."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tinytrain.device.data import load_npz, to_logical
from tinytrain.device.runner import HostProgram

# progress(n, **live): n more samples done; training passes its running figures as `live`
# (epoch, from 0; loss: the epoch's mean loss so far; accuracy: its running accuracy, None
# for mse).
Progress = Callable[..., None]
Stop = Callable[[], bool]  # True: stop after the current sample


@dataclass
class EpochStats:
    epoch: int
    mean_loss: float
    accuracy: float | None
    steps: int  # samples trained in this epoch (by this run)
    interrupted: bool = False  # stopped before the end of the epoch
    start: int = 0  # where in the epoch's sample order this run began (a resumed run)


class StopRequest:
    """Ctrl-C (SIGINT) as a request: the first one only sets a flag, which the loops below check
    between samples, so a frame on the link is never torn and the caller can still save; a
    second one raises KeyboardInterrupt at once. Installed only in the main thread (the only
    one Python delivers signals to)."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __call__(self) -> bool:
        return self.requested


def sample_order(n: int, epoch: int, shuffle: bool, seed: int) -> np.ndarray:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def train(prog: HostProgram, x: np.ndarray, y: np.ndarray, epochs: int = 1, shuffle: bool = False,
          seed: int = 0, metrics: TextIO | None = None, progress: Progress | None = None,
          on_epoch: Callable[[EpochStats], None] | None = None,
          stop: Stop | None = None, start: tuple[int, int] = (0, 0),
          keep_pending: bool = False) -> list[EpochStats]:
    """Train sample by sample. `on_epoch` is called as each epoch ends (after its partial
    batch is applied); when `stop()` turns true the current sample is finished, the pending
    partial batch applied (kept in the device's accumulators with `keep_pending`, for a
    caller that saves the training state: a resumed run then completes that batch as an
    uninterrupted one would), and the last (interrupted) epoch reported. `start` (epoch,
    sample): where a resumed run goes on, in the same sample orders."""
    ce = prog.info["loss"] == "ce"
    stats, step = [], start[0] * len(x) + start[1]
    for epoch in range(start[0], epochs):
        losses, correct, interrupted, loss_sum = [], 0, False, 0.0
        order = sample_order(len(x), epoch, shuffle, seed)
        first = start[1] if epoch == start[0] else 0
        for k in range(first, len(order)):
            i = order[k]
            loss, pred, _ = prog.train(x[i], y[i])
            losses.append(loss)
            label = int(y[i]) if ce else None
            correct += int(ce and pred == label)
            if metrics:
                rec = {"step": step, "epoch": epoch, "sample": int(i), "loss": float(loss),
                       "label": label, "pred": int(pred) if ce else None}
                metrics.write(json.dumps(rec) + "\n")
            step += 1
            if progress:  # a running sum: the bar costs O(1) a step
                loss_sum += float(loss)
                n = len(losses)
                progress(1, epoch=epoch, loss=loss_sum / n, accuracy=correct / n if ce else None)
            if stop and stop() and k + 1 < len(order):
                interrupted = True
                break
        if not (interrupted and keep_pending):
            prog.apply_update()  # a partial last batch is applied, as PyTorch's DataLoader does
        if not losses:  # resumed at the very end of an epoch
            continue
        s = EpochStats(epoch, float(np.mean(losses)), correct / len(losses) if ce else None,
                       len(losses), interrupted, first)
        stats.append(s)
        if on_epoch:
            on_epoch(s)
        if interrupted or (stop and stop()):
            break
    return stats


def infer_all(prog: HostProgram, x: np.ndarray, progress: Progress | None = None,
              stop: Stop | None = None) -> np.ndarray:
    """Outputs for the samples of x, in order; fewer if `stop()` turned true."""
    outs = []
    for s in x:
        outs.append(prog.infer(s))
        if progress:
            progress(1)
        if stop and stop():
            break
    return to_logical(np.stack(outs), prog.info)


def evaluate(prog: HostProgram, x: np.ndarray, y: np.ndarray, progress: Progress | None = None,
             stop: Stop | None = None) -> float | None:
    """Accuracy (argmax of the outputs against the labels); None if stopped before the end."""
    out = infer_all(prog, x, progress, stop)
    if len(out) < len(x):
        return None
    return float(np.mean(out.reshape(len(out), -1).argmax(axis=1) == y))


def accuracy(prog: HostProgram, path: Path, progress: Progress | None = None) -> float:
    x, y = load_npz(path, prog.info)
    acc = evaluate(prog, x, y, progress)
    assert acc is not None
    return acc
