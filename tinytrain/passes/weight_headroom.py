"""Room for the int8 weights training moves (`--weight-headroom`, models tinytrain quantises).

Post-training quantisation gives each output channel the scale max|w| / 127, so that channel's
largest weight sits at the clamp: a trained weight cannot grow past where calibration left it.
Fine-tuning grows some: on bench/auto_plan.py's MobileNetV2, fp32 training of the 64 KB plan
(16 pointwise convs at 1/8 of their input channels) left 1-18 % of the trained elements of a
layer beyond their channel's original max, up to 2.2x; int8 clipped them, and the 1-byte shadow
ended 1.4 points below fp32 (batch 8, 40 sample orders), +-0.1 with 2x room.

This pass widens the per-channel scales of every int8 weight the update plan trains by
`headroom` (values requantised to the coarser grid, the int32 bias to its new scale s_x * s_w,
the requantisation multipliers recomputed). The forward of those layers then rounds their
weights one bit coarser (headroom 2) from the start: a price paid only in layers that train.
A `--new-head` classifier keeps its own, wider room (passes/new_head.py). A model that was
already int8 keeps the scales of its file (a TFLite export writes the integers back in place),
so the pass applies only with `--quantize int8`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tinytrain.errors import OptionError
from tinytrain.ir import Graph, Node, QuantParams, Tensor
from tinytrain.passes.update_plan import UpdatePlan, layers
from tinytrain.quant.params import channel_multiplier

# 1 bit: fp32 fine-tuning of the bench's partial plans grew trained weights up to 2.2x their
# channel's max, most of those that grew past it by less than 2x
TRAINED_WEIGHT_HEADROOM = 2.0
MAX_HEADROOM = 64.0  # 6 bits: beyond this an int8 weight keeps fewer than 2 bits of itself
WIDENED = ("conv2d_q8", "dense_q8")


def check_headroom(headroom: float) -> None:
    if not 1.0 <= headroom <= MAX_HEADROOM:
        raise OptionError(f"--weight-headroom must be between 1 (the calibrated scales) and "
                          f"{MAX_HEADROOM:g}, got {headroom:g}")


def widen_trained_weights(g: Graph, plan: UpdatePlan, headroom: float) -> Graph:
    """The graph with the scales of the int8 weights `plan` trains widened by `headroom`
    (the `--new-head` classifier excepted); g.meta["weight_headroom"] records what changed."""
    check_headroom(headroom)
    head = (g.meta.get("new_head") or {}).get("weight")
    trained = {ly.weight for ly, up in zip(layers(g), plan.layers, strict=True)
               if up.weight and ly.weight != head}
    if headroom == 1.0 or not trained:
        return g
    new: list[Tensor] = []
    swap: dict[str, Node] = {}
    for node in g.nodes:
        if node.op in WIDENED and node.inputs[1] in trained:
            swap[node.name] = _widen(g, node, headroom, new)
    if not swap:
        return g
    nodes = tuple(swap.get(n.name, n) for n in g.nodes)
    meta = {**g.meta, "weight_headroom": {"factor": headroom,
                                          "weights": sorted(n.inputs[1] for n in swap.values())}}
    return g.with_tensors(new).replace(nodes=nodes, meta=meta)


def rescaled_weight(g: Graph, node: Node, factor: float) -> list[Tensor]:
    """A conv/dense int8 node's weight with its per-channel scales times `factor` (values
    requantised to the coarser grid) and its int32 bias, if any, at the new s_x * s_w: the
    weight first, then the bias. Shared with passes/new_head.py."""
    wt = g.t(node.inputs[1])
    assert wt.quant is not None and wt.data is not None
    w_scale = tuple(float(np.float32(s * factor)) for s in wt.quant.scale)
    per = np.asarray(wt.quant.scale, np.float64) / np.asarray(w_scale, np.float64)
    shape = (-1,) + (1,) * (wt.data.ndim - 1)
    w = np.clip(np.round(wt.data.astype(np.float64) * per.reshape(shape)), -127, 127)
    out = [wt.replace(data=w.astype(np.int8),
                      quant=QuantParams(w_scale, wt.quant.zero_point, wt.quant.axis))]
    bt = g.t(node.inputs[2]) if len(node.inputs) > 2 else None
    if bt is not None and bt.data is not None:
        b_scale = tuple(float(np.float32(node.attrs["x_scale"])) * s for s in w_scale)
        b = np.round(bt.data.astype(np.float64) * per)
        out.append(bt.replace(data=np.clip(b, -(2**31), 2**31 - 1).astype(np.int32),
                              quant=QuantParams(b_scale, (0,) * len(b_scale), 0)))
    return out


def _widen(g: Graph, node: Node, headroom: float, new: list[Tensor]) -> Node:
    a = node.attrs
    rescaled = rescaled_weight(g, node, headroom)
    new.extend(rescaled)
    w_scale = rescaled[0].quant.scale
    # the output's scale and the fused activation's bounds stay: only the multipliers follow
    mult, shift = zip(*(channel_multiplier(float(a["x_scale"]) * s / float(a["y_scale"]))
                        for s in w_scale), strict=True)
    return dataclasses.replace(node, attrs={**a, "mult": tuple(mult), "shift": tuple(shift),
                                            "w_scale": w_scale})
