"""UF2 files for the Raspberry Pi Pico boards, written and read here, and putting one on a board.

UF2 (Microsoft, https://github.com/microsoft/uf2, README "File format") is a sequence of
independent 512-byte blocks, all fields little-endian 32-bit words:

    0   magicStart0 0x0A324655 ("UF2\\n")    16  payloadSize          28  familyID (flag 0x2000)
    4   magicStart1 0x9E5D5157               20  blockNo, from 0          (else fileSize / 0)
    8   flags                                24  numBlocks in the file  32  data[476], padded
    12  targetAddr                                                          with zeros
                                                                        508 magicEnd 0x0AB16F30

The RP2040 and RP2350 boot ROMs (BOOTSEL mode: a USB drive named RPI-RP2 or RP2350, or
`picotool load`) take only blocks with the familyID flag and their own family ID, a 256-byte
payload and, for flash, a 256-byte aligned target address; they always write the whole
256-byte page, and restart the chip once every block of the file has arrived. Pages the ELF
fills only in part are padded with zeros, as the spec pads the data field.

RP2040 erratum RP2040-E14 (pico-bootrom-rp2040 virtual_disk.c, raspberrypi/pico-sdk#763): the
RP2040 ROM decides whether to erase a 4 KB flash sector from the block *number* (blockNo * 256 /
4096), not from the address, so a file whose sectors are not each a run of 16 consecutive blocks
(an image starting mid-sector, or with a gap, as .data's load image after .text can leave) gets
sectors written without erase or erased after being written. For RP2040 files every touched
sector is therefore filled with zero pages from its start (up to the image's last page), as
picotool's elf2uf2 does; the ROM erases those sectors anyway. The RP2350 ROM tracks erased
sectors by address (pico-bootrom-rp2350 usb_virtual_disk.c), so its files carry only the pages
the ELF fills.

RP2350 erratum RP2350-E10, "UF2 drag & drop doesn't work with partition tables" (A2 silicon):
with a partition table in flash, the A2 ROM looks the family's target partition up by reading
flash while the flash is still in whatever XIP mode it was left in, before the download's first
task has exited XIP (our reading of the A2 ROM's source, raspberrypi/pico-bootrom-rp2350
usb_virtual_disk.c and varm_nsboot.c, and of raspberrypi/pico-feedback#495). The Pico SDK's
workaround (picotool `uf2 convert --abs-block`) puts one extra block first: family "absolute"
0xE48BFF57, 256 bytes of 0xEF at 0x10FFFF00, block 0 of numBlocks 2 (a transfer that never
completes, so the chip does not restart on it), tagged with the RP2 "ignore block" extension
0x9957E304. Absolute blocks need no partition lookup; writing it takes the flash out of XIP, and
the real image then starts a new transfer. We do not add it by default: tinytrain images run
unpartitioned from 0x10000000 and write no partition table (a board with one needs it erased,
e.g. `picotool erase`, before our firmware runs correctly), and on the Pico 2's 4 MB flash
0x10FFFF00 wraps to the last 4 KB sector, where our second checkpoint slot lives: the ROM erases
that sector to write the block, and trained weights with it (as users of the SDK's default
found: awalol/DS5Dongle#244). `elf_to_uf2(..., e10_block=ADDRESS)` adds it for anyone who needs
it, at an address they choose.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tinytrain.device.flashing.common import FlashError, Segment
from tinytrain.device.flashing.elf import load_elf

MAGIC_START0 = 0x0A324655
MAGIC_START1 = 0x9E5D5157
MAGIC_END = 0x0AB16F30
FLAG_NOT_MAIN_FLASH = 0x00000001
FLAG_FILE_CONTAINER = 0x00001000
FLAG_FAMILY_ID = 0x00002000
FLAG_MD5 = 0x00004000
FLAG_EXTENSION_TAGS = 0x00008000
BLOCK_SIZE = 512
DATA_SIZE = 476
PAGE = 256  # payload of every block we write: the RP2040/RP2350 flash page
SECTOR = 4096  # QSPI flash erase sector
HEADER = struct.Struct("<8I")  # magic0 magic1 flags addr payload_size block_no num_blocks family
END = struct.Struct("<I")

RP2040 = 0xE48BFF56
RP2XXX_ABSOLUTE = 0xE48BFF57
RP2XXX_DATA = 0xE48BFF58
RP2350_ARM_S = 0xE48BFF59
RP2350_RISCV = 0xE48BFF5A
RP2350_ARM_NS = 0xE48BFF5B
FAMILY_NAMES = {RP2040: "RP2040", RP2XXX_ABSOLUTE: "RP2 absolute", RP2XXX_DATA: "RP2 data",
                RP2350_ARM_S: "RP2350 Arm Secure", RP2350_RISCV: "RP2350 RISC-V",
                RP2350_ARM_NS: "RP2350 Arm Non-secure"}
XIP_FLASH = (0x10000000, 0x11000000)  # both chips' 16 MB QSPI flash window
E10_FILL = 0xEF
E10_IGNORE_TAG = 0x9957E304  # RP2 extension tag "ignore block": size byte 4, type 0x9957E3

UF2_NAME = "firmware.uf2"
INFO_FILE = "INFO_UF2.TXT"  # every UF2 boot drive has it (spec, "Files exposed by bootloaders")
# Board-ID line of the boot ROMs' INFO_UF2.TXT, by the family their ROM accepts
ROM_BOARD_IDS = {"RPI-RP2": (RP2040,),
                 "RP2350": (RP2350_ARM_S, RP2350_RISCV, RP2350_ARM_NS, RP2XXX_ABSOLUTE)}
PICOTOOL_TIMEOUT_S = 300.0
BOOTSEL_HINT = ("hold the board's BOOTSEL button while plugging it in (it shows up as a USB drive "
                "named RPI-RP2 or RP2350), or install picotool, or pass --drive PATH")


def family_name(family: int | None) -> str:
    if family is None:
        return "no family ID"
    name = FAMILY_NAMES.get(family)
    return f"0x{family:08X}" + (f" ({name})" if name else "")


# ---- writing ------------------------------------------------------------------------------------


def elf_to_uf2(elf: Path, family_id: int, *, e10_block: int | None = None) -> bytes:
    """The loadable bytes of `elf` (PT_LOAD file bytes at their load addresses) as a UF2 file:
    256-byte pages at 256-byte aligned addresses, one block each, family `family_id`.
    `e10_block`: address of an RP2350-E10 workaround block to put first (see the module doc)."""
    return segments_to_uf2(load_elf(elf), family_id, e10_block=e10_block)


def segments_to_uf2(segments: Sequence[Segment], family_id: int, *,
                    e10_block: int | None = None) -> bytes:
    """(address, bytes) segments as a UF2 file; see `elf_to_uf2`."""
    if not 0 <= family_id < 1 << 32:
        raise FlashError(f"UF2 family ID {family_id} is not a 32-bit number")
    pages: dict[int, bytearray] = {}
    for addr, data in segments:
        pos = 0
        while pos < len(data):
            page = (addr + pos) & ~(PAGE - 1)
            off = addr + pos - page
            n = min(PAGE - off, len(data) - pos)
            buf = pages.setdefault(page, bytearray(PAGE))
            buf[off:off + n] = data[pos:pos + n]
            pos += n
    if not pages:
        raise FlashError("the firmware image is empty: nothing to put in a UF2 file")
    in_flash = [XIP_FLASH[0] <= p < XIP_FLASH[1] for p in pages]
    if family_id in FAMILY_NAMES and any(in_flash) and not all(in_flash):
        raise FlashError("the image mixes flash (0x10000000...) and RAM addresses; the boot ROM "
                         "takes a UF2 file for one or the other")
    if family_id == RP2040 and all(in_flash):
        last = max(pages)
        for sector in {p & ~(SECTOR - 1) for p in pages}:  # RP2040-E14: whole sectors
            for p in range(sector, min(sector + SECTOR, last), PAGE):
                pages.setdefault(p, bytearray(PAGE))
    out = bytearray()
    if e10_block is not None:
        if e10_block % PAGE or not XIP_FLASH[0] <= e10_block < XIP_FLASH[1]:
            raise FlashError(f"RP2350-E10 block address 0x{e10_block:X} must be a 256-byte "
                             "aligned flash address (0x10000000-0x10FFFF00)")
        tag = struct.pack("<II", E10_IGNORE_TAG, 0)  # the tag, then the end-of-tags marker
        out += _block(FLAG_FAMILY_ID | FLAG_EXTENSION_TAGS, e10_block, bytes([E10_FILL]) * PAGE,
                      0, 2, RP2XXX_ABSOLUTE, tag)
    order = sorted(pages)
    for n, page in enumerate(order):
        out += _block(FLAG_FAMILY_ID, page, bytes(pages[page]), n, len(order), family_id)
    return bytes(out)


def _block(flags: int, addr: int, payload: bytes, block_no: int, num_blocks: int, family: int,
           extra: bytes = b"") -> bytes:
    data = payload + extra
    return (HEADER.pack(MAGIC_START0, MAGIC_START1, flags, addr, len(payload), block_no,
                        num_blocks, family)
            + data + bytes(DATA_SIZE - len(data)) + END.pack(MAGIC_END))


def write_uf2(elf: Path, family_id: int, out: Path | None = None) -> Path:
    """Write the UF2 file of `elf` next to it (or to `out`), replacing any older one at once."""
    out = out or elf.with_name(UF2_NAME)
    data = elf_to_uf2(elf, family_id)
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    except OSError as e:
        raise FlashError(f"cannot write {out}: {e.strerror}") from None
    return out


# ---- reading ------------------------------------------------------------------------------------


def parse_uf2(data: bytes) -> list[tuple[int, bytes, int | None]]:
    """The (target address, payload, family ID or None) of every block of a UF2 file meant for
    main flash, in file order. Raises FlashError on a malformed file: not whole 512-byte blocks,
    a wrong magic number, a payload that does not fit its block, block numbers that are not
    0..numBlocks-1 once each (per family and numBlocks, so concatenated files are fine; the
    RP2350-E10 block is the one accepted partial transfer)."""
    if not data:
        raise FlashError("the UF2 file is empty")
    if len(data) % BLOCK_SIZE:
        raise FlashError(f"the UF2 file is {len(data)} bytes, not a whole number of "
                         f"{BLOCK_SIZE}-byte blocks: truncated or not a UF2 file")
    blocks: list[tuple[int, bytes, int | None]] = []
    seen: dict[tuple[int | None, int], set[int]] = {}
    e10: set[tuple[int | None, int]] = set()
    for i in range(len(data) // BLOCK_SIZE):
        at = i * BLOCK_SIZE
        m0, m1, flags, addr, size, block_no, num_blocks, field = HEADER.unpack_from(data, at)
        (m_end,) = END.unpack_from(data, at + BLOCK_SIZE - END.size)
        where = f"UF2 block {i} (file offset {at})"
        if (m0, m1) != (MAGIC_START0, MAGIC_START1):
            raise FlashError(f"{where} has start magic 0x{m0:08X} 0x{m1:08X}, expected "
                             f"0x{MAGIC_START0:08X} 0x{MAGIC_START1:08X}: not a UF2 file, or "
                             "corrupted")
        if m_end != MAGIC_END:
            raise FlashError(f"{where} has end magic 0x{m_end:08X}, expected 0x{MAGIC_END:08X}: "
                             "the block is corrupted")
        if size > DATA_SIZE:
            raise FlashError(f"{where} claims a {size}-byte payload; a block holds at most "
                             f"{DATA_SIZE}")
        if num_blocks == 0 or block_no >= num_blocks:
            raise FlashError(f"{where} is numbered {block_no} of {num_blocks} blocks")
        family = field if flags & FLAG_FAMILY_ID else None
        payload = data[at + HEADER.size:at + HEADER.size + size]
        key = (family, num_blocks)  # numbering counts every block of a file, comments too
        numbers = seen.setdefault(key, set())
        if block_no in numbers:
            raise FlashError(f"{where} repeats block number {block_no} of {num_blocks} "
                             f"({family_name(family)})")
        numbers.add(block_no)
        if _is_e10(family, payload, block_no, num_blocks):
            e10.add(key)
        if not flags & (FLAG_NOT_MAIN_FLASH | FLAG_FILE_CONTAINER):  # else not for the flash
            blocks.append((addr, payload, family))
    for key, numbers in seen.items():
        family, num_blocks = key
        if len(numbers) != num_blocks and key not in e10:
            raise FlashError(f"the UF2 file has {len(numbers)} of its {num_blocks} blocks for "
                             f"{family_name(family)}: truncated or corrupted (the boot ROM "
                             "would wait for the rest and never start the program)")
    return blocks


def _is_e10(family: int | None, payload: bytes, block_no: int, num_blocks: int) -> bool:
    return (family == RP2XXX_ABSOLUTE and block_no == 0 and num_blocks == 2
            and payload == bytes([E10_FILL]) * PAGE)


def check_uf2(data: bytes, family_id: int, what: str = "the UF2 file") -> list[Segment]:
    """Validate a UF2 file for a board whose boot ROM takes `family_id`: well formed
    (`parse_uf2`), with blocks of that family, each a 256-byte page at a 256-byte aligned
    address. Returns those pages as (address, bytes)."""
    try:
        blocks = parse_uf2(data)
    except FlashError as e:
        raise FlashError(f"{what}: {e}") from None
    mine = [(addr, payload) for addr, payload, family in blocks if family == family_id]
    if not mine:
        found = sorted({family_name(f) for _, _, f in blocks}) or ["no flash blocks"]
        raise FlashError(f"{what} has no blocks for family {family_name(family_id)} (it has "
                         f"{', '.join(found)}); the boot ROM would ignore it")
    for addr, payload in mine:
        if len(payload) != PAGE or addr % PAGE:
            raise FlashError(f"{what} has a {len(payload)}-byte block at 0x{addr:08X}; the boot "
                             "ROM takes only 256-byte pages at 256-byte aligned addresses")
    return mine


# ---- flashing -----------------------------------------------------------------------------------


def locate_uf2(elf: Path, family_id: int) -> Path:
    """DIR/firmware.uf2 next to `elf`: rebuilt when missing or older than the ELF, validated
    when kept."""
    uf2 = elf.with_name(UF2_NAME)
    if not uf2.exists() or (elf.exists() and uf2.stat().st_mtime < elf.stat().st_mtime):
        return write_uf2(elf, family_id, uf2)
    try:
        data = uf2.read_bytes()
    except OSError as e:
        raise FlashError(f"cannot read {uf2}: {e.strerror}") from None
    check_uf2(data, family_id, f"{uf2} (delete it to rebuild it from {elf.name})")
    return uf2


def search_roots() -> list[Path]:
    """Where operating systems mount removable drives."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    roots = [Path("/Volumes")]
    if user:
        roots[:0] = [Path("/media") / user, Path("/run/media") / user]
    roots.append(Path("/media"))
    return roots


def _windows_drives() -> list[Path]:
    if sys.platform != "win32":
        return []
    return [Path(f"{c}:\\") for c in "DEFGHIJKLMNOPQRSTUVWXYZ" if os.path.exists(f"{c}:\\")]


def info_file(drive: Path) -> Path | None:
    """The drive's INFO_UF2.TXT (any letter case: FAT ignores it), if it is a UF2 boot drive."""
    try:
        for entry in drive.iterdir():
            if entry.name.upper() == INFO_FILE and entry.is_file():
                return entry
    except OSError:
        return None
    return None


def find_drives(roots: Iterable[Path] | None = None) -> list[Path]:
    """Mounted UF2 boot drives: directories under the mount roots holding INFO_UF2.TXT."""
    found: list[Path] = []
    candidates: list[Path] = []
    for root in search_roots() if roots is None else roots:
        try:
            candidates += sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:
            continue
    if roots is None:
        candidates += _windows_drives()
    for d in candidates:
        if d not in found and info_file(d) is not None:
            found.append(d)
    return found


def board_id(drive: Path) -> str | None:
    """The Board-ID line of the drive's INFO_UF2.TXT."""
    f = info_file(drive)
    try:
        text = f.read_text(errors="replace") if f else ""
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "board-id":
            return value.strip()
    return None


def _accepts(drive: Path, family_id: int) -> bool | None:
    """Whether the drive's boot ROM takes this family: None when its Board-ID is not one of
    the Raspberry Pi ROMs' (a white-labelled or third-party boot loader)."""
    families = ROM_BOARD_IDS.get(board_id(drive) or "")
    return None if families is None else family_id in families


def copy_to_drive(uf2: Path, drive: Path) -> str:
    """Copy the UF2 file onto a boot drive: the ROM writes each block to flash as it lands and
    restarts the chip after the last one. Returns a note when the drive went away at the end."""
    try:
        data = uf2.read_bytes()
    except OSError as e:
        raise FlashError(f"cannot read {uf2}: {e.strerror}") from None
    dest = drive / uf2.name
    written = 0
    try:
        with open(dest, "wb") as f:
            written = f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        # the ROM restarts the chip once the last block is in: a host still writing the
        # directory entry then loses the drive, after every block got there
        if written == len(data) and e.errno in (errno.EIO, errno.ENODEV, errno.ENXIO,
                                                errno.ENOENT):
            return " (the drive went away as the board restarted)"
        raise FlashError(f"cannot copy {uf2.name} to {drive}: {e.strerror or e}; is the board "
                         "still in BOOTSEL mode?") from None
    return ""


def run_picotool(uf2: Path, picotool: str) -> None:
    """`picotool load -x FILE`: write it over the boot ROM's PICOBOOT interface, then run it."""
    try:
        proc = subprocess.run([picotool, "load", "-x", str(uf2)], capture_output=True, text=True,
                              timeout=PICOTOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FlashError(f"picotool load did not finish in {PICOTOOL_TIMEOUT_S:.0f} s") from None
    except OSError as e:
        raise FlashError(f"cannot run {picotool}: {e.strerror}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise FlashError(f"picotool load failed: {why}; {BOOTSEL_HINT}")


def flash_uf2(elf: Path, family_id: int, *, drive: Path | None = None) -> str:
    """Flash a Pico-style board: DIR/firmware.uf2 (built from `elf` when missing or stale) copied
    to `drive`, or to the one mounted BOOTSEL drive, or else loaded with picotool. Returns how,
    for the user."""
    uf2 = locate_uf2(elf, family_id)
    size = f"{uf2.name} ({uf2.stat().st_size // 1024} KB)"
    if drive is not None:
        if not drive.is_dir():
            raise FlashError(f"--drive {drive} is not a mounted drive (no such directory)")
        if info_file(drive) is None:
            raise FlashError(f"--drive {drive} is not a UF2 boot drive (it has no {INFO_FILE}); "
                             "hold the board's BOOTSEL button while plugging it in and give "
                             "the drive it shows up as (RPI-RP2 or RP2350)")
        drives = [drive]
    else:
        drives = find_drives()
        if len(drives) > 1:  # keep the ones whose ROM takes this family, when that is known
            drives = [d for d in drives if _accepts(d, family_id) is not False] or drives
        if len(drives) > 1:
            raise FlashError(f"{len(drives)} UF2 boot drives are mounted "
                             f"({', '.join(map(str, drives))}); pick one with --drive PATH")
    if drives:
        d = drives[0]
        if _accepts(d, family_id) is False:
            raise FlashError(f"{d} is the boot drive of another chip (Board-ID {board_id(d)}); "
                             f"its ROM ignores family {family_name(family_id)}")
        note = copy_to_drive(uf2, d)
        return f"copied {size} to {d}{note}; the board restarts into it"
    picotool = shutil.which("picotool")
    if picotool is None:
        raise FlashError(f"no UF2 boot drive is mounted and picotool is not installed: "
                         f"{BOOTSEL_HINT}")
    run_picotool(uf2, picotool)
    return f"loaded {size} with picotool and started it"
