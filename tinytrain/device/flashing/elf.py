"""Firmware images as (address, bytes) segments, from an ELF32 ARM file or a raw .bin.

Only program headers matter to a flasher: each PT_LOAD segment's file bytes go to its physical
(load) address, which differs from the virtual one for .data copied to RAM at startup.
"""

from __future__ import annotations

import struct
from pathlib import Path

from tinytrain.device.flashing.common import FlashError, Segment

ELF_MAGIC = b"\x7fELF"
ELFCLASS32 = 1
ELFDATA2LSB = 1
EM_ARM = 40
PT_LOAD = 1
EHDR = struct.Struct("<16sHHIIIIIHHHHHH")  # Elf32_Ehdr, 52 bytes
PHDR = struct.Struct("<8I")  # Elf32_Phdr: type offset vaddr paddr filesz memsz flags align
ADDRESS_LIMIT = 1 << 32


def load_elf(path: str | Path) -> list[Segment]:
    """The loadable bytes of an ELF32 little-endian ARM file, merged where segments touch."""
    path = Path(path)
    data = _read(path)
    if data[:4] != ELF_MAGIC:
        raise FlashError(f"{path} is not an ELF file (for a raw .bin, give its base address)")
    if len(data) < EHDR.size:
        raise FlashError(f"{path} is truncated: {len(data)} bytes, shorter than an ELF header")
    ident, _type, machine, _ver, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum, \
        *_ = EHDR.unpack_from(data)
    if ident[4] != ELFCLASS32:
        raise FlashError(f"{path} is a 64-bit ELF file; microcontroller images are ELF32")
    if ident[5] != ELFDATA2LSB:
        raise FlashError(f"{path} is a big-endian ELF file; expected little-endian ARM")
    if machine != EM_ARM:
        raise FlashError(f"{path} is built for ELF machine {machine}, not ARM ({EM_ARM}); "
                         "was it compiled with the host compiler?")
    if phnum and phentsize < PHDR.size:
        raise FlashError(f"{path} has a malformed program header table (entry size {phentsize})")
    if phoff + phnum * phentsize > len(data):
        raise FlashError(f"{path} is truncated: its program headers end past the file")
    segments = []
    for i in range(phnum):
        p_type, offset, _vaddr, paddr, filesz, _memsz, _pflags, _align = PHDR.unpack_from(
            data, phoff + i * phentsize)
        if p_type != PT_LOAD or filesz == 0:  # .bss and friends take no flash
            continue
        if offset + filesz > len(data):
            raise FlashError(f"{path} is truncated: segment at 0x{paddr:08X} needs bytes "
                             f"{offset}..{offset + filesz}, the file has {len(data)}")
        if paddr + filesz > ADDRESS_LIMIT:
            raise FlashError(f"{path}: segment at 0x{paddr:08X} runs past the 4 GB address space")
        segments.append((paddr, data[offset:offset + filesz]))
    if not segments:
        raise FlashError(f"{path} has no loadable bytes (no PT_LOAD segment with file data)")
    return merge_segments(segments, str(path))


def load_bin(path: str | Path, base: int) -> list[Segment]:
    """A raw binary placed at `base`."""
    path = Path(path)
    if not 0 <= base < ADDRESS_LIMIT:
        raise FlashError(f"base address 0x{base:X} for {path} is outside the 32-bit address space")
    data = _read(path)
    if not data:
        raise FlashError(f"{path} is empty: nothing to flash")
    if base + len(data) > ADDRESS_LIMIT:
        raise FlashError(f"{path} ({len(data)} bytes) at 0x{base:08X} runs past 4 GB")
    return [(base, data)]


def load_image(path: str | Path, base: int | None = None) -> list[Segment]:
    """An ELF file by its headers, or a raw binary at `base` (which ELF files must not be given)."""
    path = Path(path)
    is_elf = _read(path)[:4] == ELF_MAGIC
    if is_elf and base is not None:
        raise FlashError(f"{path} is an ELF file: it carries its own addresses, drop the base "
                         "address")
    if is_elf or base is None:
        return load_elf(path)
    return load_bin(path, base)


def merge_segments(segments: list[Segment], what: str = "image") -> list[Segment]:
    """Sort by address and join segments that touch; overlapping ones are an error."""
    merged: list[tuple[int, bytearray]] = []
    for addr, data in sorted(segments, key=lambda s: s[0]):
        if merged and addr < merged[-1][0] + len(merged[-1][1]):
            raise FlashError(f"{what}: segments overlap at 0x{addr:08X}")
        if merged and addr == merged[-1][0] + len(merged[-1][1]):
            merged[-1][1].extend(data)
        else:
            merged.append((addr, bytearray(data)))
    return [(addr, bytes(data)) for addr, data in merged]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise FlashError(f"cannot read firmware image {path}: {e.strerror}") from None
