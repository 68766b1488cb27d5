"""Flashing over serial against device simulators on pseudo-terminals, plus ELF loading and the
probe fallback. No board needed: tests/sim/ implements each bootloader from its specification."""

from __future__ import annotations

import os
import random
import struct
import time
from pathlib import Path

import pytest
import serial

from tests.sim.nrf_dfu_bootloader import (
    EXT_SD_VERSION_FAILURE,
    OBJ_COMMAND,
    OBJ_DATA,
    OP_CREATE,
    OP_EXECUTE,
    OP_MTU,
    OP_PING,
    OP_SET_PRN,
    RES_EXT_ERROR,
    RES_INSUFFICIENT_RESOURCES,
    RES_OPERATION_FAILED,
    NrfDfuBootloader,
)
from tests.sim.stm32_rom_bootloader import STM32U585 as SIM_U585
from tests.sim.stm32_rom_bootloader import Stm32RomBootloader
from tinytrain.boards import load_board
from tinytrain.device.flashing import (
    FlashError,
    board_chip,
    flash_image,
    flash_probe,
    load_bin,
    load_elf,
    load_image,
    open_serial,
)
from tinytrain.device.flashing.stm32_rom import (
    SECTORS,
    STM32F746,
    STM32U585,
    covered_units,
    plan_blocks,
)

# Host timeout where a test makes the simulator stay silent: the simulator answers in well under
# a millisecond, so this only keeps those tests short. Tests that get NACKs keep the default.
SILENCE_TIMEOUT_S = 0.3
STM32_BASE = 0x08000000
NRF_BASE = 0x1000
CHECKPOINT_6, CHECKPOINT_7 = SECTORS[6][0], SECTORS[7][0]


def _bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _one_line(e: pytest.ExceptionInfo[FlashError]) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


@pytest.fixture
def sims():
    started = []

    def start(sim):
        started.append(sim.start())
        return sim

    yield start
    for sim in started:
        sim.close()


@pytest.fixture
def dead_port():
    """A tty with nothing behind it: no bootloader answers."""
    master, slave = os.openpty()
    yield os.ttyname(slave)
    os.close(master)
    os.close(slave)


# ---------------------------------------------------------------- STM32 ROM bootloader (AN3155)

def _stm32(sims, **faults) -> Stm32RomBootloader:
    sim = sims(Stm32RomBootloader(**faults))
    sim.load(STM32_BASE, b"\x5a" * (6 * 32 * 1024))  # an older firmware in sectors 0..4
    sim.load(SECTORS[5][0], b"\x66" * 1024)
    sim.load(CHECKPOINT_6, b"CKPT6" * 100)
    sim.load(CHECKPOINT_7, b"CKPT7" * 100)
    return sim


STM32_IMAGE = [(STM32_BASE, _bytes(40 * 1024 + 13, 1)),  # sectors 0 and 1, odd length
               (SECTORS[4][0] + 0x102, _bytes(777, 2))]  # sector 4, unaligned start


def test_stm32_round_trip(sims):
    sim = _stm32(sims)
    calls = []
    flash_image("stm32-rom", sim.port, STM32_IMAGE, progress=lambda d, t: calls.append((d, t)))
    for addr, data in STM32_IMAGE:
        assert sim.flash_at(addr, len(data)) == data
    assert sorted(sim.erased_sectors) == [0, 1, 4]
    assert sim.flash_at(SECTORS[2][0] - 16, 16) == b"\xff" * 16  # rest of an erased sector
    assert sim.flash_at(SECTORS[2][0], 16) == b"\x5a" * 16  # not covered: untouched
    assert sim.flash_at(SECTORS[4][0], 0x102) == b"\xff" * 0x102
    assert sim.flash_at(SECTORS[5][0], 1024) == b"\x66" * 1024  # not covered: untouched
    assert sim.flash_at(CHECKPOINT_6, 500) == b"CKPT6" * 100
    assert sim.flash_at(CHECKPOINT_7, 500) == b"CKPT7" * 100
    assert sim.go_address == STM32_BASE
    assert sim.accepted[:3] == [0x00, 0x02, 0x44]  # Get, Get ID, Extended Erase
    assert sim.nacks == 0
    assert calls[-1][0] == calls[-1][1] and [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_stm32_image_in_checkpoint_sector_erases_it(sims):
    sim = _stm32(sims)
    flash_image("stm32-rom", sim.port, [(CHECKPOINT_7, b"\x01\x02\x03\x04")])
    assert sim.erased_sectors == [7]
    assert sim.flash_at(CHECKPOINT_7, 8) == b"\x01\x02\x03\x04\xff\xff\xff\xff"
    assert sim.flash_at(CHECKPOINT_6, 500) == b"CKPT6" * 100


def test_stm32_nacked_block_is_retried(sims):
    sim = _stm32(sims, nack_commands={5})  # Get, Get ID, Erase, Write, *Write*
    flash_image("stm32-rom", sim.port, STM32_IMAGE)
    assert sim.nacks == 1
    assert sim.flash_at(STM32_BASE, len(STM32_IMAGE[0][1])) == STM32_IMAGE[0][1]
    assert sim.go_address == STM32_BASE


def test_stm32_silent_block_is_retried(sims):
    sim = _stm32(sims, silent_commands={6})
    flash_image("stm32-rom", sim.port, STM32_IMAGE, timeout=SILENCE_TIMEOUT_S)
    assert sim.flash_at(STM32_BASE, len(STM32_IMAGE[0][1])) == STM32_IMAGE[0][1]
    assert sim.go_address == STM32_BASE


def test_stm32_persistent_nack_names_the_address(sims):
    sim = _stm32(sims, nack_opcode=0x31)
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    msg = _one_line(e)
    assert "write of 256 bytes at 0x08000000" in msg and "3 attempts" in msg and "NACK" in msg
    assert sim.go_address is None


def test_stm32_persistent_timeout(sims):
    sim = _stm32(sims, silent_opcode=0x31)
    t0 = time.monotonic()
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE, timeout=SILENCE_TIMEOUT_S)
    assert "no answer" in _one_line(e) and "0x08000000" in str(e.value)
    assert time.monotonic() - t0 < 20 * SILENCE_TIMEOUT_S  # 3 attempts, not a hang


def test_stm32_verify_mismatch(sims):
    sim = _stm32(sims, corrupt_address=STM32_BASE + 0x4321)
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    assert "verify failed at 0x08004321" in _one_line(e)
    assert sim.go_address is None


def test_stm32_wrong_chip_id(sims):
    sim = _stm32(sims, pid=0x451)  # an STM32F76x/77x
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    msg = _one_line(e)
    assert "0x451" in msg and "0x449" in msg
    assert sim.erased_sectors == []


def test_stm32_legacy_erase_only(sims):
    sim = _stm32(sims, extended_erase=False)
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    assert "Extended Erase (0x44)" in _one_line(e)


def test_stm32_write_protected_sector(sims):
    sim = _stm32(sims, protected_sectors={1})
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    assert "erase of sector(s) 0, 1, 4" in _one_line(e)
    assert sim.erased_sectors == []


def test_stm32_resyncs_with_a_bootloader_left_synced(sims):
    sim = _stm32(sims, nack_opcode=0x31)
    with pytest.raises(FlashError):
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    # Still synced from the first session: the new 0x7F pair reads as a bad command (NACK).
    sim.nack_opcode = None
    flash_image("stm32-rom", sim.port, STM32_IMAGE, timeout=SILENCE_TIMEOUT_S)
    assert sim.flash_at(STM32_BASE, len(STM32_IMAGE[0][1])) == STM32_IMAGE[0][1]
    assert sim.go_address == STM32_BASE


def test_stm32_sim_refuses_writes_to_protected_sectors(sims):
    sim = _stm32(sims, protected_sectors={4})
    erased = SECTORS[4][0] + 0x10000  # past the old firmware: erased, but write-protected
    address = erased.to_bytes(4, "big")
    with open_serial(sim.port, baud=115200, timeout=0.5, parity=serial.PARITY_EVEN) as s:
        s.write(b"\x7f")
        assert s.read(1) == b"\x79"
        s.write(b"\x31\xce" + address + bytes([address[0] ^ address[1] ^ address[2] ^ address[3]]))
        assert s.read(2) == b"\x79\x79"
        s.write(bytes([3, 1, 2, 3, 4, 3 ^ 1 ^ 2 ^ 3 ^ 4]))
        assert s.read(1) == b"\x1f"
    assert sim.flash_at(erased, 4) == b"\xff" * 4


def test_stm32_no_bootloader(dead_port):
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", dead_port, STM32_IMAGE, timeout=0.05)
    assert "BOOT0" in _one_line(e)


def test_stm32_image_outside_flash(sims):
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", "/dev/null", [(0x20000000, b"\x00" * 16)])
    assert "outside the STM32F746 flash" in _one_line(e)


def test_stm32_blocks_are_aligned_and_share_words():
    blocks = plan_blocks([(STM32_BASE + 1, b"\x11\x22"), (STM32_BASE + 3, b"\x33" * 600)])
    assert all(a % 4 == 0 and len(d) % 4 == 0 and len(d) <= 256 for a, d in blocks)
    joined = b"".join(d for _, d in blocks)
    assert joined[:5] == b"\xff\x11\x22\x33\x33" and len(joined) == 604


def test_stm32_sim_speaks_an3155_byte_exactly(sims):
    """The simulator itself: sync first, complements and checksums checked, unerased flash."""
    sim = _stm32(sims)
    with open_serial(sim.port, baud=115200, timeout=0.2, parity=serial.PARITY_EVEN) as s:
        s.write(b"\x00\xff")  # Get before sync: ignored while the ROM waits for 0x7F
        assert s.read(1) == b""
        s.write(b"\x7f")
        assert s.read(1) == b"\x79"
        s.write(b"\x00\x00")  # bad complement
        assert s.read(1) == b"\x1f"
        s.write(b"\x02\xfd")  # Get ID
        assert s.read(5) == b"\x79\x01\x04\x49\x79"
        s.write(b"\x31\xce" + bytes([0x08, 0, 0, 0, 0x09]))  # address checksum should be 0x08
        assert s.read(2) == b"\x79\x1f"
        s.write(b"\x31\xce" + bytes([0x08, 0, 0, 0, 0x08]))
        assert s.read(2) == b"\x79\x79"
        s.write(bytes([3, 1, 2, 3, 4, 3 ^ 1 ^ 2 ^ 3 ^ 4]))  # onto 0x5A bytes: not erased
        assert s.read(1) == b"\x1f"
        s.write(b"\x44\xbb" + b"\x00\x00\x00\x00" + b"\x01")  # erase sector 0, bad checksum
        assert s.read(2) == b"\x79\x1f"
        s.write(b"\x44\xbb" + b"\x00\x00\x00\x00" + b"\x00")
        assert s.read(2) == b"\x79\x79"
        s.write(b"\x11\xee" + bytes([0x08, 0, 0, 0, 0x08]) + b"\x03\xfc")  # read 4 bytes
        assert s.read(7) == b"\x79\x79\x79" + b"\xff" * 4
    assert sim.erased_sectors == [0]


# ---------------------------------------------------------------- STM32U585: pages in two banks

U5_PAGE = 8192
U5_BANK2 = 0x08100000
# The slots a 40 KB checkpoint gets on the U585: the last 10 pages of bank 2 (as a build has it).
U5_SLOTS = load_board("stm32u585").flash_layout(40_000)


def _u585(sims, **faults) -> Stm32RomBootloader:
    sim = sims(Stm32RomBootloader(chip=SIM_U585, **faults))
    sim.load(STM32_BASE, b"\x5a" * (8 * U5_PAGE))  # an older firmware in pages 0..7
    for n, slot in enumerate(U5_SLOTS.slots):
        sim.load(slot, f"CKPT{n}".encode() * 2000)  # 10 KB into each slot
    return sim


U5_IMAGE = [(STM32_BASE, _bytes(5 * U5_PAGE + 13, 7)),  # pages 0..5, odd length
            (STM32_BASE + 5 * U5_PAGE + 20, _bytes(9, 8)),  # shares page 5's second quad-word
            (U5_BANK2 + U5_PAGE + 0x102, _bytes(777, 9))]  # bank 2 page 1 = erase number 129


def test_board_chip_comes_from_the_board_file():
    u5, f7 = board_chip(load_board("stm32u585")), board_chip(load_board("stm32f746"))
    assert (u5.product_id, u5.erase_units, u5.write_align) == (
        0x482, STM32U585.erase_units, 16)
    assert (f7.product_id, f7.erase_units) == (0x449, STM32F746.erase_units)
    assert f7.unit == "sector" and u5.unit == "page" and u5.name == "STM32U585"
    assert board_chip(load_board("nrf52840")) is None
    assert all(s % U5_PAGE == 0 and s >= U5_BANK2 for s in U5_SLOTS.slots)


def test_stm32u585_round_trip_keeps_checkpoints(sims):
    sim = _u585(sims)
    flash_image("stm32-rom", sim.port, U5_IMAGE, chip=STM32U585)
    for addr, data in U5_IMAGE:
        assert sim.flash_at(addr, len(data)) == data
    assert sorted(sim.erased_sectors) == [0, 1, 2, 3, 4, 5, 129]  # numbered across both banks
    assert sim.flash_at(STM32_BASE + 6 * U5_PAGE, 16) == b"\x5a" * 16  # page 6: not covered
    assert sim.flash_at(U5_BANK2 + U5_PAGE, 0x102) == b"\xff" * 0x102
    for n, slot in enumerate(U5_SLOTS.slots):
        assert sim.flash_at(slot, 10_000) == f"CKPT{n}".encode() * 2000
    assert sim.go_address == STM32_BASE and sim.nacks == 0


def test_stm32u585_writes_whole_quad_words_once():
    blocks = plan_blocks(U5_IMAGE, STM32U585)
    assert all(a % 16 == 0 and len(d) % 16 == 0 and len(d) <= 256 for a, d in blocks)
    quads = [a for addr, d in blocks for a in range(addr, addr + len(d), 16)]
    assert len(quads) == len(set(quads))  # ECC: a quad-word is programmed once after an erase
    assert covered_units(blocks, STM32U585) == [0, 1, 2, 3, 4, 5, 129]


def test_stm32u585_wrong_product_id(sims):
    sim = _u585(sims, pid=0x449)  # an STM32F74x answers where a U585 was expected
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", sim.port, U5_IMAGE, chip=STM32U585)
    msg = _one_line(e)
    assert "product ID 0x449, not 0x482 (STM32U585)" in msg and "wrong board or port" in msg
    assert sim.erased_sectors == []


def test_stm32f746_image_on_a_u585(sims):
    sim = _u585(sims)
    with pytest.raises(FlashError) as e:  # the default chip is the F746
        flash_image("stm32-rom", sim.port, STM32_IMAGE)
    assert "product ID 0x482, not 0x449 (STM32F746)" in _one_line(e)
    assert sim.erased_sectors == []


def test_stm32u585_image_outside_flash():
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", "/dev/null", [(0x08200000, b"\x00" * 16)], chip=STM32U585)
    assert "outside the STM32U585 flash 0x08000000..0x081FFFFF" in _one_line(e)


def test_stm32u585_sim_needs_quad_words_and_erases_banks(sims):
    sim = _u585(sims)
    page = (U5_BANK2 + 2 * U5_PAGE).to_bytes(4, "big")
    page_sum = bytes([page[0] ^ page[1] ^ page[2] ^ page[3]])
    with open_serial(sim.port, baud=115200, timeout=0.5, parity=serial.PARITY_EVEN) as s:
        s.write(b"\x7f")
        assert s.read(1) == b"\x79"
        s.write(b"\x02\xfd")  # Get ID
        assert s.read(5) == b"\x79\x01\x04\x82\x79"
        s.write(b"\x31\xce" + page + page_sum)  # 4 bytes: not a quad-word
        assert s.read(2) == b"\x79\x79"
        s.write(bytes([3, 1, 2, 3, 4, 3 ^ 1 ^ 2 ^ 3 ^ 4]))
        assert s.read(1) == b"\x1f"
        s.write(b"\x31\xce" + page + page_sum)  # 16 bytes: programmed
        assert s.read(2) == b"\x79\x79"
        s.write(bytes([15, *[0xFF] * 16, 15]))
        assert s.read(1) == b"\x79"
        s.write(b"\x31\xce" + page + page_sum)  # the same quad-word again: ECC refuses
        assert s.read(2) == b"\x79\x79"
        s.write(bytes([15, *[0xFF] * 16, 15]))
        assert s.read(1) == b"\x1f"
        s.write(b"\x44\xbb" + b"\xff\xfd" + b"\x02")  # bank 2 erase: pages 128..255
        assert s.read(2) == b"\x79\x79"
    assert sim.erased_sectors == list(range(128, 256))
    assert sim.flash_at(U5_SLOTS.slots[0], 16) == b"\xff" * 16
    assert sim.flash_at(STM32_BASE, 16) == b"\x5a" * 16


# ---------------------------------------------------------------- nRF5 SDK Secure DFU (serial)

def _nrf(sims, **kw) -> NrfDfuBootloader:
    sim = sims(NrfDfuBootloader(**kw))
    sim.load(0, b"MBR!" * 1024)
    sim.load(NRF_BASE, b"\x42" * 0x8000)  # the previous application
    sim.load(0xD0000, b"KEEP" * 1024)  # application data past the new image
    sim.load(0xE0000, b"BOOT" * 1024)
    return sim


# Two segments with a gap (filled with 0xFF), over three 4 KB objects; random bytes include
# 0xC0 and 0xDB, so SLIP escaping is exercised.
NRF_IMAGE = [(NRF_BASE, _bytes(6000, 3)), (NRF_BASE + 6100, _bytes(4000, 4))]
NRF_FLAT = NRF_IMAGE[0][1] + b"\xff" * 100 + NRF_IMAGE[1][1]


def test_nrf_round_trip(sims):
    sim = _nrf(sims)
    calls = []
    flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE,
                progress=lambda d, t: calls.append((d, t)))
    assert sim.activated
    assert bytes(sim.flash[NRF_BASE:NRF_BASE + len(NRF_FLAT)]) == NRF_FLAT
    assert sim.flash[0:4096] == b"MBR!" * 1024
    assert sim.flash[0xD0000:0xD1000] == b"KEEP" * 1024
    assert sim.flash[0xE0000:0xE1000] == b"BOOT" * 1024
    assert sim.requests[:3] == [OP_PING, 0x0A, OP_SET_PRN] and OP_MTU in sim.requests
    assert sim.created_data_offsets == [0, 4096, 8192]
    assert sim.dropped_frames == 0 and sim.app_version == 1
    assert calls == [(4096, len(NRF_FLAT)), (8192, len(NRF_FLAT)),
                     (len(NRF_FLAT), len(NRF_FLAT))]


def test_nrf_small_mtu_chunks_fit(sims):
    sim = _nrf(sims, mtu=23)  # 10 data bytes per write after worst-case SLIP doubling
    flash_image("nrf-dfu-serial", sim.port, [(NRF_BASE, b"\xc0\xdb" * 2000)])
    assert sim.activated and sim.dropped_frames == 0


def test_nrf_crc_mismatch_is_retried(sims):
    sim = _nrf(sims, corrupt_objects={1})
    flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert sim.corruptions == 1 and sim.activated
    assert sim.created_data_offsets == [0, 4096, 4096, 8192]
    assert bytes(sim.flash[NRF_BASE:NRF_BASE + len(NRF_FLAT)]) == NRF_FLAT


def test_nrf_persistent_crc_mismatch_then_resume(sims):
    sim = _nrf(sims, corrupt_objects={2}, corrupt_always=True)
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert "image offset 8192 (0x00003000) failed its CRC check 3 times" in _one_line(e)
    assert not sim.activated
    # The next run finds the same init packet and two executed objects: it resumes (nrfutil).
    sim.corrupt_always = False
    sim.created_data_offsets.clear()
    flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert sim.activated and sim.created_data_offsets == [8192]
    assert bytes(sim.flash[NRF_BASE:NRF_BASE + len(NRF_FLAT)]) == NRF_FLAT


@pytest.mark.parametrize("fault, expected", [
    ((OP_CREATE, OBJ_DATA, RES_INSUFFICIENT_RESOURCES, 0),
     "rejected Create (data object at image offset 0 (0x00001000)): result 0x04 (insufficient "
     "resources)"),
    ((OP_EXECUTE, OBJ_COMMAND, RES_EXT_ERROR, EXT_SD_VERSION_FAILURE),
     "rejected Execute (init packet): extended error 0x07 (SoftDevice requirement not met)"),
    ((OP_EXECUTE, OBJ_DATA, RES_OPERATION_FAILED, 0),
     "rejected Execute (data object at image offset 0 (0x00001000)): result 0x0A (operation "
     "failed)"),
])
def test_nrf_bootloader_error_codes(sims, fault, expected):
    opcode, obj, result, ext = fault
    sim = _nrf(sims, fail_on=(opcode, obj), fail_result=result, fail_ext=ext)
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert expected in _one_line(e)
    assert not sim.activated


def test_nrf_downgrade_is_refused_by_the_init_packet_check(sims):
    sim = _nrf(sims, app_version=7)
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert "extended error 0x05 (firmware version too old)" in _one_line(e)


def test_nrf_wrong_chip(sims):
    sim = _nrf(sims, part=0x52832)
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", sim.port, NRF_IMAGE)
    assert "nRF52832, not an nRF52840" in _one_line(e)


def test_nrf_image_must_start_after_the_mbr():
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", "/dev/null", [(0x27000, b"\x00" * 64)])
    assert "0x00027000" in _one_line(e) and "0x00001000" in str(e.value)


def test_nrf_no_bootloader(dead_port):
    with pytest.raises(FlashError) as e:
        flash_image("nrf-dfu-serial", dead_port, NRF_IMAGE, timeout=0.05)
    assert "bootloader mode" in _one_line(e)


def test_bad_protocol_and_port():
    with pytest.raises(FlashError, match="unknown flashing protocol 'dfu'"):
        flash_image("dfu", "/dev/null", NRF_IMAGE)
    with pytest.raises(FlashError) as e:
        flash_image("stm32-rom", "/dev/does-not-exist", STM32_IMAGE)
    assert "cannot open serial port /dev/does-not-exist" in _one_line(e)


# ---------------------------------------------------------------- ELF and raw images

def _elf(segments: list[tuple[int, int, int, bytes, int]], *, machine: int = 40,
         ei_class: int = 1, ei_data: int = 1) -> bytes:
    """An ELF32 with the given program headers (type, vaddr, paddr, file bytes, memsz)."""
    phoff, phnum = 52, len(segments)
    offset = phoff + 32 * phnum
    header = struct.pack("<16sHHIIIIIHHHHHH",
                         b"\x7fELF" + bytes([ei_class, ei_data, 1]) + b"\x00" * 9,
                         2, machine, 1, 0, phoff, 0, 0, 52, 32, phnum, 40, 0, 0)
    phdrs, body = b"", b""
    for p_type, vaddr, paddr, data, memsz in segments:
        phdrs += struct.pack("<8I", p_type, offset + len(body), vaddr, paddr, len(data), memsz,
                             5, 4)
        body += data
    return header + phdrs + body


def test_load_elf_uses_physical_addresses_and_merges(tmp_path):
    text, data = _bytes(1000, 5), _bytes(64, 6)
    path = tmp_path / "fw.elf"
    path.write_bytes(_elf([
        (1, 0x08000000, 0x08000000, text, 1000),
        (1, 0x20000000, 0x08000000 + 1000, data, 64),  # .data: runs from RAM, stored in flash
        (1, 0x20000040, 0x20000040, b"", 4096),  # .bss: nothing to flash
        (4, 0, 0, b"NOTE", 4),  # not PT_LOAD
        (1, 0x08010000, 0x08010000, b"\x01\x02", 2),
    ]))
    assert load_elf(path) == [(0x08000000, text + data), (0x08010000, b"\x01\x02")]
    assert load_image(path) == load_elf(path)


@pytest.mark.parametrize("content, expected", [
    (b"hello, world", "not an ELF file"),
    (b"\x7fELF\x01\x01\x01", "truncated"),
    (_elf([(1, 0, 0x1000, b"abcd", 4)])[:-2], "truncated"),
    (_elf([(1, 0, 0x1000, b"abcd", 4)], machine=62), "ELF machine 62, not ARM"),
    (_elf([(1, 0, 0x1000, b"abcd", 4)], ei_class=2), "64-bit"),
    (_elf([(1, 0, 0x1000, b"abcd", 4)], ei_data=2), "big-endian"),
    (_elf([(1, 0, 0x20000000, b"", 16)]), "no loadable bytes"),
    (_elf([(1, 0, 0x1000, b"abcd", 4), (1, 0, 0x1002, b"ef", 2)]), "overlap at 0x00001002"),
])
def test_bad_elf(tmp_path, content, expected):
    path = tmp_path / "bad.elf"
    path.write_bytes(content)
    with pytest.raises(FlashError) as e:
        load_elf(path)
    assert expected in _one_line(e)


def test_raw_bin_needs_a_base(tmp_path):
    path = tmp_path / "fw.bin"
    path.write_bytes(b"\x00\x01\x02")
    assert load_bin(path, 0x1000) == [(0x1000, b"\x00\x01\x02")]
    assert load_image(path, 0x1000) == [(0x1000, b"\x00\x01\x02")]
    with pytest.raises(FlashError, match="not an ELF file"):
        load_image(path)
    with pytest.raises(FlashError, match="cannot read firmware image"):
        load_elf(tmp_path / "missing.elf")


# ---------------------------------------------------------------- debug probe

def _fake_tool(bin_dir: Path, name: str, log: Path, exit_code: int = 0) -> None:
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "{log}"\n'
                      f'echo "Error: probe says no" >&2\nexit {exit_code}\n')
    script.chmod(0o755)


@pytest.fixture
def elf_file(tmp_path):
    path = tmp_path / "fw.elf"
    path.write_bytes(_elf([(1, 0x08000000, 0x08000000, b"abcd", 4)]))
    return path


def test_probe_prefers_pyocd(tmp_path, monkeypatch, elf_file):
    bin_dir, log = tmp_path / "bin", tmp_path / "args.txt"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "pyocd", log)
    _fake_tool(bin_dir, "openocd", tmp_path / "openocd.txt")
    monkeypatch.setenv("PATH", str(bin_dir))
    flash_probe(elf_file, "stm32f746-disco")
    assert log.read_text().splitlines() == ["flash", "-t", "stm32f746xx", str(elf_file)]
    flash_probe(elf_file, "nrf52840")
    assert log.read_text().splitlines() == ["flash", "-t", "nrf52840", str(elf_file)]
    assert not (tmp_path / "openocd.txt").exists()


def test_probe_falls_back_to_openocd(tmp_path, monkeypatch, elf_file):
    bin_dir, log = tmp_path / "bin", tmp_path / "args.txt"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "openocd", log)
    monkeypatch.setenv("PATH", str(bin_dir))
    flash_probe(elf_file, "nrf52840-dongle")
    assert log.read_text().splitlines() == ["-f", "board/nordic_nrf52_dk.cfg", "-c",
                                            f"program {elf_file} verify reset exit"]


def test_probe_errors(tmp_path, monkeypatch, elf_file):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(FlashError) as e:
        flash_probe(elf_file, "stm32f746")
    assert "neither is on PATH" in _one_line(e)
    with pytest.raises(FlashError, match="no probe target known for board 'esp32'"):
        flash_probe(elf_file, "esp32")
    _fake_tool(bin_dir, "pyocd", tmp_path / "args.txt", exit_code=1)
    with pytest.raises(FlashError) as e:
        flash_probe(elf_file, "stm32f746")
    assert _one_line(e).endswith("(exit 1): Error: probe says no")
