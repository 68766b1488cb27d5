"""The local work of each round of a fleet, decided by the server and sent in every train
message's config: the devices' learning rate (set over the link before they train) and their
local epochs. A decaying rate lets a fleet take large steps while its devices' data pull the
model apart the most, and small ones as it settles.

The rate is either the fleet's (`lr`: every device at lr x decay^(round - 1)) or, with a decay
alone, each device's own build lr times decay^(round - 1) (`lr-scale`): a mixed fleet whose
classes train with different optimizers (SGD at 0.2, Adam at 0.06) needs rates of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytrain.errors import OptionError


@dataclass(frozen=True)
class Schedule:
    """Each round's local work, sent in its train messages: the devices' learning rate (lr
    times lr_decay per round since the first; None: each device's build lr, times lr_decay
    per round as `lr-scale`) and local epochs (None: each node's own, the run config's
    `local-epochs`)."""

    lr: float | None = None
    lr_decay: float = 1.0
    epochs: int | None = None

    def __post_init__(self) -> None:
        if self.lr is not None and not (np.isfinite(self.lr) and self.lr > 0):
            raise OptionError(f"the fleet's lr must be > 0, not {self.lr}")
        if not (np.isfinite(self.lr_decay) and 0 < self.lr_decay <= 1):
            raise OptionError(f"lr-decay must be in (0, 1], not {self.lr_decay}")
        if self.epochs is not None and self.epochs < 1:
            raise OptionError(f"local epochs must be >= 1, not {self.epochs}")

    def at(self, server_round: int) -> dict[str, float | int]:
        """The config entries of a round's train messages."""
        out: dict[str, float | int] = {}
        if self.lr is not None:
            out["lr"] = float(self.lr * self.lr_decay ** (server_round - 1))
        elif self.lr_decay != 1.0:
            out["lr-scale"] = float(self.lr_decay ** (server_round - 1))
        if self.epochs is not None:
            out["local-epochs"] = int(self.epochs)
        return out


def device_lr(config: Mapping[str, Any], info: Mapping[str, Any]) -> float | None:
    """The learning rate a device sets for its round, from the round's config (Schedule.at):
    the fleet's `lr`, or `lr-scale` times the build's own lr (`info`: its program.json);
    None leaves the device's rate as it is."""
    if "lr" in config:
        return float(config["lr"])
    if "lr-scale" in config:
        return float(config["lr-scale"]) * float((info.get("sgd") or {}).get("lr", 0.0))
    return None
