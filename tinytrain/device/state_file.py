"""The .npz that `tinytrain run --save` and `OnlineModel.save` write: the trained parameters by
name (what `export`, `infer --state` and `load_params` take), the training state besides them
under "state/NAME" (model.h's NAME_state table: samples pending toward the next update,
gradient accumulators, momentum buffers, int8 shadow bytes, the stochastic rounding's step
counter) and, from `run --save`, where the run stopped ("run/position"). With all three a run
continues exactly where it stopped (`run --state FILE --resume`). Files holding parameters
only (an older tinytrain's, or written by hand) still load."""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.errors import DataError

STATE = "state/"  # key prefix of the training state's entries
POSITION = "run/position"
POSITION_FIELDS = ("epoch", "sample", "epochs", "shuffle", "seed", "samples")


@dataclass
class Saved:
    params: dict[str, np.ndarray]
    state: dict[str, np.ndarray] | None = None  # None: the file has none
    position: dict[str, int] | None = None  # POSITION_FIELDS; None: not saved by a run


def read(path: str | Path) -> Saved:
    """The file's parts; a clear DataError when it is not such a file."""
    path = Path(path)
    try:
        f = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"state file {path} does not exist") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read state file {path}: {e}") from None
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is not an .npz of parameters; pass a file written by "
                        "save() or `tinytrain run --save`")
    try:
        with f:
            items = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read state file {path}: {e}") from None
    params = {k: v for k, v in items.items() if not k.startswith((STATE, "run/"))}
    state = {k[len(STATE):]: v for k, v in items.items() if k.startswith(STATE)} or None
    position = None
    if POSITION in items:
        p = items[POSITION]
        if p.shape != (len(POSITION_FIELDS),) or p.dtype.kind not in "iu":
            raise DataError(f"{path}: '{POSITION}' is not a run position; pass a file written "
                            "by `tinytrain run --save`")
        position = dict(zip(POSITION_FIELDS, (int(v) for v in p), strict=True))
    return Saved(params, state, position)


def write(path: str | Path, params: dict[str, np.ndarray],
          state: dict[str, np.ndarray] | None = None,
          position: dict[str, Any] | None = None) -> Path:
    """Write the file atomically (a reader never sees half of it); `path` gets the .npz
    suffix if it has none, as np.savez does. Returns the path written."""
    path = Path(path)
    path = path if path.suffix == ".npz" else Path(f"{path}.npz")
    items = dict(params)
    items.update({STATE + k: v for k, v in (state or {}).items()})
    if position is not None:
        items[POSITION] = np.array([int(position[k]) for k in POSITION_FIELDS], np.int64)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **items)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
