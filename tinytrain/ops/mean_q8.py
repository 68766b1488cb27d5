"""int8 MEAN over H and W (global average pool), bit-exact with LiteRT's reference kernel.

LiteRT's reference MEAN (as shipped in ai-edge-litert) takes one integer path for int8 whatever
keep_dims and the scales are (QuantizedMeanOrSum): the sum of (x - in_zp) is multiplied by
in_scale / out_scale with 1/(H*W) folded into the integer multiplier, rounded twice
(gemmlowp), plus out_zp, clamped. (Older TensorFlow sources also have a keep_dims path that
divides after rescaling, and a truncating path for equal scales; LiteRT matches neither.)
The fold depends on H*W, so it is finished from the input shape in `fold_count`.

attrs (from `prepare`): keepdims, in_zp, out_zp, mult, shift, in_scale, out_scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.ops.base import OpDef, size
from tinytrain.quant import fixedpoint as fp


def prepare(in_q: QuantParams, out_q: QuantParams, keep_dims: bool) -> dict[str, Any]:
    """PrepareMeanOrSum: QuantizeMultiplier(double(in_scale) / double(out_scale))."""
    in_scale, in_zp = fp.scale_zp(in_q)
    out_scale, out_zp = fp.scale_zp(out_q)
    mult, shift = fp.quantize_multiplier(in_scale / out_scale)
    return {"keepdims": int(keep_dims), "in_zp": in_zp, "out_zp": out_zp, "mult": mult,
            "shift": shift, "in_scale": in_scale, "out_scale": out_scale}


def fold_count(a: dict, count: int) -> tuple[int, int]:
    """The kernel's (multiplier, shift): 1/count folded in with a shift of
    floor(log2(count)) bits, capped at 32 and so that the shift stays >= -31."""
    k = min(count.bit_length() - 1, 32, 31 + a["shift"])
    return int((a["mult"] << k) // count), a["shift"] - k


def mean(x: np.ndarray, a: dict) -> np.ndarray:
    """x: (rows, c) int8 -> (c,) int8."""
    x = np.asarray(x, np.int64)
    mult, shift = fold_count(a, x.shape[0])
    acc = fp.wrap32((x - a["in_zp"]).sum(axis=0))
    y = fp.mbqm_double_rounding(acc, mult, shift) + a["out_zp"]
    return np.clip(y, -128, 127).astype(np.int8)


def _rows(shape) -> int:
    return size(shape[:-1])


class MeanQ8(OpDef):
    name = "mean_q8"
    public = True
    source_ops = ("MEAN (int8)",)

    def infer(self, node, shapes):
        c = shapes[0][-1]
        return [(1, 1, c) if node.attrs.get("keepdims", 1) else (c,)]

    def forward(self, node, xs):
        x = xs[0]
        y = mean(x.reshape(-1, x.shape[-1]), node.attrs)
        return [y.reshape(self.infer(node, [x.shape])[0])]

    def gradient(self, node, gb):
        # real y = mean of real x (int8 saturation passes straight through)
        dy, x = gb.grad(node.outputs[0]), node.inputs[0]
        if dy is not None and gb.needs_grad(x):
            gb.contribute(x, gb.emit("global_avg_pool_backward", [dy], out_shape=gb.shape(x)))

    def c_call(self, node, cg):
        x, a = cg.shape(node.inputs[0]), node.attrs
        mult, shift = fold_count(a, _rows(x))
        return (f"tt_mean_s8({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, {_rows(x)}, "
                f"{x[-1]}, {a['in_zp']}, {a['out_zp']}, {mult}, {shift});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0])


OPS = (MeanQ8(),)
