"""Handlers for float TFLite operators (Keras's default export): each emits the fp32 IR ops the
ONNX importer emits, so a float .tflite trains, plans and quantises (--quantize int8) like an
fp32 ONNX model. TFLite is NHWC, which is the IR's per-sample layout: weights keep their file
layout (a conv's OHWI is the IR's), except the depthwise filter (1, kh, kw, C) -> (C, kh, kw, 1).

Operators whose inputs are all constant (what a Keras Normalization layer leaves: SUB, DIV,
RSQRT, SQUARED_DIFFERENCE of its mean and variance) are evaluated here; where one operand is an
activation, SUB and DIV by a constant become ADD and MUL of the negated and inverted constant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tflite

from tinytrain.frontend.tflite_ops import (
    ACT,
    B,
    bind,
    check_float,
    constant,
    conv_filter,
    in_tensor,
    opcode,
    options,
    out_tensor,
    param,
    registrar,
    reshape,
    transpose,
    window,
)
from tinytrain.frontend.tflite_rnn import unidirectional_sequence_lstm
from tinytrain.ir import FIXED, ParamSource

if TYPE_CHECKING:
    from tinytrain.frontend.tflite_import import TFLiteImporter

FLOAT_HANDLERS: dict[int, Callable[[TFLiteImporter, int, Any], None]] = {}
FLOAT_SUPPORTED: list[str] = []

# fused activations of float operators, as the IR op and its attributes
FUSED = {ACT.RELU: ("clip", {"lo": 0.0, "hi": float("inf")}),
         ACT.RELU6: ("clip", {"lo": 0.0, "hi": 6.0}),
         ACT.RELU_N1_TO_1: ("clip", {"lo": -1.0, "hi": 1.0})}  # as LiteRT's float kernels
# (a fused TANH, which LiteRT's CONV_2D ignores, is refused: the converter writes a TANH op)


handles = registrar(FLOAT_HANDLERS, FLOAT_SUPPORTED)
handles(B.RESHAPE, B.SQUEEZE, B.EXPAND_DIMS)(reshape)  # layout-free: shared with int8
handles(B.TRANSPOSE)(transpose)
handles(B.UNIDIRECTIONAL_SEQUENCE_LSTM)(unidirectional_sequence_lstm)  # frontend/tflite_rnn.py


def per_sample_const(im: TFLiteImporter, k: int, c: np.ndarray, rank: int) -> np.ndarray:
    """A constant operand as a per-sample array of `rank` axes (broadcasting like numpy)."""
    c = np.asarray(c, np.float64)
    if c.ndim == rank + 1:
        if c.shape[0] != 1:
            raise im.fail(k, f"constant of shape {list(c.shape)} broadcasts over the batch axis")
        c = c[0]
    if c.ndim > rank:
        raise im.fail(k, f"constant of shape {list(c.shape)} has more axes than the "
                         f"activation's {rank} per sample")
    return c.reshape((1,) * (rank - c.ndim) + c.shape)


def fused_act(im: TFLiteImporter, k: int, o: Any, y_name: str) -> str:
    """Append the operator's fused activation after `y_name` (if it has one)."""
    fused = o.FusedActivationFunction() if o is not None else ACT.NONE
    if fused == ACT.NONE:
        return y_name
    if fused not in FUSED:
        name = next((n for n, v in vars(ACT).items() if v == fused), str(fused))
        raise im.fail(k, f"fused activation {name} is not supported (NONE, RELU, RELU6, "
                         "RELU_N1_TO_1 are; LiteRT's float CONV_2D ignores a fused TANH)")
    op, attrs = FUSED[fused]
    return im.b.node(op, im.op_label(k) + "_act", [y_name], attrs)


def _conv(im: TFLiteImporter, k: int, op: Any, depthwise: bool) -> None:
    x, w, b, y = in_tensor(im, op, 0), in_tensor(im, op, 1), in_tensor(im, op, 2), \
        out_tensor(im, op)
    assert x is not None and w is not None
    o = options(op, tflite.DepthwiseConv2DOptions if depthwise else tflite.Conv2DOptions)
    wdata = check_float(im, k, w, "weights")
    if len(x.shape) != 4 or wdata.ndim != 4:
        raise im.fail(k, f"expects an NHWC input and a rank-4 filter (got {list(x.shape)} and "
                         f"{list(wdata.shape)})")
    _, h, wd, cin = x.shape
    wir, transform, groups, _ = conv_filter(im, k, cin, wdata, depthwise)
    inputs = [im.act(k, x.index), param(im, k, w, wir, "weight", transform, None)]
    if b is not None:
        inputs.append(param(im, k, b, check_float(im, k, b, "bias"), "bias", "identity", None))
    attrs = {**window(o, h, wd, *wir.shape[1:3], o.DilationHFactor(), o.DilationWFactor()),
             "groups": groups}
    out = im.b.node("conv2d", im.op_label(k), inputs, attrs)
    bind(im, k, y, fused_act(im, k, o, out))


@handles(B.CONV_2D)
def conv2d(im: TFLiteImporter, k: int, op: Any) -> None:
    _conv(im, k, op, depthwise=False)


@handles(B.DEPTHWISE_CONV_2D)
def depthwise_conv2d(im: TFLiteImporter, k: int, op: Any) -> None:
    _conv(im, k, op, depthwise=True)


@handles(B.FULLY_CONNECTED)
def fully_connected(im: TFLiteImporter, k: int, op: Any) -> None:
    x, w, b, y = in_tensor(im, op, 0), in_tensor(im, op, 1), in_tensor(im, op, 2), \
        out_tensor(im, op)
    assert x is not None and w is not None
    o = options(op, tflite.FullyConnectedOptions)
    wdata = check_float(im, k, w, "weights")
    if wdata.ndim != 2:
        raise im.fail(k, f"weights '{w.name}' have shape {list(wdata.shape)}, not (units, "
                         "inputs)")
    out_n, in_n = wdata.shape
    src = im.act(k, x.index)
    if im.b.tensors[src].size != in_n:
        raise im.fail(k, f"input has {im.b.tensors[src].size} values per sample, the weights "
                         f"expect {in_n} (a Dense layer over a sequence's steps is not "
                         "supported; flatten first)")
    inputs = [src, param(im, k, w, wdata, "weight", "identity", None)]
    if b is not None:
        inputs.append(param(im, k, b, check_float(im, k, b, "bias"), "bias", "identity", None))
    out = im.b.node("dense", im.op_label(k), inputs)
    bind(im, k, y, fused_act(im, k, o, out))


BINARY_OPTIONS = {B.ADD: tflite.AddOptions, B.MUL: tflite.MulOptions, B.SUB: tflite.SubOptions,
                  B.DIV: tflite.DivOptions}
FOLD: dict[int, Callable[..., np.ndarray]] = {
    B.ADD: np.add, B.MUL: np.multiply, B.SUB: np.subtract, B.DIV: np.divide,
    B.SQUARED_DIFFERENCE: lambda a, b: np.square(a - b), B.RSQRT: lambda a: 1.0 / np.sqrt(a),
    B.SQRT: np.sqrt, B.NEG: np.negative, B.MAXIMUM: np.maximum, B.MINIMUM: np.minimum,
}


def fold(im: TFLiteImporter, k: int, op: Any, code: int) -> bool:
    """Evaluate an operator whose inputs are all constant; False if one is an activation."""
    ins = [in_tensor(im, op, j) for j in range(len(op.InputsAsNumpy()))]
    values = [constant(im, t) for t in ins if t is not None]
    if any(v is None for v in values) or code not in FOLD:
        return False
    with np.errstate(all="raise"):
        try:
            v = FOLD[code](*[np.asarray(a, np.float64) for a in values])
        except FloatingPointError:
            raise im.fail(k, "its constant operands give a non-finite value") from None
    y = out_tensor(im, op)
    im.folded[y.index] = np.asarray(v, np.float32).reshape(y.shape)
    return True


@handles(B.ADD, B.MUL, B.SUB, B.DIV)
def binary(im: TFLiteImporter, k: int, op: Any) -> None:
    code = opcode(im.model, op)
    if fold(im, k, op, code):
        return
    a, b, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert a is not None and b is not None
    o = options(op, BINARY_OPTIONS[code])
    ca, cb = constant(im, a), constant(im, b)
    op_name = {B.ADD: "add", B.SUB: "add", B.MUL: "mul", B.DIV: "mul"}[code]
    if ca is None and cb is None:
        if code in (B.SUB, B.DIV):
            raise im.fail(k, f"{'SUB' if code == B.SUB else 'DIV'} of two activations is not "
                             "supported; it is supported with a constant second operand (a "
                             "normalisation's mean or scale)")
        names = [im.act(k, a.index), im.act(k, b.index)]
        if len(im.b.tensors[names[0]].shape) != len(im.b.tensors[names[1]].shape):
            raise im.fail(k, "operands of different ranks per sample are not supported")
    else:
        if code in (B.SUB, B.DIV) and cb is None:
            raise im.fail(k, "a constant minus or divided by an activation is not supported")
        act_t, c = (b, ca) if ca is not None else (a, cb)
        src = im.act(k, act_t.index)
        c = per_sample_const(im, k, c, len(im.b.tensors[src].shape))
        if code == B.SUB:
            c = -c
        elif code == B.DIV:
            if not np.all(c):
                raise im.fail(k, "divides by a constant that holds zeros")
            c = 1.0 / c
        if all(n == 1 for n in c.shape[:-1]):  # per channel: a frozen affine, quantisable
            mul = op_name == "mul"
            sole = im.readers(act_t.index) == 1
            bind(im, k, y, fused_act(im, k, o, affine(im, k, src, c.reshape(-1), mul, sole)))
            return
        names = [src, im.b.const(im.op_label(k) + "_const", c)]
    out = im.b.node(op_name, im.op_label(k), names)
    bind(im, k, y, fused_act(im, k, o, out))


def affine(im: TFLiteImporter, k: int, src: str, c: np.ndarray, mul: bool,
           sole_reader: bool) -> str:
    """x * c or x + c with c per channel (a Keras Normalization's mean and variance, an
    unfolded BatchNormalization) as a frozen 1x1 depthwise conv, as the ONNX importer makes a
    lone BatchNormalization: `--quantize int8` then treats it as any conv. Consecutive ones
    (SUB then DIV) merge into one while nothing else reads the first."""
    shape = im.b.tensors[src].shape
    ch = shape[-1]
    c = np.broadcast_to(np.asarray(c, np.float64), (ch,))
    prev = im.affines.get(src)
    if prev is not None and sole_reader:
        scale_t, shift_t = prev
        scale = im.b.tensors[scale_t].data.reshape(-1).astype(np.float64)
        shift = im.b.tensors[shift_t].data.astype(np.float64)
        scale, shift = (scale * c, shift * c) if mul else (scale, shift + c)
        im.b.tensors[scale_t] = im.b.tensors[scale_t].replace(
            data=scale.reshape(ch, 1, 1, 1).astype(np.float32))
        im.b.tensors[shift_t] = im.b.tensors[shift_t].replace(data=shift.astype(np.float32))
        out = src
    else:
        scale, shift = (c, np.zeros(ch)) if mul else (np.ones(ch), c)
        name = im.op_label(k)
        source = ParamSource(name, "affine", FIXED)
        rows = (1, int(np.prod(shape[:-1])), ch)  # any rank as HWC: conv2d's layout
        x = src if len(shape) == 3 else im.b.node("reshape", name + "_hwc", [src],
                                                   {"shape": rows})
        scale_t = im.b.param(name + "_scale", scale.reshape(ch, 1, 1, 1), source,
                             trainable=False)
        shift_t = im.b.param(name + "_shift", shift, source, trainable=False)
        attrs = {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "dilation": (1, 1),
                 "groups": ch}
        out = im.b.node("conv2d", name, [x, scale_t, shift_t], attrs)
        if len(shape) != 3:
            out = im.b.node("reshape", name + "_flat", [out], {"shape": tuple(shape)})
    im.affines[out] = (scale_t, shift_t)
    return out


@handles(B.SQUARED_DIFFERENCE, B.RSQRT, B.SQRT, B.NEG, B.MAXIMUM, B.MINIMUM)
def constant_only(im: TFLiteImporter, k: int, op: Any) -> None:
    """Ops tinytrain evaluates at import on constants; on activations (a LayerNormalization
    computed per sample) they have no kernel yet."""
    if not fold(im, k, op, opcode(im.model, op)):
        raise im.fail(k, "is supported on constants only (folded at import, as a Keras "
                         "Normalization layer leaves it); on an activation (e.g. a "
                         "LayerNormalization) it has no kernel")


def _pool(im: TFLiteImporter, k: int, op: Any, ir_op: str) -> None:
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    o = options(op, tflite.Pool2DOptions)
    _, h, w, _ = x.shape
    attrs = window(o, h, w, o.FilterHeight(), o.FilterWidth())
    if ir_op == "avg_pool2d":
        attrs["count_include_pad"] = 0  # TFLite averages over the window's valid inputs
    out = im.b.node(ir_op, im.op_label(k), [im.act(k, x.index)], attrs)
    bind(im, k, y, fused_act(im, k, o, out))


@handles(B.AVERAGE_POOL_2D)
def average_pool(im: TFLiteImporter, k: int, op: Any) -> None:
    _pool(im, k, op, "avg_pool2d")


@handles(B.MAX_POOL_2D)
def max_pool(im: TFLiteImporter, k: int, op: Any) -> None:
    _pool(im, k, op, "max_pool2d")


@handles(B.MEAN)
def mean(im: TFLiteImporter, k: int, op: Any) -> None:
    x, axes, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert x is not None and axes is not None
    if fold(im, k, op, B.MEAN):
        return
    av = constant(im, axes)
    ax = sorted(int(a) % len(x.shape) for a in np.asarray(av).reshape(-1)) \
        if av is not None else []
    if ax != list(range(1, len(x.shape) - 1)) or len(x.shape) not in (3, 4):
        raise im.fail(k, f"MEAN over axes {ax} of a rank-{len(x.shape)} tensor; tinytrain "
                         "supports the mean over height and width of an NHWC tensor, or over "
                         "the steps of an NWC sequence (GlobalAveragePooling1D/2D)")
    o = options(op, tflite.ReducerOptions)
    keep = int(bool(o.KeepDims())) if o is not None else 0
    out = im.b.node("global_avg_pool", im.op_label(k), [im.act(k, x.index)], {"keepdims": 0})
    if keep:  # the pooled axes stay as 1s: the same values
        out = im.b.node("reshape", im.op_label(k) + "_keep", [out], {"shape": y.shape[1:]})
    bind(im, k, y, out)


@handles(B.PAD, B.PADV2)
def pad(im: TFLiteImporter, k: int, op: Any) -> None:
    x, pads, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert x is not None and pads is not None
    pv = constant(im, pads)
    if pv is None:
        raise im.fail(k, "paddings must be a constant tensor")
    p = np.asarray(pv).reshape(-1, 2)
    if len(p) != len(x.shape) or p[0].any() or (p < 0).any():
        raise im.fail(k, f"paddings {p.tolist()} must give one non-negative row per axis and "
                         "not pad the batch axis")
    val = constant(im, in_tensor(im, op, 2))
    attrs = {"before": tuple(int(v) for v in p[1:, 0]), "after": tuple(int(v) for v in p[1:, 1]),
             "value": float(val.reshape(-1)[0]) if val is not None and val.size else 0.0}
    bind(im, k, y, im.b.node("pad", im.op_label(k), [im.act(k, x.index)], attrs))


@handles(B.CONCATENATION)
def concatenation(im: TFLiteImporter, k: int, op: Any) -> None:
    ins = [in_tensor(im, op, j) for j in range(len(op.InputsAsNumpy()))]
    y = out_tensor(im, op)
    o = options(op, tflite.ConcatenationOptions)
    axis = o.Axis() % len(y.shape)
    if axis == 0:
        raise im.fail(k, "concatenation along the batch axis is not supported")
    if o.FusedActivationFunction() != ACT.NONE:  # LiteRT refuses it too
        raise im.fail(k, "a fused activation on CONCATENATION is not supported")
    names = [im.act(k, t.index) for t in ins if t is not None]
    bind(im, k, y, im.b.node("concat", im.op_label(k), names, {"axis": axis - 1}))


def _unary(ir_op: str, attrs: Callable[[Any], dict]) -> Callable:
    def h(im: TFLiteImporter, k: int, op: Any) -> None:
        x, y = in_tensor(im, op, 0), out_tensor(im, op)
        assert x is not None
        bind(im, k, y, im.b.node(ir_op, im.op_label(k), [im.act(k, x.index)], attrs(op)))
    return h


def _leaky_alpha(op: Any) -> dict:
    o = options(op, tflite.LeakyReluOptions)
    return {"alpha": float(o.Alpha()) if o is not None else 0.2}


handles(B.RELU)(_unary("clip", lambda op: {"lo": 0.0, "hi": float("inf")}))
handles(B.RELU6)(_unary("clip", lambda op: {"lo": 0.0, "hi": 6.0}))
handles(B.RELU_N1_TO_1)(_unary("clip", lambda op: {"lo": -1.0, "hi": 1.0}))
handles(B.LOGISTIC)(_unary("sigmoid", lambda op: {}))
handles(B.TANH)(_unary("tanh", lambda op: {}))
handles(B.HARD_SWISH)(_unary("hard_swish", lambda op: {}))
handles(B.LEAKY_RELU)(_unary("leaky_relu", _leaky_alpha))


@handles(B.SOFTMAX)
def softmax(im: TFLiteImporter, k: int, op: Any) -> None:
    """A final softmax over the classes is folded into the loss, as for ONNX models: the
    device trains on the logits and answers probabilities."""
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    o = options(op, tflite.SoftmaxOptions)
    src = im.act(k, x.index)
    if y.index != im.output_index or len(im.b.tensors[src].shape) != 1:
        raise im.fail(k, "SOFTMAX is supported only as the model's final operator over the "
                         "classes of (N, classes) logits; it is folded into the loss")
    if o is not None and float(o.Beta()) != 1.0:
        raise im.fail(k, f"SOFTMAX with beta {o.Beta()} is not supported (beta 1 is)")
    im.output_activation = "softmax"
    im.env[y.index] = src

