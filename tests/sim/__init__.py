"""Device simulators for flashing tests: each serves a bootloader protocol on a pseudo-terminal.

The host side opens `sim.port` (a /dev/pts/N path) with pyserial exactly as it would open
/dev/ttyACM0; the simulator answers from a thread on the master end.
"""

from __future__ import annotations

import os
import select
import threading
import tty

POLL_S = 0.02  # how often a blocked read looks at the stop flag
JOIN_TIMEOUT_S = 2.0


class Stopped(Exception):
    """Raised inside the device thread when the test closes the simulator."""


class PtyDevice:
    """Subclasses implement serve() with read()/read_byte() and write()."""

    def __init__(self) -> None:
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)  # no echo or line editing before the host configures the port
        self.port = os.ttyname(self._slave)
        self._pending = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.error: BaseException | None = None  # a crash in serve(), re-raised by close()

    def start(self) -> PtyDevice:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT_S)
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.error is not None:
            raise RuntimeError(f"simulator {type(self).__name__} crashed") from self.error

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve(self) -> None:
        raise NotImplementedError

    def read(self, n: int) -> bytes:
        """Exactly n bytes from the host, waiting as long as it takes (like the chip does)."""
        while len(self._pending) < n:
            if self._stop.is_set():
                raise Stopped
            ready, _, _ = select.select([self._master], [], [], POLL_S)
            if ready:
                try:
                    self._pending += os.read(self._master, 4096)
                except OSError:  # the tty went away
                    raise Stopped from None
        data = bytes(self._pending[:n])
        del self._pending[:n]
        return data

    def read_byte(self) -> int:
        return self.read(1)[0]

    def write(self, data: bytes) -> None:
        os.write(self._master, data)

    def _run(self) -> None:
        try:
            self.serve()
        except Stopped:
            pass
        except BaseException as e:  # surfaced by close() so a broken simulator fails the test
            self.error = e
