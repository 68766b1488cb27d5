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
