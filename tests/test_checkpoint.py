"""Checkpoints of the trainable parameters in flash (firmware/tt_checkpoint.c).

The checkpoint code runs on the host flash (firmware/port_host_flash.c: a file mapped with
MAP_SHARED, power cuts injected with TT_FLASH_CUT_AFTER) with a fake model of four
parameters (tests/c/checkpoint_model), driven by tests/c/checkpoint_harness.c. The slot
layout documented in tt_checkpoint.h is checked byte for byte against an independent Python
encoder (zlib.crc32 for the CRC), and slots crafted by that encoder are what the corruption
and foreign-checkpoint tests feed the firmware.

The power-cut tests kill a save after every single byte it erases or programs, boot a fresh
process on the same flash file and require the parameters to be exactly the old checkpoint's
or exactly the new one's.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRMWARE = ROOT / "firmware"
CDIR = ROOT / "tests" / "c"
MODEL_DIR = CDIR / "checkpoint_model"
HARNESS = CDIR / "checkpoint_harness.c"
SOURCES = [HARNESS, MODEL_DIR / "model.c", FIRMWARE / "tt_checkpoint.c",
           FIRMWARE / "tt_crc32.c", FIRMWARE / "port_host_flash.c"]

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wconversion"]
ARM_FLAGS = ["-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"]

# The fake model (tests/c/checkpoint_model/model.h).
MODEL_ID = 0x5EED1234
OTHER_MODEL_ID = 0x0BADF00D
PARAM_BYTES = (24, 13, 12, 5)
STATE_BYTES = (4, 20, 11)  # pending count, momentum, shadow bytes
SLOT_SIZE = 4096  # the host default for 89 bytes of parameters and state: one 4 KB sector
RECEIVED = "FAKE_RECEIVED"  # the fake model with received tensors (layout version 3)
RECEIVED_BYTES = (7, 40, 3)  # tests/c/checkpoint_model/model.h
CUT_EXIT = 75


def _header_defines() -> dict[str, int]:
    """The TT_CKPT_* numbers from tt_checkpoint.h, so the test and the C agree by construction."""
    text = (FIRMWARE / "tt_checkpoint.h").read_text()
    found = re.findall(r"#define (TT_CKPT_\w+) \(?(-?(?:0x[0-9A-Fa-f]+|\d+))u?\)?", text)
    return {name: int(value, 0) for name, value in found}


CK = _header_defines()
HEADER = CK["TT_CKPT_HEADER_BYTES"]
NONE, ENOFLASH, EUNIT, ETOOBIG = (CK["TT_CKPT_NONE"], CK["TT_CKPT_ENOFLASH"],
                                  CK["TT_CKPT_EUNIT"], CK["TT_CKPT_ETOOBIG"])


def round_up(n: int, unit: int) -> int:
    return (n + unit - 1) // unit * unit


def pattern(variant: int, state: bool = True) -> list[bytes]:
    """The parameter (and state) bytes the harness's `fill variant` writes (the C's formula)."""
    sizes = PARAM_BYTES + (STATE_BYTES if state else ())
    return [bytes((variant * 53 + i * 17 + j * 29 + 7) & 0xFF for j in range(n))
            for i, n in enumerate(sizes)]


def encode_slot(variant: int, seq: int, unit: int = 4, *, model_id: int = MODEL_ID,
                version: int | None = None, num_params: int = len(PARAM_BYTES),
                write_unit: int | None = None, payload_bytes: int | None = None,
                state: bool = True, num_state: int | None = None) -> bytes:
    """A slot's used bytes as tt_checkpoint.h documents them, written independently of the C:
    the parameters, then (`state`) the training state."""
    payload = b"".join(p + b"\xff" * (round_up(len(p), unit) - len(p))
                       for p in pattern(variant, state))
    fields = struct.pack(
        "<4I2HI", CK["TT_CKPT_VERSION"] if version is None else version, model_id, seq,
        len(payload) if payload_bytes is None else payload_bytes, num_params,
        (len(STATE_BYTES) if state else 0) if num_state is None else num_state,
        unit if write_unit is None else write_unit)
    crc = zlib.crc32(fields + payload)
    header = fields + struct.pack("<2I", crc, CK["TT_CKPT_MAGIC"])
    assert len(header) == HEADER
    return header + b"\xff" * (round_up(HEADER, unit) - HEADER) + payload


def used_bytes(unit: int, state: bool = True) -> int:
    sizes = PARAM_BYTES + (STATE_BYTES if state else ())
    return round_up(HEADER, unit) + sum(round_up(n, unit) for n in sizes)


def flash_image(*slots: bytes | None, slot_size: int = SLOT_SIZE) -> bytes:
    out = bytearray(b"\xff" * (2 * slot_size))
    for k, s in enumerate(slots):
        if s is not None:
            out[k * slot_size:k * slot_size + len(s)] = s
    return bytes(out)


Harness = Callable[..., list[str]]


def _defines_for(src: Path, defines: tuple[str, ...]) -> tuple[str, ...]:
    """The -D options a source reads: the host flash its TT_HOST_FLASH_*, the checkpoint code
    (through model.h) FAKE_MODEL_ID; so objects are shared between harness variants."""
    prefix = {"port_host_flash.c": "TT_HOST_FLASH_", "tt_checkpoint.c": "FAKE_MODEL_ID"}
    want = prefix.get(src.name)
    return tuple(d for d in defines if d == RECEIVED  # the model's shape: every source's
                 or (want is not None and d.startswith(want)))


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Link the harness once per set of -D options, compiling each object once."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    out_dir = tmp_path_factory.mktemp("ckpt_bin")
    objects: dict[tuple[Path, tuple[str, ...]], Path] = {}
    built: dict[tuple[str, ...], Path] = {}

    def compile_(cmd: list[str]) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"

    def _build(*defines: str) -> Path:
        if defines not in built:
            objs = []
            for src in SOURCES:
                key = (src, _defines_for(src, defines))
                if key not in objects:
                    obj = out_dir / f"{src.stem}_{len(objects)}.o"
                    compile_(["gcc", *CFLAGS, *(f"-D{d}" for d in key[1]), f"-I{MODEL_DIR}",
                              f"-I{FIRMWARE}", "-c", str(src), "-o", str(obj)])
                    objects[key] = obj
                objs.append(str(objects[key]))
            exe = out_dir / f"harness{len(built)}"
            compile_(["gcc", "-o", str(exe), *objs])
            built[defines] = exe
        return built[defines]

    return _build


@pytest.fixture
def flash(tmp_path: Path) -> Path:
    return tmp_path / "flash.bin"


def run(exe: Path, flash_file: Path | None, *args: str | int) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TT_FLASH_")}
    if flash_file is not None:
        env["TT_FLASH_FILE"] = str(flash_file)
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, f"{args}: rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout.splitlines()


def slot_bytes(flash_file: Path, slot: int, n: int, slot_size: int = SLOT_SIZE) -> bytes:
    return flash_file.read_bytes()[slot * slot_size:slot * slot_size + n]


# ---- (a) round trip, sequence numbers, alternating slots, the documented layout ----

@pytest.mark.parametrize("unit", [1, 4, 16, 32])
def test_round_trip_layout_and_alternating_slots(build: Callable[..., Path], flash: Path,
                                                 unit: int) -> None:
    exe = build(f"TT_HOST_FLASH_WRITE_UNIT={unit}")
    n = used_bytes(unit)
    assert run(exe, flash, "info", "newest", "load") == [
        f"info {SLOT_SIZE} {unit}", f"newest {NONE} 0", f"load {NONE} 0 init"]
    assert flash.read_bytes() == b"\xff" * (2 * SLOT_SIZE)  # created blank

    assert run(exe, flash, "save", 1) == ["save 0 1"]
    assert slot_bytes(flash, 0, SLOT_SIZE) == encode_slot(1, 1, unit).ljust(SLOT_SIZE, b"\xff")
    assert slot_bytes(flash, 1, SLOT_SIZE) == b"\xff" * SLOT_SIZE
    assert run(exe, flash, "load") == ["load 0 1 v1"]  # a new process: it came from the file

    # Each save goes to the slot not holding the newest, with seq + 1; the newest is intact.
    assert run(exe, flash, "save", 2) == ["save 0 2"]
    assert slot_bytes(flash, 0, n) == encode_slot(1, 1, unit)
    assert slot_bytes(flash, 1, n) == encode_slot(2, 2, unit)
    assert run(exe, flash, "save", 3, "newest") == ["save 0 3", "newest 0 3"]
    assert slot_bytes(flash, 0, n) == encode_slot(3, 3, unit)
    assert slot_bytes(flash, 1, n) == encode_slot(2, 2, unit)
    assert run(exe, flash, "fill", 9, "load", "save", 4) == ["load 0 3 v3", "save 0 4"]
    assert slot_bytes(flash, 1, n) == encode_slot(4, 4, unit)
    assert run(exe, flash, "load") == ["load 0 4 v4"]


def test_in_memory_flash_without_a_file(build: Callable[..., Path]) -> None:
    exe = build()
    assert run(exe, None, "load", "save", 1, "save", 2, "fill", 7, "load", "save", 3,
               "fill", 7, "load") == [f"load {NONE} 0 init", "save 0 1", "save 0 2",
                                      "load 0 2 v2", "save 0 3", "load 0 3 v3"]


def test_python_encoded_slot_loads(build: Callable[..., Path], flash: Path) -> None:
    """The layout as documented is all the loader needs."""
    flash.write_bytes(flash_image(None, encode_slot(42, 7)))
    assert run(build(), flash, "load", "save", 1) == ["load 0 7 v42", "save 0 8"]
    assert slot_bytes(flash, 0, used_bytes(4)) == encode_slot(1, 8)


def test_sequence_number_wraps(build: Callable[..., Path], flash: Path) -> None:
    flash.write_bytes(flash_image(encode_slot(1, 0xFFFFFFFF), encode_slot(2, 0)))
    assert run(build(), flash, "load", "save", 3, "load") == [
        "load 0 0 v2", "save 0 1", "load 0 1 v3"]
    assert slot_bytes(flash, 0, used_bytes(4)) == encode_slot(3, 1)


# ---- (b) another model's checkpoints are never loaded ----

def test_other_model_checkpoint_is_ignored(build: Callable[..., Path], flash: Path) -> None:
    exe, other = build(), build(f"FAKE_MODEL_ID=0x{OTHER_MODEL_ID:08X}u")
    assert run(other, flash, "save", 5, "save", 6) == ["save 0 1", "save 0 2"]
    assert run(exe, flash, "newest", "load") == [f"newest {NONE} 0", f"load {NONE} 0 init"]
    # With nothing valid of its own the model starts at seq 1 in slot 0; the other model's
    # newer checkpoint in slot 1 is left alone and does not win.
    assert run(exe, flash, "save", 1, "load") == ["save 0 1", "load 0 1 v1"]
    assert slot_bytes(flash, 1, used_bytes(4)) == encode_slot(6, 2, model_id=OTHER_MODEL_ID)
    assert run(other, flash, "load") == ["load 0 2 v6"]


@pytest.mark.parametrize("field", [
    {"model_id": OTHER_MODEL_ID}, {"version": 1}, {"num_params": 3}, {"write_unit": 8},
    {"payload_bytes": used_bytes(4) - HEADER - 4}, {"num_state": 2}])
def test_newer_slot_with_foreign_fields_is_ignored(build: Callable[..., Path], flash: Path,
                                                   field: dict[str, int]) -> None:
    """A newer slot with a correct CRC but another model id, format version, parameter or
    state count, write unit or payload size loses to this model's older checkpoint."""
    flash.write_bytes(flash_image(encode_slot(1, 1), encode_slot(2, 5, **field)))
    assert run(build(), flash, "load", "save", 3) == ["load 0 1 v1", "save 0 2"]


# ---- (c) any single corrupted byte of the newest slot falls back to the older one ----

def test_corrupt_byte_of_newest_falls_back(build: Callable[..., Path], flash: Path) -> None:
    exe = build()
    good = flash_image(encode_slot(1, 1), encode_slot(2, 2))
    n = used_bytes(4)
    for offset in range(n):
        for mask in (0x01, 0x80, 0xFF):
            image = bytearray(good)
            image[SLOT_SIZE + offset] ^= mask
            flash.write_bytes(image)
            assert run(exe, flash, "load") == ["load 0 1 v1"], (offset, mask)
    # Bytes past the checkpoint are not part of it.
    image = bytearray(good)
    image[SLOT_SIZE + n] = 0
    flash.write_bytes(image)
    assert run(exe, flash, "load") == ["load 0 2 v2"]
    # Both slots corrupt: nothing to load and the compiled-in values stay.
    image[5] ^= 0x10
    image[SLOT_SIZE + 40] ^= 0x10
    flash.write_bytes(image)
    assert run(exe, flash, "load") == [f"load {NONE} 0 init"]


# ---- (d) a power cut at every byte of a save ----

def cut_every_byte(exe: Path, flash: Path, new: int, extra: int = 3) -> list[tuple]:
    lines = run(exe, flash, "cutloop", new, extra)
    rows = []
    for line in lines:
        tag, n, save, changed, rc, seq, cls = line.split()
        assert tag == "cut"
        rows.append((int(n), save, int(changed), int(rc), int(seq), cls))
    return rows


def check_cuts(rows: list[tuple], total: int, target: int, old: tuple[int, int, str],
               new: tuple[int, int, str], extra: int = 3) -> None:
    """old/new: (load rc, seq, class) the boot must report before/after the commit."""
    assert [r[0] for r in rows] == list(range(1, total + extra + 1))
    for n, save, changed, rc, seq, cls in rows:
        # The save is killed at each of its `total` bytes and completes beyond them.
        assert save == ("cut" if n <= total else "done"), n
        # Only the target slot is ever written.
        assert changed & ~(1 << target) == 0, n
        # Exactly old or exactly new; the last byte of the save (the magic's) commits it.
        assert (rc, seq, cls) == (old if n < total else new), n


# Each cut costs two fork()s, and the erase of a 4 KB slot is 4096 cut points of the same kind,
# so one scenario runs on the default slot and the others on a 256-byte one.
SMALL_SLOT = 256


@pytest.mark.parametrize(("unit", "slot_size"), [(4, SLOT_SIZE), (16, SMALL_SLOT)])
def test_power_cut_during_save_over_an_older_checkpoint(build: Callable[..., Path], flash: Path,
                                                        unit: int, slot_size: int) -> None:
    """A (seq 2) in slot 1, an older checkpoint in slot 0: saving B erases and rewrites slot 0.
    Cut after each of its bytes (erase and program), then boot: A or B, never a mix."""
    exe = build(f"TT_HOST_FLASH_WRITE_UNIT={unit}", f"TT_HOST_FLASH_SLOT_SIZE={slot_size}")
    assert run(exe, flash, "save", 1, "save", 2) == ["save 0 1", "save 0 2"]
    before = flash.read_bytes()
    total = slot_size + used_bytes(unit)  # erase every byte of the slot, program the used ones
    rows = cut_every_byte(exe, flash, 3)
    check_cuts(rows, total, target=0, old=(0, 2, "v2"), new=(0, 3, "v3"))
    # From the first erased byte on, the target slot differs from before (its older
    # checkpoint is gone); slot 1 never changes.
    assert all(r[2] == 1 for r in rows)
    # The loop restored the before state for every cut and left the last completed save.
    assert flash.read_bytes()[slot_size:] == before[slot_size:]
    assert flash.read_bytes()[:used_bytes(unit)] == encode_slot(3, 3, unit)


def test_power_cut_during_save_next_to_one_checkpoint(build: Callable[..., Path],
                                                      flash: Path) -> None:
    """A (seq 1) in slot 0, slot 1 blank: saving B writes slot 1."""
    exe = build(f"TT_HOST_FLASH_SLOT_SIZE={SMALL_SLOT}")
    assert run(exe, flash, "save", 1) == ["save 0 1"]
    check_cuts(cut_every_byte(exe, flash, 2), SMALL_SLOT + used_bytes(4), target=1,
               old=(0, 1, "v1"), new=(0, 2, "v2"))


def test_power_cut_during_first_checkpoint(build: Callable[..., Path], flash: Path) -> None:
    """No checkpoint yet: a cut save leaves none, and the boot keeps the compiled-in values."""
    exe = build(f"TT_HOST_FLASH_SLOT_SIZE={SMALL_SLOT}")
    assert run(exe, flash, "newest") == [f"newest {NONE} 0"]  # creates the blank file
    check_cuts(cut_every_byte(exe, flash, 1), SMALL_SLOT + used_bytes(4), target=0,
               old=(NONE, 0, "init"), new=(0, 1, "v1"))


def test_cut_injection_counts_bytes(build: Callable[..., Path], flash: Path) -> None:
    """TT_FLASH_CUT_AFTER as a user would set it: exit 75, the flash file keeps the bytes."""
    exe = build()
    run(exe, flash, "newest")
    env = {**os.environ, "TT_FLASH_FILE": str(flash), "TT_FLASH_CUT_AFTER": str(SLOT_SIZE + 10)}
    proc = subprocess.run([str(exe), "save", "1"], env=env, capture_output=True)
    assert proc.returncode == CUT_EXIT
    # The erase (all of slot 0) and the first 10 payload bytes (after the header span).
    assert slot_bytes(flash, 0, HEADER + 12) == b"\xff" * HEADER + encode_slot(1, 1)[
        HEADER:HEADER + 10] + b"\xff\xff"
    assert run(exe, flash, "load") == [f"load {NONE} 0 init"]


# ---- errors: boards that cannot hold the checkpoint; flash never touched ----

def test_slot_too_small_no_flash_and_bad_unit(build: Callable[..., Path], flash: Path) -> None:
    tiny = build("TT_HOST_FLASH_SLOT_SIZE=64")
    assert run(tiny, flash, "info", "save", 1, "load", "newest") == [
        "info 64 4", f"save {ETOOBIG} 0", f"load {ETOOBIG} 0 v1", f"newest {ETOOBIG} 0"]
    assert flash.read_bytes() == b"\xff" * 128

    flash.unlink()
    none = build("TT_HOST_FLASH_SLOT_SIZE=0")
    assert run(none, flash, "info", "save", 1, "load") == [
        "info 0 4", f"save {ENOFLASH} 0", f"load {ENOFLASH} 0 v1"]
    assert not flash.exists()

    wide = build("TT_HOST_FLASH_WRITE_UNIT=64")
    assert run(wide, flash, "save", 1, "load") == [f"save {EUNIT} 0", f"load {EUNIT} 0 v1"]
    assert flash.read_bytes() == b"\xff" * (2 * SLOT_SIZE)


def test_a_slot_too_small_for_the_state_keeps_the_parameters(build: Callable[..., Path],
                                                             flash: Path) -> None:
    """A slot with room for the parameters but not the state: the checkpoint holds the
    parameters alone (num_state 0), and a load restores them."""
    room = used_bytes(4, state=False)
    assert room < used_bytes(4)
    exe = build(f"TT_HOST_FLASH_SLOT_SIZE={room}")
    assert run(exe, flash, "save", 5) == ["save 0 1"]
    assert slot_bytes(flash, 0, room, room) == encode_slot(5, 1, state=False)
    assert run(exe, flash, "load")[0].startswith("load 0 1 ")


def test_wrong_size_flash_file_starts_blank(build: Callable[..., Path], flash: Path) -> None:
    flash.write_bytes(encode_slot(1, 1) * 3)  # another build's layout
    assert run(build(), flash, "load", "save", 2) == [f"load {NONE} 0 init", "save 0 1"]
    assert flash.stat().st_size == 2 * SLOT_SIZE


# ---- (e) the firmware side builds for the Cortex-M7 with only the allowed headers ----

def test_commit_mark_is_never_half_written() -> None:
    """Every byte of the magic has a zero bit and is not 0xFF, so a magic programmed in part
    (bytes or bits still erased) never reads as the magic."""
    magic = struct.pack("<I", CK["TT_CKPT_MAGIC"])
    assert magic == b"TTCK" and all(b != 0xFF for b in magic)
    assert CK["TT_CKPT_OFF_MAGIC"] + 4 == HEADER  # the last bytes of the header


def test_checkpoint_uses_only_allowed_headers() -> None:
    allowed = {"stdint.h", "stddef.h", "string.h"}
    for path in (FIRMWARE / "tt_checkpoint.c", FIRMWARE / "tt_checkpoint.h"):
        system = set(re.findall(r"#include <([^>]+)>", path.read_text()))
        assert system <= allowed, (path.name, system - allowed)
        assert not re.search(r"\b(malloc|calloc|free|printf)\s*\(", path.read_text())


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                    reason="arm-none-eabi-gcc not found")
def test_builds_for_cortex_m7(tmp_path: Path) -> None:
    cmd = ["arm-none-eabi-gcc", *CFLAGS, *ARM_FLAGS, f"-I{MODEL_DIR}", f"-I{FIRMWARE}",
           "-fstack-usage", "-c", str(FIRMWARE / "tt_checkpoint.c"), "-o",
           str(tmp_path / "ckpt.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The save's own frame stays small: the 64-byte stage buffer plus some words.
    usage = (tmp_path / "ckpt.su").read_text()
    save = re.search(r"tt_checkpoint_save\t(\d+)", usage)
    assert save is not None and int(save.group(1)) <= 256, usage


# ---- (f) received tensors (--receive): layout 3, and power cuts across a receive ----

def encode_received_slot(variant: int, seq: int, unit: int) -> bytes:
    """A layout-3 slot as tt_checkpoint.h documents it, written independently of the C: the
    received tensors (each padded to 16 bytes or the unit), then the parameters and the state
    (each padded to the unit)."""
    pad = max(16, unit)
    recv = [bytes((variant * 53 + i * 17 + j * 29 + 7) & 0xFF for j in range(n))
            for i, n in enumerate(RECEIVED_BYTES)]
    rest = [bytes((variant * 53 + (i + len(RECEIVED_BYTES)) * 17 + j * 29 + 7) & 0xFF
                  for j in range(n)) for i, n in enumerate(PARAM_BYTES + STATE_BYTES)]
    payload = b"".join(p + b"\xff" * (round_up(len(p), pad) - len(p)) for p in recv) + \
        b"".join(p + b"\xff" * (round_up(len(p), unit) - len(p)) for p in rest)
    fields = struct.pack("<4I2HI", CK["TT_CKPT_VERSION_RECEIVED"], MODEL_ID, seq, len(payload),
                         len(PARAM_BYTES), len(STATE_BYTES), unit)
    header = fields + struct.pack("<2I", zlib.crc32(fields + payload), CK["TT_CKPT_MAGIC"])
    return header + b"\xff" * (round_up(HEADER, unit) - HEADER) + payload


@pytest.mark.parametrize("unit", [1, 2, 4, 8, 16, 32])
def test_a_receive_writes_layout_3_and_boots_with_the_values(build: Callable[..., Path],
                                                             flash: Path, unit: int) -> None:
    exe = build(RECEIVED, f"TT_HOST_FLASH_WRITE_UNIT={unit}")
    assert run(exe, flash, "load", "receive", 1, "load") == [
        f"load {NONE} 0 init", "receive 0 1", "load 0 1 v1"]
    want = encode_received_slot(1, 1, unit)
    assert slot_bytes(flash, 0, len(want)) == want
    # a save keeps the received values it runs (read in place from the slot) beside new
    # parameters; a later boot reads both
    assert run(exe, flash, "load", "fill", 2, "save", 2) == ["load 0 1 v1", "save 0 2"]
    assert run(exe, flash, "load")[0].startswith("load 0 2 mix")  # received v1, params v2
    assert run(exe, flash, "receive", 3, "load") == ["receive 0 3", "load 0 3 v3"]
    assert slot_bytes(flash, 0, len(want)) == encode_received_slot(3, 3, unit)


@pytest.mark.parametrize(("unit", "slot_size"), [(1, SMALL_SLOT), (4, SMALL_SLOT),
                                                (32, 2 * SMALL_SLOT)])
def test_power_cut_during_a_receive_boots_old_or_new(build: Callable[..., Path], flash: Path,
                                                     unit: int, slot_size: int) -> None:
    """A receive of variant 1 in slot 0; receiving variant 2 writes slot 1. Cut after each of
    its bytes (the erase, each piece, the commit), then boot: received tensors, parameters
    and state all of variant 1 or all of variant 2, never a mix."""
    exe = build(RECEIVED, f"TT_HOST_FLASH_WRITE_UNIT={unit}",
                f"TT_HOST_FLASH_SLOT_SIZE={slot_size}")
    assert run(exe, flash, "receive", 1) == ["receive 0 1"]
    lines = run(exe, flash, "cutloop", 2, 3, "receive")
    rows = [(int(n), save, int(changed), int(rc), int(seq), cls)
            for _, n, save, changed, rc, seq, cls in (line.split() for line in lines)]
    total = sum(r[1] == "cut" for r in rows)
    assert total > slot_size  # the erase, then the pieces and the commit
    check_cuts(rows, total, target=1, old=(0, 1, "v1"), new=(0, 2, "v2"))
