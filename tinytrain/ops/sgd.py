"""SGD update of one trainable parameter from its accumulated gradient (PyTorch semantics)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, size, trained_index

# inputs: (param, grad[, momentum_buf]); outputs: (param,). attrs: lr, momentum, wd, scale,
# and for a partial update `channels`: the trained input channels (grad holds only those), or
# with `channel_axis` 0 the trained channels (rows) of a depthwise weight.
# The C call multiplies by `scale`, a local of tt_apply_update() (batch / samples accumulated),
# so a partial final batch is averaged over the samples it really has.


class SGD(OpDef):
    name = "sgd"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        a = node.attrs
        p = xs[0].astype(np.float32).copy()
        ix = trained_index(a)
        g = xs[1].astype(np.float32) * np.float32(a["scale"]) + np.float32(a["wd"]) * p[ix]
        if len(xs) > 2:
            m = np.float32(a["momentum"]) * xs[2] + g
            xs[2][...] = m
            g = m
        xs[1][...] = 0.0
        p[ix] = p[ix] - np.float32(a["lr"]) * g
        return [p]

    def c_call(self, node, cg):
        a = node.attrs
        m = cg.ptr(node.inputs[2]) if len(node.inputs) > 2 else "NULL"
        hyper = f"{cg.sgd_scalars(a)}, {c_float(a['scale'])} * scale"
        if a.get("channels") is not None and a.get("channel_axis") == 0:  # depthwise rows
            p, ch = cg.shape(node.inputs[0]), a["channels"]
            idx = "NULL" if tuple(ch) == tuple(range(len(ch))) else cg.ints(ch)
            return (f"tt_sgd_rows_f32({cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {m}, "
                    f"{size(p[1:])}, {idx}, {len(ch)}, {hyper});")
        if a.get("channels") is not None:
            p = cg.shape(node.inputs[0])
            ch = a["channels"]
            idx = "NULL" if tuple(ch) == tuple(range(len(ch))) else cg.ints(ch)
            return (f"tt_sgd_channels_f32({cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                    f"{m}, {size(p[:-1])}, {p[-1]}, {idx}, {len(ch)}, {hyper});")
        return (f"tt_sgd_f32({cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {m}, "
                f"{size(cg.shape(node.inputs[0]))}, {hyper});")


OPS = (SGD(),)
