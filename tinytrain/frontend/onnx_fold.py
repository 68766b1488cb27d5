"""Constant folding of ONNX shape arithmetic (Shape -> Gather -> Concat -> Reshape chains).

Only nodes whose inputs are all known constants are evaluated here; `Shape` of an activation
is known too because every activation shape is static. The batch axis evaluates as 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

Attrs = dict[str, Any]


def attrs_of(node: onnx.NodeProto) -> Attrs:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _axes(node: onnx.NodeProto, xs: list[np.ndarray | None], a: Attrs) -> list[int] | None:
    if "axes" in a:
        return [int(v) for v in a["axes"]]
    if len(xs) > 1 and xs[1] is not None:
        return [int(v) for v in xs[1]]
    return None


def _squeeze(node, xs, a):
    axes = _axes(node, xs, a)
    return np.squeeze(xs[0], axis=tuple(axes) if axes is not None else None)


def _unsqueeze(node, xs, a):
    y, axes = xs[0], _axes(node, xs, a) or []
    for ax in sorted(v % (y.ndim + len(axes)) for v in axes):
        y = np.expand_dims(y, ax)
    return y


def _slice(node, xs, a):
    x = xs[0]
    if "starts" in a:  # opset < 10 keeps them as attributes
        starts, ends = list(a["starts"]), list(a["ends"])
    else:
        starts, ends = list(xs[1]), list(xs[2])
    axes = list(a.get("axes", xs[3] if len(xs) > 3 and xs[3] is not None else range(len(starts))))
    steps = list(xs[4]) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        sl[int(ax)] = slice(int(s), int(e), int(st))
    return x[tuple(sl)]


def _reshape(node, xs, a):
    shape = [int(v) for v in xs[1]]
    shape = [xs[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return xs[0].reshape(shape)


def _cast(node, xs, a):
    to = onnx.helper.tensor_dtype_to_np_dtype(a["to"])
    return xs[0].astype(to)


def _constant_of_shape(node, xs, a):
    v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return np.full([int(s) for s in xs[0]], v.reshape(-1)[0], dtype=v.dtype)


def _constant(node, xs, a):
    if "value" in a:
        return numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], dtype=dtype)
    raise ValueError("Constant without a supported value attribute")


FOLDERS: dict[str, Callable[[onnx.NodeProto, list, Attrs], np.ndarray]] = {
    "Constant": _constant,
    "Identity": lambda n, xs, a: xs[0],
    "Cast": _cast,
    "Gather": lambda n, xs, a: np.take(xs[0], xs[1].astype(np.int64), axis=a.get("axis", 0)),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda n, xs, a: np.concatenate([np.atleast_1d(x) for x in xs], axis=a["axis"]),
    "Slice": _slice,
    "Reshape": _reshape,
    "Flatten": lambda n, xs, a: xs[0].reshape(int(np.prod(xs[0].shape[: a.get("axis", 1)])), -1),
    "Transpose": lambda n, xs, a: np.transpose(xs[0], a.get("perm")),
    "Add": lambda n, xs, a: xs[0] + xs[1],
    "Sub": lambda n, xs, a: xs[0] - xs[1],
    "Mul": lambda n, xs, a: xs[0] * xs[1],
    "Div": lambda n, xs, a: (xs[0] // xs[1]) if xs[0].dtype.kind == "i" else xs[0] / xs[1],
    "Sqrt": lambda n, xs, a: np.sqrt(xs[0]),
    "ConstantOfShape": _constant_of_shape,
    "Range": lambda n, xs, a: np.arange(xs[0], xs[1], xs[2]),
    # PyTorch's zero initial state of a recurrent layer: zeros expanded to (layers, batch, H)
    "Expand": lambda n, xs, a: xs[0] * np.ones([int(v) for v in xs[1]], xs[0].dtype),
}
