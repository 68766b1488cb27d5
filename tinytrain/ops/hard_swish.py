"""HardSwish: y = x * relu6(x + 3) / 6."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class HardSwish(Unary):
    name = "hard_swish"
    source_ops = ("HardSwish", "HARD_SWISH")

    def f(self, x, node):
        return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)

    def df(self, x, y, node):
        # PyTorch: 0 for x <= -3, 1 for x >= 3, x/3 + 1/2 strictly between.
        return np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, x / 3.0 + 0.5)).astype(np.float32)


OPS = pair(HardSwish())
