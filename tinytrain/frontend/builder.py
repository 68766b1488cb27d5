"""A mutable helper that frontends use to assemble an IR Graph, then freeze it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinytrain.ir import ACTIVATION, CONST, PARAM, Graph, Node, ParamSource, QuantParams, Tensor
from tinytrain.ops import get_op


def sanitize(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s if s and not s[0].isdigit() else "t_" + s


# elements of one tensor: far beyond any MCU, and every byte offset stays inside int32 in C
MAX_ELEMENTS = 1 << 26


def check_shape(shape: Sequence[int]) -> None:
    """An op's inferred output shape is usable: every dimension >= 1, a sane total size.
    (ValueError: the importer names the node.)"""
    if any(int(s) < 1 for s in shape):
        raise ValueError(f"its output shape would be {list(shape)}: every dimension must be at "
                         "least 1")
    if int(np.prod([int(s) for s in shape], dtype=np.int64)) > MAX_ELEMENTS:
        raise ValueError(f"its output shape {list(shape)} has more than {MAX_ELEMENTS} elements")


class GraphBuilder:
    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []

    def unique(self, base: str) -> str:
        base = sanitize(base)
        name, k = base, 1
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        return name

    def add_tensor(self, t: Tensor) -> str:
        self.tensors[t.name] = t
        return t.name

    def param(self, base: str, data: np.ndarray, source: ParamSource,
              trainable: bool = True, dtype: str = "f32",
              quant: QuantParams | None = None) -> str:
        np_type = {"f32": np.float32, "s8": np.int8, "s32": np.int32}[dtype]
        data = np.ascontiguousarray(data, dtype=np_type)
        name = self.unique(base)
        return self.add_tensor(Tensor(name, tuple(data.shape), PARAM, dtype=dtype, data=data,
                                      trainable=trainable, source=source, quant=quant))

    def const(self, base: str, data: np.ndarray) -> str:
        data = np.ascontiguousarray(data, dtype=np.float32)
        name = self.unique(base)
        return self.add_tensor(Tensor(name, tuple(data.shape), CONST, data=data))

    def node(self, op: str, name: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None,
             out: str | None = None, dtype: str = "f32", quant: QuantParams | None = None) -> str:
        """Append a node with one output; its shape comes from the op's shape inference."""
        attrs = attrs or {}
        node_name = self.unique_node(name)
        out_name = self.unique(out or node_name)
        probe = Node(node_name, op, tuple(inputs), (out_name,), attrs)
        shape = get_op(op).infer(probe, [self.tensors[i].shape for i in inputs])[0]
        check_shape(shape)
        alias = inputs[0] if op == "reshape" else None
        self.add_tensor(Tensor(out_name, tuple(int(s) for s in shape), ACTIVATION, dtype=dtype,
                               quant=quant, alias_of=alias))
        self.nodes.append(probe)
        return out_name

    def node_outputs(self, op: str, name: str, inputs: Sequence[str], attrs: dict[str, Any],
                     suffixes: Sequence[str]) -> list[str]:
        """Append a node with several outputs (a recurrent layer's y and trace), named
        `name` + each suffix; their shapes come from the op's shape inference."""
        node_name = self.unique_node(name)
        outs: list[str] = []
        for s in suffixes:  # reserve each name before making the next
            outs.append(self.unique(node_name + s))
            self.tensors[outs[-1]] = Tensor(outs[-1], (1,), ACTIVATION)
        probe = Node(node_name, op, tuple(inputs), tuple(outs), attrs)
        shapes = get_op(op).infer(probe, [self.tensors[i].shape for i in inputs])
        for o, shape in zip(outs, shapes):
            check_shape(shape)
            self.add_tensor(Tensor(o, tuple(int(s) for s in shape), ACTIVATION))
        self.nodes.append(probe)
        return outs

    def unique_node(self, base: str) -> str:
        names = {n.name for n in self.nodes}
        base = sanitize(base)
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}_{k}"
        return name

    def graph(self, inputs: Sequence[str], outputs: Sequence[str], meta: dict[str, Any]) -> Graph:
        return Graph(dict(self.tensors), tuple(self.nodes), tuple(inputs), tuple(outputs), meta)
