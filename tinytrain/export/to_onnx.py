"""`tinytrain export`: write trained parameters back into a copy of the source ONNX model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from tinytrain.device.runner import load_program_info
from tinytrain.errors import DataError, ModelError
from tinytrain.frontend.onnx_import import node_names
from tinytrain.quant.params import real_values


class _Writer:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.inits = {i.name: i for i in model.graph.initializer}
        self.nodes = dict(zip(node_names(model), model.graph.node))

    def value(self, name: str) -> np.ndarray:
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        raise ModelError(f"cannot find initializer {name} in the source model")

    def set_input(self, node: onnx.NodeProto, k: int, name: str, value: np.ndarray) -> None:
        """Point input k of `node` at a fresh initializer holding `value`."""
        init = numpy_helper.from_array(np.ascontiguousarray(value, np.float32), name)
        if name in self.inits:  # written before (e.g. a BN's mean/var, once per BN parameter)
            self.model.graph.initializer.remove(self.inits[name])
        self.model.graph.initializer.append(init)
        self.inits[name] = init
        while len(node.input) <= k:
            node.input.append("")
        node.input[k] = name


def _attr(node: onnx.NodeProto, key: str, default: float) -> float:
    for a in node.attribute:
        if a.name == key:
            return float(onnx.helper.get_attribute_value(a))
    return default


def _bn_identity(w: _Writer, bn_name: str, c: int, keep_affine: bool = False) -> None:
    """Make a BatchNormalization node compute y = x (its effect now lives in the conv)."""
    bn = w.nodes[bn_name]
    eps = _attr(bn, "epsilon", 1e-5)
    if not keep_affine:
        w.set_input(bn, 1, f"{bn_name}_tt_scale", np.ones(c))
        w.set_input(bn, 2, f"{bn_name}_tt_bias", np.zeros(c))
    w.set_input(bn, 3, f"{bn_name}_tt_mean", np.zeros(c))
    w.set_input(bn, 4, f"{bn_name}_tt_var", np.full(c, 1.0 - eps, np.float32))


def _write(w: _Writer, p: dict[str, Any], v: np.ndarray) -> None:
    src = p["source"]
    node, t, slot = w.nodes[src["node"]], src["transform"], src["slot"]
    new = f"tt_trained_{p['name']}"
    if t.startswith(("oihw", "oik")):
        if slot == "weight":  # IR (O, kh, kw, I) -> OIHW; a 1-D conv's (O, 1, k, I) -> OIK
            oihw = v.transpose(0, 3, 1, 2)
            w.set_input(node, 1, new, oihw[:, :, 0] if t.startswith("oik") else oihw)
            if "_bn:" in t:
                _bn_identity(w, t.split(":", 1)[1], v.shape[0])
        else:
            w.set_input(node, 2, new, v)
    elif t == "bn":
        c = v.shape[0]
        w.set_input(node, 1 if slot == "weight" else 2, new, v.reshape(c))
        _bn_identity(w, src["node"], c, keep_affine=True)
    elif t.startswith("gemm"):
        if slot == "weight":
            B = v / _attr(node, "alpha", 1.0)
            w.set_input(node, 1, new, B if t == "gemm:1" else B.T)
        else:
            c = v / _attr(node, "beta", 1.0)
            if len(node.input) > 2 and node.input[2]:
                old = w.value(node.input[2]).shape
                c = c.reshape(old) if int(np.prod(old)) == c.size else c
            w.set_input(node, 2, new, c)
    elif t == "matmul":
        w.set_input(node, 1, new, v.T)
    elif t == "add":  # MatMul + Add: replace the constant operand of the Add
        k = 0 if node.input[0] in w.inits else 1
        old = w.value(node.input[k]).shape
        if int(np.prod(old)) != v.size:  # a broadcast scalar bias became one value per unit
            old = (1,) * (len(old) - 1) + (v.size,)
        w.set_input(node, k, new, v.reshape(old))
    elif t in ("rnn_w", "rnn_r"):  # IR (G, 1, 1, I) or (G, H) -> ONNX (1, G, I) / (1, G, H)
        w.set_input(node, 1 if t == "rnn_w" else 2, new, v.reshape(1, v.shape[0], -1))
    elif t in ("rnn_wb", "rnn_rb"):  # Wb and Rb are the two halves of one B (1, 2G)
        b = w.value(node.input[3]).astype(np.float32).reshape(2, -1)
        b[0 if t == "rnn_wb" else 1] = v
        w.set_input(node, 3, f"tt_trained_{src['node']}_B", b.reshape(1, -1))
    else:
        raise ModelError(f"internal: no exporter for parameter transform '{t}'")


def export_onnx(build_dir: Path, state: dict[str, np.ndarray], out: Path) -> None:
    info = load_program_info(build_dir)
    src = Path(build_dir) / "source_model.onnx"
    if info.get("source_format") != "onnx" or not src.exists():
        raise ModelError(f"{build_dir} was not built from an ONNX model; cannot export ONNX")
    if info.get("qdq") is not None:
        raise ModelError(f"{build_dir} was built from an ONNX QDQ (int8) model; exporting its "
                         "trained int8 parameters back to QDQ is not supported yet (export "
                         "supports fp32 ONNX builds and int8 TFLite builds)")
    model = onnx.load(str(src))
    original_inits = {i.name for i in model.graph.initializer}
    w = _Writer(model)
    for p in info["trainable"]:
        if p["name"] not in state:
            raise DataError(f"state file has no parameter '{p['name']}'; was it saved from "
                            "this build?")
        v = np.asarray(state[p["name"]])
        if list(v.shape) != p["shape"]:
            raise DataError(f"parameter '{p['name']}' has shape {list(v.shape)} in the state "
                            f"file, the build expects {p['shape']}")
        _write(w, p, real_values(p, v))
    # drop initializers nothing reads any more (the originals we replaced)
    used = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    _sync_graph_inputs(model, original_inits)
    onnx.checker.check_model(model)
    tmp = Path(out).with_name(Path(out).name + ".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(out)


def _sync_graph_inputs(model: onnx.ModelProto, original_inits: set[str]) -> None:
    """Unlist dropped initializers from the graph inputs (else they become required inputs);
    IR < 4 (old exporters) requires every initializer to be a graph input, so list new ones."""
    kept = {i.name for i in model.graph.initializer}
    inputs = [x for x in model.graph.input if x.name not in original_inits or x.name in kept]
    if model.ir_version < 4:
        listed = {x.name for x in inputs}
        inputs += [onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                   for i in model.graph.initializer if i.name not in listed]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
