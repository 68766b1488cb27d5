"""Shared pieces of the int8 ops' gradient rules.

Gradients of int8 tensors are float32 w.r.t. their real values, scale * (q - zero_point), so a
rule differentiates the real-valued function the int8 op approximates:
  - where the int8 output was clamped (fused activation or the int8 range), nothing flows back:
    `masked` emits q8_clamp_backward, but only on a bound the op can actually reach (a pool of
    identically quantised values never saturates, so there y == 127 is a real value);
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


def real_range(scale: float, zp: int) -> tuple[float, float]:
    return scale * (-128 - zp), scale * (127 - zp)


def can_saturate(lo_real: float, hi_real: float, out_scale: float,
                 out_zp: int) -> tuple[bool, bool]:
    """Whether reals in [lo_real, hi_real] can be clamped at the output's low / high end."""
    out_lo, out_hi = real_range(out_scale, out_zp)
    return lo_real < out_lo, hi_real > out_hi


def mask_bounds(act_min: int, act_max: int, low: bool = True,
                high: bool = True) -> tuple[int, int]:
    """q8_clamp_backward's (lo, hi): a bound the output cannot be clamped at is moved outside
    the int8 range. `low`/`high`: whether the int8 range itself can clamp."""
    lo = act_min if (act_min > -128 or low) else -129
    hi = act_max if (act_max < 127 or high) else 128
    return lo, hi


def masked(gb: GradBuilder, node: Node, bounds: tuple[int, int]) -> str | None:
    """dL/dy with the clamped outputs zeroed (None when no gradient arrives)."""
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


def elementwise_gradient(gb: GradBuilder, node: Node, dy: str | None,
                         dlut: tuple[float, ...]) -> None:
    x = node.inputs[0]
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
