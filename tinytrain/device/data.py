"""Training/evaluation data files (.npz with x and y), checked against the built program."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.device.samples import input_batch, targets_to_ir
from tinytrain.errors import DataError


def load_npz(path: Path, info: dict[str, Any],
             need_y: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (x in IR layout (N, ...), y) or raise a DataError that says what is wrong."""
    path = Path(path)
    howto = "write it with numpy.savez(path, x=..., y=...)"
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except FileNotFoundError:
        raise DataError(f"data file {path} does not exist") from None
    except OSError as e:
        raise DataError(f"cannot read data file {path}: {e.strerror}") from None
    if magic == b"\x93NUMPY":
        raise DataError(f"{path} is a single .npy array, not an .npz with x and y; {howto}")
    if not magic.startswith(b"PK"):
        raise DataError(f"{path} is not an .npz file (a zip archive of arrays); {howto}")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise DataError(f"data file {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path} is not a readable .npz file ({e}); {howto}") from None
    want = tuple(info["input_logical_shape"])
    if "x" not in arrays:
        raise DataError(f"{path} has no array 'x' (it has: {', '.join(sorted(arrays)) or 'none'}); "
                        f"x must be float32 of shape (N, {', '.join(map(str, want))})")
    # the same shape, layout, dtype and finiteness checks as the Python API's samples
    x, _ = input_batch(arrays["x"], info, name=f"{path}: x", batch_only=True)
    y = arrays.get("y")
    if y is None:
        if need_y:
            raise DataError(f"{path} has no array 'y' with the labels (N,) integers for "
                            "cross-entropy, or float targets for mse")
        return x, None
    if y.ndim == 0 or len(y) != len(x):
        raise DataError(f"{path}: x has {len(x)} samples but y has shape {tuple(y.shape)}; "
                        "y needs one entry per sample")
    if info["loss"] == "ce":
        classes = int(np.prod(info["output_shape_ir"]))
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{path}: y must be integer class labels of shape (N,), got "
                            f"{y.dtype} {tuple(y.shape)}")
        if y.min() < 0 or y.max() >= classes:
            raise DataError(f"{path}: labels must be in [0, {classes}), found "
                            f"{int(y.min())}..{int(y.max())}")
        return x, y.astype(np.int32)
    n_out = int(np.prod(info["target_shape"]))
    if not np.issubdtype(y.dtype, np.number):
        raise DataError(f"{path}: mse targets y must be numbers, got dtype {y.dtype}")
    y = np.asarray(y, np.float32).reshape(len(y), -1)
    if y.shape[1] != n_out:
        raise DataError(f"{path}: mse targets need {n_out} values per sample, y has {y.shape[1]}")
    if not np.isfinite(y).all():
        raise DataError(f"{path}: mse targets y hold values that are not finite")
    return x, targets_to_ir(y, info)


def to_logical(out: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """(N, IR output) -> (N, logical output) in the model's own layout."""
    perm = info["output_perm"]
    ir_shape = tuple(info["output_shape_ir"])
    out = out.reshape((len(out),) + ir_shape)
    inv = tuple(int(i) + 1 for i in np.argsort(perm))
    return np.ascontiguousarray(np.transpose(out, (0,) + inv))
