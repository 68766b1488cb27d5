"""Artefacts built once per pytest session and shared by every xdist worker.

A module-scoped fixture runs once per worker that runs any of the module's tests, and pytest-xdist
spreads a module's tests over all workers: an expensive build there is made twice on two cores.
`shared_dir` makes it once per session: the first worker to ask builds it under a file lock in
the session's shared temporary directory; the others wait for it and reuse it. What it returns
is read-only to its users (copy it before changing anything in it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

DONE = ".shared-done"  # written last: a directory without it is a build that did not finish


def session_root(factory: pytest.TempPathFactory) -> Path:
    """The temporary directory every worker of this session sees."""
    base = factory.getbasetemp()
    # under xdist each worker's base is <session>/popen-gwN
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_dir(factory: pytest.TempPathFactory, name: str,
               make: Callable[[Path], None]) -> Path:
    """The directory `make(d)` fills, made by one worker per session under a lock."""
    root = session_root(factory) / "shared"
    root.mkdir(exist_ok=True)
    out = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (out / DONE).is_file():
            shutil.rmtree(out, ignore_errors=True)  # a worker's failed attempt
            out.mkdir()
            make(out)
            (out / DONE).touch()
    return out
