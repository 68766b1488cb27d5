"""Softmax cross-entropy on an integer label: the loss node also emits d(loss)/d(logits)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, size


def log_softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max()
    return z - np.log(np.exp(z).sum())


class SoftmaxCE(OpDef):
    """inputs (logits, label[, damp]) -> outputs (loss, pred, dlogits). attrs: scale
    (1/batch). damp (a fleet's restricted softmax, passes/fleet_correction.py): the loss is
    taken on logits * (1 - damp) per class; the prediction stays the logits' argmax."""

    name = "softmax_ce"

    def infer(self, node, shapes):
        return [(1,), (1,), shapes[0]]

    def forward(self, node, xs):
        logits, label = xs[0].reshape(-1), int(xs[1].reshape(-1)[0])
        keep = 1.0 - xs[2].reshape(-1).astype(np.float64) if len(xs) > 2 else 1.0
        lsm = log_softmax(logits * keep)
        d = np.exp(lsm)
        d[label] -= 1.0
        d = d * keep
        return [np.array([-lsm[label]], np.float32), np.array([int(logits.argmax())], np.int32),
                (d * node.attrs.get("scale", 1.0)).astype(np.float32).reshape(xs[0].shape)]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        fn, damp = ("tt_softmax_ce_damped_f32", f", {cg.ptr(node.inputs[2])}") \
            if len(node.inputs) > 2 else ("tt_softmax_ce_f32", "")
        return (f"{cg.ptr(node.outputs[0])}[0] = {fn}({cg.ptr(node.outputs[2])}, "
                f"{cg.ptr(node.inputs[0])}, {n}, {cg.ptr(node.inputs[1])}[0], 1.0f, "
                f"{cg.ptr(node.outputs[1])}{damp});")


class MSE(OpDef):
    """inputs (y, target) -> outputs (loss, pred, dy): mean squared error for regressors."""

    name = "mse"

    def infer(self, node, shapes):
        return [(1,), (1,), shapes[0]]

    def forward(self, node, xs):
        y, t = xs[0].astype(np.float64), xs[1].astype(np.float64).reshape(xs[0].shape)
        loss = np.mean((y - t) ** 2)
        d = 2.0 * (y - t) / y.size
        return [np.array([loss], np.float32), np.array([int(y.reshape(-1).argmax())], np.int32),
                d.astype(np.float32)]

    def c_call(self, node, cg):
        n = size(cg.shape(node.inputs[0]))
        return (f"{cg.ptr(node.outputs[0])}[0] = tt_mse_f32({cg.ptr(node.outputs[2])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {n}, 1.0f); "
                f"{cg.ptr(node.outputs[1])}[0] = 0;")



class Softmax(OpDef):
    """Inference head only: a trailing Softmax/LogSoftmax is folded into the loss for training."""

    name = "softmax"
    public = True
    source_ops = ("Softmax", "LogSoftmax", "SOFTMAX")
    has_gradient = False

    def infer(self, node, shapes):
        return [shapes[0]]

    def forward(self, node, xs):
        lsm = log_softmax(xs[0].reshape(-1)).reshape(xs[0].shape)
        return [(lsm if node.attrs.get("log") else np.exp(lsm)).astype(np.float32)]

    def c_call(self, node, cg):
        fn = "tt_log_softmax_f32" if node.attrs.get("log") else "tt_softmax_f32"
        return (f"{fn}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{size(cg.shape(node.inputs[0]))});")


OPS = (SoftmaxCE(), MSE(), Softmax())
