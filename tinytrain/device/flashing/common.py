"""What every way of flashing shares: the error it raises, an image's segments, a serial port
opened the way bootloaders want it."""

from __future__ import annotations

import os
from collections.abc import Callable

import serial

from tinytrain.errors import TinyTrainError

Segment = tuple[int, bytes]
Progress = Callable[[int, int], None]


class FlashError(TinyTrainError):
    """Flashing failed: the message says what, where (port, address) and what to try."""


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
