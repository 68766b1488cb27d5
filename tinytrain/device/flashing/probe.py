"""Flash through a debug probe (ST-LINK, J-Link, CMSIS-DAP) with pyocd, or openocd without it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tinytrain.device.flashing.common import FlashError

PROBE_TIMEOUT_S = 300.0  # a full 1 MB erase and program over SWD stays well below this
# board name prefix -> (pyocd target, openocd board config)
TARGETS = {
    "stm32f746": ("stm32f746xx", "board/stm32f7discovery.cfg"),
    "nrf52840": ("nrf52840", "board/nordic_nrf52_dk.cfg"),
}


def flash_probe(elf_path: str | Path, board: str) -> None:
    """Program, verify and reset `board` with `elf_path` through whichever tool is installed."""
    pyocd_target, openocd_cfg = probe_target(board)
    path = Path(elf_path)
    if not path.is_file():
        raise FlashError(f"firmware image {path} does not exist")
    if pyocd := shutil.which("pyocd"):
        cmd = [pyocd, "flash", "-t", pyocd_target, str(path)]
    elif openocd := shutil.which("openocd"):
        # openocd parses the command as Tcl: braces keep a path with spaces in one word.
        name = f"{{{path}}}" if any(c.isspace() for c in str(path)) else str(path)
        cmd = [openocd, "-f", openocd_cfg, "-c", f"program {name} verify reset exit"]
    else:
        raise FlashError("flashing through a probe needs pyocd (pip install pyocd) or openocd; "
                         "neither is on PATH")
    tool = Path(cmd[0]).name
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FlashError(f"{tool} did not finish within {PROBE_TIMEOUT_S:g} s; is the probe "
                         "connected?") from None
    except OSError as e:
        raise FlashError(f"cannot run {tool}: {e.strerror}") from None
    if proc.returncode != 0:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        why = lines[-1].strip() if lines else "no output"
        raise FlashError(f"{tool} failed to flash {path.name} to {board} (exit "
                         f"{proc.returncode}): {why}")


def probe_target(board: str) -> tuple[str, str]:
    """(pyocd target, openocd board config) for a board name such as stm32f746-disco."""
    for prefix, target in TARGETS.items():
        if board.lower().startswith(prefix):
            return target
    raise FlashError(f"no probe target known for board '{board}'; supported: "
                     f"{', '.join(TARGETS)}")
