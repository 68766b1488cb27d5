"""Keep a global average pool's gradient per channel instead of broadcasting it.

The backward of y[c] = mean over H x W of x[., ., c] gives every pixel of channel c the same
value v[c] = dL/dy[c] / (H*W). global_avg_pool_backward writes all H x W x C of them as
floats; the ReLU/ReLU6 backward then zeroes some (by its mask or saved activation), and the
conv that produced the pool input reads the result for its bias, weight and input gradients.
On MobileNetV2 with a 1280-channel feature-mix conv that tensor is 4 x 4 x 1280 floats,
80 KB, the largest buffer of the backward pass.

This pass keeps v (C floats) instead: global_avg_pool_share computes it, and each reader of
the broadcast (masked) gradient becomes a pooled_grad node that reads v and the activation's
gate element by element (ops/pooled_grad.py), adding the same floats in the same order. The
H x W x C gradient never exists. It applies when every reader of that gradient is a conv
input/weight/bias gradient (or its fused update), through at most one ReLU-style gate; it is
kept only if the planner's arena, or else the backward's peak, shrinks.
"""

from __future__ import annotations

from collections.abc import Callable

from tinytrain.ir import GRAD, Graph, Node
from tinytrain.ops.base import size
from tinytrain.ops.pooled_grad import INNER
from tinytrain.passes.inplace import run_in_place
from tinytrain.passes.memory_plan import peak_live, plan_memory

GATES = {"mask_backward": "mask", "q8_clamp_backward": "s8", "clip_backward": "f32"}


def _pooled(reader: Node, v: str, gate: Node | None, shape: tuple[int, ...]) -> Node:
    attrs = {**reader.attrs, "inner": reader.op, "dy_shape": shape}
    if gate is None:
        attrs["gate"] = "none"
        ins: tuple[str, ...] = (v,)
    else:
        attrs["gate"] = GATES[gate.op]
        if gate.op != "mask_backward":
            attrs["lo"], attrs["hi"] = gate.attrs["lo"], gate.attrs["hi"]
        ins = (v, gate.inputs[1])
    return Node(reader.name, "pooled_grad", ins + reader.inputs[1:], reader.outputs, attrs,
                reader.phase)


def _rewrite(g: Graph, pool: Node, readers: dict[str, list[Node]]) -> dict[str, Node | None]:
    """node name -> its replacement (None: dropped) for one pool backward, or {} when some
    reader of the broadcast gradient cannot read the per-channel vector."""
    grad = pool.outputs[0]
    shape = tuple(g.t(grad).shape)
    if len(shape) != 3 or grad in g.outputs:
        return {}
    v = f"{grad}_per_channel"
    out: dict[str, Node | None] = {
        pool.name: Node(pool.name, "global_avg_pool_share", pool.inputs, (v,),
                        {"rows": size(shape[:-1])}, pool.phase)}
    for r in readers.get(grad, []):
        gate: Node | None = None
        dy, users = grad, [r]
        if r.op in GATES and r.inputs[0] == grad and grad not in r.inputs[1:]:
            gate, dy = r, r.outputs[0]
            users = readers.get(dy, [])
            if dy in g.outputs or not users:
                return {}
            out[r.name] = None
        for u in users:
            if (u.op not in INNER or u.inputs[0] != dy or dy in u.inputs[1:]
                    or u.name in out or u.attrs.get("master")):
                return {}
            out[u.name] = _pooled(u, v, gate, shape)
    return out


def _cost(g: Graph, later: Callable[[Graph], Graph]) -> tuple[int, int]:
    g = run_in_place(later(g))
    return plan_memory(g).arena_size, peak_live(g, "backward")


def keep_pool_gradient_per_channel(g: Graph,
                                   later: Callable[[Graph], Graph] = lambda g: g) -> Graph:
    """`later`: the pass that runs next and may want the same readers (the compiler passes
    channel streaming: a 1x1 conv's input gradient reading the pool's gradient is also where
    a channel-streamed region starts). Both candidates are judged after it and the in-place
    pass, so the one that leaves the smaller arena, or else backward peak, wins."""
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in dict.fromkeys(n.inputs):
            readers.setdefault(i, []).append(n)
    changes: dict[str, Node | None] = {}
    for pool in (n for n in g.nodes if n.op == "global_avg_pool_backward"):
        changes.update(_rewrite(g, pool, readers))
    if not changes:
        return g
    kept = tuple(n for n in (changes.get(m.name, m) for m in g.nodes) if n is not None)
    used = {t for n in kept for t in n.inputs + n.outputs}
    tensors = {k: t for k, t in g.tensors.items() if k in used or t.kind != GRAD}
    for n in kept:
        if n.op == "global_avg_pool_share":
            src = g.t(n.inputs[0])
            tensors[n.outputs[0]] = src.replace(name=n.outputs[0], alias_of=None, kind=GRAD)
    out = g.replace(nodes=kept, tensors=tensors,
                    meta={**g.meta, "pooled_grads": sorted(
                        n.name for n in kept if n.op == "global_avg_pool_share")})
    return out if _cost(out, later) < _cost(g, later) else g
