"""Shared pieces of the int8 ops' gradient rules.

Gradients of int8 tensors are float32 w.r.t. their real values, scale * (q - zero_point), so a
rule differentiates the real-valued function the int8 op approximates:
  - where a fused activation clamped the output (ReLU's 0, ReLU6's 6), nothing flows back:
    `masked` emits q8_clamp_backward. Plain int8 saturation is not masked (straight through),
    as for conv/dense: masking saturated outputs kills their gradient for good;
  - elementwise functions of one int8 input (logistic, hard-swish) use a 256-entry table of
    the derivative at every dequantised input value, built at compile time (`lut_backward_q8`):
    the device needs no transcendental functions and numpy and C agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tinytrain.ir import Node
from tinytrain.ops.base import GradBuilder, OpDef, size
from tinytrain.ops.conv2d_q8 import floats


def mask_range(a: dict) -> tuple[int, int]:
    """q8_clamp_backward's (lo, hi): the fused activation's bounds, grad_lo/grad_hi as the
    importer sets them (tflite_ops.grad_range); without them, the clamp bounds that lie
    inside the int8 range (a ReLU whose zero point is -128 then needs grad_lo)."""
    lo = a.get("grad_lo", a["act_min"] if a["act_min"] > -128 else -129)
    hi = a.get("grad_hi", a["act_max"] if a["act_max"] < 127 else 128)
    return lo, hi


def masked(gb: GradBuilder, node: Node, bounds: tuple[int, int]) -> str | None:
    """dL/dy with the activation-clamped outputs zeroed (None when no gradient arrives)."""
    dy = gb.grad(node.outputs[0])
    if dy is None:
        return None
    lo, hi = bounds
    if lo < -128 and hi > 127:
        return dy
    return gb.emit("q8_clamp_backward", [dy, node.outputs[0]], {"lo": lo, "hi": hi})


def derivative_table(scale: float, zp: int,
                     df: Callable[[np.ndarray], np.ndarray]) -> tuple[float, ...]:
    """df at the dequantised value of every int8 q, indexed by q's uint8 bit pattern."""
    q = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int32)
    real = (np.float32(scale) * (q - zp).astype(np.float32)).astype(np.float64)
    return tuple(float(v) for v in np.asarray(df(real), np.float64).astype(np.float32))


def elementwise_gradient(gb: GradBuilder, node: Node, dlut: tuple[float, ...]) -> None:
    dy, x = gb.grad(node.outputs[0]), node.inputs[0]
    if dy is not None and gb.needs_grad(x):
        gb.contribute(x, gb.emit("lut_backward_q8", [dy, x], {"dlut": dlut}))


class LutBackwardQ8(OpDef):
    """dx = dy * dlut[x]: the derivative of an elementwise int8 function, tabulated."""

    name = "lut_backward_q8"

    def infer(self, node, shapes):
        return [shapes[1]]

    def forward(self, node, xs):
        dy, x = xs
        d = np.asarray(node.attrs["dlut"], np.float32)[np.asarray(x, np.int8).view(np.uint8)]
        return [(dy.reshape(x.shape).astype(np.float32) * d).astype(np.float32)]

    def c_call(self, node, cg):
        return (f"tt_lut_backward_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {size(cg.shape(node.inputs[1]))}, "
                f"{floats(cg, node.attrs['dlut'])});")


OPS = (LutBackwardQ8(),)
