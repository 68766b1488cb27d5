"""Fleet drift correction: after a step's updates, p[e] -= lr * (mu * p[e] + b[e]).

One term covers SCAFFOLD (b = c - c_i, mu = 0) and FedProx (b = -mu * w_global) and both
together (passes/fleet_correction.py adds it, tinytrain/fleet/correction.py fills b and mu).
b and mu are in the parameter's own units: values for fp32, codes for int8 weights and int32
biases (with quantisation-aware scaling a code step of lr * mu * (q - q_global) is exactly the
real proximal step). fp32 takes the effective rate of momentum, lr / (1 - momentum): a term
that stays constant through a round moves the weights that much per step under heavy-ball
momentum, and it bypasses the momentum buffer, so the buffer keeps today's values.

inputs: (p, b, mu) for fp32, (p, b, mu, rng_step[, shadow]) for int8 / int32. attrs: outer,
n_ch, inner, channels (the trained elements' walk, see runtime_c/reference/tt_fleet.c), lr and
momentum (the build's; the C reads the run-time values), and for int8 mode and salt (the
build's rounding, a salt of its own).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, walk_args
from tinytrain.quant.update import MODES, update_s8, update_s32


def positions(a: dict) -> np.ndarray:
    """Flat indices into p of the trained elements, in b's order."""
    ch = np.asarray(a["channels"] if a["channels"] is not None else range(a["k"]), np.int64)
    o = np.arange(a["outer"], dtype=np.int64)[:, None, None]
    i = np.arange(a["inner"], dtype=np.int64)[None, None, :]
    return ((o * a["n_ch"] + ch[None, :, None]) * a["inner"] + i).reshape(-1)


def effective_lr(lr: float, momentum: float) -> np.float32:
    """The fp32 correction's rate, as the C computes it in float."""
    return np.float32(np.float32(lr) / (np.float32(1.0) - np.float32(momentum)))


class FleetCorrection(OpDef):
    name = "fleet_correction"

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        a = node.attrs
        p, b, mu = xs[0].copy(), xs[1].reshape(-1).astype(np.float32), np.float32(xs[2][0])
        flat = p.reshape(-1)
        pos = positions(a)
        if p.dtype == np.float32:
            t = (mu * flat[pos]).astype(np.float32) + b
            flat[pos] = flat[pos] - effective_lr(a["lr"], a["momentum"]) * t
            return [p]
        step = int(xs[3].reshape(-1)[0])
        t = (mu * flat[pos].astype(np.float32)).astype(np.float32) + b
        delta = (np.float32(a["lr"]) * t).astype(np.float32)
        idx = np.arange(len(pos))
        if p.dtype == np.int32:
            flat[pos] = update_s32(flat[pos], delta, a["mode"], a["salt"], step, idx)
        else:
            shadow = xs[4].reshape(-1) if len(xs) > 4 else None
            flat[pos] = update_s8(flat[pos], delta, a["mode"], a["salt"], step, idx, shadow)
        return [p]

    def c_call(self, node, cg):
        a = node.attrs
        p, b, mu = (cg.ptr(node.inputs[k]) for k in range(3))
        lr, momentum = cg.run_time(a, "lr"), cg.run_time(a, "momentum")
        dtype = cg.g.t(node.inputs[0]).dtype
        if dtype == "f32":
            return (f"tt_fleet_correct_f32({p}, {b}, {walk_args(cg, a)}, "
                    f"{lr} / (1.0f - {momentum}), {mu}[0]);")
        u = (f"&(tt_q8_update){{{MODES[a['mode']]}, {a['salt']}u, "
             f"(uint32_t){cg.ptr(node.inputs[3])}[0], 0, 1.0f}}")
        if dtype == "s32":
            return f"tt_fleet_correct_s32({p}, {b}, {walk_args(cg, a)}, {lr}, {mu}[0], {u});"
        shadow = cg.ptr(node.inputs[4]) if len(node.inputs) > 4 else "NULL"
        return (f"tt_fleet_correct_s8({p}, {shadow}, {b}, {walk_args(cg, a)}, {lr}, {mu}[0], "
                f"{u});")


OPS = (FleetCorrection(),)
