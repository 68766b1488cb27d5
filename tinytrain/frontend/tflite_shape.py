"""TFLite operators on shapes, evaluated at import whatever the model's type. TensorFlow's
converter writes a Keras Flatten with a dynamic batch as SHAPE -> STRIDED_SLICE -> PACK ->
RESHAPE: the first three compute the RESHAPE's target from the activation's shape, which
tinytrain knows at compile time (batch 1), so they fold to constants and RESHAPE takes the
shape the file stores for its output."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tflite

from tinytrain.frontend.tflite_ops import B, in_tensor, options, out_tensor, registrar

if TYPE_CHECKING:
    from tinytrain.frontend.tflite_import import TFLiteImporter

SHAPE_HANDLERS: dict[int, Callable[[TFLiteImporter, int, Any], None]] = {}
SHAPE_SUPPORTED: list[str] = []


handles = registrar(SHAPE_HANDLERS, SHAPE_SUPPORTED)


def _const(im: TFLiteImporter, k: int, op: Any, j: int) -> np.ndarray:
    t = in_tensor(im, op, j)
    if t is None:
        raise im.fail(k, f"input {j} is missing")
    v = t.data if t.data is not None else im.folded.get(t.index)
    if v is None:
        raise im.fail(k, f"input '{t.name}' must be a constant or a shape computed from one")
    return np.asarray(v)


def _set(im: TFLiteImporter, op: Any, value: np.ndarray) -> None:
    y = out_tensor(im, op)
    im.folded[y.index] = np.asarray(value).reshape(y.shape) if y.shape else np.asarray(value)


@handles(B.SHAPE)
def shape(im: TFLiteImporter, k: int, op: Any) -> None:
    x = in_tensor(im, op, 0)
    assert x is not None
    _set(im, op, np.array(x.shape, np.int32))


@handles(B.STRIDED_SLICE)
def strided_slice(im: TFLiteImporter, k: int, op: Any) -> None:
    from tinytrain.frontend.tflite_rnn import step_of_sequence

    if step_of_sequence(im, k, op):  # one step of a sequence (after an LSTM), not a shape
        return
    v = _const(im, k, op, 0)
    begin, end, strides = (_const(im, k, op, j).reshape(-1).astype(int) for j in (1, 2, 3))
    o = options(op, tflite.StridedSliceOptions)
    if v.ndim != 1 or len(begin) != 1 or (o is not None and (o.EllipsisMask() or
                                                             o.NewAxisMask())):
        raise im.fail(k, "STRIDED_SLICE is supported on 1-D constants (a shape) and as one "
                         "whole step of a (1, steps, features) sequence only")
    b = None if o is not None and o.BeginMask() & 1 else int(begin[0])
    e = None if o is not None and o.EndMask() & 1 else int(end[0])
    out = v[slice(b, e, int(strides[0]))]
    if o is not None and o.ShrinkAxisMask() & 1:
        out = out[0]
    _set(im, op, out)


@handles(B.PACK)
def pack(im: TFLiteImporter, k: int, op: Any) -> None:
    o = options(op, tflite.PackOptions)
    values = [_const(im, k, op, j) for j in range(len(op.InputsAsNumpy()))]
    _set(im, op, np.stack(values, axis=o.Axis() if o is not None else 0))
