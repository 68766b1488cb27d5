"""The real-board layers (boards/<board>/board.c) build with the cross compiler and implement
every function of firmware/tt_port.h.

Each file is compiled with exactly the flags its board uses (-Werror included), then
arm-none-eabi-nm must list every function declared in tt_port.h as a global text symbol (T).
The layers are written against bare registers, so the objects must not pull in anything
undefined either (no vendor HAL, no libc beyond <string.h>'s memset/memcpy, which every firmware
links for the model and GCC may call for a plain loop). Corstone-300's layer is the QEMU twins'
own (boards/qemu/mps2.c): QEMU's mps3-an547 models that FPGA image, so board and twin are one.
Nothing here runs on hardware.
"""

import importlib.util
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
    "stm32u585": ["-mcpu=cortex-m33", "-mthumb", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"],
    "rp2040": ["-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"],
    "rp2350": ["-mcpu=cortex-m33", "-mthumb", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard", "-DTT_FPV5"],
    "corstone300": ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-DTT_FPV5"],
    "alif_e7_he": ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-DTT_FPV5"],
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


LIBC_ALLOWED = {"memset", "memcpy"}  # <string.h>, linked into every firmware anyway
CKPT_BYTES = 40_000  # a checkpoint that needs a multi-sector slot on the STM32F746


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_board_layer_compiles_and_defines_the_port(board, tmp_path):
    src = Path("boards") / load_board(board).source  # corstone300's is the twin layer
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
    undefined = sorted(name for name, kind in symbols.items()
                       if kind == "U" and name not in LIBC_ALLOWED)
    assert not undefined, f"{src} depends on undefined symbols {undefined}"


def crc32_mpeg2_bitwise(data: bytes) -> int:
    """CRC-32/MPEG-2 one bit at a time (independent of make_boot2.py's table-driven one):
    poly 0x04C11DB7, init 0xFFFFFFFF, MSB first (not reflected), no final XOR."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def test_rp2040_boot2_matches_its_source_and_checksum(tmp_path):
    """board.c's pasted stage 2 is boot2.S as make_boot2.py assembles it, zero-padded to 252
    bytes, followed by the CRC the RP2040 boot ROM checks (RP2040 datasheet 2.8.1.3.1: over the
    first 252 bytes, stored as a little-endian word in the last 4)."""
    assert crc32_mpeg2_bitwise(b"123456789") == 0x0376E6E7  # the catalogued check value
    spec = importlib.util.spec_from_file_location(
        "make_boot2", ROOT / "boards" / "rp2040" / "make_boot2.py")
    make_boot2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_boot2)
    code = make_boot2.assemble(tmp_path)

    text = (ROOT / "boards" / "rp2040" / "board.c").read_text()
    block = re.search(re.escape(make_boot2.BEGIN) + r"(.*?)" + re.escape(make_boot2.END), text,
                      flags=re.S)
    assert block, "board.c has no generated boot2 block"
    array = re.search(r"tt_rp2040_boot2\[256\]\s*=\s*\{(.*?)\}", block.group(1), flags=re.S)
    assert array and 'section(".tt_boot2")' in block.group(1)
    image = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-fA-F]{2})\b", array.group(1)))
    assert len(image) == 256
    assert image[:len(code)] == code, "board.c's boot2 is stale: run boards/rp2040/make_boot2.py"
    assert image[len(code):252] == bytes(252 - len(code))
    assert int.from_bytes(image[252:], "little") == crc32_mpeg2_bitwise(image[:252])
