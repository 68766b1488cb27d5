"""The real-board layers (boards/<board>/board.c) build with the cross compiler and implement
every function of firmware/tt_port.h.

Each file is compiled with exactly the flags its board uses (-Werror included), then
arm-none-eabi-nm must list every function declared in tt_port.h as a global text symbol (T).
The layers are written against bare registers, so the objects must not pull in anything
undefined either (no libc, no vendor HAL). Nothing here runs on hardware.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tinytrain.boards import load_board

ROOT = Path(__file__).resolve().parents[1]
PORT_H = ROOT / "firmware" / "tt_port.h"
COMMON = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror",
          "-ffunction-sections", "-fdata-sections", "-Ifirmware"]
BOARDS = {
    "stm32f746": ["-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"],
    "nrf52840": ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"],
}

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("arm-none-eabi-nm") is None,
    reason="arm-none-eabi-gcc / arm-none-eabi-nm not installed")


def port_functions() -> set[str]:
    """Names of the functions declared in tt_port.h (comments stripped)."""
    text = re.sub(r"/\*.*?\*/", "", PORT_H.read_text(), flags=re.S)
    return set(re.findall(r"^[A-Za-z_][\w \t\*]*?\b(tt_port_\w+)\s*\(", text, flags=re.M))


def test_port_header_declares_the_interface():
    assert {"tt_port_init", "tt_port_getc", "tt_port_write", "tt_port_ticks",
            "tt_port_tick_bits", "tt_port_flash_slot_size", "tt_port_flash_write_unit",
            "tt_port_flash_erase", "tt_port_flash_program",
            "tt_port_flash_slot"} <= port_functions()


CKPT_BYTES = 40_000  # a checkpoint that needs a multi-sector slot on the STM32F746


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_board_layer_compiles_and_defines_the_port(board, tmp_path):
    src = Path("boards") / board / "board.c"
    obj = tmp_path / f"{board}.o"
    slots = load_board(board).flash_layout(CKPT_BYTES)  # as a build passes them
    cmd = ["arm-none-eabi-gcc", *BOARDS[board], *COMMON, f"-DTT_CKPT_SLOT0={slots.slots[0]}u",
           f"-DTT_CKPT_SLOT1={slots.slots[1]}u", f"-DTT_CKPT_SLOT_SIZE={slots.slot_bytes}u",
           "-c", str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}"
    assert proc.stderr == "", f"warnings from {src}:\n{proc.stderr}"

    nm = subprocess.run(["arm-none-eabi-nm", str(obj)], capture_output=True, text=True, check=True)
    symbols = {}
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            symbols[parts[-1]] = parts[-2]
    missing = sorted(f for f in port_functions() if symbols.get(f) != "T")
    assert not missing, f"{src} does not define (T) {missing}; nm says:\n{nm.stdout}"
    undefined = sorted(name for name, kind in symbols.items() if kind == "U")
    assert not undefined, f"{src} depends on undefined symbols {undefined}"
