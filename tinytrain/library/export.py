"""Write a build's model as a library in one of the packaging formats, atomically: the export
directory is assembled beside its destination and renamed into place, and only a previous
export is ever replaced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tinytrain import __version__
from tinytrain.errors import BuildError, OptionError
from tinytrain.library.layouts import FORMATS, render_layout
from tinytrain.library.sources import load_sources

MARKER = "tinytrain_export.json"  # what makes a directory an export this command may replace


def export_library(build_dir: Path, fmt: str, out: Path) -> dict[str, Any]:
    """Export the model of `build_dir` to `out` in format `fmt`; returns the marker's content
    (format, prefix, files)."""
    if fmt not in FORMATS:
        raise OptionError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    _check_out(out)
    src = load_sources(build_dir)
    files = render_layout(src, fmt)
    marker = {"tinytrain": __version__, "format": fmt, "prefix": src.prefix,
              "model_id": src.info["model_id"], "model_name": src.info.get("model_name"),
              "files": sorted(files)}
    tmp = out.with_name(f".{out.name}.tt-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return marker


def _check_out(out: Path) -> None:
    """Refuse to replace anything but an earlier export (or an empty directory)."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file, not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise BuildError(f"--out {out} exists and is not a tinytrain export (no {MARKER}); "
                         "choose another --out or remove it")


def _swap(tmp: Path, out: Path) -> None:
    _check_out(out)  # again: it may have changed meanwhile
    old = out.with_name(f".{out.name}.tt-old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
