"""`--new-head`: room for an int8 classifier that training will grow (a fresh head).

An int8 model's ranges were fixed by quantisation: the classifier's weights per channel by
their largest value, its logits by calibration. A head re-initialised for new classes starts
with small random weights and near-zero logits, so both ranges are a fraction of what the
trained head needs (measured on the MobileNetV2-style bench: weights grow 3-5x, logits from
[-1.5, 0.7] to [-5.3, 8.3]). Int8 training then saturates: weights clip, logits tie at 127 and
the argmax and the loss both go wrong (22 points below fp32 in that bench).

This pass widens, before training is added:
- the classifier's weight scales by HEAD_WEIGHT_HEADROOM (values requantised to the coarser
  grid, the int32 bias to its new scale s_x * s_w);
- its output (the logits) to cover at least [-LOGIT_SPAN, LOGIT_SPAN].
The requantisation multipliers follow. The head's initial forward therefore differs from the
file's by the coarser rounding: meant for a head whose values are about to be learned.
"""

from __future__ import annotations

import dataclasses

from tinytrain.errors import ModelError
from tinytrain.ir import Graph, Node, QuantParams
from tinytrain.passes.weight_headroom import rescaled_weight
from tinytrain.quant.params import affine_from_range, requant

HEAD_WEIGHT_HEADROOM = 8.0  # 3 bits: the bench's fresh head grew 4.6x; leave margin
LOGIT_SPAN = 16.0  # softmax margin beyond which the cross-entropy gradient is < 1e-7
HEAD_OPS = ("dense_q8", "conv2d_q8")


def widen_new_head(g: Graph) -> Graph:
    """The int8 graph with its classifier's weight and logit ranges widened (see above)."""
    out = g.outputs[0]
    node = next((n for n in g.nodes if out in n.outputs), None)
    if node is None or node.op not in HEAD_OPS:
        have = "an fp32 model" if g.t(out).dtype != "s8" else \
            f"'{node.op if node else 'an input'}' producing the output"
        raise ModelError(f"--new-head widens an int8 classifier (the conv or dense layer that "
                         f"produces the model's output); this model has {have}. Drop "
                         "--new-head (an fp32 head needs no room to grow)")
    a = node.attrs
    if (a["act_min"], a["act_max"]) != (-128, 127):
        raise ModelError(f"--new-head: the classifier {node.name} has a fused activation; "
                         "a logit layer is expected to be linear")
    new = rescaled_weight(g, node, HEAD_WEIGHT_HEADROOM)
    wt, w_scale = g.t(node.inputs[1]), new[0].quant.scale
    bt, b_scale = (g.t(node.inputs[2]), new[1].quant.scale) if len(new) > 1 else (None, None)
    x_scale = a["x_scale"]
    yt = g.t(out)
    assert yt.quant is not None
    lo = yt.quant.scale[0] * (-128 - yt.quant.zero_point[0])
    hi = yt.quant.scale[0] * (127 - yt.quant.zero_point[0])
    y_scale, y_zp = affine_from_range(min(lo, -LOGIT_SPAN), max(hi, LOGIT_SPAN))
    new.append(yt.replace(quant=QuantParams((y_scale,), (y_zp,), None)))
    attrs = {**a, **requant(x_scale, a["x_zp"], w_scale, y_scale, y_zp, "NONE", (-128, 127))}
    swap = {node.name: dataclasses.replace(node, attrs=attrs)}
    for c in g.nodes:
        if out in c.inputs and c is not node:
            swap[c.name] = _rescaled_consumer(g, c, yt.quant, new[-1].quant)
    nodes = tuple(swap.get(n.name, n) for n in g.nodes)
    # what an export needs to write the widened quantisation back (export_tflite.py)
    meta = {**g.meta, "new_head": {
        "layer": node.name, "weight_headroom": HEAD_WEIGHT_HEADROOM,
        "logits": [float(y_scale * (-128 - y_zp)), float(y_scale * (127 - y_zp))],
        "weight": wt.name, "weight_scale": list(w_scale),
        "bias": bt.name if b_scale else None, "bias_scale": list(b_scale) if b_scale else None,
        "logits_quant": [y_scale, y_zp]}}
    return g.with_tensors(new).replace(nodes=nodes, meta=meta)


def _rescaled_consumer(g: Graph, c: Node, old: QuantParams, new: QuantParams) -> Node:
    """A TFLite SOFTMAX kept for inference reads the logits: prepared again for their new
    scale (beta 1, the only beta checked here: its attrs must match the old scale's)."""
    from tinytrain.ops import softmax_q8

    if c.op == "softmax_q8":
        out_q = g.t(c.outputs[0]).quant
        if dict(c.attrs) == softmax_q8.prepare(old, out_q):
            return dataclasses.replace(c, attrs=softmax_q8.prepare(new, out_q))
    raise ModelError(f"--new-head: the logits also feed {c.name} ({c.op}), which --new-head "
                     "cannot rescale (a softmax with beta 1 is the only consumer supported)")
