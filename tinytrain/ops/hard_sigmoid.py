"""HardSigmoid: y = max(0, min(1, alpha*x + beta)) (ONNX defaults alpha=0.2, beta=0.5)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class HardSigmoid(Unary):
    name = "hard_sigmoid"
    source_ops = ("HardSigmoid",)
    params = ("alpha", "beta")

    def f(self, x, node):
        a, b = np.float32(node.attrs["alpha"]), np.float32(node.attrs["beta"])
        return np.clip(a * x + b, 0.0, 1.0)

    def df(self, x, y, node):
        a, b = np.float32(node.attrs["alpha"]), np.float32(node.attrs["beta"])
        t = a * x + b
        return np.where((t > 0) & (t < 1), a, 0.0).astype(np.float32)


OPS = pair(HardSigmoid())
