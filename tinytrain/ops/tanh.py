"""Tanh; the backward reads the saved output y: dy * (1 - y^2)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class Tanh(Unary):
    name = "tanh"
    source_ops = ("Tanh", "TANH")
    saves = "y"

    def f(self, x, node):
        return np.tanh(x.astype(np.float64))

    def df(self, x, y, node):
        return 1.0 - y * y


OPS = pair(Tanh())
