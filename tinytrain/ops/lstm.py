"""LSTM recurrence (ONNX's LSTM, PyTorch's nn.LSTM) and its backpropagation through time.

The importer splits an LSTM layer in two: the input projection W x_t + Wb for every step is a
1x1 convolution over the sequence (so it plans, streams and sparse-updates as any conv), and
this op runs the recurrence over its result. Gates are in ONNX's order i, o, f, c.

    g_t = xproj_t + R h_{t-1} + Rb        i, o, f = sigmoid(g_i, g_o, g_f), u = tanh(g_c)
    c_t = f * c_{t-1} + i * u             h_t = o * tanh(c_t)

Shapes: xproj (1, T, 4H), R (4H, H), Rb (4H,), optional frozen h0 and c0 (H,). Outputs: the
activated gates i, o, f, u of every step (1, T, 4H), written over xproj when the planner lets
it (in_place), y (1, T, H), every step's h, and the cell states c_t (1, T, H). The gates and
cells are the trace the backward reads: what BPTT costs in memory, priced by the planner as
any activation that lives until the backward. Inputs after R are named by attrs `bias`, `h0`,
`c0` (true when present), in that order. Attr `cell_clip` (TFLite's; 0 or absent: none)
clamps c_t to [-clip, clip], and no gradient passes where it held.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef, c_float


def optional_inputs(node, names: Sequence[str]) -> dict[str, str | None]:
    """The recurrence's optional inputs after (xproj, R), by role: None when absent."""
    out: dict[str, str | None] = {}
    k = 2
    for role in names:
        if node.attrs.get(role):
            out[role] = node.inputs[k]
            k += 1
        else:
            out[role] = None
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def clip_cell(c: np.ndarray, node) -> np.ndarray:
    clip = float(node.attrs.get("cell_clip", 0.0))
    return np.clip(c, -clip, clip) if clip > 0 else c


def passes_clip(c: np.ndarray, node) -> np.ndarray:
    """1 where the cell state's gradient passes the clip (strictly inside it), else 0."""
    clip = float(node.attrs.get("cell_clip", 0.0))
    return (np.abs(c) < clip).astype(np.float64) if clip > 0 else np.ones_like(c)


def check_shapes(node, shapes, gates: int) -> int:
    """The hidden size, after checking xproj (1, T, gates*H) and R (gates*H, H)."""
    x, r = shapes[0], shapes[1]
    h = int(node.attrs["hidden"])
    if len(x) != 3 or x[0] != 1 or x[2] != gates * h:
        raise ValueError(f"the input projection must be (1, steps, {gates * h}), not {list(x)}")
    if tuple(r) != (gates * h, h):
        raise ValueError(f"the recurrent weight must be ({gates * h}, {h}), not {list(r)}")
    for s in shapes[2:]:
        if tuple(s) not in ((gates * h,), (h,)):
            raise ValueError(f"a bias or initial state of shape {list(s)} does not fit "
                             f"hidden size {h}")
    return h


def c_opt(cg, name: str | None) -> str:
    return cg.ptr(name) if name is not None else "NULL"


class Lstm(OpDef):
    name = "lstm"
    public = True
    source_ops = ("onnx:LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                  "UNIDIRECTIONAL_SEQUENCE_LSTM (int8, run in fp32)")

    def infer(self, node, shapes):
        h = check_shapes(node, shapes, 4)
        t = shapes[0][1]
        return [(1, t, 4 * h), (1, t, h), (1, t, h)]

    def in_place(self, node, shapes):
        return True  # step t's gates are made from step t's projection alone

    def forward(self, node, xs):
        h_n = int(node.attrs["hidden"])
        ins = optional_inputs(node, ("bias", "h0", "c0"))
        env = dict(zip(node.inputs, xs))
        xp, r = xs[0][0].astype(np.float64), xs[1].astype(np.float64)
        rb = env[ins["bias"]].astype(np.float64) if ins["bias"] else 0.0
        h = env[ins["h0"]].astype(np.float64) if ins["h0"] else np.zeros(h_n)
        c = env[ins["c0"]].astype(np.float64) if ins["c0"] else np.zeros(h_n)
        steps = xp.shape[0]
        gates, y, cells = np.zeros((steps, 4 * h_n)), np.zeros((steps, h_n)), \
            np.zeros((steps, h_n))
        for t in range(steps):
            g = xp[t] + r @ h + rb
            i, o, f = (sigmoid(g[k * h_n:(k + 1) * h_n]) for k in range(3))
            u = np.tanh(g[3 * h_n:])
            c = clip_cell(f * c + i * u, node)
            h = o * np.tanh(c)
            gates[t], y[t], cells[t] = np.concatenate([i, o, f, u]), h, c
        return [v[None].astype(np.float32) for v in (gates, y, cells)]

    def gradient(self, node, gb):
        gates, y, cells = node.outputs
        dy = gb.grad(y)
        if dy is None:
            return
        ins = optional_inputs(node, ("bias", "h0", "c0"))
        xproj, r = node.inputs[0], node.inputs[1]
        wanted = [gb.needs_grad(xproj), gb.needs_grad(r),
                  ins["bias"] is not None and gb.needs_grad(ins["bias"])]
        if not any(wanted):
            return
        extra = [ins["c0"]] if ins["c0"] else []
        dg = gb.emit("lstm_backward", [dy, gates, cells, r, *extra],
                     {"hidden": node.attrs["hidden"], "c0": bool(extra),
                      "cell_clip": node.attrs.get("cell_clip", 0.0)},
                     out_shape=gb.shape(xproj))
        if wanted[0]:
            gb.contribute(xproj, dg)
        if wanted[1]:
            h0 = [ins["h0"]] if ins["h0"] else []
            gb.accumulate_param(r, "rnn_backward_recurrent", [dg, y, *h0],
                                {"h0": bool(h0)})
        if wanted[2]:
            gb.accumulate_param(ins["bias"], "bias_backward", [dg])

    def c_call(self, node, cg):
        ins = optional_inputs(node, ("bias", "h0", "c0"))
        _, steps, hidden = cg.shape(node.outputs[1])
        gates, y, cells = (cg.ptr(o) for o in node.outputs)
        return (f"tt_lstm_f32({gates}, {y}, {cells}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {c_opt(cg, ins['bias'])}, "
                f"{c_opt(cg, ins['h0'])}, {c_opt(cg, ins['c0'])}, {steps}, {hidden}, "
                f"{c_float(node.attrs.get('cell_clip', 0.0))});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * shapes[1][0] * shapes[1][1]


class LstmBackward(OpDef):
    """dL/d(gate pre-activations) of every step, (1, T, 4H), by BPTT from the last step back.
    Inputs: dy (1, T, H), the gates and cells, R, and c0 when the forward had one."""

    name = "lstm_backward"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, gates, cells = (v[0].astype(np.float64) for v in xs[:3])
        h_n = int(node.attrs["hidden"])
        r = xs[3].astype(np.float64)
        c0 = xs[4].astype(np.float64) if node.attrs.get("c0") else np.zeros(h_n)
        steps = dy.shape[0]
        dg = np.zeros((steps, 4 * h_n))
        dh_next, dc_next = np.zeros(h_n), np.zeros(h_n)
        for t in reversed(range(steps)):
            i, o, f, u = (gates[t, k * h_n:(k + 1) * h_n] for k in range(4))
            c, c_prev = cells[t], cells[t - 1] if t else c0
            tc = np.tanh(c)
            dh = dy[t] + dh_next
            dc = (dc_next + dh * o * (1.0 - tc * tc)) * passes_clip(c, node)
            dg[t] = np.concatenate([dc * u * i * (1 - i), dh * tc * o * (1 - o),
                                    dc * c_prev * f * (1 - f), dc * i * (1 - u * u)])
            dc_next = dc * f
            dh_next = r.T @ dg[t]
        return [dg[None].astype(np.float32)]

    def c_call(self, node, cg):
        _, steps, hidden = cg.shape(node.inputs[0])
        c0 = cg.ptr(node.inputs[4]) if node.attrs.get("c0") else "NULL"
        ins = ", ".join(cg.ptr(i) for i in node.inputs[:4])
        return (f"tt_lstm_backward_f32({cg.ptr(node.outputs[0])}, {ins}, {c0}, {steps}, "
                f"{hidden}, {c_float(node.attrs.get('cell_clip', 0.0))});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * shapes[3][0] * shapes[3][1]


OPS: Sequence[OpDef] = (Lstm(), LstmBackward())
