"""The recurrent weight's gradient of a GRU or LSTM: dR += sum over steps of dhp_t h_{t-1}^T.

dhp (1, T, G) is the gradient of the recurrent projection R h_{t-1} + Rb at every step (the
LSTM's gate gradients; for a GRU, gru_hproj_grad's), y (1, T, H) the layer's outputs, and h0
the frozen initial state (zero when absent, attr `h0` false). With batch 1 the gradient is
fused with its SGD update (passes/fuse.py): each element of R is summed over the steps and
applied at once, so no gradient buffer of R's size exists.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ops.base import OpDef


class RnnBackwardRecurrent(OpDef):
    name = "rnn_backward_recurrent"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dhp, y = xs[0][0].astype(np.float64), xs[1][0].astype(np.float64)
        h0 = xs[2].astype(np.float64) if node.attrs.get("h0") else np.zeros(y.shape[1])
        prev = np.concatenate([h0[None], y[:-1]])
        return [(dhp.T @ prev).astype(np.float32)]

    def c_call(self, node, cg):
        _, steps, gates = cg.shape(node.inputs[0])
        hidden = cg.shape(node.inputs[1])[2]
        h0 = cg.ptr(node.inputs[2]) if node.attrs.get("h0") else "NULL"
        return (f"tt_rnn_backward_recurrent_f32({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {h0}, {steps}, {gates}, "
                f"{hidden});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * out_shapes[0][0] * out_shapes[0][1]


class RnnRecurrentSGD(OpDef):
    """rnn_backward_recurrent fused with SGD: inputs (dhp, y, [h0], R, [momentum]); output R.
    Each element's sum over the steps runs in the unfused kernel's order, so the update is
    bit-identical to gradient-then-SGD."""

    name = "rnn_recurrent_sgd"

    def _r(self, node) -> int:
        return 3 if node.attrs.get("h0") else 2

    def infer(self, node, shapes):
        return [shapes[self._r(node)]]

    def forward(self, node, xs):
        from tinytrain.ops.fused_update import sgd_apply

        k = self._r(node)
        grad = RnnBackwardRecurrent().forward(node, xs[:k])[0]
        return [sgd_apply(xs[k], grad, xs[k + 1] if len(xs) > k + 1 else None, node.attrs)]

    def c_call(self, node, cg):
        k = self._r(node)
        _, steps, gates = cg.shape(node.inputs[0])
        hidden = cg.shape(node.inputs[1])[2]
        h0 = cg.ptr(node.inputs[2]) if node.attrs.get("h0") else "NULL"
        m = cg.ptr(node.inputs[k + 1]) if len(node.inputs) > k + 1 else "NULL"
        return (f"tt_rnn_recurrent_sgd_f32({cg.ptr(node.inputs[k])}, {m}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {h0}, {steps}, {gates}, "
                f"{hidden}, {cg.sgd_scalars(node.attrs)});")

    def macs(self, node, shapes, out_shapes):
        return shapes[0][1] * out_shapes[0][0] * out_shapes[0][1]


OPS: Sequence[OpDef] = (RnnBackwardRecurrent(), RnnRecurrentSGD())
