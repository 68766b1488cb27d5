"""Float copies of the int8 inputs that channel-streamed 1x1 weight updates read.

A channel-streamed region (passes/channel_stream.py) updates row c of an int8 1x1 weight from
channel c's gradient plane and the layer's saved int8 input x (H x W x k): every one of the C
rows converts all of x to float again, and on a Cortex-M that conversion (sign-extend, move to
the FPU, convert) costs more than the multiply-accumulate it feeds. Converted once per region
into the region's scratch, x is read as floats C times: (float)(x - zero_point) is exact, so
the update is bit-identical.

It costs H x W x k floats of scratch while the region runs, so each region keeps the copy
only when the planner's arena does not grow: in the backward of the TTE schemes those bytes
are usually free (the forward sets the arena).
"""

from __future__ import annotations

from tinytrain.ir import Graph, Node
from tinytrain.passes.channel_stream import _pointwise, each_region_within_arena


def _wants_float_x(g: Graph, n: Node) -> bool:
    """An int8 1x1 weight update of a region (depthwise ones read x through a window)."""
    return n.op == "conv2d_weight_sgd_q8" and _pointwise(n) and g.t(n.inputs[1]).dtype == "s8"


def _with_float_x(g: Graph, node: Node) -> Graph | None:
    """node with its scratch grown by a float copy of each int8 1x1 update's x."""
    a = node.attrs
    scratch = g.t(a["scratch"])
    off, xf = scratch.size, {}
    for n in a["_nodes"]:
        if _wants_float_x(g, n) and n.inputs[1] not in xf:
            xf[n.inputs[1]] = (off, int(n.attrs["x_zp"]))
            off += g.t(n.inputs[1]).size
    if not xf:
        return None
    k = node.outputs.index(a["scratch"])
    shapes = list(a["out_shapes"])
    shapes[k] = (off,)
    new = Node(node.name, node.op, node.inputs, node.outputs,
               {**a, "x_float": xf, "out_shapes": tuple(shapes)}, node.phase)
    nodes = tuple(new if m.name == node.name else m for m in g.nodes)
    return g.replace(nodes=nodes).with_tensors([scratch.replace(shape=(off,))])


def convert_update_inputs(g: Graph) -> Graph:
    """Give each channel-streamed region float copies of its int8 update inputs where the
    arena stays the same size (one region at a time, in order)."""
    return each_region_within_arena(g, _with_float_x)
