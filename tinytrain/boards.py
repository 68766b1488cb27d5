"""Boards are data: boards/<name>.toml gives the core, memory map, toolchain, QEMU twin and
flashing protocol; boards/<dir>/board.c is the only board-specific C (clock, UART, flash)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from tinytrain.assets import asset_dir
from tinytrain.errors import OptionError

BOARDS_DIR = asset_dir("boards")
# The QEMU twins' board layer: CMSDK UART, SysTick, RAM-backed "flash" (boards/qemu/mps2.c).
QEMU_SOURCE = "qemu/mps2.c"


# The MPS2 machines' SysTick runs at 25 MHz: under -icount shift=0 (1 instruction per ns) one
# tick is 40 instructions. The SSE-200 machines (mps2-an505) clock it at 20 MHz.
MPS2_SYSCLK_HZ = 25_000_000
MPS2_UART0 = 0x40004000  # CMSDK APB UART0 of the MPS2 FPGA images (AN385, AN386, AN500)


@dataclass(frozen=True)
class QemuTwin:
    machine: str
    flash_origin: int  # where the board's flash appears in the twin (its code memory)
    ram_origin: int | None = None  # where its RAM is, when not at the board's address
    uart_base: int = MPS2_UART0  # the CMSDK UART the link uses
    sysclk_hz: int = MPS2_SYSCLK_HZ  # SysTick's processor clock

    @property
    def instructions_per_tick(self) -> float:
        """Instructions one SysTick tick counts under -icount shift=0 (1 instruction per ns)."""
        return 1e9 / self.sysclk_hz


# firmware/tt_checkpoint.h: a slot holds a 32-byte header, then each parameter and each entry
# of the training state padded to the flash write unit (4 bytes on most boards; the STM32U5
# programs 16-byte quad-words).
CKPT_HEADER_BYTES, CKPT_WRITE_UNIT = 32, 4


@dataclass(frozen=True)
class FlashLayout:
    """Where the two checkpoint slots and the program go on a board's flash."""
    slots: tuple[int, int]  # slot addresses
    slot_bytes: int
    regions: tuple[tuple[int, int], ...]  # (origin, bytes) the program may use, in order
    with_state: bool = True  # the slots hold the training state too, not only the parameters

    @property
    def program_bytes(self) -> int:
        return sum(n for _, n in self.regions)

    def shifted(self, delta: int) -> FlashLayout:
        """The same layout in a QEMU twin whose flash sits `delta` bytes from the board's."""
        return FlashLayout((self.slots[0] + delta, self.slots[1] + delta), self.slot_bytes,
                           tuple((o + delta, n) for o, n in self.regions), self.with_state)


def checkpoint_bytes(entry_bytes: list[int], unit: int = CKPT_WRITE_UNIT) -> int:
    """Bytes a checkpoint of these entries (parameters, state) occupies in its slot, each
    padded to the flash write unit."""
    return CKPT_HEADER_BYTES + sum(-(-n // unit) * unit for n in entry_bytes)


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
    flash_origin: int = 0  # where the program starts
    flash_base: int = 0  # where the chip's flash starts (below flash_origin: a bootloader's)
    flash_write_unit: int = CKPT_WRITE_UNIT  # bytes the flash programs at once
    flash_sectors: tuple[int, ...] = ()  # erase units in bytes from flash_origin (STM32 style)
    # where each of flash_sectors starts, when the code memories are not one run from
    # flash_origin ([layout] flash_banks: an FPGA image's ITCM and code SRAM); () = contiguous
    flash_sector_starts: tuple[int, ...] = ()
    flash_page_bytes: int = 0  # or uniform pages up to flash_end (nRF style)
    flash_end: int = 0
    stack_bytes: int = 0
    # instructions per fp32 MAC on a core without an FPU (libgcc's soft-float), measured
    soft_float_per_mac: float = 0.0
    # the channel-streamed 1x1 backward's multiply-adds fused by default (Helium's float lanes:
    # VFMA is their only multiply-accumulate; TT_F32_FMA in runtime_c/reference/tt_reference.h)
    fp32_fma: bool = False
    qemu: QemuTwin | None = None
    flash: dict[str, object] = field(default_factory=dict)
    toml: str = ""  # the board file's path when it lies outside the package

    @property
    def is_mcu(self) -> bool:
        return self.runner == "mcu"

    @property
    def ref(self) -> str:
        """What load_board() takes to load this board again (program.json keeps it)."""
        return self.toml or self.name

    def source_file(self, rel: str) -> Path:
        """A board-layer file: beside an outside board file if it is there, else the
        package's (an outside board may reuse boards/stm32f746/board.c)."""
        if self.toml and (Path(self.toml).parent / rel).exists():
            return Path(self.toml).parent / rel
        return BOARDS_DIR / rel

    def checkpoint_layout(self, param_bytes: list[int], state_bytes: list[int]) -> FlashLayout:
        """Slots for the parameters and the training state; where the flash cannot hold
        that, for the parameters alone (the firmware then checkpoints only those)."""
        try:
            return replace(self.flash_layout(self.checkpoint_bytes(param_bytes + state_bytes)),
                           with_state=bool(state_bytes))
        except OptionError:
            return replace(self.flash_layout(self.checkpoint_bytes(param_bytes)),
                           with_state=False)

    def checkpoint_bytes(self, entry_bytes: list[int]) -> int:
        """Bytes a checkpoint of these entries takes in one of this board's slots."""
        return checkpoint_bytes(entry_bytes, self.flash_write_unit)

    def flash_layout(self, ckpt_bytes: int) -> FlashLayout:
        """Two checkpoint slots of whole erase units big enough for `ckpt_bytes`, using as
        little flash as the erase map allows; the program gets the rest."""
        if self.flash_page_bytes:  # uniform pages: both slots right below flash_end
            size = max(1, -(-ckpt_bytes // self.flash_page_bytes)) * self.flash_page_bytes
            s1 = self.flash_end - size
            s0 = s1 - size
            if s0 <= self.flash_origin:
                raise OptionError(f"{ckpt_bytes / 1024:.1f} KB of trainable parameters leave "
                                  f"no flash for the program on {self.name}")
            return FlashLayout((s0, s1), size, ((self.flash_origin, s0 - self.flash_origin),))
        n = len(self.flash_sectors)
        starts = list(self.flash_sector_starts) or [
            self.flash_origin + sum(self.flash_sectors[:k]) for k in range(n)]
        ends = [a + z for a, z in zip(starts, self.flash_sectors, strict=True)]
        starts.append(ends[-1] if ends else self.flash_origin)  # a run's end: starts[j]
        runs = [(i, j) for i in range(1, n)  # sector 0 holds the vectors
                for j in range(i + 1, n + 1)
                if all(ends[k] == starts[k + 1] for k in range(i, j - 1))  # one memory
                and ends[j - 1] - starts[i] >= ckpt_bytes]
        best = None  # (flash the slots take, -(end of the later slot)) smallest first
        for a in runs:
            for b in runs:
                if a[1] <= b[0]:
                    used = starts[a[1]] - starts[a[0]] + starts[b[1]] - starts[b[0]]
                    key = (used, -b[1], -a[1])
                    if best is None or key < best[0]:
                        best = (key, a, b)
        if best is None:
            raise OptionError(f"{ckpt_bytes / 1024:.1f} KB of trainable parameters do not fit "
                              f"two checkpoint slots in {self.name}'s flash")
        _, a, b = best
        # both slots hold at least `size`; an erase clears every sector starting in the slot
        size = min(starts[a[1]] - starts[a[0]], starts[b[1]] - starts[b[0]])
        taken = set(range(*a)) | set(range(*b))
        regions: list[tuple[int, int]] = []
        for k in range(len(self.flash_sectors)):
            if k in taken:
                continue
            if regions and regions[-1][0] + regions[-1][1] == starts[k]:
                regions[-1] = (regions[-1][0], regions[-1][1] + self.flash_sectors[k])
            else:
                regions.append((starts[k], self.flash_sectors[k]))
        return FlashLayout((starts[a[0]], starts[b[0]]), size, tuple(regions))


def _sectors(lay: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The erase map: flash_sectors_kb (sizes, one run from flash_origin), or flash_banks,
    [origin, KB, sector KB] per memory, for code memories apart from each other (with where
    each sector starts)."""
    if "flash_banks" not in lay:
        return tuple(k * 1024 for k in lay.get("flash_sectors_kb", ())), ()
    sizes, starts = [], []
    for origin, kb, sector_kb in lay["flash_banks"]:
        for k in range(kb // sector_kb):
            sizes.append(sector_kb * 1024)
            starts.append(origin + k * sector_kb * 1024)
    return tuple(sizes), tuple(starts)


def available() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml"))


def load_board(name: str) -> Board:
    """A board of the package by name, or a board file of the user's (a path ending in
    .toml, whose `source` is looked up beside it first)."""
    outside = name.endswith(".toml")
    path = Path(name).resolve() if outside else BOARDS_DIR / f"{name}.toml"
    if not path.exists():
        if outside:
            raise OptionError(f"board file {name} does not exist")
        raise OptionError(f"unknown board '{name}'. Available boards: {', '.join(available())}"
                          " (or give the path of a board file, NAME.toml)")
    try:
        d = tomllib.loads(path.read_text())
        mem, lay, tc = d.get("memory", {}), d.get("layout", {}), d.get("toolchain", {})
        q = d.get("qemu")
        sectors, sector_starts = _sectors(lay)
        twin = None if q is None else QemuTwin(
            q["machine"], q["flash_origin"], q.get("ram_origin"),
            q.get("uart_base", MPS2_UART0), q.get("sysclk_hz", MPS2_SYSCLK_HZ))
        return Board(
            name=path.stem, toml=str(path) if outside else "",
            description=d.get("description", ""), cpu=d.get("cpu", ""),
            sram_bytes=mem.get("sram_kb", 0) * 1024 or None,
            flash_bytes=mem.get("flash_kb", 0) * 1024 or None,
            cc=tc.get("cc", "gcc"), runner=d.get("runner", "host"),
            clock_hz=d.get("clock_hz", 0), cflags=tuple(tc.get("cflags", ())),
            source=tc.get("source", ""), ram_origin=lay.get("ram_origin", 0),
            flash_origin=lay.get("flash_origin", 0),
            flash_base=lay.get("flash_base", lay.get("flash_origin", 0)),
            flash_write_unit=lay.get("flash_write_unit", CKPT_WRITE_UNIT),
            flash_sectors=sectors, flash_sector_starts=sector_starts,
            flash_page_bytes=lay.get("flash_page_kb", 0) * 1024,
            flash_end=lay.get("flash_end", 0),
            stack_bytes=lay.get("stack_kb", 0) * 1024,
            soft_float_per_mac=tc.get("soft_float_instructions_per_mac", 0.0),
            fp32_fma=bool(tc.get("fp32_fma", False)), qemu=twin,
            flash=d.get("flash", {}))
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise OptionError(f"board file {path} is invalid: {e}") from None


# SRAM the linked firmware holds besides the plan: the link's counters, and newlib's
# reentrancy struct (~1.1 KB) when libm's errno pulls it in; the firmware tests bound it by
# 2 KB (tests/test_boards.py UNPLANNED_SRAM), so a plan within capacity - 2 KB links.
UNPLANNED_SRAM_ALLOWANCE = 2048


def sram_limits(board: Board, max_sram: int | None) -> list[tuple[int, str]]:
    """The SRAM figures a plan must stay within, each with where it comes from: --max-sram,
    and a board's capacity less what the linked firmware holds besides the plan (its statics,
    newlib's data, alignment: a few hundred bytes, measured on every build as unplanned_sram)."""
    limits = []
    if max_sram is not None:
        limits.append((max_sram, f"--max-sram {max_sram / 1024:g} KB"))
    if board.sram_bytes is not None:
        allowance = UNPLANNED_SRAM_ALLOWANCE if board.is_mcu else 0
        limits.append((board.sram_bytes - allowance,
                       f"{board.name}'s {board.sram_bytes // 1024} KB of SRAM"
                       + (f" less {allowance} B for the firmware's own statics, newlib and "
                          "alignment" if allowance else "")))
    return limits
