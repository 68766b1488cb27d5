"""--fleet-correction: a drift-correction term in every optimizer step of a fleet's devices.

Federated devices that each see a few classes drift toward them between averages. SCAFFOLD
(Karimireddy et al., 2020) adds control variates c - c_i to every local gradient; FedProx
(Li et al., 2020) pulls toward the round's global weights with mu * (w - w_global). Both are

    p[e] -= lr * (mu * p[e] + b[e])

after each step's own updates (ops/fleet_correction.py), with b = c - c_i - mu * w_global per
trained element. So one node per trained tensor serves either method and both: the build adds
the buffers, the fleet's run chooses the method and fills them each round over the link's
state commands (tinytrain/fleet/correction.py). A term that is zero changes nothing, so a
build with the correction and b = mu = 0 trains bit for bit as one without it.

A cross-entropy loss also gets FedRS's restricted softmax (Li & Zhan, 2021): a per-class
damping d, the loss taken on logits * (1 - d), which the fleet sets to 1 - alpha for the
classes a device has no samples of, so its few classes do not push the others' logits down.

An Adam build (--optimizer adam) takes the term into its gradient instead: b and mu become
inputs of each adam node (ops/adam.py), g' = g + mu * p + b ahead of the moments, since a
correction added after Adam's step would not be scaled as the gradient is. Its SCAFFOLD
variate is the round's mean gradient (option II's (w_global - w) / (K lr) holds only for
SGD), so each trained element also gets a gradient sum, `<p>_fleet_gsum`, one float more.

Cost: b is one float per trained element, plus mu and d (one float per class): the planner
prices them as training state (report.json's sram_bytes.fleet_correction). It runs last, on
the graph the memory passes left, so b follows the parameters as stored (a packed partial
weight's trained channels).
"""

from __future__ import annotations

import zlib

from tinytrain.ir import OPT_STATE, Graph, Node, Tensor
from tinytrain.ops.base import size, trained_walk
from tinytrain.quant.update import ROUNDINGS

MU = "fleet_mu"
B_SUFFIX = "_fleet_b"
DAMP = "fleet_damp"  # per class: the restricted softmax's 1 - alpha for classes a device lacks
GSUM_SUFFIX = "_fleet_gsum"  # Adam builds: the device's gradient summed over a round


def is_fleet_state(name: str) -> bool:
    """Whether a state tensor is the correction's (its own line in the SRAM breakdown)."""
    return name in (MU, DAMP) or name.endswith(B_SUFFIX) or name.endswith(GSUM_SUFFIX)


def salt(seed: int, name: str) -> int:
    """The stochastic rounding salt of a parameter's int8 correction (apart from its update's:
    the two roundings of one step draw independent numbers)."""
    return zlib.crc32(f"{seed}:{name}:fleet".encode())


def walk(g: Graph, name: str) -> tuple[dict, tuple[int, ...]]:
    """The correction's walk over a parameter's trained elements (outer, n_ch, inner,
    channels, k; see runtime_c/reference/tt_fleet.c) and the shape of its b, which is the
    trained slice as the link hands it out (fleet.tensors.Trained.take)."""
    shape = tuple(g.t(name).shape)
    ch = g.meta.get("partial_channels", {}).get(name)
    if name in g.meta.get("split_weights", {}) or ch is None:  # whole, or stored packed
        return trained_walk(shape, {}), shape
    axis = g.meta.get("partial_axis", {}).get(name)
    w = trained_walk(shape, {"channels": ch, "channel_axis": axis})
    return w, ((w["k"], *shape[1:]) if axis == 0 else (*shape[:-1], w["k"]))


def add_fleet_correction(g: Graph) -> Graph:
    """Append a fleet_correction node per trained parameter to the update phase."""
    sgd = g.meta.get("sgd") or {}
    params = list(g.params(trainable=True))
    if not params:
        return g
    mu = Tensor(MU, (1,), OPT_STATE)
    tensors, nodes = [mu], []
    step = "rng_step"
    adam = {n.outputs[0]: n for n in g.nodes if n.op == "adam"}
    for p in params:
        attrs, b_shape = walk(g, p.name)
        b = Tensor(f"{p.name}{B_SUFFIX}", b_shape, OPT_STATE)
        tensors.append(b)
        if p.name in adam:  # into Adam's gradient, with the round's gradient sum
            gsum = Tensor(f"{p.name}{GSUM_SUFFIX}", b_shape, OPT_STATE)
            tensors.append(gsum)
            n = adam[p.name]
            assert size(g.t(n.inputs[1]).shape) == size(b_shape), p.name  # one walk
            adam[p.name] = Node(n.name, n.op, n.inputs + (b.name, mu.name, gsum.name),
                                n.outputs, n.attrs, n.phase)
            continue
        inputs = [p.name, b.name, mu.name]
        attrs |= {"lr": sgd.get("lr", 0.0), "momentum": sgd.get("momentum", 0.0)}
        if p.dtype in ("s8", "s32"):
            if step not in g.tensors and all(t.name != step for t in tensors):
                tensors.append(Tensor(step, (1,), OPT_STATE, dtype="s32"))
            inputs.append(step)
            shadow = f"{p.name}_shadow"
            if p.dtype == "s8" and shadow in g.tensors:
                inputs.append(shadow)
            attrs |= {"mode": ROUNDINGS[sgd.get("rounding", "stochastic")],
                      "salt": salt(int(sgd.get("seed", 0)), p.name)}
        nodes.append(Node(f"{p.name}_fleet", "fleet_correction", tuple(inputs), (p.name,),
                          attrs, phase="update"))
    body = tuple(adam.get(n.outputs[0], n) if n.op == "adam" else n for n in g.nodes)
    return _restrict_softmax(g.with_tensors(tensors).replace(
        nodes=body + tuple(nodes), meta={**g.meta, "fleet_correction": True}))


def _restrict_softmax(g: Graph) -> Graph:
    """A cross-entropy loss reads a per-class damping (FedRS's restricted softmax: the fleet
    sets 1 - alpha for the classes a device has no samples of; zero, the default, is the
    plain loss bit for bit)."""
    loss = [n for n in g.nodes if n.op == "softmax_ce"]
    if not loss:
        return g
    damp = Tensor(DAMP, (size(g.t(loss[0].inputs[0]).shape),), OPT_STATE)
    nodes = tuple(Node(n.name, n.op, n.inputs + (DAMP,), n.outputs, n.attrs, n.phase)
                  if n.op == "softmax_ce" else n for n in g.nodes)
    return g.with_tensors([damp]).replace(nodes=nodes)
