"""Boards are data: boards/<name>.toml gives the core, memory sizes and how to build and run."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from tinytrain.errors import OptionError

BOARDS_DIR = Path(__file__).resolve().parents[1] / "boards"


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    cpu: str
    sram_bytes: int | None  # None: not limited (the host)
    flash_bytes: int | None
    cc: str
    runner: str  # "host" today; "qemu" / "serial" later


def available() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def load_board(name: str) -> Board:
    path = BOARDS_DIR / f"{name}.toml"
    if not path.exists():
        raise OptionError(f"unknown board '{name}'. Available boards: {', '.join(available())}")
    d = tomllib.loads(path.read_text())
    mem = d.get("memory", {})
    return Board(name=name, description=d.get("description", ""), cpu=d.get("cpu", ""),
                 sram_bytes=mem.get("sram_kb", 0) * 1024 or None,
                 flash_bytes=mem.get("flash_kb", 0) * 1024 or None,
                 cc=d.get("toolchain", {}).get("cc", "gcc"),
                 runner=d.get("runner", "host"))
