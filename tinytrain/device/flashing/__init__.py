"""Put a firmware image on a board: over a ROM/DFU bootloader's serial port, or through a probe.

Images are lists of (address, bytes) segments, as `load_elf` / `load_bin` return them.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinytrain.device.flashing.common import FlashError, Progress, Segment, open_serial
from tinytrain.device.flashing.elf import load_bin, load_elf, load_image
from tinytrain.device.flashing.probe import flash_probe

PROTOCOLS = ("stm32-rom", "nrf-dfu-serial")


def flash_image(protocol: str, port: str, segments: Sequence[Segment], *, baud: int = 115200,
                timeout: float = 1.0, progress: Progress | None = None) -> None:
    """Write `segments` to the board's flash through its bootloader on `port`, then start it.

    protocol: "stm32-rom" (STM32F746 system-memory bootloader, ST AN3155) or "nrf-dfu-serial"
    (nRF5 SDK Secure DFU, SLIP over a serial/USB CDC port). `port` is anything
    serial.serial_for_url accepts. `progress(done_bytes, total_bytes)` is called as data goes out
    (for stm32-rom the total counts every byte twice: written, then read back to verify).
    """
    if not segments:
        raise FlashError("the firmware image is empty: nothing to flash")
    if protocol == "stm32-rom":
        from tinytrain.device.flashing import stm32_rom

        stm32_rom.flash(port, segments, baud=baud, timeout=timeout, progress=progress)
    elif protocol == "nrf-dfu-serial":
        from tinytrain.device.flashing import nrf_dfu

        nrf_dfu.flash(port, segments, baud=baud, timeout=timeout, progress=progress)
    else:
        raise FlashError(f"unknown flashing protocol '{protocol}'; use one of: "
                         f"{', '.join(PROTOCOLS)}")


__all__ = ["FlashError", "PROTOCOLS", "Progress", "Segment", "flash_image", "flash_probe",
           "load_bin", "load_elf", "load_image", "open_serial"]
