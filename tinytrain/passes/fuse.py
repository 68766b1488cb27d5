"""Fuse each weight/bias gradient with its SGD update (batch 1 only).

With one sample per step the accumulated gradient is just this sample's gradient, so the
update can be applied element by element as the gradient is summed: the gradient buffer
disappears and the update happens as early as the backward pass allows (TTE's "apply
immediately"). The fused node sits where the gradient node was, which is after the layer's
input-gradient node (the last reader of the old weights).
"""

from __future__ import annotations

from tinytrain.ir import PARAM_GRAD, Graph, Node

FUSED = {("conv2d_backward_weight", "sgd"): "conv2d_weight_sgd",
         ("dense_backward_weight", "sgd"): "dense_weight_sgd",
         ("bias_backward", "sgd"): "bias_sgd",
         ("conv2d_backward_weight_q8", "sgd_q8"): "conv2d_weight_sgd_q8",
         ("dense_backward_weight_q8", "sgd_q8"): "dense_weight_sgd_q8",
         ("bias_backward", "sgd_q8"): "bias_sgd_q8",
         ("dw_backward_weight_partial", "sgd"): "dw_weight_sgd_partial",
         ("dw_backward_weight_partial_q8", "sgd_q8"): "dw_weight_sgd_partial_q8",
         ("rnn_backward_recurrent", "sgd"): "rnn_recurrent_sgd",
         ("gru_bias_backward", "sgd"): "gru_bias_sgd"}
UPDATE_ATTRS = ("lr", "momentum", "wd", "channels", "step", "mode", "salt", "packed_cin",
                "channel_axis")


def fuse_updates(g: Graph) -> Graph:
    if g.meta.get("sgd", {}).get("batch", 1) != 1:
        return g  # a batch needs the accumulated gradient
    writers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for o in n.outputs:
            if g.t(o).kind == PARAM_GRAD:
                writers.setdefault(o, []).append(n)
    position = {n.name: k for k, n in enumerate(g.nodes)}
    replace: dict[str, Node] = {}
    drop: set[str] = set()
    for u in (n for n in g.nodes if n.op in ("sgd", "sgd_q8")):
        p, gname = u.inputs[0], u.inputs[1]
        ws = writers.get(gname, [])
        if len(ws) != 1 or (ws[0].op, u.op) not in FUSED:
            continue
        w = ws[0]
        later_readers = [n for n in g.nodes if p in n.inputs and n is not u
                         and position[n.name] > position[w.name]]
        if later_readers:
            continue  # someone still needs the old value after the gradient is known
        attrs = {**w.attrs, **{k: u.attrs[k] for k in UPDATE_ATTRS if k in u.attrs}}
        attrs.pop("out_shape", None)
        inputs = w.inputs + (p,) + u.inputs[2:]
        replace[w.name] = Node(w.name + "_sgd", FUSED[(w.op, u.op)], inputs, (p,), attrs,
                               "backward")
        drop.update({u.name})
        drop.add(gname)
    nodes = tuple(replace.get(n.name, n) for n in g.nodes if n.name not in drop)
    tensors = {k: t for k, t in g.tensors.items() if k not in drop}
    return g.replace(nodes=nodes, tensors=tensors, meta={**g.meta, "fused": sorted(replace)})
