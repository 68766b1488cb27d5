"""Adam update of one trainable fp32 parameter from its accumulated gradient (PyTorch's
torch.optim.Adam: L2 weight decay in the gradient, no amsgrad), and the step counter it reads.

adam inputs: (param, grad, m, v, adam_step[, b, mu, gsum]); output: param. The bracket is a
fleet build's (passes/fleet_correction.py): b and mu enter the gradient before the moments,
and gsum sums the device's own gradient over a round. attrs: lr, beta1, beta2, eps, wd, scale
(1 / batch; the C multiplies it by tt_apply_update()'s `scale` for a partial final batch) and,
for a partial update, `channels` with `channel_axis` as ops/sgd.py has them. grad, m, v, b and
gsum hold the trained elements only, in the walk of runtime_c/reference/tt_adam_f32.c.

adam_tick inputs: (adam_step,); output: adam_step, advanced once before a step's updates.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, trained_index, trained_walk, walk_args

STEP = "adam_step"  # the model's Adam step counter (s32 training state)
MOMENTS = ("_adam_m", "_adam_v")  # a parameter's moments: its name and these (training state)


def pow_step(beta: float, t: int) -> np.float32:
    """beta^t by squaring in float32, the C's multiplications (tt_adam_f32.c)."""
    r, b = np.float32(1.0), np.float32(beta)
    while t > 0:
        if t & 1:
            r = np.float32(r * b)
        b = np.float32(b * b)
        t >>= 1
    return r


def step_size(a: dict, t: int) -> tuple[np.float32, np.float32]:
    """lr / (1 - beta1^t) and sqrt(1 - beta2^t), as the C computes them in float."""
    t = max(t, 1)
    bc1 = np.float32(1.0) - pow_step(a["beta1"], t)
    bc2 = np.float32(1.0) - pow_step(a["beta2"], t)
    return np.float32(np.float32(a["lr"]) / bc1), np.sqrt(bc2, dtype=np.float32)


class Adam(OpDef):
    name = "adam"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        a = node.attrs
        f32 = np.float32
        p = xs[0].astype(f32).copy()
        ix = trained_index(a)
        g, m, v = xs[1], xs[2], xs[3]
        w = p[ix].reshape(g.shape)
        gi = (g.astype(f32) * f32(a["scale"]) + f32(a["wd"]) * w).astype(f32)
        if len(xs) > 5:  # a fleet build: its gradient sum, then the correction
            xs[7][...] = xs[7] + gi.reshape(xs[7].shape)
            gi = (gi + (f32(xs[6].reshape(-1)[0]) * w + xs[5].reshape(g.shape))).astype(f32)
        b1c, b2c = f32(1.0) - f32(a["beta1"]), f32(1.0) - f32(a["beta2"])
        m[...] = m + b1c * (gi - m)
        v[...] = f32(a["beta2"]) * v + b2c * (gi * gi)
        step, bc2_sqrt = step_size(a, int(xs[4].reshape(-1)[0]))
        w = w - step * (m / (np.sqrt(v, dtype=f32) / bc2_sqrt + f32(a["eps"])))
        p[ix] = w.reshape(p[ix].shape)
        g[...] = 0.0
        return [p]

    def c_call(self, node, cg):
        a = node.attrs
        ins = node.inputs
        lr, wd = cg.run_time(a, "lr"), cg.run_time(a, "wd")
        hyper = (f"&(tt_adam_hyper){{{lr}, {c_float(a['beta1'])}, {c_float(a['beta2'])}, "
                 f"{c_float(a['eps'])}, {wd}, {c_float(a['scale'])} * scale}}")
        fleet = (f"{cg.ptr(ins[5])}, {cg.ptr(ins[6])}[0], {cg.ptr(ins[7])}" if len(ins) > 5
                 else "NULL, 0.0f, NULL")
        return (f"tt_adam_f32({cg.ptr(ins[0])}, {cg.ptr(ins[1])}, {cg.ptr(ins[2])}, "
                f"{cg.ptr(ins[3])}, {walk_args(cg, trained_walk(cg.shape(ins[0]), a))}, {hyper}, "
                f"{cg.ptr(ins[4])}[0], {fleet});")


class AdamTick(OpDef):
    name = "adam_tick"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        t = int(xs[0].reshape(-1)[0])
        return [np.array([min(max(t, 0) + 1, 2**31 - 1)], np.int32).reshape(xs[0].shape)]

    def c_call(self, node, cg):
        return f"tt_adam_tick({cg.ptr(node.inputs[0])});"


OPS = (Adam(), AdamTick())
