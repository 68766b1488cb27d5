"""Sigmoid; the backward reads the saved output y: dy * y * (1 - y)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class Sigmoid(Unary):
    name = "sigmoid"
    source_ops = ("Sigmoid", "LOGISTIC")
    saves = "y"

    def f(self, x, node):
        return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))

    def df(self, x, y, node):
        return y * (1.0 - y)


OPS = pair(Sigmoid())
