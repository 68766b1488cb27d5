"""What every op definition provides, and small helpers shared by the op files.

An op file defines one forward op and the backward ops its gradient rule emits. Each OpDef
knows its shape inference, a numpy reference (the spec the C kernel must match), its gradient
rule (a function that emits backward nodes through a GradBuilder), its C call and its MACs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tinytrain.ir import Node

if TYPE_CHECKING:
    from tinytrain.codegen.context import CContext

Shape = tuple[int, ...]


class GradBuilder(Protocol):
    """The interface autodiff hands to gradient rules."""

    def grad(self, tensor: str) -> str | None: ...  # dL/d(tensor) for a node output, or None
    def needs_grad(self, tensor: str) -> bool: ...
    def shape(self, tensor: str) -> Shape: ...
    def emit(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None,
             out_shape: Shape | None = None) -> str: ...
    def contribute(self, tensor: str, grad: str) -> None: ...  # add to dL/d(tensor)
    def accumulate_param(self, param: str, op: str, inputs: Sequence[str],
                         attrs: dict[str, Any] | None = None) -> None: ...


class OpDef:
    name: str = ""
    #: forward ops appear in `tinytrain ops`; backward/internal ops do not
    public: bool = False
    #: human name of the source ops this implements, for the ops table
    source_ops: tuple[str, ...] = ()

    def infer(self, node: Node, shapes: Sequence[Shape]) -> list[Shape]:
        raise NotImplementedError

    def forward(self, node: Node, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def gradient(self, node: Node, gb: GradBuilder) -> None:
        """Emit backward nodes. Ops without a rule raise in autodiff (clear error)."""
        raise NotImplementedError

    has_gradient: bool = True

    def c_call(self, node: Node, cg: CContext) -> str:
        raise NotImplementedError

    def macs(self, node: Node, shapes: Sequence[Shape], out_shapes: Sequence[Shape]) -> int:
        return 0

    def members(self, node: Node) -> list[Node]:
        """The fused ops a fused node runs, in order, each counted on its own in a
        `--profile-members` build (codegen.render.profile_members); [] for an ordinary op."""
        return []

    def in_place(self, node: Node, shapes: Sequence[Shape]) -> bool:
        """True if the kernel may write its output over input 0 (passes/inplace.py)."""
        return False

    # Row streaming (passes/stream.py). An op that can produce its HWC output one row at a
    # time says which of its inputs are read by rows and which rows each output row needs.
    def row_inputs(self, node: Node, shapes: Sequence[Shape]) -> tuple[int, ...] | None:
        """Indices of the inputs read row by row, or None if this node cannot stream."""
        return None

    def row_window(self, node: Node, shapes: Sequence[Shape], row: int) -> list[tuple[int, int]]:
        """For output row `row`: (first, last) rows of each row input it reads (first > last:
        none, all padding)."""
        raise NotImplementedError

    def row_call(self, node: Node, cg: CContext, rings: Sequence[str], out: str,
                 row: str) -> str:
        """C statement computing output row `row`; rings/out are tt_rows expressions."""
        raise NotImplementedError


def size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def channel_run(ch) -> int | None:
    """The first channel of ch when ch is a run of consecutive channels (TTE's first k, the
    rest after them), which kernels take as an offset pointer and no index table; else
    None."""
    ch = tuple(ch)
    return ch[0] if ch and ch == tuple(range(ch[0], ch[0] + len(ch))) else None


def pad4(shape: Shape) -> tuple[int, int, int, int]:
    s = tuple(int(v) for v in shape)
    if len(s) > 4:
        raise ValueError(f"rank {len(s)} > 4")
    return (1,) * (4 - len(s)) + s  # type: ignore[return-value]


def broadcast_shape(a: Shape, b: Shape) -> Shape:
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


def broadcast_strides(src: Shape, out: Shape) -> tuple[int, int, int, int]:
    """Element strides reading `src` as if broadcast to `out` (both left-padded to rank 4)."""
    s4, o4 = pad4(src), pad4(out)
    strides = [0, 0, 0, 0]
    acc = 1
    for k in range(3, -1, -1):
        strides[k] = 0 if (s4[k] == 1 and o4[k] != 1) else acc
        acc *= s4[k]
    return tuple(strides)  # type: ignore[return-value]


def reduce_to(g: np.ndarray, shape: Shape) -> np.ndarray:
    """Sum a broadcast gradient back down to `shape` (numpy reference of tt_reduce_to)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for k, n in enumerate(shape):
        if n == 1 and g.shape[k] != 1:
            g = g.sum(axis=k, keepdims=True)
    return g.reshape(shape)


# every op by name: filled by the package (tinytrain/ops/__init__.py) from each op file's OPS
# tuple. It lives here, below the op files, so that fused ops can look up the ops of the nodes
# they run (a fused node only exists in a graph the passes built, with the package imported).
REGISTRY: dict[str, OpDef] = {}


def get_op(name: str) -> OpDef:
    from tinytrain.errors import CompileError

    try:
        return REGISTRY[name]
    except KeyError:
        raise CompileError(f"internal: no op definition for IR op '{name}'") from None


def c_float(v: float) -> str:
    """A C float literal that round-trips the fp32 value exactly."""
    f = float(np.float32(v))
    if np.isnan(f):
        from tinytrain.errors import CompileError

        raise CompileError("the model needs a NaN constant, which has no meaning in training; "
                           "check the model's attributes and weights for NaN")
    if np.isinf(f):
        return "INFINITY" if f > 0 else "(-INFINITY)"
    return f"{f!r}f" if "e" in repr(f) or "." in repr(f) else f"{f!r}.0f"


def trained_walk(shape: Shape, a: dict) -> dict:
    """The walk over a parameter's trained elements that the C kernels take (outer, n_ch,
    inner, channels, k; runtime_c/reference/tt_fleet.c), from the same attrs as
    trained_index: whole, input channels on the last axis, or a depthwise weight's rows."""
    ch = a.get("channels")
    if ch is None:
        return {"outer": 1, "n_ch": 1, "inner": size(shape), "channels": None, "k": 1}
    ch = [int(c) for c in ch]
    if a.get("channel_axis") == 0:
        return {"outer": 1, "n_ch": shape[0], "inner": size(shape[1:]), "channels": ch,
                "k": len(ch)}
    return {"outer": size(shape[:-1]), "n_ch": shape[-1], "inner": 1, "channels": ch,
            "k": len(ch)}


def walk_args(cg: CContext, w: dict) -> str:
    """A trained_walk as the C kernels' arguments: outer, n_ch, inner, idx, k (idx NULL for
    channels 0..k-1)."""
    ch = w["channels"]
    idx = "NULL" if ch is None or tuple(ch) == tuple(range(len(ch))) else cg.ints(ch)
    return f"{w['outer']}, {w['n_ch']}, {w['inner']}, {idx}, {w['k']}"


def trained_index(a: dict) -> tuple:
    """numpy index of the trained slice of a parameter from an update node's attrs: its
    `channels` on the last (input-channel) axis, or on axis 0 for a depthwise weight
    (`channel_axis` 0); all of it when `channels` is None."""
    ch = a.get("channels")
    if ch is None:
        return (Ellipsis,)
    return (list(ch),) if a.get("channel_axis") == 0 else (Ellipsis, list(ch))
