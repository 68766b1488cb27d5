"""Shared shape of elementwise activations: same-shape output, backward from x or y."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef, c_float, size


class Unary(OpDef):
    """y = f(x). `saves` says whether the backward reads the input x or the output y."""

    public = True
    saves = "x"
    params: Sequence[str] = ()  # attribute names passed to the kernel after n

    def f(self, x: np.ndarray, node) -> np.ndarray:
        raise NotImplementedError

    def df(self, x: np.ndarray, y: np.ndarray, node) -> np.ndarray:
        """Derivative dy/dx evaluated from x or y (numpy reference of the backward kernel)."""
        raise NotImplementedError

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        return [self.f(xs[0].astype(np.float32), node).astype(np.float32)]

    def gradient(self, node, gb):
        dy = gb.grad(node.outputs[0])
        x = node.inputs[0]
        if dy is None or not gb.needs_grad(x):
            return
        saved = x if self.saves == "x" else node.outputs[0]
        gb.contribute(x, gb.emit(self.name + "_backward", [dy, saved], dict(node.attrs),
                                 out_shape=gb.shape(x)))

    def _args(self, node) -> str:
        return "".join(f", {c_float(node.attrs[p])}" for p in self.params)

    def c_call(self, node, cg):
        n = size(cg.shape(node.outputs[0]))
        return (f"tt_{self.name}_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{n}{self._args(node)});")


class UnaryBackward(OpDef):
    def __init__(self, fwd: Unary) -> None:
        self.fwd = fwd
        self.name = fwd.name + "_backward"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        dy, saved = xs
        if self.fwd.saves == "x":
            d = self.fwd.df(saved, self.fwd.f(saved, node), node)
        else:
            d = self.fwd.df(None, saved, node)  # type: ignore[arg-type]
        return [(dy * d).astype(np.float32)]

    def c_call(self, node, cg):
        n = size(cg.shape(node.outputs[0]))
        return (f"tt_{self.fwd.name}_backward_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {n}"
                f"{self.fwd._args(node)});")


def pair(fwd: Unary) -> tuple[OpDef, OpDef]:
    return fwd, UnaryBackward(fwd)

