"""GRU recurrence (ONNX's GRU with linear_before_reset=1, which is PyTorch's nn.GRU) and its
backpropagation through time.

As for the LSTM (ops/lstm.py), the importer runs the input projection W x_t + Wb as a 1x1
convolution over the sequence, and this op runs the recurrence. Gates in ONNX's order z, r, n:

    p_t = R h_{t-1} + Rb                   z, r = sigmoid(xproj_z + p_z, xproj_r + p_r)
    n = tanh(xproj_n + r * p_n)            h_t = (1 - z) * n + z * h_{t-1}

Shapes: xproj (1, T, 3H), R (3H, H), Rb (3H,), optional frozen h0 (H,). Outputs: the activated
gates z, r, n of every step (1, T, 3H), written over xproj when the planner lets it
(in_place), y (1, T, H), and p_n (1, T, H). Gates and p_n are the trace the backward reads.
Inputs after R are named by attrs `bias`, `h0`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef
from tinytrain.ops.lstm import c_opt, check_shapes, optional_inputs, sigmoid


class Gru(OpDef):
    name = "gru"
    public = True
    source_ops = ("onnx:GRU",)

    def infer(self, node, shapes):
        h = check_shapes(node, shapes, 3)
        t = shapes[0][1]
        return [(1, t, 3 * h), (1, t, h), (1, t, h)]

    def in_place(self, node, shapes):
        return True  # step t's gates are made from step t's projection alone

    def forward(self, node, xs):
        h_n = int(node.attrs["hidden"])
        ins = optional_inputs(node, ("bias", "h0"))
        env = dict(zip(node.inputs, xs))
        xp, r = xs[0][0].astype(np.float64), xs[1].astype(np.float64)
        rb = env[ins["bias"]].astype(np.float64) if ins["bias"] else np.zeros(3 * h_n)
        h = env[ins["h0"]].astype(np.float64) if ins["h0"] else np.zeros(h_n)
        steps = xp.shape[0]
        gates, y, pns = np.zeros((steps, 3 * h_n)), np.zeros((steps, h_n)), \
            np.zeros((steps, h_n))
        for t in range(steps):
            p = r @ h + rb
            z = sigmoid(xp[t, :h_n] + p[:h_n])
            rr = sigmoid(xp[t, h_n:2 * h_n] + p[h_n:2 * h_n])
            n = np.tanh(xp[t, 2 * h_n:] + rr * p[2 * h_n:])
            h = (1.0 - z) * n + z * h
            gates[t], y[t], pns[t] = np.concatenate([z, rr, n]), h, p[2 * h_n:]
        return [v[None].astype(np.float32) for v in (gates, y, pns)]

    def gradient(self, node, gb):
        gates, y, pn = node.outputs
        dy = gb.grad(y)
        if dy is None:
            return
        ins = optional_inputs(node, ("bias", "h0"))
        xproj, r = node.inputs[0], node.inputs[1]
        wanted = [gb.needs_grad(xproj), gb.needs_grad(r),
                  ins["bias"] is not None and gb.needs_grad(ins["bias"])]
        if not any(wanted):
            return
        h0 = [ins["h0"]] if ins["h0"] else []
        attrs = {"hidden": node.attrs["hidden"], "h0": bool(h0)}
        dx = gb.emit("gru_backward", [dy, gates, pn, y, r, *h0], attrs,
                     out_shape=gb.shape(xproj))
        if wanted[0]:
            gb.contribute(xproj, dx)
        # R's and Rb's gradients read dx and the gates: the n rows times r, on the fly
        if wanted[1]:
            gb.accumulate_param(r, "rnn_backward_recurrent", [dx, y, *h0, gates],
                                {"h0": bool(h0), "reset": True})
        if wanted[2]:
            gb.accumulate_param(ins["bias"], "gru_bias_backward", [dx, gates])

    def c_call(self, node, cg):
        ins = optional_inputs(node, ("bias", "h0"))
        _, steps, hidden = cg.shape(node.outputs[1])
        gates, y, pn = (cg.ptr(o) for o in node.outputs)
        return (f"tt_gru_f32({gates}, {y}, {pn}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {c_opt(cg, ins['bias'])}, {c_opt(cg, ins['h0'])}, "
                f"{steps}, {hidden});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * shapes[1][0] * shapes[1][1]


def _step_grads(dh, z, rr, n, pn, h_prev):
    """The three gate pre-activation gradients of one step, and the input projection's."""
    dn = dh * (1.0 - z) * (1.0 - n * n)
    return np.concatenate([dh * (h_prev - n) * z * (1.0 - z), dn * pn * rr * (1.0 - rr), dn])


class GruBackward(OpDef):
    """dL/d(xproj) of every step, (1, T, 3H), by BPTT from the last step back. Inputs: dy
    (1, T, H), the gates, p_n, y, R, and h0 when the forward had one."""

    name = "gru_backward"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, gates, pns, y = (v[0].astype(np.float64) for v in xs[:4])
        r = xs[4].astype(np.float64)
        h_n = int(node.attrs["hidden"])
        h0 = xs[5].astype(np.float64) if node.attrs.get("h0") else np.zeros(h_n)
        steps = dy.shape[0]
        dx = np.zeros((steps, 3 * h_n))
        dh_next = np.zeros(h_n)
        for t in reversed(range(steps)):
            z, rr, n = (gates[t, k * h_n:(k + 1) * h_n] for k in range(3))
            pn = pns[t]
            dh = dy[t] + dh_next
            dx[t] = _step_grads(dh, z, rr, n, pn, y[t - 1] if t else h0)
            dp = dx[t].copy()
            dp[2 * h_n:] *= rr
            dh_next = dh * z + r.T @ dp
        return [dx[None].astype(np.float32)]

    def c_call(self, node, cg):
        _, steps, hidden = cg.shape(node.inputs[0])
        h0 = cg.ptr(node.inputs[5]) if node.attrs.get("h0") else "NULL"
        ins = ", ".join(cg.ptr(i) for i in node.inputs[:5])
        return (f"tt_gru_backward_f32({cg.ptr(node.outputs[0])}, {ins}, {h0}, {steps}, "
                f"{hidden});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * shapes[4][0] * shapes[4][1]


OPS: Sequence[OpDef] = (Gru(), GruBackward())
