"""Start a board's QEMU twin with its UART on a local TCP socket, reached through pyserial's
socket:// URL exactly like a board on /dev/ttyACM0."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tinytrain.boards import load_board
from tinytrain.errors import BuildError
from tinytrain.link.transport import LinkError, SerialTransport

QEMU = "qemu-system-arm"
QEMU_HINT = "install it with `apt-get install qemu-system-arm` (Debian/Ubuntu)"
TWIN_ELF = "firmware_qemu.elf"
CONNECT_TIMEOUT = 20.0  # seconds for QEMU to open its serial socket


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class QemuTwin:
    proc: subprocess.Popen
    port: int
    log: IO[bytes]

    @classmethod
    def start(cls, build_dir: Path, info: dict[str, Any], icount: bool = False) -> QemuTwin:
        board = load_board(info.get("board", "host"))
        if board.qemu is None:
            raise BuildError(f"board {board.name} has no QEMU twin; --qemu needs a firmware "
                             "build (e.g. --board stm32f746)")
        elf = Path(build_dir) / TWIN_ELF
        if not elf.exists():
            raise BuildError(f"{elf} is missing; rebuild with `tinytrain build --board "
                             f"{board.name}`")
        if shutil.which(QEMU) is None:
            raise BuildError(f"{QEMU} is not installed; {QEMU_HINT}")
        last = ""
        for _ in range(5):  # the free port can be taken by someone else before QEMU binds it
            port = _free_port()
            argv = [QEMU, "-M", board.qemu.machine, "-kernel", str(elf), "-display", "none",
                    "-monitor", "none", "-nodefaults",
                    "-serial", f"tcp:127.0.0.1:{port},server=on,wait=off,nodelay=on"]
            if icount:  # one instruction per virtual ns: SysTick counts 40 instructions a tick
                argv += ["-icount", "shift=0"]
            # stderr goes to a file: a pipe nobody drains could block QEMU on a long warning
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log)
            deadline = time.monotonic() + CONNECT_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    return cls(proc, port, log)
                except OSError:
                    time.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.seek(0)
            last = log.read().decode(errors="replace").strip()
            log.close()
        raise BuildError(f"QEMU ({board.qemu.machine}) did not start: {last[-500:]}")

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def transport(self) -> TwinTransport:
        return TwinTransport(self)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class TwinTransport(SerialTransport):
    """The twin's UART socket; closing it also stops QEMU."""

    def __init__(self, twin: QemuTwin) -> None:
        self.twin = twin
        try:
            super().__init__(twin.url)
        except LinkError:
            twin.stop()
            raise

    def read(self, timeout: float) -> bytes:
        if self.twin.proc.poll() is not None:
            raise LinkError(f"QEMU exited (code {self.twin.proc.returncode})")
        return super().read(timeout)

    def close(self) -> None:
        super().close()
        self.twin.stop()
