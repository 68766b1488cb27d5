"""LeakyRelu: y = x for x > 0, alpha*x otherwise."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class LeakyRelu(Unary):
    name = "leaky_relu"
    source_ops = ("LeakyRelu", "LEAKY_RELU")
    params = ("alpha",)

    def f(self, x, node):
        return np.where(x > 0, x, np.float32(node.attrs["alpha"]) * x)

    def df(self, x, y, node):
        return np.where(x > 0, 1.0, node.attrs["alpha"]).astype(np.float32)


OPS = pair(LeakyRelu())
