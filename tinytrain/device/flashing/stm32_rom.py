"""STM32 system-memory (ROM) bootloader over USART, as ST application note AN3155 specifies.

Line format 8E1. Every command is its byte and that byte's complement; every address is 4 bytes
big-endian plus their XOR; every data block is N-1, the N bytes and an XOR over both. The device
answers ACK (0x79) or NACK (0x1F) after each of those pieces.

What differs between chips is data (`Stm32Chip`): the product ID Get ID answers, the erase units
Extended Erase numbers, and the write granularity. STM32F746 (RM0385, AN2606): ID 0x449, eight
sectors of 32-256 KB, 32-bit writes. STM32U585 (RM0456, AN2606): ID 0x482, 256 pages of 8 KB in
two banks of 1 MB, numbered 0-255 across both banks (bank 2's page k is number 128 + k, with
SWAP_BANK = 0 as shipped), 16-byte (quad-word, ECC) writes, each written once after an erase.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from operator import xor
from typing import TYPE_CHECKING, TypeVar

import serial

from tinytrain.device.flashing.common import FlashError, Progress, Segment, open_serial
from tinytrain.device.flashing.elf import merge_segments

if TYPE_CHECKING:
    from tinytrain.boards import Board

SYNC = 0x7F
ACK = 0x79
NACK = 0x1F
CMD_GET = 0x00
CMD_GET_ID = 0x02
CMD_READ = 0x11
CMD_GO = 0x21
CMD_WRITE = 0x31
CMD_ERASE = 0x43  # legacy erase, one-byte page numbers: not usable on the F7 or the U5
CMD_EXT_ERASE = 0x44
REQUIRED_COMMANDS = {CMD_GET_ID: "Get ID", CMD_READ: "Read Memory", CMD_GO: "Go",
                     CMD_WRITE: "Write Memory", CMD_EXT_ERASE: "Extended Erase"}

SECTOR_ERASE_TIMEOUT_S = 4.0  # a 256 KB F7 sector erase takes up to a few seconds (datasheet)
PAGE_ERASE_TIMEOUT_S = 0.5  # an 8 KB U5 page erase takes milliseconds (DS13086)
DEFAULT_WRITE_ALIGN = 16


@dataclass(frozen=True)
class Stm32Chip:
    """What the flasher needs to know of one STM32 behind the ROM bootloader."""
    name: str
    product_id: int  # what Get ID answers (AN2606 lists it per product)
    erase_units: tuple[tuple[int, int], ...]  # (start, size); index = Extended Erase number
    write_align: int = 4  # Write Memory address and length multiple of this (and written once)
    unit: str = "sector"  # what the erase units are called in messages
    erase_timeout_s: float = SECTOR_ERASE_TIMEOUT_S  # per unit, on top of the link timeout

    @property
    def flash_base(self) -> int:
        return self.erase_units[0][0]

    @property
    def flash_end(self) -> int:
        return self.erase_units[-1][0] + self.erase_units[-1][1]

    @classmethod
    def with_sectors(cls, name: str, product_id: int, base: int, sizes: Sequence[int],
                     write_align: int = 4) -> Stm32Chip:
        starts = [base + sum(sizes[:i]) for i in range(len(sizes))]
        return cls(name, product_id, tuple(zip(starts, sizes)), write_align)

    @classmethod
    def with_pages(cls, name: str, product_id: int, base: int, end: int, page: int,
                   write_align: int = 4) -> Stm32Chip:
        return cls(name, product_id, tuple((a, page) for a in range(base, end, page)),
                   write_align, "page", PAGE_ERASE_TIMEOUT_S)

    @classmethod
    def from_board(cls, board: Board) -> Stm32Chip:
        """From boards/<name>.toml: [flash] product_id, and the [layout] erase map. Extended
        Erase numbers the units from the start of the flash (flash_base, else flash_origin)."""
        pid = board.flash.get("product_id")
        if not isinstance(pid, int):
            raise FlashError(f"board {board.name} flashes with stm32-rom but its [flash] table "
                             "has no product_id (the Get ID answer, from ST AN2606)")
        base = board.flash_base or board.flash_origin
        # The board's flash write unit (4: F7 words, 16: U5 quad-words); unknown, 16 bytes, a
        # multiple of both, whose 0xFF padding lands in erased units (they start at multiples
        # of 16).
        align = max(4, board.flash_write_unit or DEFAULT_WRITE_ALIGN)
        name = board.name.upper()
        if board.flash_sectors:
            return cls.with_sectors(name, pid, base, board.flash_sectors, align)
        if board.flash_page_bytes and board.flash_end > base:
            return cls.with_pages(name, pid, base, board.flash_end, board.flash_page_bytes, align)
        raise FlashError(f"board {board.name} has no flash erase map ([layout] "
                         "flash_sectors_kb, or flash_page_kb and flash_end)")


# STM32F74x/75x (RM0385 single bank, AXIM addresses): 4 x 32 KB, 1 x 128 KB, 3 x 256 KB sectors.
STM32F746 = Stm32Chip.with_sectors("STM32F746", 0x449, 0x08000000,
                                   [kb * 1024 for kb in (32, 32, 32, 32, 128, 256, 256, 256)])
# STM32U575/585 with 2 MB (RM0456): 2 banks x 128 pages x 8 KB; quad-word programming.
STM32U585 = Stm32Chip.with_pages("STM32U585", 0x482, 0x08000000, 0x08200000, 8192, 16)

# The F746 defaults, as before the chip became a parameter.
PID_STM32F74X = STM32F746.product_id
FLASH_BASE = STM32F746.flash_base
SECTORS = STM32F746.erase_units
FLASH_END = STM32F746.flash_end

MAX_BLOCK = 256  # AN3155: Write/Read Memory move at most 256 bytes per command
SYNC_ATTEMPTS = 5  # the first 0x7F may be eaten while the ROM measures the baud rate
BLOCK_ATTEMPTS = 3  # per command: a NACK or silence is retried this often before giving up

T = TypeVar("T")


class _Transient(Exception):
    """A NACK or a missing answer: worth another attempt."""


def flash(port: str, segments: Sequence[Segment], *, baud: int = 115200, timeout: float = 1.0,
          progress: Progress | None = None, chip: Stm32Chip = STM32F746) -> None:
    """sync, Get, Get ID, erase the covered units, write, read back and compare, Go.

    Only the erase units the image covers are erased: checkpoint slots (whole units the
    program does not use) keep their trained weights across re-flashes."""
    blocks = plan_blocks(segments, chip)
    units = covered_units(blocks, chip)
    total = 2 * sum(len(d) for _, d in blocks)  # written once and read back once
    with open_serial(port, baud=baud, timeout=timeout, parity=serial.PARITY_EVEN) as ser:
        bl = _Bootloader(ser, port, timeout)
        bl.sync()
        _version, commands = bl.retry("Get", bl.get)
        _check_commands(commands, port, chip)
        pid = bl.retry("Get ID", bl.get_id)
        if pid != chip.product_id:
            raise FlashError(f"the chip on {port} reports product ID 0x{pid:03X}, not "
                             f"0x{chip.product_id:03X} ({chip.name}); wrong board or port?")
        names = ", ".join(str(u) for u in units)
        bl.retry(f"erase of {chip.unit}(s) {names}",
                 partial(bl.extended_erase, units, chip.erase_timeout_s))
        done = 0
        for addr, data in blocks:
            bl.retry(f"write of {len(data)} bytes at 0x{addr:08X}", partial(bl.write, addr, data))
            done += len(data)
            if progress:
                progress(done, total)
        for addr, data in blocks:
            got = bl.retry(f"read-back of {len(data)} bytes at 0x{addr:08X}",
                           partial(bl.read, addr, len(data)))
            if got != data:
                i = next(i for i, (a, b) in enumerate(zip(data, got)) if a != b)
                raise FlashError(f"verify failed at 0x{addr + i:08X}: wrote 0x{data[i]:02X}, read "
                                 f"back 0x{got[i]:02X}; the flash may be worn or write-protected")
            done += len(data)
            if progress:
                progress(done, total)
        base = min(addr for addr, _ in segments)  # the vector table: initial SP, reset
        bl.retry(f"Go to 0x{base:08X}", partial(bl.go, base))


def plan_blocks(segments: Sequence[Segment], chip: Stm32Chip = STM32F746) -> list[Segment]:
    """Write blocks of at most MAX_BLOCK bytes, aligned to the chip's write unit and padded
    with erased-flash 0xFF; a write unit shared by two segments is written once, whole."""
    align = chip.write_align
    runs: list[tuple[int, int, list[Segment]]] = []  # aligned start, end, segments
    for addr, data in merge_segments(list(segments)):
        end = addr + len(data)
        if addr < chip.flash_base or end > chip.flash_end:
            raise FlashError(f"the image has bytes at 0x{addr:08X}..0x{end - 1:08X}, outside the "
                             f"{chip.name} flash 0x{chip.flash_base:08X}.."
                             f"0x{chip.flash_end - 1:08X}; was it linked for this board?")
        start, end = addr - addr % align, end + -end % align
        if runs and start <= runs[-1][1]:  # two segments share a write unit: write them together
            runs[-1] = (runs[-1][0], end, [*runs[-1][2], (addr, data)])
        else:
            runs.append((start, end, [(addr, data)]))
    blocks = []
    step = MAX_BLOCK - MAX_BLOCK % align
    for start, end, segs in runs:
        run = bytearray(b"\xff" * (end - start))
        for addr, data in segs:
            run[addr - start:addr - start + len(data)] = data
        blocks += [(start + i, bytes(run[i:i + step])) for i in range(0, len(run), step)]
    return blocks


def covered_units(blocks: Sequence[Segment], chip: Stm32Chip = STM32F746) -> list[int]:
    """Extended Erase numbers of the units holding any byte of `blocks`, ascending."""
    return [n for n, (u_start, u_size) in enumerate(chip.erase_units)
            if any(addr < u_start + u_size and addr + len(d) > u_start for addr, d in blocks)]



def _check_commands(commands: bytes, port: str, chip: Stm32Chip) -> None:
    missing = [name for cmd, name in REQUIRED_COMMANDS.items() if cmd not in commands]
    if CMD_EXT_ERASE not in commands and CMD_ERASE in commands:
        raise FlashError(f"the bootloader on {port} offers only the legacy Erase (0x43), not "
                         f"Extended Erase (0x44) which the {chip.name} needs; is this an "
                         f"{chip.name}?")
    if missing:
        raise FlashError(f"the bootloader on {port} does not support {', '.join(missing)}; "
                         "is read protection (RDP) active?")


def _checksum(data: bytes) -> int:
    return reduce(xor, data, 0)


class _Bootloader:
    """One AN3155 session: each method is one command, raising _Transient on NACK or silence."""

    def __init__(self, ser: serial.SerialBase, port: str, timeout: float) -> None:
        self.ser, self.port, self.timeout = ser, port, timeout

    def retry(self, what: str, op: Callable[[], T]) -> T:
        last = ""
        for _ in range(BLOCK_ATTEMPTS):
            try:
                return op()
            except _Transient as e:
                last = str(e)
                self.ser.reset_input_buffer()  # drop a late answer to the failed attempt
        raise FlashError(f"STM32 bootloader on {self.port}: {what} failed after {BLOCK_ATTEMPTS} "
                         f"attempts ({last})")

    def sync(self) -> None:
        for _ in range(SYNC_ATTEMPTS):
            self.ser.reset_input_buffer()
            self.ser.write(bytes([SYNC]))
            # NACK: the bootloader was already synced and read our 0x7F pair as a bad command.
            if self.ser.read(1) in (bytes([ACK]), bytes([NACK])):
                return
        raise FlashError(f"no answer from the STM32 ROM bootloader on {self.port} after "
                         f"{SYNC_ATTEMPTS} sync bytes; hold BOOT0 high, reset the board and retry")

    def get(self) -> tuple[int, bytes]:
        self._command(CMD_GET)
        reply = self._read(self._read(1)[0] + 1)
        self._ack("Get")
        return reply[0], reply[1:]

    def get_id(self) -> int:
        self._command(CMD_GET_ID)
        pid = self._read(self._read(1)[0] + 1)
        self._ack("Get ID")
        return int.from_bytes(pid, "big")

    def extended_erase(self, units: Sequence[int], timeout_per_unit: float) -> None:
        self._command(CMD_EXT_ERASE)
        payload = (len(units) - 1).to_bytes(2, "big") + b"".join(
            u.to_bytes(2, "big") for u in units)
        self.ser.write(payload + bytes([_checksum(payload)]))
        self.ser.timeout = self.timeout + timeout_per_unit * len(units)
        try:
            self._ack("erase")
        finally:
            self.ser.timeout = self.timeout

    def write(self, addr: int, data: bytes) -> None:
        self._command(CMD_WRITE)
        self._address(addr)
        block = bytes([len(data) - 1]) + data
        self.ser.write(block + bytes([_checksum(block)]))
        self._ack("data block")

    def read(self, addr: int, n: int) -> bytes:
        self._command(CMD_READ)
        self._address(addr)
        self.ser.write(bytes([n - 1, (n - 1) ^ 0xFF]))
        self._ack("byte count")
        return self._read(n)

    def go(self, addr: int) -> None:
        self._command(CMD_GO)
        self._address(addr)

    def _command(self, cmd: int) -> None:
        self.ser.write(bytes([cmd, cmd ^ 0xFF]))
        self._ack(f"command 0x{cmd:02X}")

    def _address(self, addr: int) -> None:
        raw = addr.to_bytes(4, "big")
        self.ser.write(raw + bytes([_checksum(raw)]))
        self._ack("address")

    def _ack(self, what: str) -> None:
        b = self.ser.read(1)
        if b == bytes([ACK]):
            return
        if b == bytes([NACK]):
            raise _Transient(f"NACK to the {what}")
        if not b:
            raise _Transient(f"no answer to the {what} within {self.ser.timeout:g} s")
        raise _Transient(f"unexpected byte 0x{b[0]:02X} instead of ACK to the {what}")

    def _read(self, n: int) -> bytes:
        data = self.ser.read(n)
        if len(data) != n:
            raise _Transient(f"reply cut short: {len(data)} of {n} bytes")
        return data
