"""Clip to [lo, hi]: Relu (lo=0, hi=inf), ReLU6 (0, 6) and ONNX Clip."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.unary import Unary, pair


class Clip(Unary):
    name = "clip"
    source_ops = ("Relu", "Clip", "RELU", "RELU6", "RELU_N1_TO_1")
    params = ("lo", "hi")

    def f(self, x, node):
        return np.clip(x, node.attrs["lo"], node.attrs["hi"])

    def df(self, x, y, node):
        # PyTorch convention: no gradient at the clip points themselves.
        return ((x > node.attrs["lo"]) & (x < node.attrs["hi"])).astype(np.float32)


OPS = pair(Clip())
