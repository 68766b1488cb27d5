"""Attach the training loss to the model output: softmax cross-entropy or mean squared error."""

from __future__ import annotations

from tinytrain.errors import ModelError
from tinytrain.ir import ACTIVATION, GRAD, LABEL, LOSS, Graph, Node, Tensor

LOSSES = ("ce", "mse")


def add_loss(g: Graph, loss: str = "ce") -> Graph:
    if loss not in LOSSES:
        raise ModelError(f"unknown loss '{loss}'; choose one of: {', '.join(LOSSES)}")
    logits = g.outputs[0]
    shape = g.t(logits).shape
    extra: list[Tensor] = []
    pre: tuple[Node, ...] = ()
    if g.t(logits).dtype == "s8":  # int8 model: the loss works on real-valued logits
        real = Tensor(f"{logits}_real", shape, ACTIVATION)
        extra.append(real)
        pre = (_real_logits(g, logits, real.name),)
        logits = real.name
    if loss == "ce" and len(shape) != 1:
        raise ModelError(
            f"cross-entropy needs a (N, classes) model output, but the output has per-sample "
            f"shape {shape}; use --loss mse for regressors or dense outputs")
    if loss == "ce":
        label = Tensor("label", (1,), LABEL, dtype="s32")
    else:
        label = Tensor("target", shape, LABEL)
    new = [label, Tensor("loss", (1,), LOSS), Tensor("pred", (1,), LOSS, dtype="s32"),
           Tensor(f"{logits}_grad", shape, GRAD)]
    node = Node("loss", "softmax_ce" if loss == "ce" else "mse", (logits, label.name),
                ("loss", "pred", f"{logits}_grad"), {}, phase="loss")
    meta = {**g.meta, "loss": loss}
    return g.with_tensors(new + extra).replace(nodes=g.nodes + pre + (node,), meta=meta)


def _real_logits(g: Graph, logits: str, real: str) -> Node:
    """The node giving the loss the int8 logits' real values: a linear int8 dense head's
    accumulators scaled to reals (dense_logits_q8: no 8-bit rounding, no saturation), any
    other producer's output dequantised."""
    head = next((n for n in g.nodes if logits in n.outputs), None)
    if head is not None and head.op == "dense_q8" and \
            (head.attrs["act_min"], head.attrs["act_max"]) == (-128, 127):
        return Node(f"{logits}_logits", "dense_logits_q8", head.inputs, (real,),
                    dict(head.attrs))
    q = g.t(logits).quant
    assert q is not None
    return Node(f"{logits}_dequantize", "dequantize_q8", (logits,), (real,),
                {"scale": q.scale[0], "zp": q.zero_point[0]})
