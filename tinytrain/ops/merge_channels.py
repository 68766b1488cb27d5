"""Reassemble a tensor from two parts that hold complementary sets of its last-axis channels.

A split partial update (passes/split_weights.py) keeps only the trained input channels of a
weight in SRAM and the others in flash: a forward layer gets the whole int8 weight back in a
transient arena buffer from this op, and an input gradient computed per part (fp32) is put
together by it. attrs: channels (trained, in the packed order), rest
(the other input channels, in the frozen part's order).
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, channel_run, size


class MergeChannels(OpDef):
    name = "merge_channels"
    has_gradient = False

    def infer(self, node, shapes):
        return [tuple(shapes[0][:-1]) + (len(node.attrs["channels"]) + len(node.attrs["rest"]),)]

    def forward(self, node, xs):
        trained, rest = xs
        out = np.empty(self.infer(node, [trained.shape])[0], trained.dtype)
        out[..., list(node.attrs["channels"])] = trained
        out[..., list(node.attrs["rest"])] = rest
        return [out]

    def c_call(self, node, cg):
        shape = cg.shape(node.outputs[0])
        rows, c = size(shape[:-1]), shape[-1]
        y = cg.ptr(node.outputs[0])
        calls = []
        for k, key in enumerate(("channels", "rest")):
            ch, first = node.attrs[key], channel_run(node.attrs[key])
            kernel = "tt_scatter_channels_s8" if cg.g.t(node.outputs[0]).dtype == "s8" else \
                "tt_scatter_channels_f32"
            if first is not None:
                dst, idx = (f"({y} + {first})" if first else y), "NULL"
            else:
                dst, idx = y, cg.ints(ch)
            calls.append(f"{cg.kernel(kernel)}({dst}, {cg.ptr(node.inputs[k])}, {rows}, {c}, "
                         f"{idx}, {len(ch)});")
        return " ".join(calls)

    def macs(self, node, shapes, out_shapes):
        return 0


OPS = (MergeChannels(),)
