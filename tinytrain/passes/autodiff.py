"""Compile-time reverse-mode autodiff: a walk over the forward nodes using each op's rule.

Parameter gradients are accumulated (+=) into persistent PARAM_GRAD buffers so a batch is
gradient accumulation over single samples and memory does not grow with the batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinytrain.errors import ModelError
from tinytrain.ir import GRAD, PARAM, PARAM_GRAD, Graph, Node, Tensor
from tinytrain.ops import get_op


def needs_grad_set(g: Graph) -> set[str]:
    """Tensors whose gradient is needed: trainable params and activations that depend on one."""
    req = {t.name for t in g.params(trainable=True)}
    for n in g.nodes:
        if n.phase == "forward" and any(i in req for i in n.inputs):
            req.update(n.outputs)
    return req


class _Builder:
    def __init__(self, g: Graph) -> None:
        self.g = g
        self.tensors: dict[str, Tensor] = dict(g.tensors)
        self.nodes: list[Node] = []
        self.req = needs_grad_set(g)
        self.contribs: dict[str, list[str]] = {}
        self.names: set[str] = {n.name for n in g.nodes}
        self.current = ""

    # GradBuilder interface ------------------------------------------------------------
    def grad(self, tensor: str) -> str | None:
        parts = self.contribs.get(tensor)
        if not parts:
            return None
        while len(parts) > 1:  # fan-in: sum contributions pairwise, in a fixed order
            a, b = parts[0], parts[1]
            parts[:2] = [self.emit("accumulate", [a, b])]
        return parts[0]

    def needs_grad(self, tensor: str) -> bool:
        return tensor in self.req

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.tensors[tensor].shape

    def emit(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None,
             out_shape: tuple[int, ...] | None = None) -> str:
        attrs = dict(attrs or {})
        if out_shape is not None:
            attrs["out_shape"] = tuple(out_shape)
        name = self._name(f"{self.current}_{op}")
        out = self._tensor_name(f"{name}_out")
        probe = Node(name, op, tuple(inputs), (out,), attrs, phase="backward")
        shape = get_op(op).infer(probe, [self.tensors[i].shape for i in inputs])[0]
        alias = inputs[0] if op == "reshape" else None
        self.tensors[out] = Tensor(out, tuple(shape), GRAD, alias_of=alias)
        self.nodes.append(probe)
        return out

    def contribute(self, tensor: str, grad: str) -> None:
        if self.tensors[tensor].kind == PARAM:  # a parameter used as a plain operand
            self.accumulate_param(tensor, "accumulate_param", [grad])
            return
        self.contribs.setdefault(tensor, []).append(grad)

    def accumulate_param(self, param: str, op: str, inputs: Sequence[str],
                         attrs: dict[str, Any] | None = None) -> None:
        p = self.tensors[param]
        gname = f"{param}_grad"
        if gname not in self.tensors:
            self.tensors[gname] = Tensor(gname, p.shape, PARAM_GRAD)
        attrs = dict(attrs or {})
        attrs["out_shape"] = p.shape
        name = self._name(f"{self.current}_{op}")
        self.nodes.append(Node(name, op, tuple(inputs), (gname,), attrs, phase="backward"))

    # helpers ----------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def _tensor_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        return name


def autodiff(g: Graph) -> Graph:
    loss_nodes = [n for n in g.nodes if n.phase == "loss"]
    if len(loss_nodes) != 1:
        raise ModelError("internal: autodiff needs exactly one loss node (run add_loss first)")
    b = _Builder(g)
    logits = loss_nodes[0].inputs[0]  # the model output, or its dequantised copy (int8)
    if b.needs_grad(logits):
        b.contribute(logits, loss_nodes[0].outputs[2])
    for node in reversed([n for n in g.nodes if n.phase == "forward"]):
        if not any(o in b.contribs for o in node.outputs):
            continue
        op = get_op(node.op)
        if not op.has_gradient:
            raise ModelError(f"node '{node.name}' ({node.op}) has no gradient rule, but a "
                             "trainable parameter lies before it")
        b.current = node.name
        op.gradient(node, b)
    return g.replace(tensors=b.tensors, nodes=g.nodes + tuple(b.nodes))

