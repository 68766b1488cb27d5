"""Copy selected channels (last axis) of a saved activation for a partial weight update.
attrs: `channels`; `flat`: index the whole tensor flattened (a dense layer's input features)."""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, channel_run, size


class GatherChannels(OpDef):
    name = "gather_channels"
    has_gradient = False  # inserted after autodiff; its output only feeds a weight gradient

    def infer(self, node, shapes):
        keep = () if node.attrs.get("flat") else tuple(shapes[0][:-1])
        return [keep + (len(node.attrs["channels"]),)]

    def forward(self, node, xs):
        x = xs[0].reshape(-1) if node.attrs.get("flat") else xs[0]
        return [np.ascontiguousarray(x[..., list(node.attrs["channels"])])]

    def c_call(self, node, cg):
        x = cg.shape(node.inputs[0])
        if node.attrs.get("flat"):
            x = (size(x),)
        ch = node.attrs["channels"]
        src, first = cg.ptr(node.inputs[0]), channel_run(ch)
        if first is not None:
            src, idx = (f"({src} + {first})" if first else src), "NULL"
        else:
            idx = cg.ints(ch)
        kernel = "tt_gather_channels_s8" if cg.g.t(node.inputs[0]).dtype == "s8" else \
            "tt_gather_channels_f32"
        return (f"{cg.kernel(kernel)}({cg.ptr(node.outputs[0])}, {src}, "
                f"{size(x[:-1])}, {x[-1]}, {idx}, {len(ch)});")


OPS = (GatherChannels(),)
