"""`--receive PLAN`: frozen tensors a device can be sent over the link.

A mixed fleet's classes train different parts of one model. When a device runs its frozen
tensors as the model was built, a tensor one class trains takes different values on the
devices of another, so the classes compute different functions and cannot average what they
share (fleet/shares.py keeps a copy per class instead, each learning from its own devices
only). A device built with `--receive PLAN` holds every tensor PLAN trains and this build
freezes as *received*: still in flash and read in place by the kernels, but replaceable over
the link. The host streams new values into the checkpoint slot the device is not using, and a
commit switches the kernels to them atomically (firmware/tt_checkpoint.h, version 3). A fleet
then sends each device the current values of what the other classes train, and every class
runs the same model.

The received tensors are whole parameters. A weight this build trains in part (some input
channels) while PLAN trains others cannot be received: the device stores its trained channels
apart from the frozen rest (passes/split_weights.py), so the rest is refused with a clear error.
"""

from __future__ import annotations

from tinytrain.errors import OptionError
from tinytrain.ir import PARAM, Graph
from tinytrain.passes.update_plan import LayerUpdate, UpdatePlan, layers

RECEIVED = "received"  # g.meta: the received tensors' names, in the order the link sends them


def union(a: UpdatePlan, b: UpdatePlan) -> UpdatePlan:
    """Every parameter either plan trains (a weight's channels: the union of both)."""
    def both(x: LayerUpdate, y: LayerUpdate) -> LayerUpdate:
        if not (x.weight or y.weight):
            channels = None
        elif x.weight and y.weight and x.channels is not None and y.channels is not None:
            channels = tuple(sorted(set(x.channels) | set(y.channels)))
        elif x.weight and y.weight:
            channels = None
        else:
            channels = x.channels if x.weight else y.channels
        return LayerUpdate(x.bias or y.bias, x.weight or y.weight, channels)
    return UpdatePlan(f"{a.spec}+{b.spec}",
                      tuple(both(x, y) for x, y in zip(a.layers, b.layers, strict=True)))


def received_params(g: Graph, update: UpdatePlan, receive: UpdatePlan) -> list[str]:
    """The parameters `receive` trains that `update` freezes whole, in layer order (weight
    before bias). A weight `update` trains in part and `receive` trains beyond those channels
    is an error: its frozen rest cannot be received."""
    out: list[str] = []
    for ly, up, rc in zip(layers(g), update.layers, receive.layers, strict=True):
        if rc.weight:
            if not up.weight:
                out.append(ly.weight)
            elif up.channels is not None and (
                    rc.channels is None or not set(rc.channels) <= set(up.channels)):
                theirs = "all input channels" if rc.channels is None else _channels(rc.channels)
                raise OptionError(
                    f"--receive: layer {ly.index} ({ly.source}) trains {_channels(up.channels)} "
                    f"of its weight here and {theirs} in the received plan; a device cannot "
                    "receive the rest of a weight it trains in part. Train the same channels "
                    "of it in both plans, all of them, or none here")
        if rc.bias and ly.bias and not up.bias:
            out.append(ly.bias)
    return out


def _channels(channels: tuple[int, ...]) -> str:
    if len(channels) == 1:
        return f"input channel {channels[0]}"
    run = channels == tuple(range(channels[0], channels[-1] + 1))
    return "input channels " + (f"{channels[0]}-{channels[-1]}" if run
                                else ", ".join(map(str, channels)))


def mark_received(g: Graph, update: UpdatePlan, receive: UpdatePlan) -> Graph:
    """The graph with g.meta["received"] naming the received tensors (see the module)."""
    names = [n for n in received_params(g, update, receive) if g.t(n).kind == PARAM]
    return g.replace(meta={**g.meta, RECEIVED: names, "receive": receive.spec})


def received(g: Graph) -> list[str]:
    """The received tensors of a compiled graph, in link order."""
    return [n for n in g.meta.get(RECEIVED, []) if n in g.tensors]
