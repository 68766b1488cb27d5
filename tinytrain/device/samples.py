"""Samples and targets checked against the built program before they cross the link.

The user gives samples in the model's own input layout (NCHW for a PyTorch export); the device
reads the IR layout (NHWC). Both the data files of `run`/`infer` (tinytrain.device.data)
and the Python API (tinytrain.device.online) go through here, so a layout mistake, a wrong
rank, a wrong number of values, a dtype that is not real numbers or a NaN gets the same
one-paragraph DataError that says what the model expects and how to fix the array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.errors import DataError

# dtype kinds that hold real numbers: signed and unsigned integers and floats.
REAL_KINDS = "iuf"


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"


SAMPLES = "samples must be real numbers, float32 in the model's own input layout"


def as_real_array(x: Any, name: str, rule: str = SAMPLES) -> np.ndarray:
    """x as a numpy array of real numbers (any int or float dtype), or a DataError that names
    what it holds instead and ends with `rule`."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        raise DataError(f"{name} is not a rectangular array of numbers (its rows differ in "
                        "length); give a numpy array such as np.asarray(x, np.float32)") from None
    kind = a.dtype.kind
    if kind in REAL_KINDS:
        return a
    what = {"c": "complex numbers (the model's inputs are real: pass x.real or np.abs(x), "
                 "whichever your features mean)",
            "b": "booleans (convert them with x.astype(np.float32))",
            "U": "strings (parse them first, e.g. x.astype(np.float32))",
            "S": "byte strings (parse them first, e.g. x.astype(np.float32))",
            "O": "Python objects (build a numeric array with np.asarray(x, np.float32))"}
    raise DataError(f"{name} has dtype {a.dtype}: {what.get(kind, 'not real numbers')}; {rule}")


def layout_name(perm: tuple[int, ...]) -> str:
    """How to call the model's own layout, given its logical -> IR (NHWC) permutation."""
    if len(perm) == 3:
        if perm == (1, 2, 0):
            return "channels first (C, H, W), i.e. NCHW as PyTorch and ONNX export it"
        if perm == (0, 1, 2):
            return "channels last (H, W, C), i.e. NHWC as TFLite uses it"
    return "the axis order of the model's input"


def _permutation(given: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes p with given[p[i]] == want[i] (equal sizes keep their order), or None when
    `given` is not a reordering of `want`."""
    if len(given) != len(want) or sorted(given) != sorted(want) or given == want:
        return None
    free, perm = list(range(len(given))), []
    for w in want:
        k = next(k for k in free if given[k] == w)
        free.remove(k)
        perm.append(k)
    return tuple(perm)


def _shape_hint(shape: tuple[int, ...], want: tuple[int, ...], info: dict[str, Any]) -> str:
    """Why `shape` is not `want` (one sample) or (N, *want), and how to fix it; '' when there
    is nothing more specific to say than the expected shape."""
    own = tuple(int(p) for p in info["input_perm"])
    n = int(np.prod(want))
    # x as one sample of the same rank, then as a batch (N, ...) of the same rank
    views = ([((), shape)] if len(shape) == len(want) else []) + \
        ([(shape[:1], shape[1:])] if len(shape) == len(want) + 1 else [])
    for lead, body in views:
        perm = _permutation(body, want)
        if perm is None:
            continue
        given = ("channels-last (NHWC) data" if own == (1, 2, 0) and perm == (2, 0, 1)
                 else "channels-first (NCHW) data" if own == (0, 1, 2) and perm == (1, 2, 0)
                 else "the right axes in another order")
        axes = (0,) + tuple(p + 1 for p in perm) if lead else perm
        return (f"; this looks like {given}: the model's input is {layout_name(own)}, so "
                f"reorder the axes with x.transpose{axes}")
    # the right number of values, flattened or missing an axis of size 1
    fix = (() if int(np.prod(shape)) == n else
           shape[:1] if len(shape) >= 2 and int(np.prod(shape[1:])) == n else None)
    if fix is None:
        return ""
    what = "one sample" if not fix else "each sample"
    return (f"; it has the right number of values for {what} ({n}) in another shape: if they "
            f"are in the model's order, use x.reshape{_shape(fix + want)}")


def input_batch(x: Any, info: dict[str, Any], name: str = "x",
                batch_only: bool = False, codes: bool = False) -> tuple[np.ndarray, bool]:
    """One sample (the model's input shape) or a batch (N, ...) in the model's own layout ->
    (N, IR shape) contiguous, and whether x was a single sample.

    float32, except int8 arrays for an int8 model when `codes` is set: those are the input's
    quantised codes and pass unchanged. `batch_only` is for data files, whose x always has a
    leading N (the model's own shape is still taken as one sample)."""
    a = as_real_array(x, name)
    want = tuple(int(d) for d in info["input_logical_shape"])
    single = tuple(a.shape) == want
    if single:
        a = a[None]
    if a.ndim != len(want) + 1 or tuple(a.shape[1:]) != want or a.shape[0] == 0:
        shape = tuple(a.shape)
        if a.ndim == len(want) + 1 and shape[1:] == want:  # N == 0
            raise DataError(f"{name} holds no samples (shape {_shape(shape)})")
        expect = (f"(N, {', '.join(map(str, want))})" if batch_only else
                  f"{_shape(want)} for one sample or (N, {', '.join(map(str, want))}) for a "
                  "batch")
        raise DataError(f"{name} has shape {_shape(shape)}, the model expects {expect} in its "
                        f"own input layout{_shape_hint(shape, want, info)}")
    keep = codes and info.get("input_dtype", "f32") == "s8" and a.dtype == np.int8
    if not keep:
        with np.errstate(over="ignore"):  # values beyond float32 become inf: refused below
            f = a.astype(np.float32)
        bad = ~np.isfinite(f)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), f.shape)
            k, idx = int(where[0]), tuple(int(i) for i in where[1:])
            src = a[(k, *idx)]
            why = ("beyond float32's range" if np.isfinite(src) else str(src))
            at = f"sample {k}, index {idx}" if not single else f"index {idx}"
            raise DataError(f"{name} holds a value that is not finite at {at} ({why}); "
                            "samples must be finite real numbers (replace or drop NaN and "
                            "infinities before training or inference)")
        a = f
    a = np.transpose(a, (0,) + tuple(int(p) + 1 for p in info["input_perm"]))
    return np.ascontiguousarray(a), single


def n_classes(info: dict[str, Any]) -> int | None:
    """Classes of a cross-entropy build; None for mse."""
    return int(np.prod(info["output_shape_ir"])) if info["loss"] == "ce" else None


def label(y: Any, info: dict[str, Any], name: str = "y") -> np.ndarray:
    """One class label (an integer in [0, classes)) -> the int32 target the device reads."""
    classes = n_classes(info)
    assert classes is not None
    a = np.asarray(y) if not isinstance(y, np.ndarray) else y
    if a.dtype.kind not in "iu" or a.size != 1 or a.ndim > 1:
        raise DataError(f"{name} must be one integer class label in [0, {classes}), got "
                        f"{a.dtype} of shape {_shape(tuple(a.shape))}"
                        + (f" ({a.reshape(-1)[0].item()!r})" if a.size == 1 else ""))
    v = int(a.reshape(-1)[0])
    if not 0 <= v < classes:
        raise DataError(f"{name} is {v}, outside the model's classes: labels must be in "
                        f"[0, {classes}) for its {classes} outputs")
    return np.array([v], np.int32)


def targets_to_ir(y: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """mse targets (N, values in the model's own output layout) -> (N, IR output values)."""
    y = y.reshape((len(y),) + tuple(info["output_logical_shape"]))
    y = np.transpose(y, (0,) + tuple(int(p) + 1 for p in info["output_perm"]))
    return np.ascontiguousarray(y, np.float32).reshape(len(y), -1)


def target(y: Any, info: dict[str, Any], name: str = "y") -> np.ndarray:
    """One mse target: the model's output shape (or its values as a flat vector) ->
    the float32 IR-layout target the device reads."""
    out = tuple(int(d) for d in info["output_logical_shape"])
    n = int(np.prod(out))
    a = as_real_array(y, name, "mse targets must be real numbers")
    if tuple(a.shape) != out and not (a.ndim <= 1 and a.size == n):
        raise DataError(f"{name} has shape {_shape(tuple(a.shape))}, an mse target has the "
                        f"model's output shape {_shape(out)} ({n} value{'s' * (n != 1)})")
    with np.errstate(over="ignore"):
        f = a.astype(np.float32).reshape(1, n)
    if not np.isfinite(f).all():
        raise DataError(f"{name} holds a value that is not finite; mse targets must be finite "
                        "real numbers")
    return targets_to_ir(f, info)[0]
