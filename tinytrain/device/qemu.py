"""Start a board's QEMU twin with its UART on a local TCP socket, reached through pyserial's
socket:// URL exactly like a board on /dev/ttyACM0.

The twin's flash persists in DIR/twin_flash.bin, as a board's flash survives a power cycle.
The MPS2 machines have no flash device: their code memory is RAM loaded from the ELF, and
boards/qemu/mps2.c emulates the two checkpoint slots in it with NOR semantics. So the slots'
bytes travel through QEMU itself, never through the firmware: at start each slot is preloaded
from the file with QEMU's generic loader (`-device loader,force-raw=on`, applied at reset,
before the first instruction), and after every checkpoint the firmware acknowledges, and when
tinytrain stops the twin, it pauses the CPU and reads both slots back with the QMP monitor's
`pmemsave`. The firmware therefore boots exactly as on
the board: tt_checkpoint_load() finds, CRC-checks and loads the newest valid slot, or none.
The file is slot 0 then slot 1, like the host build's TT_FLASH_FILE; a missing file or one of
another size (another layout) is an erased (0xFF) flash. A rebuild replaces DIR and with it the
file; `--erase-flash` (erase_flash below) deletes it."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tinytrain.boards import Board, load_board
from tinytrain.device.link.transport import LinkError, SerialTransport
from tinytrain.errors import BuildError

QEMU = "qemu-system-arm"
QEMU_HINT = "install it with `apt-get install qemu-system-arm` (Debian/Ubuntu)"
TWIN_ELF = "firmware_qemu.elf"
TWIN_FLASH = "twin_flash.bin"  # the twin's checkpoint slots, kept between runs
CONNECT_TIMEOUT = 20.0  # seconds for QEMU to open its serial socket
MONITOR_TIMEOUT = 10.0  # seconds for a QMP command (pmemsave of two slots takes milliseconds)
ERASED = 0xFF
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_tinytrain() -> Callable[[], None] | None:
    """For Popen's preexec_fn on Linux: the twin gets SIGTERM (QEMU exits cleanly on it) when
    the thread that started it ends. The twin has a session of its own (a terminal's Ctrl-C
    and hang-up are for tinytrain), so without this a tinytrain killed outright would leave a
    QEMU spinning in the firmware's UART loop."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: only a syscall after it
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # tinytrain died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class TwinFlash:
    """The twin's two checkpoint slots (addresses in its memory map) and their file."""
    path: Path
    slots: tuple[int, int]
    slot_bytes: int

    @classmethod
    def of(cls, build_dir: Path, board: Board) -> TwinFlash:
        from tinytrain.codegen.render import flash_layout_of_project, twin_layout

        lay = twin_layout(board, flash_layout_of_project(Path(build_dir), board))
        return cls(Path(build_dir) / TWIN_FLASH, lay.slots, lay.slot_bytes)

    def load(self) -> bytes:
        """The saved image, or an erased flash when there is none of this layout."""
        size = 2 * self.slot_bytes
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        return data if len(data) == size else bytes([ERASED]) * size

    def save(self, image: bytes) -> None:
        """Replace the file atomically: a crash mid-write leaves the old image, never half."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_bytes(image)
        os.replace(tmp, self.path)


def erase_flash(build_dir: Path) -> bool:
    """Forget the twin's checkpoints (the next twin boots with erased flash); True if any."""
    try:
        (Path(build_dir) / TWIN_FLASH).unlink()
        return True
    except FileNotFoundError:
        return False


class Monitor:
    """QEMU's QMP monitor: one JSON command per line, its reply (events are skipped)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=MONITOR_TIMEOUT)
        self.file = self.sock.makefile("rwb")
        try:
            self._reply()  # the greeting
            self.call("qmp_capabilities")
        except (OSError, ValueError):
            self.close()
            raise

    def _reply(self) -> Any:
        while True:
            line = self.file.readline()
            if not line:
                raise OSError("QEMU closed its monitor")
            msg = json.loads(line)
            if "error" in msg:
                raise OSError(f"QEMU monitor: {msg['error'].get('desc', msg['error'])}")
            if "return" in msg or "QMP" in msg:
                return msg.get("return")

    def call(self, cmd: str, **args: Any) -> Any:
        self.file.write(json.dumps({"execute": cmd, "arguments": args}).encode() + b"\n")
        self.file.flush()
        return self._reply()

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def _loader_path(p: Path) -> str:
    return str(p).replace(",", ",,")  # QEMU's option syntax doubles a literal comma


@dataclass
class QemuTwin:
    proc: subprocess.Popen
    port: int
    log: IO[bytes]
    monitor: Monitor
    flash: TwinFlash
    booted_image: bytes  # what the slots held at start: the file is only rewritten on change
    workdir: tempfile.TemporaryDirectory

    @classmethod
    def start(cls, build_dir: Path, info: dict[str, Any], icount: bool = False,
              trace: Path | None = None) -> QemuTwin:
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
        flash = TwinFlash.of(build_dir, board)
        image = flash.load()
        work = tempfile.TemporaryDirectory(prefix="tt-twin-")
        loaders = []
        for k, addr in enumerate(flash.slots):
            p = Path(work.name) / f"slot{k}.bin"
            p.write_bytes(image[k * flash.slot_bytes:(k + 1) * flash.slot_bytes])
            loaders += ["-device", f"loader,file={_loader_path(p)},addr=0x{addr:x},force-raw=on"]
        last = ""
        for _ in range(5):  # a free port can be taken by someone else before QEMU binds it
            port, qmp = _free_port(), _free_port()
            argv = [QEMU, "-M", board.qemu.machine, "-kernel", str(elf), "-display", "none",
                    "-monitor", "none", "-nodefaults", *loaders,
                    "-qmp", f"tcp:127.0.0.1:{qmp},server=on,wait=off",
                    "-serial", f"tcp:127.0.0.1:{port},server=on,wait=off,nodelay=on"]
            if icount:  # one instruction per virtual ns: SysTick counts 40 instructions a tick
                argv += ["-icount", "shift=0"]
            if trace is not None:  # every executed block and each block's instructions, once
                argv += ["-d", "exec,nochain,in_asm", "-D", str(trace)]  # (trace_profile.py)
            # stderr goes to a file: a pipe nobody drains could block QEMU on a long warning.
            # A session of its own: Ctrl-C in the terminal is for tinytrain (which finishes
            # the step and saves), not for the twin.
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True,
                                    preexec_fn=_die_with_tinytrain())
            deadline = time.monotonic() + CONNECT_TIMEOUT
            try:
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                        monitor = Monitor(qmp)
                        return cls(proc, port, log, monitor, flash, image, work)
                    except (OSError, ValueError):
                        time.sleep(0.05)
            except BaseException:  # e.g. Ctrl-C while it starts: its own session spares it
                proc.kill()
                proc.wait()
                log.close()
                work.cleanup()
                raise
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.seek(0)
            last = log.read().decode(errors="replace").strip()
            log.close()
        work.cleanup()
        raise BuildError(f"QEMU ({board.qemu.machine}) did not start: {last[-500:]}")

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    def transport(self) -> TwinTransport:
        return TwinTransport(self)

    def save_flash(self) -> bool:
        """Write the slots to DIR/twin_flash.bin if they changed since boot; True if written.
        The CPU is paused meanwhile so the image is one instant of the flash."""
        self.monitor.call("stop")
        try:
            parts = []
            for k, addr in enumerate(self.flash.slots):
                out = Path(self.workdir.name) / f"saved{k}.bin"
                self.monitor.call("pmemsave", val=addr, size=self.flash.slot_bytes,
                                  filename=str(out))
                parts.append(out.read_bytes())
        finally:
            self.monitor.call("cont")
        image = b"".join(parts)
        if image == self.booted_image:
            return False
        self.flash.save(image)
        self.booted_image = image
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.save_flash()
            except (OSError, ValueError) as e:  # QEMU wedged or the directory is read-only
                print(f"warning: the QEMU twin's flash was not saved to {self.flash.path}: "
                      f"{e}", file=sys.stderr)
            try:
                self.monitor.call("quit")
                self.proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.monitor.close()
        self.log.close()
        self.workdir.cleanup()


class TwinTransport(SerialTransport):
    """The twin's UART socket; closing it also stops QEMU (saving its flash)."""

    def __init__(self, twin: QemuTwin) -> None:
        self.twin = twin
        try:
            super().__init__(twin.url)
        except LinkError:
            twin.stop()
            raise

    def flash_written(self) -> None:
        """The firmware wrote a checkpoint: keep the slots on disk at once, so a QEMU that
        dies later (killed, or crashed) loses no checkpoint it acknowledged."""
        self.twin.save_flash()

    def read(self, timeout: float) -> bytes:
        if self.twin.proc.poll() is not None:
            raise LinkError(f"QEMU exited (code {self.twin.proc.returncode})")
        return super().read(timeout)

    def close(self) -> None:
        super().close()
        self.twin.stop()
