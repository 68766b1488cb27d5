"""ONNX (fp32) -> canonical IR: NHWC storage, explicit pads, BN folded, shape arithmetic folded."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from tinytrain.errors import ModelError
from tinytrain.frontend.builder import GraphBuilder
from tinytrain.frontend.layout import HWC, SEQ, Act, identity
from tinytrain.frontend.onnx_fold import FOLDERS, attrs_of
from tinytrain.frontend.onnx_rnn import as_steps, is_time_major_input, onnx_shape
from tinytrain.ir import INPUT, Graph, ParamSource, Tensor

Value = Act | np.ndarray


def node_names(model: onnx.ModelProto) -> list[str]:
    """Stable names for every node (unnamed nodes get `<op>_<index>`); export reuses them."""
    return [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]


def read_model(path: Path) -> onnx.ModelProto:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror}") from None
    if not data:
        raise ModelError(f"{path} is empty (0 bytes); re-export the model (torch.onnx.export, "
                         "tf2onnx) and try again.")
    try:
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model)
    except (DecodeError, onnx.checker.ValidationError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(
            f"{path} is not a valid ONNX model ({first}). The file may be truncated or not an "
            "ONNX file at all; re-export it (torch.onnx.export, tf2onnx) and try again."
        ) from None
    if not model.graph.node:
        raise ModelError(f"{path} is not a usable ONNX model: its graph has no nodes.")
    return model


def load_onnx(path: Path) -> Graph:
    path = Path(path)
    model = read_model(path)
    return Importer(model, path).run()


def handlers() -> dict[str, Any]:
    """ONNX op type -> handler (onnx_ops.py, and the QDQ ones from onnx_qdq.py, which register
    into the same table when imported)."""
    from tinytrain.frontend import onnx_qdq, onnx_rnn  # noqa: F401  (register their handlers)
    from tinytrain.frontend.onnx_ops import HANDLERS

    return HANDLERS


class Importer:
    def __init__(self, model: onnx.ModelProto, path: Path) -> None:
        self.model, self.path = model, path
        self.b = GraphBuilder()
        self.env: dict[str, Value] = {}
        self.names = node_names(model)
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(model.graph.node):
            for x in n.input:
                self.consumers.setdefault(x, []).append(i)
        self.skip: set[int] = set()
        self.head: dict[str, Any] = {"activation": None}
        # QDQ records (frontend/onnx_qdq.py): activation (scale, zp) by IR tensor, folded
        # DequantizeLinear constants by ONNX name, QuantizeLinear outputs
        self.qdq: dict[str, list] = {}
        self.qconst: dict[str, dict[str, Any]] = {}
        self.quantized: set[str] = set()

    # ---- errors -------------------------------------------------------------------------
    def fail(self, i: int, msg: str) -> ModelError:
        n = self.model.graph.node[i]
        return ModelError(f"{self.path}: node '{self.names[i]}' ({n.op_type}): {msg}")

    def unsupported(self, i: int, more: list[int] | None = None) -> ModelError:
        from tinytrain.frontend.onnx_ops import FOLDED

        op = self.model.graph.node[i].op_type
        also = "; ".join(f"{self.model.graph.node[k].op_type} in node '{self.names[k]}'"
                         for k in more or [])
        return ModelError(
            f"{self.path}: node '{self.names[i]}' uses op {op}, which tinytrain cannot compile"
            + (f" (also unsupported: {also})" if also else "") + ". "
            f"Supported ONNX ops: {', '.join(sorted(set(handlers()) | set(FOLDED)))} (plus "
            "shape arithmetic on "
            "constants). Replace or remove the op before export, or open an issue asking for it."
        )

    # ---- values -------------------------------------------------------------------------
    def act(self, i: int, name: str) -> Act:
        v = self.env.get(name)
        if not isinstance(v, Act):
            raise self.fail(i, f"input '{name}' must be a runtime tensor, not a constant")
        return v

    def const(self, i: int, name: str) -> np.ndarray:
        v = self.env.get(name)
        if not isinstance(v, np.ndarray):
            raise self.fail(i, f"input '{name}' must be a constant (an initializer), but it is "
                               "computed at run time; tinytrain supports constant weights only")
        return v

    def opt_const(self, i: int, node: onnx.NodeProto, k: int) -> np.ndarray | None:
        if len(node.input) > k and node.input[k]:
            return self.const(i, node.input[k])
        return None

    def sole_consumer(self, name: str, op_type: str) -> int | None:
        users = self.consumers.get(name, [])
        outs = {o.name for o in self.model.graph.output}
        if len(users) == 1 and name not in outs:
            if self.model.graph.node[users[0]].op_type == op_type:
                return users[0]
        return None

    def to_perm(self, a: Act, perm: tuple[int, ...], base: str) -> Act:
        """Materialise `a` with storage order `perm`: a free view or a transpose node."""
        if a.perm == perm:
            return a
        ir_perm = tuple(a.perm.index(p) for p in perm)  # new IR axis i = old IR axis ir_perm[i]
        if _only_unit_moves(a.ir_shape, ir_perm):
            out = self.b.node("reshape", base + "_view", [a.name],
                              {"shape": tuple(a.shape[p] for p in perm)})
        else:
            out = self.b.node("transpose", base + "_to_layout", [a.name], {"perm": ir_perm})
        return Act(out, a.shape, perm)

    def plain(self, a: Act, base: str) -> Act:
        return self.to_perm(a, identity(len(a.shape)), base)

    def hwc(self, i: int, a: Act) -> Act:
        if len(a.shape) != 3:
            raise self.fail(i, "expects an image tensor (N, C, H, W), got per-sample shape "
                               f"{a.shape}")
        return self.to_perm(a, HWC, self.names[i])

    def spatial(self, i: int, a: Act) -> tuple[Act, bool]:
        """An image (C, H, W) as HWC, or a sequence (C, L) as an image of height 1 (stored
        (1, L, C), a free view of the sequence stored (L, C)): 1-D convolutions and pools
        run as 2-D ones. Returns the image and whether it was a sequence."""
        if len(a.shape) == 3:
            return self.hwc(i, a), False
        if len(a.shape) != 2:
            raise self.fail(i, "expects an image (N, C, H, W) or a sequence (N, C, L), got "
                               f"per-sample shape {a.shape}")
        seq = self.to_perm(a, SEQ, self.names[i])
        c, n = a.shape
        y = self.b.node("reshape", self.names[i] + "_as_image", [seq.name], {"shape": (1, n, c)})
        return Act(y, (c, 1, n), HWC), True

    def sequence(self, i: int, image: str) -> Act:
        """The IR image (1, L, C) an op made from a sequence, back as the sequence (C, L)."""
        _, n, c = self.b.tensors[image].shape
        y = self.b.node("reshape", self.names[i] + "_as_sequence", [image], {"shape": (n, c)})
        return Act(y, (c, n), SEQ)

    def source(self, i: int, slot: str, transform: str) -> ParamSource:
        return ParamSource(self.names[i], slot, transform)

    # ---- driver -------------------------------------------------------------------------
    def run(self) -> Graph:
        table = handlers()
        g = self.model.graph
        known = set(table) | set(FOLDERS) | {"Shape"}
        unknown: dict[str, int] = {}  # name every unknown op before any shape complaint
        for i, node in enumerate(g.node):
            if node.op_type not in known:
                unknown.setdefault(node.op_type, i)
        if unknown:
            first, *more = unknown.values()
            raise self.unsupported(first, more)
        for init in g.initializer:
            self.env[init.name] = self.initializer(init)
        data_inputs = [x for x in g.input if x.name not in self.env]
        if len(data_inputs) != 1:
            raise ModelError(f"{self.path}: tinytrain needs exactly one input tensor, the model "
                             f"has {len(data_inputs)} ({', '.join(x.name for x in data_inputs)}).")
        inp = data_inputs[0]
        time_major = is_time_major_input(self, inp.name)
        shape = self.input_shape(inp, time_major)
        convs = [self.model.graph.node[j].op_type == "Conv"
                 for j in self.consumers.get(inp.name, [])]
        # images are stored HWC; a sequence read only by 1-D convs (L, C), as they want it
        perm = HWC if len(shape) == 3 else SEQ if len(shape) == 2 and convs and all(convs) \
            else identity(len(shape))
        in_name = self.b.unique("input")
        self.b.add_tensor(Tensor(in_name, tuple(shape[p] for p in perm), INPUT))
        self.env[inp.name] = Act(in_name, shape, perm)
        if time_major:  # (T, batch, features) read by a recurrent layer: x is (N, T, features)
            self.env[inp.name] = as_steps(self, 0, self.env[inp.name])

        for i, node in enumerate(g.node):
            if i in self.skip:
                continue
            ins = [self.env.get(x) if x else None for x in node.input]
            missing = [name for x, name in zip(ins, node.input) if x is None and name]
            if missing:
                raise self.fail(i, f"reads {missing[0]}, which nothing produces")
            if node.op_type in FOLDERS and all(x is None or isinstance(x, np.ndarray) for x in ins):
                try:
                    value = FOLDERS[node.op_type](node, ins, attrs_of(node))
                    self.env[node.output[0]] = np.asarray(value)
                except Exception as e:  # a malformed constant expression
                    raise self.fail(i, f"cannot evaluate constant expression: {e}") from None
                continue
            if node.op_type == "Shape" and ins[0] is not None and \
                    not isinstance(ins[0], np.ndarray):
                self.env[node.output[0]] = np.array(onnx_shape(ins[0]), np.int64)
                continue
            handler: Callable | None = table.get(node.op_type)
            if handler is None:
                raise self.unsupported(i)
            try:
                handler(self, i, node, attrs_of(node))
            except ModelError:
                raise
            except (ValueError, IndexError, KeyError, TypeError, AssertionError,
                    ZeroDivisionError, OverflowError, FloatingPointError) as e:
                # attributes or inputs no check in the handler anticipated
                raise self.fail(i, f"its attributes or inputs are inconsistent and cannot be "
                                   f"imported ({type(e).__name__}: {e}); check the node's "
                                   "attributes and input shapes against the ONNX operator "
                                   "specification") from None

        if len(g.output) != 1:
            raise ModelError(f"{self.path}: tinytrain needs exactly one output, the model has "
                             f"{len(g.output)}.")
        out = self.env.get(g.output[0].name)
        if not isinstance(out, Act):
            raise ModelError(f"{self.path}: the output '{g.output[0].name}' does not depend on "
                             "the input.")
        meta = {
            "source_format": "onnx",
            "model_sha256": hashlib.sha256(self.path.read_bytes()).hexdigest(),
            "model_name": self.path.name,
            "input_name": inp.name,
            "input_logical_shape": list(shape),
            "input_perm": list(perm),
            "output_name": g.output[0].name,
            "output_logical_shape": list(out.shape),
            "output_perm": list(out.perm),
            "output_activation": self.head["activation"],
        }
        from tinytrain.frontend.onnx_qdq import qdq_meta

        qdq = qdq_meta(self)
        if qdq is not None:
            meta["qdq"] = qdq
        return self.b.graph([in_name], [out.name], meta)

    def initializer(self, init: onnx.TensorProto) -> np.ndarray:
        """An initialiser's values, checked: data that fits its dims and dtype, finite floats."""
        try:
            a = numpy_helper.to_array(init)
        except Exception as e:  # onnx raises ValueError/KeyError/TypeError on damaged data
            raise ModelError(f"{self.path}: initializer '{init.name}' (dims {list(init.dims)}, "
                             f"data type {init.data_type}) cannot be read: {e}; the file is "
                             "damaged, re-export the model") from None
        if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            k = int(np.argmax(~np.isfinite(a.reshape(-1))))
            raise ModelError(f"{self.path}: initializer '{init.name}' holds a non-finite value "
                             f"({a.reshape(-1)[k]} at flat index {k}); weights and constants "
                             "must be finite")
        return a

    def input_shape(self, inp: onnx.ValueInfoProto, time_major: bool = False) -> tuple[int, ...]:
        """The per-sample shape: every axis but the batch axis, which is the first, or the
        second of a time-major (T, batch, features) sequence."""
        dims = list(inp.type.tensor_type.shape.dim)
        if not dims:
            raise ModelError(f"{self.path}: input '{inp.name}' has no shape; tinytrain needs a "
                             "static input shape such as (1, 1, 8, 8).")
        batch = 1 if time_major and len(dims) == 3 else 0
        shape = []
        for k, d in enumerate(dims):
            if k == batch:
                continue
            if not d.HasField("dim_value") or d.dim_value <= 0:
                what = d.dim_param or "unknown"
                raise ModelError(
                    f"{self.path}: input '{inp.name}' has a dynamic dimension '{what}' at "
                    f"axis {k}. "
                    "tinytrain plans every byte at compile time, so all dimensions except the "
                    "batch axis must be fixed; re-export the model with a static input shape.")
            shape.append(int(d.dim_value))
        return tuple(shape)


def _only_unit_moves(ir_shape: tuple[int, ...], ir_perm: tuple[int, ...]) -> bool:
    """True if the permutation only moves axes of size 1 (then it is a free reshape)."""
    kept = [k for k in ir_perm if ir_shape[k] != 1]
    return kept == sorted(kept)
