"""Write a build's model as a library in one of the packaging formats, atomically: the export
directory is assembled beside its destination and renamed into place, and only a previous
export is ever replaced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinytrain.codegen.outdir import check_replaceable, staged
from tinytrain.codegen.render import write_files
from tinytrain.errors import OptionError
from tinytrain.export.library.layouts import FORMATS, render_layout
from tinytrain.export.library.sources import load_sources
from tinytrain.version import __version__

MARKER = "tinytrain_export.json"  # what makes a directory an export this command may replace


def export_library(build_dir: Path, fmt: str, out: Path) -> dict[str, Any]:
    """Export the model of `build_dir` to `out` in format `fmt`; returns the marker's content
    (format, prefix, files)."""
    if fmt not in FORMATS:
        raise OptionError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    check_replaceable(out, MARKER, _not_ours(out))
    src = load_sources(build_dir)
    files = render_layout(src, fmt)
    marker = {"tinytrain": __version__, "format": fmt, "prefix": src.prefix,
              "model_id": src.info["model_id"], "model_name": src.info.get("model_name"),
              "files": sorted(files)}
    with staged(out, MARKER, _not_ours(out)) as tmp:
        write_files(files, tmp)
        (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    return marker


def _not_ours(out: Path) -> str:
    return f"--out {out} exists and is not a tinytrain export (no {MARKER})"
