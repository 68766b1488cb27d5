"""One handler per supported ONNX op: read attributes, place data in IR layout, emit IR nodes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from tinytrain.errors import quote_list
from tinytrain.frontend.layout import HWC, Act, compose_transpose, identity
from tinytrain.ir import ParamSource

if TYPE_CHECKING:  # the importer drives the handlers; they see it only as a type
    from tinytrain.frontend.onnx_import import Importer

Handler = Callable[["Importer", int, onnx.NodeProto, dict[str, Any]], None]
HANDLERS: dict[str, Handler] = {}


def handles(*ops: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


def _hwc_out(im: Importer, y: str) -> Act:
    h, w, c = im.b.tensors[y].shape
    return Act(y, (c, h, w), HWC)


def window_pads(im: Importer, i: int, a: dict, hw: tuple[int, int], k: tuple[int, int],
                s: tuple[int, int], d: tuple[int, int]) -> tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) pads from ONNX pads/auto_pad."""
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = [int(v) for v in a.get("pads", [0, 0, 0, 0])]
        if len(p) != 4:
            raise im.fail(i, f"expects 2-D padding, got pads={p}")
        if min(p) < 0:
            raise im.fail(i, "negative padding is not supported")
        return p[0], p[1], p[2], p[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    out = []
    for n, kk, ss, dd in zip(hw, k, s, d):
        total = max((math.ceil(n / ss) - 1) * ss + (kk - 1) * dd + 1 - n, 0)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def bn_affine(im: Importer, j: int) -> tuple[np.ndarray, np.ndarray]:
    n = im.model.graph.node[j]
    scale, bias, mean, var = (im.const(j, n.input[k]).astype(np.float64) for k in range(1, 5))
    eps = float(next((onnx.helper.get_attribute_value(a) for a in n.attribute
                      if a.name == "epsilon"), 1e-5))
    s = scale / np.sqrt(var + eps)
    return s, bias - mean * s


def _as_2d(a: dict, seq: bool) -> dict:
    """A 1-D op's attributes as the 2-D op's over an image of height 1."""
    if not seq:
        return a
    out = dict(a)
    for key, unit in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in a:
            out[key] = [unit, *a[key]]
    if "pads" in a:
        p = list(a["pads"])
        if len(p) != 2:
            return out  # window_pads names the bad length
        out["pads"] = [0, p[0], 0, p[1]]
    return out


@handles("Conv")
def conv(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    """Conv2d, and Conv1d as a Conv2d over an image of height 1 (weights (O, 1, k, I))."""
    x, seq = im.spatial(i, im.act(i, node.input[0]))
    w = im.const(i, node.input[1]).astype(np.float64)
    if w.ndim != (3 if seq else 4):
        raise im.fail(i, f"weight of rank {w.ndim} for a per-sample input of rank "
                         f"{2 if seq else 3}: 1-D and 2-D convolutions are supported")
    if seq:
        w, a = w[:, :, None, :], _as_2d(a, seq)
    b = im.opt_const(i, node, 2)
    groups = int(a.get("group", 1))
    cin = x.shape[0]
    if w.shape[1] * groups != cin or w.shape[0] % groups:
        raise im.fail(i, f"weight {w.shape} does not match {cin} input channels in {groups} groups")
    k = (w.shape[2], w.shape[3])
    s = tuple(int(v) for v in a.get("strides", [1, 1]))
    d = tuple(int(v) for v in a.get("dilations", [1, 1]))
    pads = window_pads(im, i, a, (x.shape[1], x.shape[2]), k, s, d)
    W = w.transpose(0, 2, 3, 1)
    out_name, transform = node.output[0], "oik" if seq else "oihw"
    bn = im.sole_consumer(out_name, "BatchNormalization")
    if bn is not None:
        sc, sh = bn_affine(im, bn)
        W = W * sc[:, None, None, None]
        b = (b.astype(np.float64) if b is not None else 0.0) * sc + sh
        im.skip.add(bn)
        out_name, transform = im.model.graph.node[bn].output[0], \
            f"{transform}_bn:{im.names[bn]}"
    name = im.names[i]
    inputs = [x.name, im.b.param(name + "_weight", W, im.source(i, "weight", transform))]
    if b is not None:
        inputs.append(im.b.param(name + "_bias", np.asarray(b), im.source(i, "bias", transform)))
    attrs = {"kernel": k, "stride": s, "pads": pads, "dilation": d, "groups": groups}
    y = im.b.node("conv2d", name, inputs, attrs)
    im.env[out_name] = im.sequence(i, y) if seq else _hwc_out(im, y)


@handles("BatchNormalization")
def batchnorm(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    """A BN with no conv before it: a trainable per-channel affine (1x1 depthwise conv)."""
    x = im.hwc(i, im.act(i, node.input[0]))
    sc, sh = bn_affine(im, i)
    c = x.shape[0]
    name = im.names[i]
    inputs = [x.name,
              im.b.param(name + "_scale", sc.reshape(c, 1, 1, 1), im.source(i, "weight", "bn")),
              im.b.param(name + "_shift", sh, im.source(i, "bias", "bn"))]
    attrs = {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "dilation": (1, 1),
             "groups": c}
    im.env[node.output[0]] = _hwc_out(im, im.b.node("conv2d", name, inputs, attrs))


def _features(im: Importer, i: int, name: str) -> Act:
    x = im.plain(im.act(i, name), im.names[i])
    if len(x.shape) != 1:
        raise im.fail(i, f"expects a (N, features) input, got per-sample shape {x.shape}; "
                         "add a Flatten before it")
    return x


@handles("Gemm")
def gemm(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = _features(im, i, node.input[0])
    if a.get("transA", 0):
        raise im.fail(i, "transA=1 is not supported")
    B = im.const(i, node.input[1]).astype(np.float64)
    trans_b = int(a.get("transB", 0))
    W = (B if trans_b else B.T) * float(a.get("alpha", 1.0))
    C = im.opt_const(i, node, 2)
    name = im.names[i]
    inputs = [x.name, im.b.param(name + "_weight", W, im.source(i, "weight", f"gemm:{trans_b}"))]
    if C is not None:
        bias = np.broadcast_to(C.astype(np.float64) * float(a.get("beta", 1.0)), (W.shape[0],))
        inputs.append(im.b.param(name + "_bias", bias, im.source(i, "bias", "gemm")))
    y = im.b.node("dense", name, inputs)
    im.env[node.output[0]] = Act(y, (W.shape[0],), (0,))


@handles("MatMul")
def matmul(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = _features(im, i, node.input[0])
    B = im.const(i, node.input[1]).astype(np.float64)
    if B.ndim != 2:
        raise im.fail(i, f"expects a 2-D constant weight, got shape {B.shape}")
    name = im.names[i]
    inputs = [x.name, im.b.param(name + "_weight", B.T, im.source(i, "weight", "matmul"))]
    out_name = node.output[0]
    add = im.sole_consumer(out_name, "Add")
    if add is not None:
        n = im.model.graph.node[add]
        other = n.input[1] if n.input[0] == out_name else n.input[0]
        c = im.env.get(other)
        if isinstance(c, np.ndarray) and c.size in (1, B.shape[1]):
            bias = np.broadcast_to(c.astype(np.float64).reshape(-1), (B.shape[1],))
            inputs.append(im.b.param(name + "_bias", bias,
                                     ParamSource(im.names[add], "bias", "add")))
            im.skip.add(add)
            out_name = n.output[0]
    y = im.b.node("dense", name, inputs)
    im.env[out_name] = Act(y, (B.shape[1],), (0,))


def _unary(op: str, attrs_fn: Callable[[Importer, int, onnx.NodeProto, dict], dict]) -> Handler:
    def h(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
        x = im.act(i, node.input[0])
        y = im.b.node(op, im.names[i], [x.name], attrs_fn(im, i, node, a))
        im.env[node.output[0]] = Act(y, x.shape, x.perm)
    return h


def _clip_attrs(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> dict:
    lo = im.opt_const(i, node, 1)
    hi = im.opt_const(i, node, 2)
    return {"lo": float(lo) if lo is not None else float(a.get("min", -np.inf)),
            "hi": float(hi) if hi is not None else float(a.get("max", np.inf))}


HANDLERS["Relu"] = _unary("clip", lambda im, i, n, a: {"lo": 0.0, "hi": float("inf")})
HANDLERS["Clip"] = _unary("clip", _clip_attrs)
HANDLERS["LeakyRelu"] = _unary("leaky_relu", lambda im, i, n, a: {"alpha": a.get("alpha", 0.01)})
HANDLERS["Sigmoid"] = _unary("sigmoid", lambda im, i, n, a: {})
HANDLERS["Tanh"] = _unary("tanh", lambda im, i, n, a: {})
HANDLERS["HardSigmoid"] = _unary("hard_sigmoid", lambda im, i, n, a: {
    "alpha": a.get("alpha", 0.2), "beta": a.get("beta", 0.5)})
HANDLERS["HardSwish"] = _unary("hard_swish", lambda im, i, n, a: {})


@handles("Identity", "Dropout")
def passthrough(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    im.env[node.output[0]] = im.act(i, node.input[0])


@handles("Add", "Mul")
def binary(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    op = node.op_type.lower()
    v0, v1 = im.env[node.input[0]], im.env[node.input[1]]
    acts = [v for v in (v0, v1) if isinstance(v, Act)]
    base = acts[0]
    names, logicals = [], []
    for k, v in enumerate((v0, v1)):
        if isinstance(v, Act):
            logicals.append(v.shape)
            if len(v.shape) != len(base.shape):
                raise im.fail(i, f"operands of rank {len(base.shape)} and {len(v.shape)} per "
                                 "sample; only equal ranks or constants are supported")
            names.append(im.to_perm(v, base.perm, im.names[i] + f"_in{k}").name)
            continue
        c = np.asarray(v, np.float64)
        full = len(base.shape) + 1
        if c.ndim > full or (c.ndim == full and c.shape[0] != 1):
            raise im.fail(i, f"constant of shape {c.shape} broadcasts over the batch axis")
        if c.ndim == full:
            c = c[0]
        c = c.reshape((1,) * (len(base.shape) - c.ndim) + c.shape)
        logicals.append(c.shape)
        names.append(im.b.const(im.names[i] + f"_const{k}", np.transpose(c, base.perm)))
    y = im.b.node(op, im.names[i], names)
    im.env[node.output[0]] = Act(y, tuple(np.broadcast_shapes(*logicals)), base.perm)


def _pool(op: str) -> Handler:
    def h(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
        x, seq = im.spatial(i, im.act(i, node.input[0]))
        a = _as_2d(a, seq)
        k = tuple(int(v) for v in a["kernel_shape"])
        s = tuple(int(v) for v in a.get("strides", [1, 1]))
        d = tuple(int(v) for v in a.get("dilations", [1, 1]))
        if op == "avg_pool2d" and d != (1, 1):
            raise im.fail(i, "dilated average pooling is not supported")
        top, left, bottom, right = window_pads(im, i, a, (x.shape[1], x.shape[2]), k, s, d)
        cip = int(a.get("count_include_pad", 0))
        if a.get("ceil_mode", 0):
            if op == "avg_pool2d" and cip:
                raise im.fail(i, "ceil_mode=1 with count_include_pad=1 is not supported")
            bottom += _ceil_extra(x.shape[1], top, bottom, k[0], s[0], d[0])
            right += _ceil_extra(x.shape[2], left, right, k[1], s[1], d[1])
        attrs: dict[str, Any] = {"kernel": k, "stride": s, "pads": (top, left, bottom, right),
                                 "dilation": d}
        if op == "avg_pool2d":
            attrs["count_include_pad"] = cip
        y = im.b.node(op, im.names[i], [x.name], attrs)
        im.env[node.output[0]] = im.sequence(i, y) if seq else _hwc_out(im, y)
    return h


def _ceil_extra(n: int, lo: int, hi: int, k: int, s: int, d: int) -> int:
    span = n + lo + hi - d * (k - 1) - 1
    out = -(-span // s) + 1
    if (out - 1) * s >= n + lo:  # the last window must start inside the input or left pad
        out -= 1
    return max(0, (out - 1) * s + d * (k - 1) + 1 - (n + lo + hi))


HANDLERS["AveragePool"] = _pool("avg_pool2d")
HANDLERS["MaxPool"] = _pool("max_pool2d")


@handles("GlobalAveragePool", "ReduceMean")
def global_pool(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    keep = 1
    rank = len(x.shape) + 1
    if node.op_type == "ReduceMean":
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = list(im.const(i, node.input[1]))
        if axes is None or sorted(int(v) % rank for v in axes) != list(range(2, rank)) or \
                rank not in (3, 4):
            raise im.fail(i, f"only ReduceMean over the spatial axes of an NCHW tensor (2, 3) "
                             f"or the steps of an NCL sequence (2) is supported (axes={axes})")
        keep = int(a.get("keepdims", 1))
    x, seq = im.spatial(i, x)
    y = im.b.node("global_avg_pool", im.names[i], [x.name], {"keepdims": keep})
    if keep:
        im.env[node.output[0]] = im.sequence(i, y) if seq else _hwc_out(im, y)
    else:
        im.env[node.output[0]] = Act(y, (x.shape[0],), (0,))


def _reshape_to(im: Importer, i: int, x: Act, shape: tuple[int, ...]) -> Act:
    x = im.plain(x, im.names[i])
    if int(np.prod(shape)) != int(np.prod(x.shape)):
        raise im.fail(i, f"cannot reshape per-sample shape {x.shape} to {shape}")
    y = im.b.node("reshape", im.names[i], [x.name], {"shape": shape})
    return Act(y, shape, identity(len(shape)))


@handles("Flatten")
def flatten(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    if int(a.get("axis", 1)) != 1:
        raise im.fail(i, "only Flatten with axis=1 (keep the batch axis) is supported")
    im.env[node.output[0]] = _reshape_to(im, i, x, (int(np.prod(x.shape)),))


@handles("Reshape")
def reshape(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    target = [int(v) for v in im.const(i, node.input[1])]
    full = (1,) + x.shape
    dims = [full[k] if v == 0 and k < len(full) else v for k, v in enumerate(target)][1:]
    if dims.count(-1) > 1:
        raise im.fail(i, f"reshape target {target} has more than one -1")
    if -1 in dims:
        rest = int(np.prod([v for v in dims if v != -1]))
        dims[dims.index(-1)] = int(np.prod(x.shape)) // max(rest, 1)
    im.env[node.output[0]] = _reshape_to(im, i, x, tuple(dims))


@handles("Squeeze", "Unsqueeze")
def squeeze(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in im.const(i, node.input[1])]
    full = list((1,) + x.shape)
    if node.op_type == "Squeeze":
        axes = [v % len(full) for v in axes] if axes is not None else [
            k for k, n in enumerate(full) if n == 1 and k > 0]
        if 0 in axes:
            raise im.fail(i, "cannot squeeze the batch axis")
        full = [n for k, n in enumerate(full) if k not in axes]
    else:
        rank = len(full) + len(axes or [])
        for ax in sorted(v % rank for v in axes or []):
            if ax == 0:
                raise im.fail(i, "cannot unsqueeze in front of the batch axis")
            full.insert(ax, 1)
    im.env[node.output[0]] = _reshape_to(im, i, x, tuple(full[1:]))


@handles("Pad")
def pad(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    mode = a.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise im.fail(i, f"only constant padding is supported (mode={mode!r})")
    pads = a.get("pads")
    if pads is None:
        pads = [int(v) for v in im.const(i, node.input[1])]
    value = float(a.get("value", 0.0))
    v = im.opt_const(i, node, 2)
    if v is not None and v.size:
        value = float(v.reshape(-1)[0])
    r = len(x.shape) + 1
    if len(pads) != 2 * r or pads[0] or pads[r] or min(pads) < 0:
        raise im.fail(i, f"pads {list(pads)} must be non-negative and leave the batch axis alone")
    before, after = pads[1:r], pads[r + 1:]
    attrs = {"before": tuple(before[p] for p in x.perm), "after": tuple(after[p] for p in x.perm),
             "value": value}
    y = im.b.node("pad", im.names[i], [x.name], attrs)
    shape = tuple(n + p + q for n, p, q in zip(x.shape, before, after))
    im.env[node.output[0]] = Act(y, shape, x.perm)


@handles("Concat")
def concat(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    xs = [im.act(i, n) for n in node.input]
    r = len(xs[0].shape) + 1
    axis = int(a["axis"]) % r
    if axis == 0:
        raise im.fail(i, "concatenation along the batch axis is not supported")
    perm = xs[0].perm
    names = [im.to_perm(x, perm, im.names[i] + f"_in{k}").name for k, x in enumerate(xs)]
    y = im.b.node("concat", im.names[i], names, {"axis": perm.index(axis - 1)})
    shape = list(xs[0].shape)
    shape[axis - 1] = sum(x.shape[axis - 1] for x in xs)
    im.env[node.output[0]] = Act(y, tuple(shape), perm)


@handles("Transpose")
def transpose(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    r = len(x.shape) + 1
    perm = [int(v) for v in a.get("perm", list(range(r))[::-1])]
    if perm[0] != 0:
        raise im.fail(i, f"Transpose perm {quote_list(perm)} moves the batch axis; only layout "
                         "changes that keep axis 0 are supported")
    onnx_perm = tuple(p - 1 for p in perm[1:])
    im.env[node.output[0]] = Act(x.name, tuple(x.shape[p] for p in onnx_perm),
                                 compose_transpose(x.perm, onnx_perm))


@handles("Softmax", "LogSoftmax")
def softmax(im: Importer, i: int, node: onnx.NodeProto, a: dict) -> None:
    x = im.act(i, node.input[0])
    outs = {o.name for o in im.model.graph.output}
    opset = max((o.version for o in im.model.opset_import if o.domain in ("", "ai.onnx")),
                default=13)
    axis = int(a.get("axis", -1 if opset >= 13 else 1)) % (len(x.shape) + 1)
    if node.output[0] not in outs or len(x.shape) != 1 or axis != 1:
        raise im.fail(i, "Softmax/LogSoftmax is supported only as the model's final op over "
                         "the class axis of (N, classes) logits; it is folded into the loss")
    im.head["activation"] = "log_softmax" if node.op_type == "LogSoftmax" else "softmax"
    im.env[node.output[0]] = im.plain(x, im.names[i])


# ops that are folded on constants (shape arithmetic), not handled
FOLDED = ("Constant", "Shape", "Gather", "Concat", "Unsqueeze")
