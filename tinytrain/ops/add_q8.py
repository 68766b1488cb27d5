"""int8 ADD with broadcasting and a fused activation, bit-exact with TFLite's reference kernel.

Both inputs are shifted left by 20 bits, rescaled to twice the larger input scale, added, and
the sum is rescaled to the output (TFLite's general 8-bit path).

attrs (from `prepare`): a_offset, b_offset, out_offset, left_shift, a_mult, a_shift, b_mult,
b_shift, out_mult, out_shift, act_min, act_max, and the scales a_scale, b_scale, out_scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import broadcast_strides, pad4, size
from tinytrain.ops.binary import Binary, reduced
from tinytrain.ops.grad_q8 import mask_range, masked
from tinytrain.quant import fixedpoint as fp

LEFT_SHIFT = 20
_PARAMS = ("a_offset", "b_offset", "out_offset", "left_shift", "a_mult", "a_shift", "b_mult",
           "b_shift", "out_mult", "out_shift", "act_min", "act_max")


def prepare(a_q: QuantParams, b_q: QuantParams, out_q: QuantParams,
            act: tuple[int, int] = (-128, 127)) -> dict[str, Any]:
    """AddPrepare (8-bit general path): multipliers in double from the float32 scales;
    `act` is the fused activation's int8 range (fixedpoint.activation_range)."""
    a_scale, a_zp = fp.scale_zp(a_q)
    b_scale, b_zp = fp.scale_zp(b_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    twice_max = 2 * max(a_scale, b_scale)
    a_mult, a_shift = fp.quantize_multiplier_smaller_than_one_exp(a_scale / twice_max)
    b_mult, b_shift = fp.quantize_multiplier_smaller_than_one_exp(b_scale / twice_max)
    # (1 << 20) * output_scale is a float32 product in TFLite (exact: a power of two)
    out_mult, out_shift = fp.quantize_multiplier_smaller_than_one_exp(
        twice_max / float(np.float32(1 << LEFT_SHIFT) * np.float32(out_scale)))
    return {"a_offset": -a_zp, "b_offset": -b_zp, "out_offset": out_zp,
            "left_shift": LEFT_SHIFT, "a_mult": a_mult, "a_shift": a_shift, "b_mult": b_mult,
            "b_shift": b_shift, "out_mult": out_mult, "out_shift": out_shift,
            "act_min": int(act[0]), "act_max": int(act[1]), "a_scale": a_scale,
            "b_scale": b_scale, "out_scale": out_scale}


def add(a: np.ndarray, b: np.ndarray, p: dict) -> np.ndarray:
    """The reference arithmetic; LiteRT rounds every rescale twice (gemmlowp)."""
    def scaled(x, offset, mult, shift):
        shifted = (np.asarray(x, np.int64) + offset) << p["left_shift"]
        return fp.mbqm_double_rounding(shifted, mult, shift)

    total = (scaled(a, p["a_offset"], p["a_mult"], p["a_shift"])
             + scaled(b, p["b_offset"], p["b_mult"], p["b_shift"]))
    y = fp.mbqm_double_rounding(total, p["out_mult"], p["out_shift"]) + p["out_offset"]
    return np.clip(y, p["act_min"], p["act_max"]).astype(np.int8)


def _params(node, cg) -> str:
    body = ", ".join(str(int(node.attrs[k])) for k in _PARAMS)
    return cg.static(f"static const tt_q8_add {{name}} = {{{{{body}}}}};")


def binary_call(kernel: str, params_type: str, keys: tuple[str, ...], node, cg) -> str:
    """`kernel(y, a, b, shape, astr, bstr, &params)` over rank-4 broadcast views."""
    y = cg.shape(node.outputs[0])
    a, b = cg.shape(node.inputs[0]), cg.shape(node.inputs[1])
    body = ", ".join(str(int(node.attrs[k])) for k in keys)
    params = cg.static(f"static const {params_type} {{name}} = {{{{{body}}}}};")
    return (f"{kernel}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
            f"{cg.ptr(node.inputs[1])}, {cg.ints(pad4(y))}, {cg.ints(broadcast_strides(a, y))}, "
            f"{cg.ints(broadcast_strides(b, y))}, &{params});")


class AddQ8(Binary):
    name = "add_q8"
    source_ops = ("ADD (int8)",)

    def forward(self, node, xs):
        return [add(xs[0], xs[1], node.attrs)]

    def gradient(self, node, gb):
        # d(a + b): dy to both real inputs where the fused activation did not clamp
        dy = masked(gb, node, mask_range(node.attrs))
        if dy is None:
            return
        for x in node.inputs:
            if gb.needs_grad(x):
                gb.contribute(x, reduced(gb, dy, gb.shape(x)))

    def c_call(self, node, cg):
        shapes = {tuple(cg.shape(n)) for n in (*node.inputs, node.outputs[0])}
        if len(shapes) == 1 and cg.uses_opt("tt_add_s8_opt"):  # no broadcast: one flat loop
            y = node.outputs[0]
            return (f"tt_add_s8_opt({cg.ptr(y)}, {cg.ptr(node.inputs[0])}, "
                    f"{cg.ptr(node.inputs[1])}, {size(cg.shape(y))}, &{_params(node, cg)});")
        return binary_call("tt_add_s8", "tt_q8_add", _PARAMS, node, cg)

    def macs(self, node, shapes, out_shapes):
        return int(np.prod(out_shapes[0], dtype=np.int64))

    def row_inputs(self, node, shapes):
        same = len(shapes[0]) == 3 and tuple(shapes[0]) == tuple(shapes[1])
        return (0, 1) if same else None  # broadcasting adds do not stream

    def row_window(self, node, shapes, row):
        return [(row, row), (row, row)]

    def row_call(self, node, cg, rings, out, row):
        k = "tt_add_s8_row_opt" if cg.uses_opt("tt_add_s8_row_opt") else "tt_add_s8_row"
        return f"{k}(&{out}, &{rings[0]}, &{rings[1]}, {row}, &{_params(node, cg)});"


OPS = (AddQ8(),)
