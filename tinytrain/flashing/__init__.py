"""Put a firmware image on a board: over a ROM/DFU bootloader's serial port, or through a probe.

Images are lists of (address, bytes) segments, as `load_elf` / `load_bin` return them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import serial

from tinytrain.errors import TinyTrainError

Segment = tuple[int, bytes]
Progress = Callable[[int, int], None]


class FlashError(TinyTrainError):
    """Flashing failed: the message says what, where (port, address) and what to try."""


# Imported after FlashError: the submodules raise it and import it from here.
from tinytrain.flashing.elf import load_bin, load_elf, load_image  # noqa: E402
from tinytrain.flashing.probe import flash_probe  # noqa: E402

PROTOCOLS = ("stm32-rom", "nrf-dfu-serial")
WRITE_TIMEOUT_S = 5.0  # a port that cannot take a few hundred bytes in this long is stuck
PTY_MAJORS = range(136, 144)  # Linux Unix98 pseudo-terminal slaves (/dev/pts/N)
PARITY_NAMES = {serial.PARITY_EVEN: "even", serial.PARITY_ODD: "odd"}
try:
    import termios

    _PORT_ERRORS: tuple[type[BaseException], ...] = (serial.SerialException, ValueError, OSError,
                                                     termios.error)
except ImportError:  # Windows: pyserial reports everything as SerialException/OSError
    _PORT_ERRORS = (serial.SerialException, ValueError, OSError)


def open_serial(port: str, *, baud: int, timeout: float,
                parity: str = serial.PARITY_NONE) -> serial.SerialBase:
    """Open `port` (a device path or any pyserial URL such as socket://host:port), 8 data bits."""
    try:
        ser = serial.serial_for_url(port, baudrate=baud, bytesize=serial.EIGHTBITS,
                                    parity=serial.PARITY_NONE, stopbits=serial.STOPBITS_ONE,
                                    timeout=timeout, write_timeout=WRITE_TIMEOUT_S)
    except _PORT_ERRORS as e:
        raise FlashError(f"cannot open serial port {port}: {e}") from None
    if parity != serial.PARITY_NONE:
        try:
            ser.parity = parity
        except _PORT_ERRORS:
            # A pseudo-terminal has no wire for a parity bit (Linux refuses the flag on one);
            # a tunnel behind it, e.g. socat to a remote UART, sets parity at its far end.
            if not _is_pty(ser):
                ser.close()
                raise FlashError(f"serial port {port} refuses {PARITY_NAMES.get(parity, parity)} "
                                 "parity, which this bootloader needs") from None
            ser.parity = serial.PARITY_NONE  # pyserial kept the refused setting: undo it
    return ser


def _is_pty(ser: serial.SerialBase) -> bool:
    fd = getattr(ser, "fd", None)
    try:
        return fd is not None and os.major(os.fstat(fd).st_rdev) in PTY_MAJORS
    except OSError:
        return False


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
        from tinytrain.flashing import stm32_rom

        stm32_rom.flash(port, segments, baud=baud, timeout=timeout, progress=progress)
    elif protocol == "nrf-dfu-serial":
        from tinytrain.flashing import nrf_dfu

        nrf_dfu.flash(port, segments, baud=baud, timeout=timeout, progress=progress)
    else:
        raise FlashError(f"unknown flashing protocol '{protocol}'; use one of: "
                         f"{', '.join(PROTOCOLS)}")


__all__ = ["FlashError", "PROTOCOLS", "Progress", "Segment", "flash_image", "flash_probe",
           "load_bin", "load_elf", "load_image"]
