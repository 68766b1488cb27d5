"""Boards are data: boards/<name>.toml gives the core, memory map, toolchain, QEMU twin and
flashing protocol; boards/<dir>/board.c is the only board-specific C (clock, UART, flash)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tinytrain.errors import OptionError

BOARDS_DIR = Path(__file__).resolve().parents[1] / "boards"
# The QEMU twins' board layer: CMSDK UART, SysTick, RAM-backed "flash" (boards/qemu/mps2.c).
QEMU_SOURCE = "qemu/mps2.c"


@dataclass(frozen=True)
class QemuTwin:
    machine: str
    flash_origin: int
    checkpoint_slots: tuple[int, int]


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    cpu: str
    sram_bytes: int | None  # None: not limited (the host)
    flash_bytes: int | None
    cc: str
    runner: str  # "host": a native binary on this machine; "mcu": firmware for a Cortex-M
    clock_hz: int = 0
    cflags: tuple[str, ...] = ()
    source: str = ""  # board layer, relative to boards/
    ram_origin: int = 0
    flash_origin: int = 0
    app_flash_bytes: int | None = None  # flash the program may use (the rest: slots, loaders)
    checkpoint_slots: tuple[int, ...] = ()
    checkpoint_slot_bytes: int = 0
    stack_bytes: int = 0
    qemu: QemuTwin | None = None
    flash: dict[str, object] = field(default_factory=dict)

    @property
    def is_mcu(self) -> bool:
        return self.runner == "mcu"


def available() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def load_board(name: str) -> Board:
    path = BOARDS_DIR / f"{name}.toml"
    if not path.exists():
        raise OptionError(f"unknown board '{name}'. Available boards: {', '.join(available())}")
    try:
        d = tomllib.loads(path.read_text())
        mem, lay, tc = d.get("memory", {}), d.get("layout", {}), d.get("toolchain", {})
        q = d.get("qemu")
        twin = None if q is None else QemuTwin(q["machine"], q["flash_origin"],
                                               tuple(q["checkpoint_slots"]))
        app_kb = lay.get("app_flash_kb")
        return Board(
            name=name, description=d.get("description", ""), cpu=d.get("cpu", ""),
            sram_bytes=mem.get("sram_kb", 0) * 1024 or None,
            flash_bytes=mem.get("flash_kb", 0) * 1024 or None,
            cc=tc.get("cc", "gcc"), runner=d.get("runner", "host"),
            clock_hz=d.get("clock_hz", 0), cflags=tuple(tc.get("cflags", ())),
            source=tc.get("source", ""), ram_origin=lay.get("ram_origin", 0),
            flash_origin=lay.get("flash_origin", 0),
            app_flash_bytes=None if app_kb is None else app_kb * 1024,
            checkpoint_slots=tuple(lay.get("checkpoint_slots", ())),
            checkpoint_slot_bytes=lay.get("checkpoint_slot_kb", 0) * 1024,
            stack_bytes=lay.get("stack_kb", 0) * 1024, qemu=twin, flash=d.get("flash", {}))
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise OptionError(f"board file {path} is invalid: {e}") from None
