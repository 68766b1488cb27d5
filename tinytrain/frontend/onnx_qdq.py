"""ONNX QDQ models (onnxruntime `quantize_static(..., quant_format=QuantFormat.QDQ)`).

The float graph is imported as usual: a DequantizeLinear of an initializer folds to the float
constant scale * (q - zp), and a QuantizeLinear -> DequantizeLinear pair on an activation is an
identity. What the pairs say is kept in `meta["qdq"]` so the int8 quantiser (passes/quantize)
uses the file's scales, zero points, weights and biases instead of calibrating:
  {ir_tensor: [scale, zp]}                          activations (and the graph input)
  {ir_param: {"scale": [...], "zp": [...]}}         int8 weights, per IR output channel
  {ir_param: {"scale": [...], "zp": [...], "int32": [...]}}   int32 biases, exactly
Only TFLite-style int8 is accepted: int8 activations, symmetric int8 weights, int32 biases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from tinytrain.frontend.layout import Act
from tinytrain.frontend.onnx_ops import handles
from tinytrain.ir import PARAM

if TYPE_CHECKING:  # the importer drives the handlers; they see it only as a type
    from tinytrain.frontend.onnx_import import Importer

# IR weights keep the output channel on axis 0; this is the ONNX initializer's matching axis
_OUT_AXIS = {"oihw": 0, "gemm:1": 0, "gemm:0": 1, "matmul": 1}


def _zero_point(im: Importer, i: int, node: onnx.NodeProto) -> np.ndarray:
    if len(node.input) < 3 or not node.input[2]:  # ONNX defaults to a uint8 zero point
        raise im.fail(i, "has no zero point, so it is uint8; tinytrain accepts int8 QDQ models "
                         "only (quantize_static(..., activation_type=QuantType.QInt8))")
    return im.const(i, node.input[2])


def _check_int8_activation(im: Importer, i: int, node: onnx.NodeProto) -> tuple[float, int]:
    scale, zp = im.const(i, node.input[1]), _zero_point(im, i, node)
    if zp.dtype != np.int8:
        raise im.fail(i, f"quantises an activation to {zp.dtype}; tinytrain accepts int8 "
                         "activations only, as TFLite does (quantize_static(..., "
                         "activation_type=QuantType.QInt8, weight_type=QuantType.QInt8))")
    if scale.size != 1:
        raise im.fail(i, "quantises an activation per channel; only per-tensor activation "
                         "scales are supported")
    return float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0])


def _record_act(im: Importer, i: int, act: Act, qp: tuple[float, int]) -> None:
    old = im.qdq.setdefault(act.name, list(qp))
    if tuple(old) != qp:
        src = im.model.graph.node[i].input[0]
        raise im.fail(i, f"quantises tensor '{src}' with (scale, zero point) {qp}, but it is "
                         f"already quantised with {tuple(old)}; tinytrain needs one "
                         "quantisation per tensor")


@handles("QuantizeLinear")
def quantize_linear(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    qp = _check_int8_activation(im, i, node)
    x = im.env[node.input[0]]
    if isinstance(x, np.ndarray):  # a float weight quantised in the graph: fold it
        q = np.clip(np.round(x.astype(np.float64) / qp[0]) + qp[1], -128, 127)
        im.env[node.output[0]] = q.astype(np.int8)
        return
    _record_act(im, i, x, qp)
    im.quantized.add(node.output[0])
    im.env[node.output[0]] = x  # the float graph carries the real value through


@handles("DequantizeLinear")
def dequantize_linear(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    if int(a.get("block_size", 0)):
        raise im.fail(i, "blocked quantisation (block_size) is not supported")
    x = im.env[node.input[0]]
    if isinstance(x, Act):
        if node.input[0] not in im.quantized:
            raise im.fail(i, "dequantises a runtime tensor that no QuantizeLinear produced; "
                             "tinytrain needs a float model input")
        _record_act(im, i, x, _check_int8_activation(im, i, node))
        im.env[node.output[0]] = x
        return
    scale = im.const(i, node.input[1]).astype(np.float32)
    zp = _zero_point(im, i, node)
    if x.dtype not in (np.int8, np.int32) or zp.dtype != x.dtype:
        raise im.fail(i, f"dequantises a {x.dtype} constant; tinytrain accepts symmetric int8 "
                         "weights and int32 biases only (weight_type=QuantType.QInt8)")
    if np.any(zp != 0):
        raise im.fail(i, "has asymmetric weights (a nonzero zero point); tinytrain needs "
                         "symmetric int8 weights, as TFLite does")
    axis = int(a.get("axis", 1)) % max(x.ndim, 1) if scale.size > 1 else None
    shape = [1] * x.ndim
    if axis is not None:
        shape[axis] = -1
    im.env[node.output[0]] = (scale.reshape(shape) * x.astype(np.float32)).astype(np.float32)
    im.qconst[node.output[0]] = {"q": x, "scale": scale.reshape(-1), "axis": axis, "node": i}


def qdq_meta(im: Importer) -> dict[str, Any] | None:
    """meta["qdq"]: the activation records plus each IR parameter that came from a
    DequantizeLinear, with its scales along the IR output-channel axis (0)."""
    if not im.qdq and not im.qconst:
        return None
    out: dict[str, Any] = dict(im.qdq)
    index = {name: k for k, name in enumerate(im.names)}
    for t in im.b.tensors.values():
        if t.kind != PARAM or t.source is None or t.source.node not in index:
            continue
        k = index[t.source.node]
        src = [im.qconst[x] for x in im.model.graph.node[k].input if x in im.qconst]
        want = np.int8 if t.source.slot == "weight" else np.int32
        rec = next((r for r in src if r["q"].dtype == want), None)
        if rec is None:
            continue
        transform = t.source.transform
        if "bn" in transform:
            raise im.fail(k, "is followed by a BatchNormalization, which changes its quantised "
                             "weights; fold batch norm into the conv before quantize_static")
        n = t.shape[0]
        scale = rec["scale"]
        if scale.size == 1:
            scale = np.repeat(scale, n)
        elif rec["axis"] != (_OUT_AXIS.get(transform, 0) if want == np.int8 else 0) \
                or scale.size != n:
            raise im.fail(k, f"quantises its {t.source.slot} per channel along axis "
                             f"{rec['axis']}, not along its {n} output channels")
        entry: dict[str, Any] = {"scale": [float(s) for s in scale], "zp": [0] * n}
        if want == np.int32:
            entry["int32"] = [int(v) for v in np.broadcast_to(rec["q"].reshape(-1), (n,))]
        out[t.name] = entry
    return out
