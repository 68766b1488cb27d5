"""Output directories written atomically: everything goes into a temporary sibling, which
replaces `--out` only once complete, so a failed command never leaves a half-written
directory. Only an empty directory or one tinytrain wrote (it holds `marker`) is replaced."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinytrain.errors import BuildError


def check_replaceable(out: Path, marker: str, not_ours: str) -> None:
    """Refuse a file, or a non-empty directory without `marker` (`not_ours` says why)."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file, not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).is_file():
        raise BuildError(f"{not_ours}; choose another --out or remove it")


@contextmanager
def staged(out: Path, marker: str, not_ours: str) -> Iterator[Path]:
    """An empty temporary sibling of `out` to write into. When the block succeeds it replaces
    `out` (checked again: `out` may have changed meanwhile); when it fails it is removed."""
    tmp = out.with_name(f".{out.name}.tt-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        yield tmp
        check_replaceable(out, marker, not_ours)
        old = out.with_name(f".{out.name}.tt-old-{os.getpid()}")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
