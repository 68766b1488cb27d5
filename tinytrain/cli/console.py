"""The command line's consoles and its one way of reporting a user error (exit code 2, one
paragraph, no traceback), shared by every command module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from tinytrain.errors import TinyTrainError

console = Console()
err = Console(stderr=True)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except TinyTrainError as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
