"""Put a firmware image on a board: over a ROM/DFU bootloader's serial port, or through a probe.

Images are lists of (address, bytes) segments, as `load_elf` / `load_bin` return them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tinytrain.device.flashing.common import FlashError, Progress, Segment, open_serial
from tinytrain.device.flashing.elf import load_bin, load_elf, load_image
from tinytrain.device.flashing.probe import flash_probe
from tinytrain.device.flashing.uf2 import elf_to_uf2, flash_uf2, parse_uf2

if TYPE_CHECKING:
    from tinytrain.boards import Board
    from tinytrain.device.flashing.stm32_rom import Stm32Chip

PROTOCOLS = ("stm32-rom", "nrf-dfu-serial", "uf2")
# [flash] protocol of a board tinytrain does not program (an FPGA board loading its images from
# an SD card, a chip programmed with its vendor's tool); [flash] how says what does.
NO_PROTOCOL = "none"
IMAGES = ("firmware.elf", "firmware.hex", "firmware.bin")  # what a firmware build writes


def flash_image(protocol: str, port: str, segments: Sequence[Segment], *, baud: int = 115200,
                timeout: float = 1.0, progress: Progress | None = None,
                chip: Stm32Chip | None = None) -> None:
    """Write `segments` to the board's flash through its bootloader on `port`, then start it.

    protocol: "stm32-rom" (STM32 system-memory bootloader, ST AN3155) or "nrf-dfu-serial"
    (nRF5 SDK Secure DFU, SLIP over a serial/USB CDC port); "uf2" boards go through
    `flash_uf2` instead. `port` is anything
    serial.serial_for_url accepts. `progress(done_bytes, total_bytes)` is called as data goes out
    (for stm32-rom the total counts every byte twice: written, then read back to verify).
    `chip`: for stm32-rom, the expected product ID and erase map (`board_chip(board)`; default
    the STM32F746); other protocols ignore it.
    """
    if not segments:
        raise FlashError("the firmware image is empty: nothing to flash")
    if protocol == "stm32-rom":
        from tinytrain.device.flashing import stm32_rom

        stm32_rom.flash(port, segments, baud=baud, timeout=timeout, progress=progress,
                        chip=chip or stm32_rom.STM32F746)
    elif protocol == "nrf-dfu-serial":
        from tinytrain.device.flashing import nrf_dfu

        nrf_dfu.flash(port, segments, baud=baud, timeout=timeout, progress=progress)
    elif protocol == "uf2":
        raise FlashError("uf2 boards (Raspberry Pi Pico) are flashed from their BOOTSEL USB drive "
                         "or with picotool, not over a serial port: use flash_uf2(elf, family_id)")
    else:
        raise FlashError(f"unknown flashing protocol '{protocol}'; use one of: "
                         f"{', '.join(PROTOCOLS)}")


def manual_programming(board: Board, build_dir: Path) -> str | None:
    """For a board tinytrain does not program ([flash] protocol "none", or none given): one
    paragraph saying so, how the board is programmed instead (its [flash] how, where DIR/ names
    the build directory; else the vendor's tools) and which image files the build holds. None
    for the boards it flashes."""
    if str(board.flash.get("protocol", NO_PROTOCOL)) != NO_PROTOCOL:
        return None
    said = "is \"none\"" if "protocol" in board.flash else "is not given"
    how = " ".join(str(board.flash.get("how", "")).split()).rstrip(".") or \
        "program it with its vendor's tools"
    how = how.replace("DIR/", f"{Path(build_dir)}/")  # the text's name for the build directory
    images = ", ".join(str(Path(build_dir) / f) for f in IMAGES if (Path(build_dir) / f).exists())
    return (f"tinytrain does not program {board.name} (the [flash] protocol of its board file "
            f"{said}): {how}. This build's images: {images or 'none (rebuild it)'}")


def board_chip(board: Board) -> Stm32Chip | None:
    """What `flash_image(chip=)` needs for a board flashed over the STM32 ROM bootloader: its
    [flash] product_id and its [layout] erase map. None for boards flashed otherwise."""
    if board.flash.get("protocol") != "stm32-rom":
        return None
    from tinytrain.device.flashing.stm32_rom import Stm32Chip

    return Stm32Chip.from_board(board)


__all__ = ["FlashError", "IMAGES", "NO_PROTOCOL", "PROTOCOLS", "Progress", "Segment",
           "board_chip", "elf_to_uf2", "flash_image", "flash_probe", "flash_uf2", "load_bin",
           "load_elf", "load_image", "manual_programming", "open_serial", "parse_uf2"]
