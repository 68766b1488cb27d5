"""Run the C compiler on a generated project."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tinytrain.boards import Board
from tinytrain.errors import BuildError


def compile_project(project: Path, board: Board) -> Path:
    if shutil.which(board.cc) is None:
        raise BuildError(f"the C compiler '{board.cc}' for board {board.name} is not installed")
    proc = subprocess.run(["make", "-s", f"CC={board.cc}"], cwd=project, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise BuildError(f"compiling the generated C for {board.name} failed:\n{tail}")
    from tinytrain.codegen.render import HOST_BINARY

    return project / HOST_BINARY
