"""The local work of each round of a fleet, decided by the server and sent in every train
message's config: the devices' learning rate (set over the link before they train) and their
local epochs. A decaying rate lets a fleet take large steps while its devices' data pull the
model apart the most, and small ones as it settles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import OptionError


@dataclass(frozen=True)
class Schedule:
    """Each round's local work, sent in its train messages: the devices' learning rate (lr
    times lr_decay per round since the first; None leaves each device's as built) and local
    epochs (None: each node's own, the run config's `local-epochs`)."""

    lr: float | None = None
    lr_decay: float = 1.0
    epochs: int | None = None

    def __post_init__(self) -> None:
        if self.lr is not None and not (np.isfinite(self.lr) and self.lr > 0):
            raise OptionError(f"the fleet's lr must be > 0, not {self.lr}")
        if not (np.isfinite(self.lr_decay) and 0 < self.lr_decay <= 1):
            raise OptionError(f"lr-decay must be in (0, 1], not {self.lr_decay}")
        if self.lr_decay != 1.0 and self.lr is None:  # nothing to decay: say so, not ignore it
            raise OptionError("lr-decay decays the fleet's lr: give the first round's lr too")
        if self.epochs is not None and self.epochs < 1:
            raise OptionError(f"local epochs must be >= 1, not {self.epochs}")

    def at(self, server_round: int) -> dict[str, float | int]:
        """The config entries of a round's train messages."""
        out: dict[str, float | int] = {}
        if self.lr is not None:
            out["lr"] = float(self.lr * self.lr_decay ** (server_round - 1))
        if self.epochs is not None:
            out["local-epochs"] = int(self.epochs)
        return out
