"""Open a built program: the host binary (a pipe), the QEMU twin (a TCP socket to its UART) or
a board (a serial port). All three are the same Device speaking the serial link protocol."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tinytrain.codegen.program import PROGRAM_JSON
from tinytrain.codegen.render import HOST_BINARY
from tinytrain.device.link.device import Device
from tinytrain.device.link.transport import LinkError, PipeTransport, SerialTransport
from tinytrain.errors import BuildError

ProgramError = LinkError  # the name older code and tests use


def load_program_info(build_dir: Path) -> dict[str, Any]:
    p = Path(build_dir) / PROGRAM_JSON
    if not p.exists():
        raise BuildError(f"{build_dir} is not a tinytrain build directory (no {PROGRAM_JSON}); "
                         "run `tinytrain build MODEL --out DIR` first")
    try:
        info = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        info = e
    if not isinstance(info, dict) or "input_logical_shape" not in info:
        raise BuildError(f"{p} is not a valid tinytrain program description; rebuild with "
                         "`tinytrain build MODEL --out DIR`")
    return info


def HostProgram(build_dir: Path, env: dict[str, str] | None = None,  # noqa: N802
                timeout: float = 30.0) -> Device:
    """DIR/tt_host as a child process. `env` adds variables (e.g. TT_FLASH_FILE)."""
    build_dir = Path(build_dir)
    info = load_program_info(build_dir)
    exe = build_dir / HOST_BINARY
    if not exe.exists():
        hint = (" (a firmware build: use --qemu or --port)" if info.get("board", "host") != "host"
                else "; rebuild with `tinytrain build`")
        raise BuildError(f"{exe} is missing{hint}")
    t = PipeTransport([str(exe)], env={**os.environ, **env} if env else None)
    try:
        return Device(t, info, timeout=timeout)
    except BaseException:
        t.close()
        raise


def open_program(build_dir: Path, port: str | None = None, qemu: bool = False,
                 timeout: float | None = None, icount: bool = False,
                 trace: Path | None = None) -> Device:
    """The one entry point of `run`, `infer` and `bench`: choose the transport. `trace` (the
    twin only): QEMU logs every executed block there (tinytrain.device.trace_profile)."""
    build_dir = Path(build_dir)
    info = load_program_info(build_dir)
    if qemu and port:
        raise BuildError("give either --qemu or --port, not both")
    if qemu:
        from tinytrain.device.qemu import QemuTwin

        twin = QemuTwin.start(build_dir, info, icount=icount, trace=trace)
        try:
            return Device(twin.transport(), info, timeout=timeout or 10.0)
        except BaseException:
            twin.stop()
            raise
    if port:
        t = SerialTransport(port)
        try:
            return Device(t, info, timeout=timeout or 5.0)
        except BaseException:
            t.close()
            raise
    if info.get("board", "host") != "host":
        raise BuildError(f"{build_dir} is firmware for {info['board']}: run it with --qemu "
                         "(its emulated twin) or --port PORT (the board)")
    return HostProgram(build_dir, timeout=timeout or 30.0)
