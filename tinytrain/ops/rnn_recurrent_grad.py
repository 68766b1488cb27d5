"""The recurrent projection's parameter gradients of a GRU or LSTM, with and without their
fused SGD update: dR += sum over steps of dhp_t h_{t-1}^T, and for a GRU dRb += sum of dhp_t.

dhp (1, T, G) is the gradient of the recurrent projection R h_{t-1} + Rb at every step. For an
LSTM it is the gate gradients. For a GRU it is the input projection's gradients dx with the n
rows times the reset gate r (which multiplies R_n h + Rb_n): these ops read dx and the GRU's
gates and scale on the fly (attr `reset` true, gates the last input before R), so dhp is never
stored. y (1, T, H) holds the layer's outputs and h0 the frozen initial state (zero when
absent, attr `h0` false).

With batch 1 each gradient is fused with its SGD update (passes/fuse.py): an element of R or
Rb is summed over the steps and applied at once, in the unfused kernel's order, so the result
is bit-identical and no gradient buffer of R's size exists.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef


def _dhp(node, dx: np.ndarray, gates: np.ndarray | None) -> np.ndarray:
    """(T, G) recurrent-projection gradients: dx itself, or a GRU's dx with n scaled by r."""
    d = dx[0].astype(np.float32)
    if gates is None:
        return d
    h = d.shape[1] // 3
    d = d.copy()
    d[:, 2 * h:] = d[:, 2 * h:] * gates[0, :, h:2 * h].astype(np.float32)
    return d


def _grad_inputs(node) -> int:
    """How many inputs the gradient itself reads: dx, y, then h0 and the gates if present."""
    return 2 + bool(node.attrs.get("h0")) + bool(node.attrs.get("reset"))


def _grad_args(node, cg) -> str:
    """The C arguments both R kernels share: dx, y, h0, reset, steps, gates, hidden."""
    _, steps, gates = cg.shape(node.inputs[0])
    hidden = cg.shape(node.inputs[1])[2]
    h0 = cg.ptr(node.inputs[2]) if node.attrs.get("h0") else "NULL"
    reset = cg.ptr(node.inputs[_grad_inputs(node) - 1]) if node.attrs.get("reset") else "NULL"
    return (f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {h0}, {reset}, {steps}, "
            f"{gates}, {hidden}")


class RnnBackwardRecurrent(OpDef):
    """inputs (dx, y, [h0], [gates]) -> dR (G, H)."""

    name = "rnn_backward_recurrent"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        gates = xs[_grad_inputs(node) - 1] if node.attrs.get("reset") else None
        dhp = _dhp(node, xs[0], gates).astype(np.float64)
        y = xs[1][0].astype(np.float64)
        h0 = xs[2].astype(np.float64) if node.attrs.get("h0") else np.zeros(y.shape[1])
        prev = np.concatenate([h0[None], y[:-1]])
        return [(dhp.T @ prev).astype(np.float32)]

    def c_call(self, node, cg):
        return (f"tt_rnn_backward_recurrent_f32({cg.ptr(node.outputs[0])}, "
                f"{_grad_args(node, cg)});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * out_shapes[0][0] * out_shapes[0][1]


class RnnRecurrentSGD(OpDef):
    """rnn_backward_recurrent fused with SGD: inputs (dx, y, [h0], [gates], R, [momentum]);
    output R."""

    name = "rnn_recurrent_sgd"

    def infer(self, node, shapes):
        return [shapes[_grad_inputs(node)]]

    def forward(self, node, xs):
        from tinytrain.ops.fused_update import sgd_apply

        k = _grad_inputs(node)
        grad = RnnBackwardRecurrent().forward(node, xs[:k])[0]
        return [sgd_apply(xs[k], grad, xs[k + 1] if len(xs) > k + 1 else None, node.attrs)]

    def c_call(self, node, cg):
        k = _grad_inputs(node)
        m = cg.ptr(node.inputs[k + 1]) if len(node.inputs) > k + 1 else "NULL"
        return (f"tt_rnn_recurrent_sgd_f32({cg.ptr(node.inputs[k])}, {m}, "
                f"{_grad_args(node, cg)}, {cg.sgd_scalars(node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * out_shapes[0][0] * out_shapes[0][1]


class GruBiasBackward(OpDef):
    """A GRU's Rb gradient, the sum over steps of dhp: inputs (dx, gates) -> dRb (3H,)."""

    name = "gru_bias_backward"

    def infer(self, node, shapes):
        return [(shapes[0][-1],)]

    def forward(self, node, xs):
        return [_dhp(node, xs[0], xs[1]).sum(axis=0)]

    def c_call(self, node, cg):
        _, steps, gates = cg.shape(node.inputs[0])
        return (f"tt_gru_bias_backward_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {steps}, {gates // 3});")


class GruBiasSGD(OpDef):
    """gru_bias_backward fused with SGD: inputs (dx, gates, Rb, [momentum]); output Rb."""

    name = "gru_bias_sgd"

    def infer(self, node, shapes):
        return [shapes[2]]

    def forward(self, node, xs):
        from tinytrain.ops.fused_update import sgd_apply

        grad = _dhp(node, xs[0], xs[1]).sum(axis=0)
        return [sgd_apply(xs[2], grad, xs[3] if len(xs) > 3 else None, node.attrs)]

    def c_call(self, node, cg):
        _, steps, gates = cg.shape(node.inputs[0])
        m = cg.ptr(node.inputs[3]) if len(node.inputs) > 3 else "NULL"
        return (f"tt_gru_bias_sgd_f32({cg.ptr(node.inputs[2])}, {m}, {cg.ptr(node.inputs[0])}, "
                f"{cg.ptr(node.inputs[1])}, {steps}, {gates // 3}, "
                f"{cg.sgd_scalars(node.attrs)});")


OPS: Sequence[OpDef] = (RnnBackwardRecurrent(), RnnRecurrentSGD(), GruBiasBackward(),
                        GruBiasSGD())
