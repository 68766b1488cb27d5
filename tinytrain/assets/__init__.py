"""Where the C runtime, the Jinja templates, the board descriptions and the firmware sources are.

They live at the top of the source tree (runtime_c/, templates/, boards/, firmware/) so that C
and TOML contributors find them there; the wheel maps them into this package
(tinytrain/assets/<name>/, see pyproject.toml). An installed wheel is found through
importlib.resources; a source checkout (an editable install, or running from the tree) falls
back to the tree itself.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

from tinytrain.errors import TinyTrainError

NAMES = ("runtime_c", "templates", "boards", "firmware")
# runtime_c/: tt_kernels.h (what generated code includes) and these folders; a build copies
# them flat into its runtime/ directory, so a file name is unique across them
RUNTIME_PARTS = ("reference", "optimized")


@cache
def asset_dir(name: str) -> Path:
    """The directory holding asset `name` (one of NAMES)."""
    assert name in NAMES, name
    packaged = Path(str(files(__name__) / name))  # a wheel unpacks into a real directory
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / name  # tinytrain/assets -> the tree's root
    if source.is_dir():
        return source
    raise TinyTrainError(f"this tinytrain installation is incomplete: its {name}/ directory "
                         f"is missing (looked in {packaged} and {source}); reinstall the "
                         "tinytrain-mcu package")


def runtime_dirs() -> list[Path]:
    """The C runtime's folders, for -I: its root (tt_kernels.h), then RUNTIME_PARTS."""
    root = asset_dir("runtime_c")
    return [root, *(root / part for part in RUNTIME_PARTS)]


@cache
def runtime_files() -> dict[str, Path]:
    """The C runtime's .c and .h files by file name, as a build lays them out flat."""
    out: dict[str, Path] = {}
    for d in runtime_dirs():
        for p in sorted(d.glob("*.[ch]")):
            if p.name in out:
                raise TinyTrainError(f"the C runtime has two files named {p.name} "
                                     f"({out[p.name]} and {p}); a build copies them into one "
                                     "directory")
            out[p.name] = p
    return dict(sorted(out.items()))
