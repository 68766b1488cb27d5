"""Drive a built program: the host binary as a child process speaking the request protocol."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.build import PROGRAM_JSON
from tinytrain.codegen.render import HOST_BINARY
from tinytrain.errors import BuildError, TinyTrainError


class ProgramError(TinyTrainError):
    """The running program stopped answering or answered with an error."""


PROTOCOL = 2  # host_main.c.j2 TT_PROTOCOL
NP_TYPES = {"f32": np.float32, "s8": np.int8, "s32": np.int32}

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


class HostProgram:
    """One running instance of DIR/tt_host. Use as a context manager."""

    def __init__(self, build_dir: Path) -> None:
        self.dir = Path(build_dir)
        self.info = load_program_info(self.dir)
        exe = self.dir / HOST_BINARY
        if not exe.exists():
            raise BuildError(f"{exe} is missing; rebuild with `tinytrain build`")
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        proto, self.n_in, self.n_out, self.target_bytes, self.train_bytes = struct.unpack(
            "<5I", self._call(b"H", b"", 20))
        if proto != PROTOCOL:
            raise ProgramError(f"program speaks protocol {proto}, this tinytrain speaks "
                               f"{PROTOCOL}; rebuild it")

    def __enter__(self) -> HostProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"Q")  # type: ignore[union-attr]
                self.proc.stdin.close()  # type: ignore[union-attr]
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=10)

    def _call(self, cmd: bytes, payload: bytes, reply: int) -> bytes:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(cmd + payload)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ProgramError(f"the program exited (code {self.proc.poll()})") from None
        status = self.proc.stdout.read(1)
        if status != b"\x00":
            raise ProgramError(f"the program failed on command {cmd!r} (status {status!r})")
        data = self.proc.stdout.read(reply)
        if len(data) != reply:
            raise ProgramError(f"short reply to {cmd!r}: {len(data)} of {reply} bytes")
        return data

    # ---- commands (x and targets already in IR layout, float32) ----
    def train(self, x: np.ndarray, target: np.ndarray) -> tuple[float, int, bool]:
        t = np.asarray(target, np.int32 if self.info["target_dtype"] == "s32" else np.float32)
        loss, pred, upd = struct.unpack("<fii", self._call(
            b"T", _f32(x, self.n_in) + t.tobytes(), 12))
        return loss, pred, bool(upd)

    def apply_update(self) -> None:
        self._call(b"U", b"", 0)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return np.frombuffer(self._call(b"I", _f32(x, self.n_in), 4 * self.n_out), np.float32)

    def reset(self) -> None:
        self._call(b"R", b"", 0)

    def get_params(self) -> dict[str, np.ndarray]:
        raw = self._call(b"G", b"", self.train_bytes)
        out, k = {}, 0
        for p in self.info["trainable"]:
            dt = np.dtype(NP_TYPES[p.get("dtype", "f32")])
            n = int(np.prod(p["shape"]))
            out[p["name"]] = np.frombuffer(raw, dt, n, k).reshape(p["shape"]).copy()
            k += n * dt.itemsize
        return out

    def set_params(self, params: dict[str, np.ndarray]) -> None:
        parts = []
        for p in self.info["trainable"]:
            if p["name"] not in params:
                raise ProgramError(f"state has no parameter '{p['name']}'")
            a = np.asarray(params[p["name"]], NP_TYPES[p.get("dtype", "f32")])
            if list(a.shape) != p["shape"]:
                raise ProgramError(f"parameter '{p['name']}' has shape {list(a.shape)}, the "
                                   f"program expects {p['shape']}")
            parts.append(a.tobytes())
        self._call(b"S", b"".join(parts), 0)


def _f32(x: np.ndarray, n: int) -> bytes:
    a = np.ascontiguousarray(x, np.float32).reshape(-1)
    if a.size != n:
        raise ProgramError(f"sample has {a.size} values, the program expects {n}")
    return a.tobytes()
