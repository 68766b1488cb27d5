"""Run the C compiler on a generated project."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tinytrain.boards import Board
from tinytrain.device.objcache import enabled, prefill
from tinytrain.errors import BuildError

APT_HINT = ("install it with `apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi` "
            "(Debian/Ubuntu)")


def cache_args() -> list[str]:
    """make's CCACHE: the runtime's objects come from device/objcache.py's cache unless
    TINYTRAIN_CACHE=off."""
    if not enabled():
        return []
    return [f"CCACHE={shlex.quote(sys.executable)} -m tinytrain.device.objcache"]


def run_make(project: Path, args: list[str]) -> subprocess.CompletedProcess:
    """`make args` in a generated project, in parallel and through the compiler cache."""
    prefill(project, args)  # the cached objects, restored without a process each
    return subprocess.run(["make", "-s", f"-j{os.cpu_count() or 1}", *cache_args(), *args],
                          cwd=project, capture_output=True, text=True)


def compile_project(project: Path, board: Board) -> list[Path]:
    """Build the project; returns the programs it produced (the host binary, or the board's and
    the QEMU twin's ELFs, each with its .bin and .hex)."""
    if shutil.which(board.cc) is None:
        hint = f"; {APT_HINT}" if board.is_mcu else ""
        raise BuildError(f"the C compiler '{board.cc}' for board {board.name} is not installed"
                         f"{hint}")
    proc = run_make(project, [] if board.is_mcu else [f"CC={board.cc}"])
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        # the board's ELF and its twin's link the same regions: name each region once
        worst: dict[str, int] = {}
        for region, n in re.findall(r"region `(\w+)' overflowed by (\d+) bytes", text):
            worst[region] = max(worst.get(region, 0), int(n))
        over = [(region, str(n)) for region, n in worst.items()]
        # ld 2.40 with --enable-non-contiguous-regions crashes instead of reporting a section
        # that fits none of the regions: that is its verdict too
        crashed = "ld terminated with signal" in text and "non-contiguous" in \
            (project / "Makefile").read_text()
        if over or crashed or "will not fit in region" in text:  # the linker's verdict
            from tinytrain.device.firmware_size import explain_overflow

            raise explain_overflow(project, board, over)
        tail = "\n".join(text.strip().splitlines()[-20:])
        raise BuildError(f"compiling the generated C for {board.name} failed:\n{tail}")
    from tinytrain.codegen.render import HOST_BINARY

    if board.is_mcu:  # each ELF with its flashable images (templates/Makefile.j2: no .bin
        # for a board whose code memories lie far apart)
        return [p for elf in ("firmware", "firmware_qemu") for ext in ("elf", "bin", "hex")
                if (p := project / f"{elf}.{ext}").exists()]
    return [project / HOST_BINARY]
