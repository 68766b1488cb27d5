"""Byte pipes the link runs over: a child process's stdin/stdout (the host build) or anything
pyserial opens (/dev/ttyACM0, socket://127.0.0.1:PORT for the QEMU twins)."""

from __future__ import annotations

import os
import select
import subprocess
from typing import Protocol

from tinytrain.errors import TinyTrainError


class LinkError(TinyTrainError):
    """The device stopped answering, answered with an error, or is not the expected build."""


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...
    def read(self, timeout: float) -> bytes: ...  # b"" on timeout
    def close(self) -> None: ...


class PipeTransport:
    """The host build: tt_host as a child process, the link on its stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        # A session of its own: Ctrl-C in the terminal is for tinytrain, which finishes the
        # current step and saves; the program ends when its stdin closes.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
        assert self.proc.stdin and self.proc.stdout
        self._in, self._out = self.proc.stdin, self.proc.stdout.fileno()

    def write(self, data: bytes) -> None:
        try:
            self._in.write(data)
            self._in.flush()
        except (BrokenPipeError, ValueError):
            raise LinkError(f"the program exited (code {self.proc.poll()})") from None

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            if self.proc.poll() is not None:
                raise LinkError(f"the program exited (code {self.proc.returncode})")
            return b""
        data = os.read(self._out, 1 << 16)
        if not data:
            code = self.proc.wait(timeout=5)
            raise LinkError(f"the program exited (code {code})")
        return data

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._in.close()  # end of input: the firmware's serve loop returns
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SerialTransport:
    """A serial port or pyserial URL; `socket://` reaches a QEMU twin's UART."""

    def __init__(self, url: str, baud: int = 115200) -> None:
        import serial

        try:
            self.port = serial.serial_for_url(url, baudrate=baud, timeout=0)
        except (serial.SerialException, ValueError, OSError) as e:
            raise LinkError(f"cannot open {url}: {e}") from None
        self.url = url
        sock = getattr(self.port, "_socket", None)
        if sock is not None:  # socket://: small frames must not wait for Nagle's algorithm
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, data: bytes) -> None:
        import serial

        try:
            self.port.write(data)
        except (serial.SerialException, OSError) as e:
            raise LinkError(f"writing to {self.url} failed: {e}") from None

    def read(self, timeout: float) -> bytes:
        import serial

        try:
            self.port.timeout = timeout
            first = self.port.read(1)
            if not first:
                return b""
            self.port.timeout = 0
            return first + self.port.read(1 << 16)
        except (serial.SerialException, OSError) as e:
            raise LinkError(f"reading from {self.url} failed: {e}") from None

    def close(self) -> None:
        self.port.close()
