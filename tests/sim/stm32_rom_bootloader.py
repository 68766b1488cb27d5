"""The STM32 system-memory bootloader's USART side, after ST AN3155 and AN2606, playing an
STM32F746 (the default) or an STM32U585.

Byte for byte: nothing is answered before the 0x7F sync byte; every command byte must come with
its complement, every address with its XOR checksum, every block with N and an XOR over N and
the data, and a mismatch gets NACK (0x1F). F746: 8 sectors (1 MB), 32-bit writes. U585: 2 banks
of 128 pages of 8 KB (2 MB), Extended Erase numbers pages 0-255 across both banks, writes are
whole quad-words (16 bytes, ECC) and each quad-word is programmed once after an erase.
Programming a byte that is not erased, or a write-protected unit, gets NACK like the chip's
programming error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from operator import xor

from tests.sim import PtyDevice

ACK, NACK, SYNC = 0x79, 0x1F, 0x7F
# Get's command list on the F7 and U5 (AN3155): Get, Get Version, Get ID, Read, Go, Write,
# Extended Erase, Write/Readout Protect and Unprotect.
COMMANDS = (0x00, 0x01, 0x02, 0x11, 0x21, 0x31, 0x44, 0x63, 0x73, 0x82, 0x92)
FLASH_BASE = 0x08000000
MASS_ERASE, BANK1_ERASE, BANK2_ERASE = 0xFFFF, 0xFFFE, 0xFFFD


@dataclass(frozen=True)
class Chip:
    pid: int
    version: int  # Get's bootloader version byte (plays no part in flashing)
    units: tuple[tuple[int, int], ...]  # (start, size) of each erase unit, by erase number
    write_align: int  # flash writes: address and length multiples of this
    ram: tuple[int, int]  # SRAM the bootloader lets the host use: its own needs the first 16 KB
    bank_units: int = 0  # dual bank: units per bank (bank erases 0xFFFE/0xFFFD); 0: single
    ecc: bool = False  # each write unit can be programmed once after an erase

    @property
    def flash_size(self) -> int:
        return self.units[-1][0] + self.units[-1][1] - FLASH_BASE


SECTOR_KB = (32, 32, 32, 32, 128, 256, 256, 256)
STM32F746 = Chip(0x449, 0x31,
                 tuple((FLASH_BASE + sum(SECTOR_KB[:i]) * 1024, kb * 1024)
                       for i, kb in enumerate(SECTOR_KB)), 4, (0x20004000, 0x20050000))
PAGE = 8192
STM32U585 = Chip(0x482, 0x92, tuple((FLASH_BASE + i * PAGE, PAGE) for i in range(256)), 16,
                 (0x20004000, 0x200C0000), bank_units=128, ecc=True)
# The F746 names the tests used before the U585 came.
PID_STM32F74X = STM32F746.pid
SECTORS = list(STM32F746.units)
FLASH_SIZE = STM32F746.flash_size
RAM_BASE, RAM_END = STM32F746.ram


def _xor(data: bytes) -> int:
    return reduce(xor, data, 0)


class Stm32RomBootloader(PtyDevice):
    """Fault switches: NACK or ignore the Nth command (1-based, counted after sync) or every
    command with an opcode; flip a bit of the byte programmed at `corrupt_address`; refuse to
    erase or program `protected_sectors` (erase numbers: sectors on the F746, pages on the
    U585); report another product ID; offer only legacy Erase."""

    def __init__(self, *, chip: Chip = STM32F746, pid: int | None = None,
                 nack_commands: Iterable[int] = (),
                 silent_commands: Iterable[int] = (), nack_opcode: int | None = None,
                 silent_opcode: int | None = None, corrupt_address: int | None = None,
                 protected_sectors: Iterable[int] = (), extended_erase: bool = True) -> None:
        super().__init__()
        self.chip = chip
        self.pid = chip.pid if pid is None else pid
        self.nack_commands, self.silent_commands = set(nack_commands), set(silent_commands)
        self.nack_opcode, self.silent_opcode = nack_opcode, silent_opcode
        self.corrupt_address = corrupt_address
        self.protected_sectors = set(protected_sectors)
        self.commands = COMMANDS if extended_erase else tuple(
            0x43 if c == 0x44 else c for c in COMMANDS)
        self.flash = bytearray(b"\xff" * chip.flash_size)
        self.ram = bytearray(chip.ram[1] - chip.ram[0])
        self.programmed: set[int] = set()  # write units programmed since their erase
        self.synced = False
        self.command_count = 0
        self.accepted: list[int] = []  # opcodes of the commands ACKed
        self.nacks = 0
        self.erased_sectors: list[int] = []
        self.go_address: int | None = None

    def load(self, address: int, data: bytes) -> None:
        """Put bytes in flash directly, as an earlier firmware or checkpoint would have."""
        self.flash[address - FLASH_BASE:address - FLASH_BASE + len(data)] = data

    def flash_at(self, address: int, n: int) -> bytes:
        return bytes(self.flash[address - FLASH_BASE:address - FLASH_BASE + n])

    # ---- protocol ----

    def serve(self) -> None:
        while self.read_byte() != SYNC:  # the ROM ignores everything until it sees 0x7F
            pass
        self.synced = True
        self.write(bytes([ACK]))
        handlers = {0x00: self._get, 0x01: self._get_version, 0x02: self._get_id,
                    0x11: self._read_memory, 0x21: self._go, 0x31: self._write_memory,
                    0x44: self._extended_erase}
        while self.go_address is None:
            cmd, complement = self.read(2)
            self.command_count += 1
            if self.command_count in self.silent_commands or cmd == self.silent_opcode:
                continue
            handler = handlers.get(cmd) if cmd in self.commands else None
            if (complement != cmd ^ 0xFF or handler is None or cmd == self.nack_opcode
                    or self.command_count in self.nack_commands):
                self._nack()
                continue
            self.accepted.append(cmd)  # state changes before the ACK that reveals them
            self.write(bytes([ACK]))
            handler()
        while True:  # jumped to the application: the bootloader no longer listens
            self.read(1)

    def _nack(self) -> bool:
        self.nacks += 1
        self.write(bytes([NACK]))
        return False

    def _get(self) -> bool:
        self.write(bytes([len(self.commands), self.chip.version, *self.commands, ACK]))
        return True

    def _get_version(self) -> bool:
        self.write(bytes([self.chip.version, 0x00, 0x00, ACK]))  # option bytes: compat only
        return True

    def _get_id(self) -> bool:
        self.write(bytes([1, self.pid >> 8, self.pid & 0xFF, ACK]))
        return True

    def _address(self, *, ack: bool = True) -> int | None:
        """Read address + checksum; ACK a valid one, NACK and return None otherwise."""
        raw = self.read(4)
        checksum = self.read_byte()
        addr = int.from_bytes(raw, "big")
        if checksum != _xor(raw) or self._region(addr, 1) is None:
            self._nack()
            return None
        if ack:
            self.write(bytes([ACK]))
        return addr

    def _region(self, addr: int, n: int) -> tuple[bytearray, int] | None:
        """(memory, offset) when [addr, addr+n) lies in flash or usable RAM."""
        if FLASH_BASE <= addr and addr + n <= FLASH_BASE + self.chip.flash_size:
            return self.flash, addr - FLASH_BASE
        ram_base, ram_end = self.chip.ram
        if ram_base <= addr and addr + n <= ram_end:
            return self.ram, addr - ram_base
        return None

    def _read_memory(self) -> bool:
        addr = self._address()
        if addr is None:
            return False
        n, complement = self.read(2)
        region = self._region(addr, n + 1)
        if complement != n ^ 0xFF or region is None:
            return self._nack()
        mem, off = region
        self.write(bytes([ACK]) + bytes(mem[off:off + n + 1]))
        return True

    def _go(self) -> bool:
        addr = self._address(ack=False)
        if addr is None:
            return False
        self.go_address = addr
        self.write(bytes([ACK]))
        return True

    def _write_memory(self) -> bool:
        addr = self._address()
        if addr is None:
            return False
        n = self.read_byte()
        data = self.read(n + 1)
        checksum = self.read_byte()
        region = self._region(addr, n + 1)
        # Word programming: address and length multiples of 4 (AN3155 Write Memory); the U5
        # programs flash by quad-words, so there both are multiples of 16.
        align = self.chip.write_align if region is not None and region[0] is self.flash else 4
        if checksum != n ^ _xor(data) or region is None or addr % align or (n + 1) % align:
            return self._nack()
        mem, off = region
        if mem is self.flash:
            touched = {self._sector_of(a) for a in range(addr, addr + n + 1)}
            if touched & self.protected_sectors:
                return self._nack()  # write protection error (WRPERR)
            if any(b != 0xFF for b in mem[off:off + n + 1]):
                return self._nack()  # programming a word that was not erased
            if self.chip.ecc:
                units = set(range(addr, addr + n + 1, align))
                if units & self.programmed:
                    return self._nack()  # a quad-word programmed twice (ECC: PROGERR)
                self.programmed |= units
        mem[off:off + n + 1] = data
        if mem is self.flash and self.corrupt_address is not None \
                and addr <= self.corrupt_address < addr + n + 1:
            mem[self.corrupt_address - FLASH_BASE] ^= 0x01  # a bit that did not program
        self.write(bytes([ACK]))
        return True

    def _extended_erase(self) -> bool:
        head = self.read(2)
        n = int.from_bytes(head, "big")
        units = self.chip.units
        if n >= 0xFFF0:  # special erase: its checksum covers just these two bytes
            checksum = self.read_byte()
            per_bank = self.chip.bank_units
            special = {MASS_ERASE: range(len(units))}
            if per_bank:  # bank erases exist only on dual-bank chips (not the F746)
                special |= {BANK1_ERASE: range(per_bank), BANK2_ERASE: range(per_bank, len(units))}
            if checksum != _xor(head) or n not in special or self.protected_sectors & set(
                    special[n]):
                return self._nack()
            sectors = list(special[n])
        else:
            raw = self.read(2 * (n + 1))
            checksum = self.read_byte()
            sectors = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
            if checksum != _xor(head + raw) or any(
                    s >= len(units) or s in self.protected_sectors for s in sectors):
                return self._nack()
        for s in sectors:
            start, size = units[s]
            self.flash[start - FLASH_BASE:start - FLASH_BASE + size] = b"\xff" * size
            if self.chip.ecc:
                self.programmed -= set(range(start, start + size, self.chip.write_align))
            self.erased_sectors.append(s)
        self.write(bytes([ACK]))
        return True

    def _sector_of(self, addr: int) -> int:
        return next(i for i, (start, size) in enumerate(self.chip.units)
                    if start <= addr < start + size)
