"""One handler per TFLite builtin operator: read its options, compute TFLite's Prepare-time
constants, and append the IR node. See tflite_import.py for the conventions."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tflite

from tinytrain.errors import quote_list
from tinytrain.ir import ParamSource, QuantParams
from tinytrain.quant.fixedpoint import activation_range
from tinytrain.quant.params import grad_range, requant

if TYPE_CHECKING:  # the importer drives the handlers; they see it only as a type
    from tinytrain.frontend.tflite_import import TFLiteImporter, TfTensor

B = tflite.BuiltinOperator
ACT = tflite.ActivationFunctionType
HANDLERS: dict[int, Callable[[TFLiteImporter, int, Any], None]] = {}
SUPPORTED: list[str] = []
ACC_LIMIT = 2**31 - 1  # int32 accumulators must not overflow (checked per layer)


def opcode(model: Any, op: Any) -> int:
    """An operator's builtin code (files before schema 3a keep it in the deprecated field)."""
    oc = model.OperatorCodes(op.OpcodeIndex())
    return max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))


def registrar(table: dict[int, Callable], names: list[str]) -> Callable[..., Callable]:
    """A `@handles(CODE, ...)` decorator that fills one handler table and its list of names
    (int8 here; tflite_float.py and tflite_shape.py keep their own)."""
    def handles(*codes: int) -> Callable:
        def deco(fn: Callable) -> Callable:
            for c in codes:
                table[c] = fn
                names.append(next(k for k, v in vars(B).items() if v == c))
            return fn
        return deco
    return handles


handles = registrar(HANDLERS, SUPPORTED)


def options(op: Any, cls: type) -> Any:
    table = op.BuiltinOptions()
    o = cls()
    if table is None:
        return None
    o.Init(table.Bytes, table.Pos)
    return o


def act_range(im: TFLiteImporter, k: int, fused: int, out: TfTensor) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the fused activation as an int8 clamp."""
    if fused not in ACT_NAMES:
        raise im.fail(k, f"fused activation {fused} is not supported (NONE, RELU, RELU6, "
                         "RELU_N1_TO_1 are)")
    return activation_range(ACT_NAMES[fused], out.scale[0], out.zero_point[0])


def same_pads(size: int, k: int, stride: int, dil: int) -> tuple[int, int]:
    out = (size + stride - 1) // stride
    eff = (k - 1) * dil + 1
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def window(o: Any, h: int, w: int, kh: int, kw: int, dh: int = 1, dw: int = 1) -> dict:
    """A conv's or pool's kernel, stride, pads (TensorFlow's SAME or VALID) and dilation."""
    sh, sw = o.StrideH(), o.StrideW()
    if o.Padding() == tflite.Padding.SAME:
        pt, pb = same_pads(h, kh, sh, dh)
        pl, pr = same_pads(w, kw, sw, dw)
    else:
        pt = pb = pl = pr = 0
    return {"kernel": (kh, kw), "stride": (sh, sw), "pads": (pt, pl, pb, pr),
            "dilation": (dh, dw)}


def conv_filter(im: TFLiteImporter, k: int, cin: int, w: np.ndarray,
                depthwise: bool) -> tuple[np.ndarray, str, int, int]:
    """A CONV_2D filter (O, kh, kw, I) or a DEPTHWISE_CONV_2D one (1, kh, kw, C*m) in the IR's
    layout (O, kh, kw, I/groups): its data, its export transform, groups, output channels."""
    if depthwise:
        _, kh, kw, cout = w.shape
        if cout % cin:
            raise im.fail(k, f"depthwise output channels {cout} are not a multiple of {cin}")
        return w.reshape(kh, kw, cout).transpose(2, 0, 1)[..., None], "depthwise", cin, cout
    cout, kh, kw, wcin = w.shape
    if cin % wcin:
        raise im.fail(k, f"input channels {cin} are not a multiple of filter depth {wcin}")
    return w, "identity", cin // wcin, cout


def bind(im: TFLiteImporter, k: int, y: TfTensor, out: str) -> None:
    """Bind operator k's output `y` to IR tensor `out` after checking its size."""
    want = y.shape[1:] if y.shape and y.shape[0] == 1 else y.shape
    if math.prod(im.b.tensors[out].shape) != math.prod(want):
        raise im.fail(k, f"computed output shape {list(im.b.tensors[out].shape)} differs from "
                         f"the model's {list(y.shape)}")
    im.env[y.index] = out


def constant(im: TFLiteImporter, t: TfTensor | None) -> np.ndarray | None:
    """The tensor's value if it is a constant buffer or was folded here, else None."""
    if t is None:
        return None
    if t.data is not None:
        return t.data
    return im.folded.get(t.index)


def check_float(im: TFLiteImporter, k: int, t: TfTensor, what: str) -> np.ndarray:
    data = constant(im, t)
    if t.dtype == "s8":
        raise im.fail(k, f"{what} '{t.name}' are int8 under float activations: a dynamic-range "
                         "quantised model, which tinytrain does not support; convert with full "
                         "integer quantisation (int8 activations) or without quantisation")
    if data is None or t.dtype != "f32":
        raise im.fail(k, f"{what} '{t.name}' must be a constant float32 tensor (it is "
                         f"{t.type_name}{'' if data is not None else ', computed'})")
    return data


def check_int8(im: TFLiteImporter, k: int, *ts: TfTensor) -> None:
    for t in ts:
        if t.dtype != "s8":
            raise im.fail(k, f"tensor '{t.name}' is {t.type_name}; only int8 activations are "
                             "supported for quantised models (int16 activations are not)")
        if not t.quantized:
            raise im.fail(k, f"int8 tensor '{t.name}' has no quantisation parameters")
        if len(t.scale) != 1:
            raise im.fail(k, f"activation '{t.name}' is quantised per channel; TFLite "
                             "activations must be per tensor")


def channel_scales(im: TFLiteImporter, k: int, w: TfTensor, n: int) -> tuple[float, ...]:
    """Per-output-channel weight scales. TFLite Micro accepts a quantized_dimension that does
    not match the layout (it uses the output-channel axis); so do we, by count."""
    if len(w.scale) not in (1, n):
        raise im.fail(k, f"weights '{w.name}' have {len(w.scale)} scales for {n} output "
                         "channels")
    if any(z != 0 for z in w.zero_point):
        raise im.fail(k, f"weights '{w.name}' are asymmetric (zero points "
                         f"{sorted(set(w.zero_point))[:4]}); int8 weights must be symmetric "
                         "(zero point 0), as in TFLite's int8 specification")
    return w.scale if len(w.scale) == n else w.scale * n


ACT_NAMES = {ACT.NONE: "NONE", ACT.RELU: "RELU", ACT.RELU6: "RELU6",
             ACT.RELU_N1_TO_1: "RELU_N1_TO_1"}


def requant_attrs(im: TFLiteImporter, k: int, x: TfTensor, w_scales: tuple[float, ...],
                  y: TfTensor, fused: int) -> dict:
    return requant(x.scale[0], x.zero_point[0], w_scales, y.scale[0], y.zero_point[0],
                   ACT_NAMES.get(fused, "NONE"), act_range(im, k, fused, y))


def check_acc(im: TFLiteImporter, k: int, taps: int, bias: np.ndarray | None) -> None:
    worst = taps * 255 * 128 + (int(np.abs(bias.astype(np.int64)).max()) if bias is not None
                                and bias.size else 0)
    if worst > ACC_LIMIT:
        raise im.fail(k, f"{taps} taps per output could overflow the int32 accumulator "
                         f"(worst case {worst}); split the layer")


def out_tensor(im: TFLiteImporter, op: Any, j: int = 0) -> TfTensor:
    return im.tensors[int(op.OutputsAsNumpy()[j])]


def in_tensor(im: TFLiteImporter, op: Any, j: int) -> TfTensor | None:
    idx = op.InputsAsNumpy()
    if j >= len(idx) or int(idx[j]) < 0:
        return None
    return im.tensors[int(idx[j])]


def param(im: TFLiteImporter, k: int, t: TfTensor, data: np.ndarray, slot: str, transform: str,
          quant: QuantParams) -> str:
    if t.data is None:
        raise im.fail(k, f"{slot} '{t.name}' is not a constant tensor")
    return im.b.param(f"{im.op_label(k)}_{slot}", data,
                      ParamSource(t.name, f"tensor:{t.index}", transform), dtype=t.dtype,
                      quant=quant)


def bias_param(im: TFLiteImporter, k: int, b: TfTensor | None, x: TfTensor,
               w_scales: tuple[float, ...]) -> tuple[list[str], np.ndarray | None]:
    if b is None:
        return [], None
    if b.dtype != "s32" or b.data is None:
        raise im.fail(k, f"bias '{b.name}' must be a constant int32 tensor (it is {b.type_name})")
    scales = b.scale if len(b.scale) == len(w_scales) else \
        tuple(float(np.float32(x.scale[0]) * np.float32(s)) for s in w_scales)
    q = QuantParams(tuple(scales), (0,) * len(scales), 0)
    return [param(im, k, b, b.data, "bias", "identity", q)], b.data


def _conv(im: TFLiteImporter, k: int, op: Any, depthwise: bool) -> None:
    x, w, b, y = in_tensor(im, op, 0), in_tensor(im, op, 1), in_tensor(im, op, 2), \
        out_tensor(im, op)
    assert x is not None and w is not None
    o = options(op, tflite.DepthwiseConv2DOptions if depthwise else tflite.Conv2DOptions)
    check_int8(im, k, x, y)  # float convolutions have their own handler (tflite_float.py)
    if w.dtype != "s8" or w.data is None:
        raise im.fail(k, f"weights '{w.name}' must be constant int8 (got {w.type_name})")
    _, h, wd, cin = x.shape
    wdata, transform, groups, cout = conv_filter(im, k, cin, w.data, depthwise)
    kh, kw = wdata.shape[1:3]
    ws = channel_scales(im, k, w, cout)
    wq = QuantParams(ws, (0,) * cout, 0)
    wname = param(im, k, w, wdata, "weight", transform, wq)
    bnames, bdata = bias_param(im, k, b, x, ws)
    check_acc(im, k, kh * kw * (cin // groups), bdata)
    attrs = {**window(o, h, wd, kh, kw, o.DilationHFactor(), o.DilationWFactor()),
             "groups": groups, **requant_attrs(im, k, x, ws, y, o.FusedActivationFunction())}
    out = im.b.node("conv2d_q8", im.op_label(k), [im.act(k, x.index), wname, *bnames], attrs,
                    dtype="s8", quant=y.qparams())
    if im.b.tensors[out].shape != y.shape[1:]:
        raise im.fail(k, f"computed output shape {im.b.tensors[out].shape} differs from the "
                         f"model's {list(y.shape)}")
    im.env[y.index] = out


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
    fused = o.FusedActivationFunction() if o is not None else ACT.NONE
    check_int8(im, k, x, y)  # float ones have their own handler (tflite_float.py)
    if w.dtype != "s8" or w.data is None:
        raise im.fail(k, f"weights '{w.name}' must be constant int8 (got {w.type_name})")
    out_n, in_n = w.data.shape
    xt = im.b.tensors[im.act(k, x.index)]
    if xt.size != in_n:
        raise im.fail(k, f"input has {xt.size} elements per sample, weights expect {in_n}")
    ws = channel_scales(im, k, w, out_n)
    wname = param(im, k, w, w.data, "weight", "identity", QuantParams(ws, (0,) * out_n, 0))
    bnames, bdata = bias_param(im, k, b, x, ws)
    check_acc(im, k, in_n, bdata)
    attrs = requant_attrs(im, k, x, ws, y, fused)
    out = im.b.node("dense_q8", im.op_label(k), [im.act(k, x.index), wname, *bnames], attrs,
                    dtype="s8", quant=y.qparams())
    want = y.shape[1:] if len(y.shape) > 1 else y.shape
    if math.prod(want) != out_n:
        raise im.fail(k, f"output shape {list(y.shape)} does not match {out_n} units")
    im.env[y.index] = out


@handles(B.TRANSPOSE)
def transpose(im: TFLiteImporter, k: int, op: Any) -> None:
    """A layout change of the model input (NCHW -> NHWC in PyTorch exports) becomes a relabel:
    samples arrive in the model's own layout and the host reorders them (data files, the
    link), as for ONNX. Elsewhere only a transpose that moves axes of size 1 (a reshape)."""
    x, p, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    if x is None or p is None or p.data is None:
        raise im.fail(k, "TRANSPOSE needs a constant permutation")
    perm = [int(v) for v in p.data.reshape(-1)]
    if sorted(perm) != list(range(len(x.shape))) or len(y.shape) != len(x.shape):
        raise im.fail(k, f"permutation {quote_list(perm)} does not fit input shape "
                         f"{quote_list(x.shape)}")
    if [x.shape[i] for i in perm] != list(y.shape):
        raise im.fail(k, f"output shape {quote_list(y.shape)} is not the input "
                         f"{quote_list(x.shape)} permuted by {quote_list(perm)}")
    src = im.b.tensors[im.act(k, x.index)]
    readers = im.readers(x.index)
    if (x.index == im.input_index and im.input_perm is None and readers == 1 and perm[0] == 0
            and x.shape and x.shape[0] == 1):
        sample = [v - 1 for v in perm[1:]]  # per-sample axes: IR axis i = logical axis sample[i]
        im.b.tensors[src.name] = src.replace(shape=tuple(x.shape[1:][i] for i in sample))
        im.input_perm = sample
        im.env[y.index] = src.name
        return
    kept = [i for i in perm if x.shape[i] != 1]
    if kept != sorted(kept):
        raise im.fail(k, "TRANSPOSE is supported on the model input (a layout change, e.g. "
                         "NCHW -> NHWC) and where it only moves axes of size 1")
    shape = im.per_sample(k, y) if y.shape and y.shape[0] == 1 else y.shape
    im.env[y.index] = im.b.node("reshape", im.op_label(k), [src.name], {"shape": tuple(shape)},
                                dtype=src.dtype, quant=src.quant)


@handles(B.RESHAPE, B.SQUEEZE)
def reshape(im: TFLiteImporter, k: int, op: Any) -> None:
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    src = im.b.tensors[im.act(k, x.index)]
    shape = im.per_sample(k, y) if y.shape and y.shape[0] == 1 else y.shape
    if math.prod(shape) != src.size:
        raise im.fail(k, f"reshape of {src.size} elements to {list(y.shape)}")
    im.env[y.index] = im.b.node("reshape", im.op_label(k), [src.name], {"shape": tuple(shape)},
                                dtype=src.dtype, quant=src.quant)


# ---- ops whose int8 kernels live in ops/*_q8.py (prepare() computes TFLite's constants) ----

def _prepared(im: TFLiteImporter, k: int, fn: Callable, *args: Any) -> dict:
    try:
        return fn(*args)
    except ValueError as e:  # a quantisation TFLite itself would reject
        raise im.fail(k, str(e)) from None


def _emit(im: TFLiteImporter, k: int, op_name: str, inputs: list[str], attrs: dict,
          y: TfTensor) -> None:
    bind(im, k, y, im.b.node(op_name, im.op_label(k), inputs, attrs, dtype=y.dtype,
                             quant=y.qparams() if y.quantized else None))


def _fused(im: TFLiteImporter, k: int, o: Any, y: TfTensor) -> tuple[int, int]:
    return act_range(im, k, o.FusedActivationFunction() if o is not None else ACT.NONE, y)


def _grad(o: Any, rng: tuple[int, int]) -> dict[str, int]:
    """grad_lo/grad_hi for a fused activation (see quant.params.grad_range)."""
    fused = o.FusedActivationFunction() if o is not None else ACT.NONE
    return grad_range(ACT_NAMES.get(fused, "NONE"), *rng)


def _binary(im: TFLiteImporter, k: int, op: Any, ir_op: str, opts_cls: type,
            prepare: Callable) -> None:
    a, b, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert a is not None and b is not None
    check_int8(im, k, a, b, y)
    for t in (a, b):
        if t.index not in im.env:
            raise im.fail(k, f"operand '{t.name}' is a constant; tinytrain supports "
                             f"{ir_op[:-3].upper()} of two activations")
    o = options(op, opts_cls)
    rng = _fused(im, k, o, y)
    attrs = {**_prepared(im, k, prepare, a.qparams(), b.qparams(), y.qparams(), rng),
             **_grad(o, rng)}
    _emit(im, k, ir_op, [im.act(k, a.index), im.act(k, b.index)], attrs, y)


@handles(B.ADD)
def add(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import add_q8

    _binary(im, k, op, "add_q8", tflite.AddOptions, add_q8.prepare)


@handles(B.MUL)
def mul(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import mul_q8

    _binary(im, k, op, "mul_q8", tflite.MulOptions, mul_q8.prepare)


def _pool(im: TFLiteImporter, k: int, op: Any, ir_op: str) -> None:
    from tinytrain.ops import avg_pool2d_q8

    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    check_int8(im, k, x, y)
    o = options(op, tflite.Pool2DOptions)
    _, h, w, _ = x.shape
    attrs = {**window(o, h, w, o.FilterHeight(), o.FilterWidth()), "count_include_pad": 0,
             **_prepared(im, k, avg_pool2d_q8.prepare, x.qparams(), y.qparams(),
                         _fused(im, k, o, y)), **_grad(o, _fused(im, k, o, y))}
    _emit(im, k, ir_op, [im.act(k, x.index)], attrs, y)


@handles(B.AVERAGE_POOL_2D)
def average_pool(im: TFLiteImporter, k: int, op: Any) -> None:
    _pool(im, k, op, "avg_pool2d_q8")


@handles(B.MAX_POOL_2D)
def max_pool(im: TFLiteImporter, k: int, op: Any) -> None:
    _pool(im, k, op, "max_pool2d_q8")


@handles(B.MEAN)
def mean(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import mean_q8

    x, axes, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert x is not None and axes is not None
    check_int8(im, k, x, y)
    ax = sorted(int(a) % len(x.shape) for a in np.asarray(axes.data).reshape(-1)) \
        if axes.data is not None else []
    if len(x.shape) != 4 or ax != [1, 2]:
        raise im.fail(k, f"MEAN over axes {ax} of a rank-{len(x.shape)} tensor; tinytrain "
                         "supports the mean over height and width of an NHWC tensor")
    o = options(op, tflite.ReducerOptions)
    keep = bool(o.KeepDims()) if o is not None else False
    attrs = _prepared(im, k, mean_q8.prepare, x.qparams(), y.qparams(), keep)
    _emit(im, k, "mean_q8", [im.act(k, x.index)], attrs, y)


@handles(B.PAD, B.PADV2)
def pad(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import pad_q8

    x, pads, y = in_tensor(im, op, 0), in_tensor(im, op, 1), out_tensor(im, op)
    assert x is not None and pads is not None
    check_int8(im, k, x, y)
    if pads.data is None:
        raise im.fail(k, "paddings must be a constant tensor")
    p = np.asarray(pads.data).reshape(-1, 2)
    if len(p) != len(x.shape) or p[0].any():
        raise im.fail(k, f"paddings {p.tolist()} must give one row per axis and not pad the "
                         "batch axis")
    val = in_tensor(im, op, 2)
    if val is not None and val.data is not None and int(val.data.reshape(-1)[0]) != \
            y.zero_point[0]:
        raise im.fail(k, "PADV2 with a value other than the zero point is not supported")
    attrs = {"before": tuple(int(v) for v in p[1:, 0]), "after": tuple(int(v) for v in p[1:, 1]),
             **_prepared(im, k, pad_q8.prepare, x.qparams(), y.qparams())}
    _emit(im, k, "pad_q8", [im.act(k, x.index)], attrs, y)


@handles(B.CONCATENATION)
def concatenation(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import concat_q8

    ins = [in_tensor(im, op, j) for j in range(len(op.InputsAsNumpy()))]
    y = out_tensor(im, op)
    check_int8(im, k, y, *[t for t in ins if t is not None])
    o = options(op, tflite.ConcatenationOptions)
    axis = o.Axis() % len(y.shape)
    if axis == 0:
        raise im.fail(k, "concatenation along the batch axis is not supported")
    if _fused(im, k, o, y) != (-128, 127):
        raise im.fail(k, "a fused activation on CONCATENATION is not supported")
    qs = [t.qparams() for t in ins if t is not None]
    attrs = {"axis": axis - 1, **_prepared(im, k, concat_q8.prepare, qs, y.qparams())}
    _emit(im, k, "concat_q8", [im.act(k, t.index) for t in ins if t is not None], attrs, y)


def _unary(im: TFLiteImporter, k: int, op: Any, ir_op: str, prepare: Callable,
           *extra: Any) -> None:
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    check_int8(im, k, x, y)
    attrs = _prepared(im, k, prepare, x.qparams(), y.qparams(), *extra)
    _emit(im, k, ir_op, [im.act(k, x.index)], attrs, y)


@handles(B.SOFTMAX)
def softmax(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import softmax_q8

    o = options(op, tflite.SoftmaxOptions)
    _unary(im, k, op, "softmax_q8", softmax_q8.prepare, float(o.Beta()) if o else 1.0)


@handles(B.LOGISTIC)
def logistic(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import logistic_q8

    _unary(im, k, op, "logistic_q8", logistic_q8.prepare)


@handles(B.HARD_SWISH)
def hard_swish(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import hard_swish_q8

    _unary(im, k, op, "hard_swish_q8", hard_swish_q8.prepare)


@handles(B.QUANTIZE)
def quantize(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.ops import quantize_q8

    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    check_int8(im, k, y)
    src = im.b.tensors[im.act(k, x.index)]
    if src.kind == "input" and src.dtype == "f32":
        # float model input: quantise on entry (the C API takes floats either way), so no
        # float copy of the input ever sits in the arena
        im.b.tensors[src.name] = src.replace(dtype="s8", quant=y.qparams())
        im.env[y.index] = src.name
        return
    if x.dtype not in ("f32", "s8"):
        raise im.fail(k, f"QUANTIZE from {x.type_name} is not supported")
    attrs = _prepared(im, k, quantize_q8.prepare, x.qparams() if x.dtype == "s8" else None,
                      y.qparams())
    _emit(im, k, "quantize_q8", [src.name], attrs, y)


@handles(B.DEQUANTIZE)
def dequantize(im: TFLiteImporter, k: int, op: Any) -> None:
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    check_int8(im, k, x)
    _emit(im, k, "dequantize_q8", [im.act(k, x.index)],
          {"scale": x.scale[0], "zp": x.zero_point[0]}, y)
