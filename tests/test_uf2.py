"""UF2 files for the Raspberry Pi Pico boards, checked against the format's specification
(github.com/microsoft/uf2 README) with a parser written here, and the ELF's loadable segments as
arm-none-eabi-readelf reports them; then `tinytrain flash` onto a fake BOOTSEL drive, through a
stand-in picotool, and its errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tinytrain.cli.main import app
from tinytrain.device.flashing import FlashError, elf_to_uf2, parse_uf2
from tinytrain.device.flashing import uf2 as uf2_mod

CC = "arm-none-eabi-gcc"
READELF = "arm-none-eabi-readelf"
RP2040, RP2350_ARM_S, ABSOLUTE = 0xE48BFF56, 0xE48BFF59, 0xE48BFF57
DATA_LEN = 37  # .data's load image: an unaligned size, right after .rodata in flash

pytestmark = pytest.mark.skipif(shutil.which(CC) is None or shutil.which(READELF) is None,
                                reason="needs arm-none-eabi-gcc and arm-none-eabi-readelf")

SOURCE = r"""
#include <stdint.h>
extern uint32_t _sidata, _sdata, _edata;
void Reset_Handler(void);
static void Default_Handler(void) { for (;;) {} }
__attribute__((section(".vectors"), used))
void (*const vectors[16])(void) = {
    (void (*)(void))0x20001000u, Reset_Handler, Default_Handler, Default_Handler,
};
const uint8_t table[700] = { 1, 2, 3, [350] = 0x5A, [699] = 0xA5 };
uint8_t blob[37] = { 0x11, 0x22, 0x33, [36] = 0x77 };
__attribute__((section(".far"), used)) const uint32_t far_words[5] = {
    0xCAFEF00Du, 0x12345678u, 3u, 4u, 0xDEADBEEFu };
volatile uint32_t sink;
void Reset_Handler(void) {
    uint8_t *s = (uint8_t *)&_sidata, *d = (uint8_t *)&_sdata;
    while (d < (uint8_t *)&_edata) *d++ = *s++;
    for (unsigned i = 0, j = 0; i < sizeof table; i++, j = j + 1 < sizeof blob ? j + 1 : 0)
        sink += table[i] + blob[j];
    sink += far_words[sink & 3];
    for (;;) {}
}
"""

# vectors, .text and .rodata from the start of flash; .data's load image after them (an
# unaligned 37 bytes); .far a few sectors on, leaving a gap of untouched flash pages
LINKER = """
MEMORY { FLASH (rx) : ORIGIN = 0x10000000, LENGTH = 2M
         RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 256K }
ENTRY(Reset_Handler)
SECTIONS {
    .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > FLASH
    _sidata = LOADADDR(.data);
    .data : { _sdata = .; *(.data*) _edata = .; } > RAM AT > FLASH
    .far 0x10003340 : { KEEP(*(.far)) } > FLASH
    .bss (NOLOAD) : { *(.bss*) *(COMMON) } > RAM
}
"""


@pytest.fixture(scope="module")
def elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("uf2_elf")
    (d / "fw.c").write_text(SOURCE)
    (d / "link.ld").write_text(LINKER)
    out = d / "firmware.elf"
    subprocess.run([CC, "-mcpu=cortex-m0plus", "-mthumb", "-O1", "-nostdlib", "-nostartfiles",
                    "-ffreestanding", "-Wl,-T," + str(d / "link.ld"), "-Wl,--build-id=none",
                    "-Wl,--no-warn-rwx-segments", "-o", str(out), str(d / "fw.c")],
                   check=True, capture_output=True, text=True)
    return out


def load_segments(elf: Path) -> list[tuple[int, bytes]]:
    """(physical address, file bytes) of every PT_LOAD with file bytes, per readelf -lW."""
    text = subprocess.run([READELF, "-lW", str(elf)], check=True, capture_output=True,
                          text=True).stdout
    raw = elf.read_bytes()
    segs = []
    for m in re.finditer(r"^\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+"
                         r"(0x[0-9a-f]+)\s+(0x[0-9a-f]+)", text, re.M):
        offset, _vaddr, paddr, filesz, _memsz = (int(g, 16) for g in m.groups())
        if filesz:
            segs.append((paddr, raw[offset:offset + filesz]))
    return segs


def read_blocks(data: bytes) -> list[dict]:
    """An independent reading of a UF2 file by the spec's table: 32-byte header of eight
    little-endian words, 476 data bytes, end magic."""
    assert len(data) % 512 == 0 and data
    blocks = []
    for at in range(0, len(data), 512):
        b = data[at:at + 512]
        assert len(b) == 512
        m0, m1, flags, addr, size, no, total, family = struct.unpack("<8I", b[:32])
        (m_end,) = struct.unpack("<I", b[508:])
        blocks.append(dict(m0=m0, m1=m1, flags=flags, addr=addr, size=size, no=no, total=total,
                           family=family, data=b[32:508], m_end=m_end))
    return blocks


def test_segments_of_the_test_elf(elf: Path) -> None:
    segs = load_segments(elf)
    assert len(segs) >= 3, segs
    data_image = [d for a, d in segs if len(d) == DATA_LEN]
    assert data_image and data_image[0][:3] == b"\x11\x22\x33", segs  # .data's load image


@pytest.mark.parametrize("family", [RP2040, RP2350_ARM_S], ids=["rp2040", "rp2350"])
def test_uf2_follows_the_spec_and_holds_the_elf(elf: Path, family: int) -> None:
    blocks = read_blocks(elf_to_uf2(elf, family))
    n = len(blocks)
    memory: dict[int, int] = {}
    for i, b in enumerate(blocks):
        assert (b["m0"], b["m1"], b["m_end"]) == (0x0A324655, 0x9E5D5157, 0x0AB16F30)
        assert b["flags"] == 0x00002000  # familyID present, nothing else
        assert b["family"] == family
        assert b["size"] == 256 and b["addr"] % 256 == 0
        assert (b["no"], b["total"]) == (i, n)
        assert b["data"][256:] == bytes(476 - 256)  # the spec pads the data field with zeros
        for k in range(256):
            assert b["addr"] + k not in memory, f"page 0x{b['addr']:08X} twice"
            memory[b["addr"] + k] = b["data"][k]
    covered = set()
    for addr, data in load_segments(elf):
        for k, byte in enumerate(data):
            assert memory.get(addr + k) == byte, f"0x{addr + k:08X}"
            covered.add(addr + k)
    assert all(v == 0 for a, v in memory.items() if a not in covered)  # padding
    addrs = [b["addr"] for b in blocks]
    assert addrs == sorted(addrs)
    if family == RP2040:
        # RP2040-E14: the ROM erases the sector of the first block it gets of each group of 16
        # block numbers (blockNo * 256 / 4096), and only that one: each group must lie in one
        # 4 KB sector, and no two groups in the same one
        groups: dict[int, set[int]] = {}
        for b in blocks:
            groups.setdefault(b["no"] // 16, set()).add(b["addr"] // 4096)
        assert all(len(s) == 1 for s in groups.values()), groups
        sectors = [next(iter(s)) for s in groups.values()]
        assert len(set(sectors)) == len(sectors), groups
        assert len(groups) >= 2  # the test ELF spans more than one sector
    else:  # only the pages the ELF fills
        assert all(any(p <= a < p + 256 for a in covered) for p in addrs)


def test_parse_uf2_reads_back_what_elf_to_uf2_wrote(elf: Path) -> None:
    data = elf_to_uf2(elf, RP2350_ARM_S)
    mine = [(b["addr"], b["data"][:256], b["family"]) for b in read_blocks(data)]
    assert parse_uf2(data) == mine


def test_rp2350_e10_block_on_request(elf: Path) -> None:
    data = elf_to_uf2(elf, RP2350_ARM_S, e10_block=0x10FFFF00)
    first, *rest = read_blocks(data)
    assert (first["family"], first["addr"], first["no"], first["total"]) == \
        (ABSOLUTE, 0x10FFFF00, 0, 2)
    assert first["flags"] == 0x0000A000 and first["data"][:256] == b"\xef" * 256
    assert first["data"][256:260] == struct.pack("<I", 0x9957E304)  # RP2 "ignore block" tag
    assert [(b["no"], b["total"]) for b in rest] == [(i, len(rest)) for i in range(len(rest))]
    assert parse_uf2(data)[1:] == parse_uf2(elf_to_uf2(elf, RP2350_ARM_S))
    assert uf2_mod.check_uf2(data, RP2350_ARM_S)[0][0] == 0x10000000


def _one_line(e: pytest.ExceptionInfo[FlashError]) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def test_corrupted_uf2_is_rejected(elf: Path) -> None:
    good = elf_to_uf2(elf, RP2040)
    bad = bytearray(good)
    bad[512 * 2] ^= 0xFF  # second block's first start magic
    with pytest.raises(FlashError) as e:
        parse_uf2(bytes(bad))
    assert "block 2" in _one_line(e) and "magic" in str(e.value)
    bad = bytearray(good)
    bad[512 * 3 + 508] ^= 0x01  # end magic
    with pytest.raises(FlashError, match="end magic"):
        parse_uf2(bytes(bad))
    with pytest.raises(FlashError) as e:
        parse_uf2(good[:-100])
    assert "512-byte blocks" in _one_line(e)
    with pytest.raises(FlashError) as e:
        parse_uf2(good[:512] + good[1024:])  # block 1 lost
    assert "truncated" in _one_line(e)
    bad = bytearray(good)
    struct.pack_into("<I", bad, 16, 600)  # payload larger than a block's data field
    with pytest.raises(FlashError, match="600-byte payload"):
        parse_uf2(bytes(bad))
    with pytest.raises(FlashError, match="empty"):
        parse_uf2(b"")
    with pytest.raises(FlashError) as e:
        uf2_mod.check_uf2(good, RP2350_ARM_S)
    assert "RP2040" in _one_line(e) and "ignore" in str(e.value)


# ---- tinytrain flash -----------------------------------------------------------------------------


@pytest.fixture
def build(tmp_path: Path, elf: Path) -> Path:
    """A firmware build directory for the rp2040 board, as far as `tinytrain flash` looks."""
    d = tmp_path / "build"
    d.mkdir()
    (d / "program.json").write_text(json.dumps({"board": "rp2040", "input_logical_shape": [1]}))
    shutil.copy(elf, d / "firmware.elf")
    return d


def fake_drive(path: Path, board_id: str = "RPI-RP2", name: str = "INFO_UF2.TXT") -> Path:
    path.mkdir(parents=True)
    (path / name).write_text("UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\n"
                             f"Board-ID: {board_id}\n")
    return path


@pytest.fixture
def no_drives_no_picotool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing mounted where drives are searched, and a PATH without picotool; returns that
    PATH directory (put a stand-in picotool there to have one)."""
    media = tmp_path / "media"
    media.mkdir()
    monkeypatch.setattr(uf2_mod, "search_roots", lambda: [media])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def tt(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_flash_copies_to_the_given_drive(build: Path, tmp_path: Path) -> None:
    drive = fake_drive(tmp_path / "RPI-RP2")
    res = tt("flash", build, "--drive", drive)
    assert res.exit_code == 0, res.output
    copied = (drive / "firmware.uf2").read_bytes()
    assert copied == (build / "firmware.uf2").read_bytes()
    assert copied == elf_to_uf2(build / "firmware.elf", RP2040)
    assert str(drive) in res.stdout


def test_flash_finds_the_mounted_drive(build: Path, no_drives_no_picotool: Path,
                                       tmp_path: Path) -> None:
    drive = fake_drive(tmp_path / "media" / "RPI-RP2", name="info_uf2.txt")  # any letter case
    (tmp_path / "media" / "USBSTICK").mkdir()  # not a boot drive
    res = tt("flash", build)
    assert res.exit_code == 0, res.output
    assert parse_uf2((drive / "firmware.uf2").read_bytes())


def test_flash_refuses_another_chips_drive(build: Path, no_drives_no_picotool: Path,
                                           tmp_path: Path) -> None:
    fake_drive(tmp_path / "media" / "RP2350", board_id="RP2350")
    res = tt("flash", build)
    assert res.exit_code == 2
    assert "another chip" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_flash_without_drive_or_picotool_says_what_to_do(build: Path,
                                                         no_drives_no_picotool: Path) -> None:
    res = tt("flash", build)
    assert res.exit_code == 2
    msg = res.stderr
    assert msg.startswith("error: ") and msg.count("\n") == 1 and "Traceback" not in msg, msg
    assert "BOOTSEL" in msg and "picotool" in msg and "--drive" in msg


def test_flash_with_picotool(build: Path, no_drives_no_picotool: Path, tmp_path: Path) -> None:
    log = tmp_path / "picotool.args"
    tool = no_drives_no_picotool / "picotool"
    tool.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n")
    tool.chmod(0o755)
    res = tt("flash", build)
    assert res.exit_code == 0, res.output
    assert log.read_text().split() == ["load", "-x", str(build / "firmware.uf2")]
    tool.write_text("#!/bin/sh\necho 'No accessible RP-series devices in BOOTSEL mode were "
                    "found.' >&2\nexit 249\n")
    res = tt("flash", build)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "No accessible RP-series devices" in res.stderr and "BOOTSEL" in res.stderr


def test_flash_rebuilds_a_stale_uf2_and_rejects_a_bad_one(build: Path, tmp_path: Path) -> None:
    drive = fake_drive(tmp_path / "RPI-RP2")
    uf2 = build / "firmware.uf2"
    uf2.write_bytes(b"stale")
    old = (build / "firmware.elf").stat().st_mtime - 10
    os.utime(uf2, (old, old))
    assert tt("flash", build, "--drive", drive).exit_code == 0
    assert uf2.read_bytes() == elf_to_uf2(build / "firmware.elf", RP2040)
    uf2.write_bytes(uf2.read_bytes()[:-512])  # newer than the ELF, and a block short
    res = tt("flash", build, "--drive", drive)
    assert res.exit_code == 2 and "delete it" in res.stderr and "truncated" in res.stderr


def test_flash_option_errors(build: Path, tmp_path: Path) -> None:
    res = tt("flash", build, "--port", "/dev/ttyACM0")
    assert res.exit_code == 2 and "BOOTSEL" in res.stderr
    not_boot = tmp_path / "stick"
    not_boot.mkdir()
    res = tt("flash", build, "--drive", not_boot)
    assert res.exit_code == 2 and "INFO_UF2.TXT" in res.stderr
