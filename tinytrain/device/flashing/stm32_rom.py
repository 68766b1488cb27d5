"""STM32F746 system-memory (ROM) bootloader over USART, as ST application note AN3155 specifies.

Line format 8E1. Every command is its byte and that byte's complement; every address is 4 bytes
big-endian plus their XOR; every data block is N-1, the N bytes and an XOR over both. The device
answers ACK (0x79) or NACK (0x1F) after each of those pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial, reduce
from operator import xor
from typing import TypeVar

import serial

from tinytrain.device.flashing.common import FlashError, Progress, Segment, open_serial
from tinytrain.device.flashing.elf import merge_segments

SYNC = 0x7F
ACK = 0x79
NACK = 0x1F
CMD_GET = 0x00
CMD_GET_ID = 0x02
CMD_READ = 0x11
CMD_GO = 0x21
CMD_WRITE = 0x31
CMD_ERASE = 0x43  # legacy erase, one-byte page numbers: not usable on the F7
CMD_EXT_ERASE = 0x44
REQUIRED_COMMANDS = {CMD_GET_ID: "Get ID", CMD_READ: "Read Memory", CMD_GO: "Go",
                     CMD_WRITE: "Write Memory", CMD_EXT_ERASE: "Extended Erase"}

PID_STM32F74X = 0x449  # STM32F74x/75x, the product ID the Get ID command returns
FLASH_BASE = 0x08000000
# (start, size) of each STM32F746 flash sector (RM0385, single bank, AXIM addresses).
SECTOR_SIZES_KB = (32, 32, 32, 32, 128, 256, 256, 256)
SECTORS: tuple[tuple[int, int], ...] = tuple(
    (FLASH_BASE + sum(SECTOR_SIZES_KB[:i]) * 1024, kb * 1024)
    for i, kb in enumerate(SECTOR_SIZES_KB))
FLASH_END = SECTORS[-1][0] + SECTORS[-1][1]
# Sectors 6 and 7 keep training checkpoints across re-flashes: never erased unless the image
# itself lies in them (we only ever erase the sectors an image covers).
CHECKPOINT_SECTORS = (6, 7)

MAX_BLOCK = 256  # AN3155: Write/Read Memory move at most 256 bytes per command
WRITE_ALIGN = 4  # the bootloader programs 32-bit words: address and length multiples of 4
SYNC_ATTEMPTS = 5  # the first 0x7F may be eaten while the ROM measures the baud rate
BLOCK_ATTEMPTS = 3  # per command: a NACK or silence is retried this often before giving up
ERASE_TIMEOUT_PER_SECTOR_S = 4.0  # a 256 KB sector erase takes up to a few seconds (datasheet)

T = TypeVar("T")


class _Transient(Exception):
    """A NACK or a missing answer: worth another attempt."""


def flash(port: str, segments: Sequence[Segment], *, baud: int = 115200, timeout: float = 1.0,
          progress: Progress | None = None) -> None:
    """sync, Get, Get ID, erase the covered sectors, write, read back and compare, Go."""
    blocks = plan_blocks(segments)
    sectors = covered_sectors(blocks)
    total = 2 * sum(len(d) for _, d in blocks)  # written once and read back once
    with open_serial(port, baud=baud, timeout=timeout, parity=serial.PARITY_EVEN) as ser:
        bl = _Bootloader(ser, port, timeout)
        bl.sync()
        _version, commands = bl.retry("Get", bl.get)
        _check_commands(commands, port)
        pid = bl.retry("Get ID", bl.get_id)
        if pid != PID_STM32F74X:
            raise FlashError(f"the chip on {port} reports product ID 0x{pid:03X}, not "
                             f"0x{PID_STM32F74X:03X} (STM32F74x/75x); wrong board or port?")
        names = ", ".join(str(s) for s in sectors)
        bl.retry(f"erase of sector(s) {names}", partial(bl.extended_erase, sectors))
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


def plan_blocks(segments: Sequence[Segment]) -> list[Segment]:
    """Word-aligned write blocks of at most MAX_BLOCK bytes, padded with erased-flash 0xFF."""
    runs: list[tuple[int, int, list[Segment]]] = []  # word-aligned start, end, segments
    for addr, data in merge_segments(list(segments)):
        end = addr + len(data)
        if addr < FLASH_BASE or end > FLASH_END:
            raise FlashError(f"the image has bytes at 0x{addr:08X}..0x{end - 1:08X}, outside the "
                             f"STM32F746 flash 0x{FLASH_BASE:08X}..0x{FLASH_END - 1:08X}; was it "
                             "linked for this board?")
        start, end = addr - addr % WRITE_ALIGN, end + -end % WRITE_ALIGN
        if runs and start <= runs[-1][1]:  # two segments share a word: write them together
            runs[-1] = (runs[-1][0], end, [*runs[-1][2], (addr, data)])
        else:
            runs.append((start, end, [(addr, data)]))
    blocks = []
    for start, end, segs in runs:
        run = bytearray(b"\xff" * (end - start))
        for addr, data in segs:
            run[addr - start:addr - start + len(data)] = data
        blocks += [(start + i, bytes(run[i:i + MAX_BLOCK])) for i in range(0, len(run), MAX_BLOCK)]
    return blocks


def covered_sectors(blocks: Sequence[Segment]) -> list[int]:
    """Numbers of the sectors holding any byte of `blocks`, ascending."""
    return [n for n, (s_start, s_size) in enumerate(SECTORS)
            if any(addr < s_start + s_size and addr + len(d) > s_start for addr, d in blocks)]


def _check_commands(commands: bytes, port: str) -> None:
    missing = [name for cmd, name in REQUIRED_COMMANDS.items() if cmd not in commands]
    if CMD_EXT_ERASE not in commands and CMD_ERASE in commands:
        raise FlashError(f"the bootloader on {port} offers only the legacy Erase (0x43), not "
                         "Extended Erase (0x44) which the STM32F7 needs; is this an STM32F7?")
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

    def extended_erase(self, sectors: Sequence[int]) -> None:
        self._command(CMD_EXT_ERASE)
        payload = (len(sectors) - 1).to_bytes(2, "big") + b"".join(
            s.to_bytes(2, "big") for s in sectors)
        self.ser.write(payload + bytes([_checksum(payload)]))
        self.ser.timeout = self.timeout + ERASE_TIMEOUT_PER_SECTOR_S * len(sectors)
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
