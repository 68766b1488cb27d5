"""The server's step on a round's average change: FedAvgM or FedAdam (Reddi et al., 2021,
"Adaptive Federated Optimization").

A round's average change d of each element (aggregate.Master) is a pseudo-gradient with its
sign turned: the direction the devices moved. FedAvgM keeps a velocity v = momentum * v + d
and moves by lr * v (lr 1, momentum 0: plain FedAvg). FedAdam keeps Adam's moments of d and
moves each element by lr * m_hat / (sqrt(v_hat) + tau): every element at about the same
pace, whatever the scale of its gradient. That is what SGD devices cannot afford to do
themselves (Adam's moments are two more floats per trained element on the device), and the
digits fleet needs it: a conv bias whose gradient is 0.09 RMS must move about 3 while the
classifier moves by hundredths.

Moments and the bias correction's count are per element, and only elements some device
trained in the round step: an element nobody trained (its devices sat the round out) keeps
its value and its moments, as if the round had not happened for it. The moments and the step
are in real values (an int tensor's codes times its scale), so one lr and tau serve int8
weights, int32 biases and floats alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import DataError

OPTIMIZERS = ("avgm", "adam")


@dataclass(frozen=True)
class ServerStep:
    """How the server moves the fleet's tensors by a round's average change."""

    optimizer: str = "avgm"  # avgm (FedAvgM, FedAvg at lr 1 and momentum 0) or adam (FedAdam)
    lr: float = 1.0
    momentum: float = 0.0  # avgm
    beta1: float = 0.9  # adam
    beta2: float = 0.99  # adam: FedAdam's default, a shorter memory than Adam's 0.999
    tau: float = 1e-3  # adam: FedAdam's epsilon, in real values
    lr_decay: float = 1.0  # round r steps at lr * lr_decay^(r-1): FedAdam's steps do not
    # shrink with the devices' changes (it divides them out), so settling needs its own decay

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise DataError(f"server-optimizer must be one of {', '.join(OPTIMIZERS)}, not "
                            f"'{self.optimizer}'")
        if not (self.lr > 0 and 0 <= self.momentum < 1):
            raise DataError(f"server-lr must be > 0 and server-momentum in [0, 1), not "
                            f"{self.lr} and {self.momentum}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.tau > 0):
            raise DataError(f"server-beta1 and server-beta2 must be in [0, 1) and server-tau "
                            f"> 0, not {self.beta1}, {self.beta2} and {self.tau}")
        if not 0 < self.lr_decay <= 1:
            raise DataError(f"server-lr-decay must be in (0, 1], not {self.lr_decay}")
        if self.optimizer == "adam" and self.momentum:
            raise DataError("server-momentum is FedAvgM's (server-optimizer avgm); FedAdam's "
                            "momentum is server-beta1")


class ServerState:
    """One tensor's server optimizer state (velocity, or Adam's moments and counts)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.m = np.zeros(shape)  # avgm: the velocity
        self.v = np.zeros(shape)
        self.t = np.zeros(shape)

    def step(self, s: ServerStep, value: np.ndarray, d: np.ndarray, hit: np.ndarray,
             server_round: int, unit: np.ndarray | float = 1.0) -> None:
        """Move `value` (in place) by the average change `d` of the elements in `hit`, in
        the fleet's round `server_round` (1-based). `unit` is what one unit of `value` is
        worth (an int tensor's scale): FedAdam steps in real values, so its lr and tau mean
        the same for an int8 weight, an int32 bias and a float."""
        lr = s.lr * s.lr_decay ** (server_round - 1)
        if s.optimizer == "avgm":
            self.m = s.momentum * self.m + d
            value += lr * self.m
            return
        d = d * unit
        step = np.zeros_like(value)
        self.t[hit] += 1
        self.m[hit] = s.beta1 * self.m[hit] + (1 - s.beta1) * d[hit]
        self.v[hit] = s.beta2 * self.v[hit] + (1 - s.beta2) * d[hit] ** 2
        m_hat = self.m[hit] / (1 - s.beta1 ** self.t[hit])
        v_hat = self.v[hit] / (1 - s.beta2 ** self.t[hit])
        step[hit] = lr * m_hat / (np.sqrt(v_hat) + s.tau)
        value += step / unit
