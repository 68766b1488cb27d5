"""Float TFLite UNIDIRECTIONAL_SEQUENCE_LSTM (a Keras LSTM as TensorFlow's converter fuses it)
-> the ONNX importer's two IR nodes: a 1x1 conv for the input projection and the `lstm`
recurrence (ops/lstm.py), and the slice of one step after it.

TFLite keeps each gate's weights in a tensor of its own, in the order i, f, c, o; the IR stacks
them in ONNX's order i, o, f, c. Each stacked parameter records its four source tensors
(ParamSource slot `tensors:a,b,c,d`, one per block of rows), and export writes each block back
to its tensor. TFLite has one bias per gate, so the recurrence has no Rb. The converter clips
the cell state at 10 (Keras's default conversion): the op clips as LiteRT does, and its
backward passes no gradient where the clip held.

The operator's state tensors are TFLite "variables" that LiteRT carries from one invoke to the
next; a training sample is one window, so the state starts at zero for each (as Keras's
stateless LSTM does, and as the reset between invokes gives).

An int8 LSTM (full integer quantisation) trains in mixed precision, as `--quantize int8` makes
a recurrent layer: its weights are dequantised into fp32 parameters, the window is dequantised
on entry and the hidden states quantised to the file's output scale on exit, and the int8
operators around it stay int8. LiteRT's integer LSTM keeps 16-bit gates and cell states; this
fp32 recurrence is within a few output steps of it (tests/test_rnn.py measures how close).
Export rounds the trained weights back onto each tensor's own int8 (int32 for biases) grid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import tflite

from tinytrain.frontend.tflite_ops import (
    ACT,
    B,
    bind,
    check_float,
    check_int8,
    handles,
    in_tensor,
    options,
    out_tensor,
)
from tinytrain.ir import ParamSource

if TYPE_CHECKING:
    from tinytrain.frontend.tflite_import import TFLiteImporter, TfTensor

# operator inputs of each gate's tensors, in the IR's (ONNX's) gate order i, o, f, c
W_IN, R_IN, B_IN = (1, 4, 2, 3), (5, 8, 6, 7), (12, 15, 13, 14)
PEEPHOLE, PROJECTION, LAYER_NORM = (9, 10, 11), (16, 17), (20, 21, 22, 23)


def _real(im: TFLiteImporter, k: int, t: TfTensor, what: str) -> np.ndarray:
    """A constant's real values: float32 as stored, int8/int32 dequantised with its scale."""
    if t.dtype == "f32":
        return check_float(im, k, t, what)
    if t.data is None or t.dtype not in ("s8", "s32") or not t.quantized:
        raise im.fail(k, f"{what} '{t.name}' must be a constant float32, or int8/int32 with "
                         f"quantisation parameters (it is {t.type_name})")
    if any(z != 0 for z in t.zero_point):
        raise im.fail(k, f"{what} '{t.name}' are quantised asymmetrically (zero point "
                         f"{t.zero_point[0]}); TFLite's LSTM weights are symmetric")
    scale = np.asarray(t.scale, np.float64)
    data = np.asarray(t.data, np.float64)
    return data * (scale.reshape((-1,) + (1,) * (data.ndim - 1)) if scale.size > 1 else scale)


def _stacked(im: TFLiteImporter, k: int, op: Any, inputs: tuple[int, ...], what: str,
             shape: tuple[int, ...]) -> tuple[np.ndarray, ParamSource]:
    """The four gates' tensors stacked along rows (real values), and where each block came
    from."""
    ts: list[TfTensor] = []
    for j in inputs:
        t = in_tensor(im, op, j)
        if t is None:
            raise im.fail(k, f"its {what} of every gate are required (input {j} is missing; "
                             "a coupled input-forget gate is not supported)")
        ts.append(t)
    blocks = [_real(im, k, t, what) for t in ts]
    if any(b.shape != shape for b in blocks):
        raise im.fail(k, f"its {what} have shapes {[list(b.shape) for b in blocks]}, expected "
                         f"{list(shape)} each")
    src = ParamSource(",".join(t.name for t in ts),
                      "tensors:" + ",".join(str(t.index) for t in ts), "blocks")
    return np.concatenate(blocks), src


def unidirectional_sequence_lstm(im: TFLiteImporter, k: int, op: Any) -> None:
    """The float operator (tflite_float.py registers it)."""
    _lstm(im, k, op, int8=False)


@handles(B.UNIDIRECTIONAL_SEQUENCE_LSTM)  # the int8 table (tflite_ops.HANDLERS)
def unidirectional_sequence_lstm_int8(im: TFLiteImporter, k: int, op: Any) -> None:
    _lstm(im, k, op, int8=True)


def _lstm(im: TFLiteImporter, k: int, op: Any, int8: bool) -> None:
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    assert x is not None
    if int8:
        check_int8(im, k, x, y)
    o = options(op, tflite.UnidirectionalSequenceLSTMOptions)
    if o is not None and o.TimeMajor():
        raise im.fail(k, "time_major=true is not supported: the converter writes "
                         "(batch, steps, features) for a Keras LSTM")
    if o is None or o.FusedActivationFunction() != ACT.TANH:
        raise im.fail(k, "only the tanh cell activation (Keras's default) is supported")
    if o.ProjClip() != 0.0:
        raise im.fail(k, "a projection clip is not supported")
    for group, what in ((PEEPHOLE, "peephole weights"), (PROJECTION, "a projection layer"),
                        (LAYER_NORM, "layer normalisation")):
        if any(in_tensor(im, op, j) is not None for j in group):
            raise im.fail(k, f"{what} (LSTM variants Keras does not write) are not supported")
    if len(x.shape) != 3 or x.shape[0] != 1:
        raise im.fail(k, f"its input must be (1, steps, features), not {list(x.shape)}")
    _, steps, features = x.shape
    w0 = in_tensor(im, op, W_IN[0])
    if w0 is None or len(w0.shape) != 2:
        raise im.fail(k, "its input weights must be (units, features) matrices")
    hidden = w0.shape[0]
    W, w_src = _stacked(im, k, op, W_IN, "input weights", (hidden, features))
    R, r_src = _stacked(im, k, op, R_IN, "recurrent weights", (hidden, hidden))
    Bias, b_src = _stacked(im, k, op, B_IN, "gate biases", (hidden,))
    name = im.op_label(k)
    src = im.act(k, x.index)
    if int8:  # the fp32 island: the window in real values
        src = im.b.node("dequantize_q8", name + "_real", [src],
                        {"scale": x.scale[0], "zp": x.zero_point[0]})
    seq = im.b.node("reshape", name + "_steps", [src], {"shape": (1, steps, features)})
    conv_in = [seq, im.b.param(name + "_W", W[:, None, None, :], w_src),
               im.b.param(name + "_Wb", Bias, b_src)]
    xproj = im.b.node("conv2d", name + "_input", conv_in,
                      {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0),
                       "dilation": (1, 1), "groups": 1})
    attrs = {"hidden": hidden, "bias": False, "h0": False, "c0": False,
             "cell_clip": float(o.CellClip())}
    _gates, ys, _cells = im.b.node_outputs("lstm", name,
                                           [xproj, im.b.param(name + "_R", R, r_src)], attrs,
                                           ("_gates", "_y", "_cells"))
    out = im.b.node("reshape", name + "_out", [ys], {"shape": (steps, hidden)})
    if int8:  # back to the file's int8 output, at its scale
        from tinytrain.ops import quantize_q8

        out = im.b.node("quantize_q8", name + "_q8", [out],
                        quantize_q8.prepare(None, y.qparams()), dtype="s8", quant=y.qparams())
    bind(im, k, y, out)


def step_of_sequence(im: TFLiteImporter, k: int, op: Any) -> bool:
    """STRIDED_SLICE of one whole step of a (1, steps, features) activation (a Keras LSTM's
    last output): a seq_step node. False if the operator is anything else."""
    x, y = in_tensor(im, op, 0), out_tensor(im, op)
    if x is None or x.index not in im.env or len(x.shape) != 3:
        return False
    o = options(op, tflite.StridedSliceOptions)
    consts = [in_tensor(im, op, j) for j in (1, 2, 3)]
    if o is None or o.EllipsisMask() or o.NewAxisMask() or any(
            t is None or t.data is None for t in consts):
        return False
    begin, end, strides = (np.asarray(t.data).reshape(-1).astype(int) for t in consts)  # type: ignore[union-attr]
    index = np.arange(int(np.prod(x.shape))).reshape(x.shape)
    sl: list[Any] = []
    for a in range(3):
        if o.ShrinkAxisMask() >> a & 1:
            sl.append(int(begin[a]))
            continue
        sl.append(slice(None if o.BeginMask() >> a & 1 else int(begin[a]),
                        None if o.EndMask() >> a & 1 else int(end[a]), int(strides[a])))
    picked = index[tuple(sl)].reshape(-1)
    _, steps, features = x.shape
    step = int(picked[0]) // features if picked.size == features else -1
    if not 0 <= step < steps or not np.array_equal(picked, index[0, step]):
        return False
    src = im.b.tensors[im.act(k, x.index)]
    seq = im.b.node("reshape", im.op_label(k) + "_steps", [src.name],
                    {"shape": (1, steps, features)}, dtype=src.dtype, quant=src.quant)
    bind(im, k, y, im.b.node("seq_step", im.op_label(k), [seq], {"step": step},
                             dtype=src.dtype, quant=src.quant))
    return True
