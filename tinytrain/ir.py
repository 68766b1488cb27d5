"""The canonical intermediate representation.

A Graph is an immutable list of Nodes over named Tensors. Shapes are per sample (the batch
axis is gone: a batch is gradient accumulation over single samples); image tensors are HWC.
Passes never mutate a Graph, they build a new one with ``replace``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Tensor kinds. They drive memory placement and the report's totals.
INPUT = "input"  # the sample fed by the host
LABEL = "label"  # integer label or float target
ACTIVATION = "activation"  # forward intermediate
PARAM = "param"  # weight or bias (trainable -> SRAM, frozen -> flash)
CONST = "const"  # frozen constant operand (flash)
GRAD = "grad"  # gradient of an activation (transient)
PARAM_GRAD = "param_grad"  # accumulated gradient of a trainable parameter
OPT_STATE = "opt_state"  # optimizer state (momentum buffers)
LOSS = "loss"  # scalar loss

KINDS = (INPUT, LABEL, ACTIVATION, PARAM, CONST, GRAD, PARAM_GRAD, OPT_STATE, LOSS)


@dataclass(frozen=True)
class QuantParams:
    """Affine quantisation: real = scale * (q - zero_point), per tensor or per channel."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None


@dataclass(frozen=True)
class ParamSource:
    """Where a parameter came from in the source model, so export can write it back."""

    node: str  # source node name
    slot: str  # which role it plays there ("weight", "bias", ...)
    transform: str  # how IR layout maps to the source layout (see frontend)

    @property
    def fixed(self) -> bool:
        """A value the importer computed from the model's constants (a normalisation's folded
        mean and scale): no update plan trains it, as it has no tensor to export to."""
        return self.transform == FIXED


FIXED = "fixed"  # ParamSource.transform of an importer's computed, never-trained parameter


@dataclass(frozen=True, eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    kind: str
    dtype: str = "f32"
    data: np.ndarray | None = None  # values of params and constants
    trainable: bool = False  # only meaningful for PARAM
    quant: QuantParams | None = None
    source: ParamSource | None = None
    alias_of: str | None = None  # a view sharing the storage of another tensor (reshape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]

    def replace(self, **kw: Any) -> Tensor:
        return dataclasses.replace(self, **kw)


DTYPE_BYTES = {"f32": 4, "s8": 1, "s32": 4, "u8": 1}


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    phase: str = "forward"  # forward | loss | backward | update

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


@dataclass(frozen=True)
class Graph:
    tensors: Mapping[str, Tensor]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def replace(self, **kw: Any) -> Graph:
        return dataclasses.replace(self, **kw)

    def t(self, name: str) -> Tensor:
        return self.tensors[name]

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i, []).append(n)
        return out

    def params(self, trainable: bool | None = None) -> list[Tensor]:
        ps = [t for t in self.tensors.values() if t.kind == PARAM]
        if trainable is not None:
            ps = [t for t in ps if t.trainable == trainable]
        return sorted(ps, key=lambda t: t.name)

    def with_tensors(self, new: Iterable[Tensor]) -> Graph:
        ts = dict(self.tensors)
        for t in new:
            ts[t.name] = t
        return self.replace(tensors=ts)


def dump(g: Graph) -> str:
    """Stable text form of a graph (``--dump-ir``)."""
    lines = []
    for name in g.inputs:
        t = g.tensors[name]
        lines.append(f"input {name}: {t.dtype}{list(t.shape)}")
    for t in g.params():
        role = "trainable" if t.trainable else "frozen"
        lines.append(f"param {t.name}: {t.dtype}{list(t.shape)} {role}")
    for n in g.nodes:
        attrs = ", ".join(f"{k}={v}" for k, v in sorted(n.attrs.items()) if not k.startswith("_"))
        outs = ", ".join(f"{o}: {g.tensors[o].dtype}{list(g.tensors[o].shape)}" for o in n.outputs)
        lines.append(f"[{n.phase}] {outs} = {n.op}({', '.join(n.inputs)}) {{{attrs}}}")
    lines.append(f"outputs {', '.join(g.outputs)}")
    return "\n".join(lines) + "\n"
