"""int8 weight / int32 bias updates: batch SGD from accumulated gradients, and the batch-1
forms fused with the weight-gradient kernel (the gradient tensor never exists).

inputs: sgd_q8 (param, grad, rng_step[, shadow]); conv2d/dense_weight_sgd_q8
(dy, x, w, rng_step[, shadow]); bias_sgd_q8 (dy, b, rng_step). attrs: `step` (per output
channel: lr / scale with quantisation-aware scaling, lr * scale without), `mode`
(stochastic | shadow | truncate), `salt`, `channels` (partial update; `channel_axis` 0: the
rows of a depthwise weight) and the layer attrs.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, size, trained_index
from tinytrain.ops.conv2d import conv_backward_weight, geom, geom_decl
from tinytrain.ops.conv2d_q8 import dequant_x, floats
from tinytrain.quant.update import MODES, update_s8, update_s32


def _channel_steps(a: dict, shape: tuple[int, ...]) -> np.ndarray:
    """step broadcast over a weight-shaped (cout, ...) array."""
    return np.asarray(a["step"], np.float32).reshape((-1,) + (1,) * (len(shape) - 1))


def _apply_s8(w: np.ndarray, grad: np.ndarray, a: dict, step: int,
              shadow: np.ndarray | None) -> np.ndarray:
    w = w.copy()
    ix = trained_index(a)
    steps = _channel_steps(a, w.shape)
    if a.get("channel_axis") == 0:  # a depthwise weight's trained rows: their channels' steps
        steps = steps[ix]
    delta = (grad.astype(np.float32) * steps).astype(np.float32)
    if a.get("packed_cin"):  # w holds just the trained channels; rounding seeds stay whole-w
        full = w.shape[:-1] + (a["packed_cin"],)
        idx = np.arange(int(np.prod(full))).reshape(full)[ix]
        return update_s8(w, delta, a["mode"], a["salt"], step, idx, shadow)
    idx = np.arange(w.size).reshape(w.shape)[ix]
    w[ix] = update_s8(w[ix], delta, a["mode"], a["salt"], step, idx, shadow)
    return w


def _update(cg, node, k_step: int) -> str:
    a = node.attrs
    return (f"&(tt_q8_update){{{MODES[a['mode']]}, {a['salt']}u, "
            f"(uint32_t){cg.ptr(node.inputs[k_step])}[0], {1 if a.get('packed_cin') else 0}, "
            f"{cg.lr_scale()}}}")


def _shadow(cg, node, k: int) -> str:
    return cg.ptr(node.inputs[k]) if len(node.inputs) > k else "NULL"


def _idx(cg, a: dict) -> str:
    ch = a.get("channels")
    if ch is None or tuple(ch) == tuple(range(len(ch))):
        return "NULL"
    return cg.ints(ch)


class SGDQ8(OpDef):
    """Batch update of an int8 weight or int32 bias from its accumulated fp32 gradient."""

    name = "sgd_q8"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        a = node.attrs
        p, g, step = xs[0], xs[1], int(xs[2].reshape(-1)[0])
        grad = (g.astype(np.float32) * np.float32(a["scale"])).astype(np.float32)
        g[...] = 0.0
        if p.dtype == np.int32:
            delta = (grad * np.asarray(a["step"], np.float32)).astype(np.float32)
            return [update_s32(p, delta, a["mode"], a["salt"], step, np.arange(p.size))]
        return [_apply_s8(p, grad, a, step, xs[3] if len(xs) > 3 else None)]

    def c_call(self, node, cg):
        a = node.attrs
        p, g = cg.ptr(node.inputs[0]), cg.ptr(node.inputs[1])
        scale = f"{c_float(a['scale'])} * scale"
        step = floats(cg, a["step"])
        if cg.g.t(node.inputs[0]).dtype == "s32":
            return (f"tt_sgd_s32({p}, {g}, {size(cg.shape(node.inputs[0]))}, {step}, {scale}, "
                    f"{_update(cg, node, 2)});")
        shape = cg.shape(node.inputs[0])
        ch = a.get("channels")
        if ch is not None and a.get("channel_axis") == 0:  # a depthwise weight's rows
            return (f"tt_sgd_rows_s8({p}, {g}, {_shadow(cg, node, 3)}, {size(shape[1:])}, "
                    f"{_idx(cg, a)}, {len(ch)}, {step}, {scale}, {_update(cg, node, 2)});")
        k = len(ch) if ch is not None else shape[-1]
        rows = size(shape[:-1])
        return (f"tt_sgd_s8({p}, {g}, {_shadow(cg, node, 3)}, {rows}, "
                f"{a.get('packed_cin') or shape[-1]}, "
                f"{_idx(cg, a)}, {k}, {rows // shape[0]}, {step}, {scale}, "
                f"{_update(cg, node, 2)});")


class Conv2dWeightSGDQ8(OpDef):
    name = "conv2d_weight_sgd_q8"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        dy, x, w, step = xs[0], xs[1], xs[2], int(xs[3].reshape(-1)[0])
        grad = conv_backward_weight(dy, dequant_x(x, node.attrs), geom(node, x.shape, dy.shape))
        return [_apply_s8(w, grad, node.attrs, step, xs[4] if len(xs) > 4 else None)]

    def c_call(self, node, cg):
        a = node.attrs
        x, dy, w = (cg.shape(node.inputs[k]) for k in (1, 0, 2))
        return (f"tt_conv2d_weight_sgd_s8({cg.ptr(node.inputs[2])}, {_shadow(cg, node, 4)}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_float(a['x_scale'])}, "
                f"{a['x_zp']}, &{geom_decl(cg, node, x, dy)}, {a.get('packed_cin') or w[-1]}, "
                f"{_idx(cg, a)}, "
                f"{floats(cg, a['step'])}, {_update(cg, node, 3)});")

    def macs(self, node, shapes, out_shapes):
        oh, ow, cout = shapes[0]
        kh, kw = node.attrs["kernel"]
        return oh * ow * cout * shapes[1][-1] * kh * kw // node.attrs.get("groups", 1)


class DenseWeightSGDQ8(OpDef):
    name = "dense_weight_sgd_q8"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        dy, x, w, step = xs[0], xs[1], xs[2], int(xs[3].reshape(-1)[0])
        grad = np.outer(dy, dequant_x(x.reshape(-1), node.attrs)).astype(np.float32)
        return [_apply_s8(w, grad, node.attrs, step, xs[4] if len(xs) > 4 else None)]

    def c_call(self, node, cg):
        a = node.attrs
        out, w_in = cg.shape(node.inputs[2])
        w_in = a.get("packed_cin") or w_in
        k = size(cg.shape(node.inputs[1]))
        fn = cg.kernel("tt_dense_weight_sgd_s8")
        return (f"{fn}({cg.ptr(node.inputs[2])}, {_shadow(cg, node, 4)}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_float(a['x_scale'])}, "
                f"{a['x_zp']}, {k}, {out}, {w_in}, {_idx(cg, a)}, {floats(cg, a['step'])}, "
                f"{_update(cg, node, 3)});")

    def macs(self, node, shapes, out_shapes):
        return size(shapes[0]) * size(shapes[1])


class BiasSGDQ8(OpDef):
    name = "bias_sgd_q8"

    def infer(self, node, shapes):
        return [shapes[1]]

    def forward(self, node, xs):
        dy, b, step = xs[0], xs[1], int(xs[2].reshape(-1)[0])
        grad = dy.reshape(-1, dy.shape[-1]).astype(np.float32).sum(axis=0, dtype=np.float32)
        delta = (grad * np.asarray(node.attrs["step"], np.float32)).astype(np.float32)
        a = node.attrs
        return [update_s32(b, delta, a["mode"], a["salt"], step, np.arange(b.size))]

    def c_call(self, node, cg):
        s = cg.shape(node.inputs[0])
        fn = cg.kernel("tt_bias_sgd_s32")
        return (f"{fn}({cg.ptr(node.inputs[1])}, {cg.ptr(node.inputs[0])}, "
                f"{size(s[:-1])}, {s[-1]}, {floats(cg, node.attrs['step'])}, "
                f"{_update(cg, node, 2)});")

    # In a backward region run row by row (passes/stream_backward.py) each row of dy adds to
    # a running per-channel sum (`out`: C floats, zeroed before the region), and the update
    # runs once every row is in: tt_bias_sgd_s32 over one "row" of sums adds each to 0.0f,
    # which leaves it unchanged (a sum that starts at +0.0f is never -0.0f).
    def row_inputs(self, node, shapes):
        return (0,) if len(shapes[0]) == 3 else None

    def row_window(self, node, shapes, row):
        return [(row, row)]

    def row_call(self, node, cg, rings, out, row):
        _, w, c = cg.shape(node.inputs[0])
        return (f"{cg.kernel('tt_bias_grad_row_f32')}({out}, "
                f"(const float *)tt_row(&{rings[0]}, {row}), "
                f"{w}, {c});")

    def row_finish(self, node, cg, sums: str) -> str:
        c = cg.shape(node.inputs[0])[-1]
        return (f"{cg.kernel('tt_bias_sgd_s32')}({cg.ptr(node.inputs[1])}, {sums}, 1, {c}, "
                f"{floats(cg, node.attrs['step'])}, {_update(cg, node, 2)});")


OPS = (SGDQ8(), Conv2dWeightSGDQ8(), DenseWeightSGDQ8(), BiasSGDQ8())
