"""ONNX LSTM and GRU (PyTorch's nn.LSTM and nn.GRU exports) -> a 1x1 conv and a recurrence.

ONNX recurrent ops read and write time-major tensors: X (T, B, I), Y (T, D, B, H), Y_h
(L*D, B, H), with the batch axis in the middle, where every other op has it first. Those values
are tracked here as `Steps` and `States` (not Acts), so the generic handlers never see a batch
axis they would misplace. PyTorch writes the same few ops around them: Transpose [1, 0, 2] for
`batch_first`, Squeeze of Y's direction axis, Gather of one step (`out[:, -1]`) or of one
layer's final state (`h_n[-1]`), Concat of the layers' final states, and an Expand that makes
the zero initial state from the input's Shape. This module handles those forms; others are
refused with what is supported.

One layer becomes two IR nodes:
- `conv2d` 1x1 over the sequence (stored (1, T, I)): the input projection W x_t + Wb, so it
  plans, streams and updates (also partially, by input channel) as any conv;
- `lstm` / `gru`: the recurrence with R and Rb (ops/lstm.py, ops/gru.py).
Gate order stays ONNX's (LSTM i, o, f, c; GRU z, r, n), so export writes W, R and B back as
they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from tinytrain.frontend.layout import Act, identity
from tinytrain.frontend.onnx_ops import HANDLERS, Handler

if TYPE_CHECKING:
    from tinytrain.frontend.onnx_import import Importer

RNN_OPS = {"LSTM": ("lstm", 4), "GRU": ("gru", 3)}  # ONNX op -> (IR op, gates)


@dataclass(frozen=True)
class Steps:
    """A time-major sequence: ONNX shape (T, B, F), or Y's (T, 1, B, F) when `directions`.
    Stored as the IR tensor `name` of shape (1, T, F)."""

    name: str
    steps: int
    features: int
    directions: bool = False

    @property
    def onnx_shape(self) -> tuple[int, ...]:
        if self.directions:
            return (self.steps, 1, 1, self.features)
        return (self.steps, 1, self.features)


@dataclass(frozen=True)
class States:
    """Final hidden states, ONNX shape (len(names), B, H): one IR tensor (H,) per entry, the
    last step of a layer's y."""

    names: tuple[str, ...]
    hidden: int

    @property
    def onnx_shape(self) -> tuple[int, ...]:
        return (len(self.names), 1, self.hidden)


def onnx_shape(v: Any) -> tuple[int, ...]:
    """What ONNX's Shape returns for a run-time value (batch of one)."""
    if isinstance(v, Act):
        return (1,) + v.shape
    return v.onnx_shape


def is_time_major_input(im: Importer, name: str) -> bool:
    """The graph input feeds a recurrent op's X directly (time-major, layout 0)."""
    for j in im.consumers.get(name, []):
        n = im.model.graph.node[j]
        if n.op_type in RNN_OPS and n.input[0] == name and not _attrs(n).get("layout", 0):
            return True
    return False


def _attrs(n: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def steps_of(im: Importer, i: int, v: Any) -> Steps:
    if isinstance(v, Steps) and not v.directions:
        return v
    raise im.fail(i, "its input X must be a time-major sequence (T, batch, features): the "
                     "model's input, a Transpose [1, 0, 2] of a (batch, T, features) tensor, or "
                     "the Squeeze of a previous layer's Y")


def rnn(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    op, gates = RNN_OPS[node.op_type]
    name = im.names[i]
    direction = _text(a.get("direction", b"forward"))
    if direction != "forward":
        raise im.fail(i, f"direction '{direction}' is not supported: only forward (one-way) "
                         "layers train; a bidirectional layer is two layers with one reversed")
    for key in ("activations", "activation_alpha", "activation_beta", "clip"):
        if key in a:
            raise im.fail(i, f"attribute '{key}' is not supported: tinytrain's {node.op_type} "
                             "uses the default activations, unclipped")
    if a.get("input_forget", 0):
        raise im.fail(i, "input_forget=1 (coupled input and forget gates) is not supported")
    if op == "gru" and not a.get("linear_before_reset", 0):
        raise im.fail(i, "linear_before_reset=0 is not supported: tinytrain trains the GRU of "
                         "PyTorch (and Keras's reset_after=True), which applies the reset gate "
                         "after the recurrent projection (linear_before_reset=1)")
    v = im.env[node.input[0]]
    if a.get("layout", 0):  # batch-first X (B, T, I): a per-sample sequence (T, I)
        if not isinstance(v, Act) or len(v.shape) != 2:
            raise im.fail(i, "with layout=1 its input X must be a (batch, T, features) tensor")
        v = as_steps(im, i, v)
    x = steps_of(im, i, v)
    W, R = (im.const(i, node.input[k]).astype(np.float64) for k in (1, 2))
    h = int(a.get("hidden_size", R.shape[-1]))
    g = gates * h
    if W.shape != (1, g, x.features) or R.shape != (1, g, h):
        raise im.fail(i, f"W {list(W.shape)} and R {list(R.shape)} do not fit hidden_size {h} "
                         f"and {x.features} input features (expected [1, {g}, {x.features}] and "
                         f"[1, {g}, {h}])")
    B = im.opt_const(i, node, 3)
    if B is not None and B.shape != (1, 2 * g):
        raise im.fail(i, f"B has shape {list(B.shape)}, expected [1, {2 * g}]")
    _full_length(im, i, node, x.steps)
    states = [_state(im, i, node, k, h) for k in ((5, 6) if op == "lstm" else (5,))]
    if op == "lstm" and len(node.input) > 7 and node.input[7]:
        if np.any(im.const(i, node.input[7])):
            raise im.fail(i, "peephole weights (input P) are not supported")

    conv_in = [x.name, im.b.param(name + "_W", W[0][:, None, None, :],
                                  im.source(i, "W", "rnn_w"))]
    if B is not None:
        conv_in.append(im.b.param(name + "_Wb", B[0, :g], im.source(i, "B", "rnn_wb")))
    conv_attrs = {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "dilation": (1, 1),
                  "groups": 1}
    xproj = im.b.node("conv2d", name + "_input", conv_in, conv_attrs)
    ins = [xproj, im.b.param(name + "_R", R[0], im.source(i, "R", "rnn_r"))]
    attrs: dict[str, Any] = {"hidden": h, "bias": B is not None}
    if B is not None:
        ins.append(im.b.param(name + "_Rb", B[0, g:], im.source(i, "B", "rnn_rb")))
    for role, s in zip(("h0", "c0"), states):
        attrs[role] = s is not None
        if s is not None:
            ins.append(im.b.const(f"{name}_{role}", s))
    _gates, y, _saved = im.b.node_outputs(op, name, ins, attrs,
                                          ("_gates", "_y", "_cells" if op == "lstm" else "_pn"))
    outs = list(node.output) + [""] * 3
    if outs[0]:
        im.env[outs[0]] = Steps(y, x.steps, h, directions=True)
    if outs[1] and (im.consumers.get(outs[1]) or outs[1] in graph_outputs(im)):
        im.env[outs[1]] = States((im.b.node("seq_step", name + "_last", [y],
                                            {"step": x.steps - 1}),), h)
    if outs[2] and im.consumers.get(outs[2]):
        raise im.fail(i, "its output Y_c (the final cell state) is used; tinytrain's LSTM "
                         "gives Y and Y_h only")


def graph_outputs(im: Importer) -> set[str]:
    return {o.name for o in im.model.graph.output}


def _full_length(im: Importer, i: int, node: onnx.NodeProto, steps: int) -> None:
    lens = im.opt_const(i, node, 4)
    if lens is not None and np.any(lens.reshape(-1) != steps):
        raise im.fail(i, f"sequence_lens {lens.reshape(-1).tolist()} is not the full window "
                         f"of {steps} steps; padded sequences are not supported")


def _state(im: Importer, i: int, node: onnx.NodeProto, k: int, h: int) -> np.ndarray | None:
    """A constant initial state (1, 1, H) as (H,), or None when absent or zero."""
    if len(node.input) <= k or not node.input[k]:
        return None
    v = im.env.get(node.input[k])
    if not isinstance(v, np.ndarray):
        raise im.fail(i, f"its initial state '{node.input[k]}' is computed at run time; "
                         "tinytrain supports a constant initial state (PyTorch's default zeros "
                         "or a fixed tensor)")
    s = np.broadcast_to(v.astype(np.float64), (1, 1, h)).reshape(h)
    return s if np.any(s) else None


def as_steps(im: Importer, i: int, a: Act) -> Steps:
    """A batch-major per-sample sequence (T, F) as the time-major Steps of the same data."""
    plain = im.plain(a, im.names[i])
    t, f = plain.shape
    return Steps(im.b.node("reshape", im.names[i] + "_steps", [plain.name],
                           {"shape": (1, t, f)}), t, f)


def as_act(im: Importer, i: int, s: Steps) -> Act:
    """Time-major Steps as the batch-major per-sample sequence (T, F)."""
    y = im.b.node("reshape", im.names[i] + "_sequence", [s.name],
                  {"shape": (s.steps, s.features)})
    return Act(y, (s.steps, s.features), identity(2))


def _wrap(op_type: str, special: Handler, other: Handler | None = None) -> None:
    """Let `special` take op_type's nodes that read a Steps or States; `other` (by default the
    generic handler) takes the rest."""
    rest = other or HANDLERS.get(op_type)

    def h(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
        if any(isinstance(im.env.get(x), (Steps, States)) for x in node.input if x):
            special(im, i, node, a)
        elif rest is not None:
            rest(im, i, node, a)
        else:
            raise im.unsupported(i)

    HANDLERS[op_type] = h


def _transpose(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    v = im.env[node.input[0]]
    perm = [int(p) for p in a.get("perm", [])]
    if isinstance(v, Steps) and not v.directions and perm == [1, 0, 2]:
        im.env[node.output[0]] = as_act(im, i, v)
        return
    raise im.fail(i, f"Transpose perm {perm} of a recurrent layer's time-major output; only "
                     "[1, 0, 2] (back to batch-first) is supported")


def transpose_to_steps(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> bool:
    """Transpose [1, 0, 2] of a batch-first sequence that only recurrent layers read: the
    time-major Steps of the same data (no copy). False when not that case."""
    v = im.env.get(node.input[0])
    perm = [int(p) for p in a.get("perm", [])]
    if not isinstance(v, Act) or len(v.shape) != 2 or perm != [1, 0, 2]:
        return False
    users = [im.model.graph.node[j] for j in im.consumers.get(node.output[0], [])]
    if not users or any(u.op_type not in (*RNN_OPS, "Shape") for u in users):
        return False
    im.env[node.output[0]] = as_steps(im, i, v)
    return True


def _squeeze(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    v = im.env[node.input[0]]
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(x) for x in im.const(i, node.input[1])]
    axes = sorted(int(x) % len(v.onnx_shape) for x in axes or [])
    if isinstance(v, Steps) and v.directions and axes == [1]:
        im.env[node.output[0]] = Steps(v.name, v.steps, v.features)
    elif isinstance(v, States) and len(v.names) == 1 and axes == [0]:
        im.env[node.output[0]] = Act(v.names[0], (v.hidden,), (0,))
    else:
        raise im.fail(i, f"Squeeze axes {axes} of a recurrent layer's output (ONNX shape "
                         f"{list(v.onnx_shape)}); supported: Y's direction axis (1) and a "
                         "single final state's axis 0")


def _gather(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    v = im.env[node.input[0]]
    idx = np.asarray(im.const(i, node.input[1]))
    axis = int(a.get("axis", 0)) % len(v.onnx_shape)
    if idx.ndim != 0:
        raise im.fail(i, "only a single index (a scalar) can be gathered from a recurrent "
                         "layer's output")
    n = v.onnx_shape[axis]
    k = int(idx) % n if -n <= int(idx) < n else None
    if k is None:
        raise im.fail(i, f"index {int(idx)} is out of range for axis {axis} of size {n}")
    if isinstance(v, Steps) and not v.directions and axis == 0:
        im.env[node.output[0]] = Act(im.b.node("seq_step", im.names[i], [v.name], {"step": k}),
                                     (v.features,), (0,))
    elif isinstance(v, States) and axis == 0:
        im.env[node.output[0]] = Act(v.names[k], (v.hidden,), (0,))
    else:
        raise im.fail(i, f"Gather on axis {axis} of a recurrent layer's output (ONNX shape "
                         f"{list(v.onnx_shape)}); supported: one step of Y (axis 0) and one "
                         "layer's final state (axis 0 of Y_h)")


def _gather_step(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    """Gather of one step from a batch-first sequence (T, F): PyTorch's `out[:, k]`."""
    v = im.env.get(node.input[0])
    idx = im.env.get(node.input[1])
    axis = int(a.get("axis", 0))
    if not (isinstance(v, Act) and len(v.shape) == 2 and axis == 1
            and isinstance(idx, np.ndarray) and idx.ndim == 0):
        raise im.fail(i, "Gather of a run-time tensor is supported only as one step of a "
                         "(batch, T, features) sequence: a scalar index on axis 1")
    t = v.shape[0]
    if not -t <= int(idx) < t:
        raise im.fail(i, f"index {int(idx)} is out of range for {t} steps")
    s = as_steps(im, i, v)
    im.env[node.output[0]] = Act(im.b.node("seq_step", im.names[i], [s.name],
                                           {"step": int(idx) % t}), (v.shape[1],), (0,))


def _concat(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    vs = [im.env.get(x) for x in node.input]
    if int(a.get("axis", 0)) != 0 or not all(isinstance(v, States) for v in vs):
        raise im.fail(i, "Concat of recurrent layers' outputs is supported only for their "
                         "final states along axis 0 (PyTorch's h_n of stacked layers)")
    names = tuple(n for v in vs for n in v.names)
    im.env[node.output[0]] = States(names, vs[0].hidden)


def _register() -> None:
    for op in RNN_OPS:
        HANDLERS[op] = rnn
    generic_transpose = HANDLERS["Transpose"]

    def transpose(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
        if not transpose_to_steps(im, i, node, a):
            generic_transpose(im, i, node, a)

    _wrap("Transpose", _transpose, transpose)
    _wrap("Squeeze", _squeeze)
    _wrap("Concat", _concat)
    _wrap("Gather", _gather, _gather_step)


_register()
