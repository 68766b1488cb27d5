"""The QEMU twin's flash persists like a board's: a checkpoint written by `run --qemu
--checkpoint` is loaded by the firmware when a later twin boots (DIR/twin_flash.bin, through
the same CRC and slot logic as on the board), `--erase-flash` forgets it, a corrupted slot is
refused by the firmware, and a rebuild starts with erased flash."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, tinytrain
from tinytrain.boards import load_board
from tinytrain.device.qemu import QEMU, TWIN_FLASH, TwinFlash
from tinytrain.device.runner import open_program

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
BOARD = "nrf52840"  # tests/test_boards.py covers the stm32f746 twin's checkpoints
HEADER = 32  # firmware/tt_checkpoint.h: the payload starts after the header (unit 4)
WAIT = 60.0  # seconds before the test gives up on the CLI (it needs a few)


def _build(out: Path) -> Path:
    tinytrain("build", DIGITS, "--board", BOARD, "--out", out, "--lr", "0.05")
    return out


def _twin_slots(makefile: Path) -> str:
    """The TWIN_SLOTS = ... definition of the generated Makefile (continuation lines joined)."""
    text = makefile.read_text().replace("\\\n", " ")
    return next(line for line in text.splitlines() if line.startswith("TWIN_SLOTS"))


def _infer(build: Path, data: Path, out: Path, *extra: str) -> np.ndarray:
    tinytrain("infer", build, "--qemu", "--data", data, "--out", out, *extra)
    return np.load(out)


@pytest.fixture(scope="module")
def firmware(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("twin") / "fw")


def test_twin_checkpoint_survives_a_restart(firmware: Path, tmp_path: Path) -> None:
    fw = firmware
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.uniform(0, 1, (24, 1, 8, 8)).astype(np.float32),
             y=rng.integers(0, 10, 24))
    d, flash_file = tmp_path / "d.npz", fw / TWIN_FLASH

    initial = _infer(fw, d, tmp_path / "initial.npy")
    assert not flash_file.exists()  # nothing written: the file only changes with the flash

    r = tinytrain("run", fw, "--qemu", "--data", d, "--epochs", "2", "--checkpoint",
                  "--save", tmp_path / "s.npz")
    assert "checkpoint 1 written to flash" in r.stdout and TWIN_FLASH in r.stdout
    with open_program(fw, qemu=True) as p:
        assert p.device_stats()["boot_checkpoint"] == 1  # the firmware loaded it at boot
    # The slots tinytrain saves and preloads are the ones the twin's firmware was built with.
    flash = TwinFlash.of(fw, load_board(BOARD))
    defs = dict(re.findall(r"-D(TT_CKPT_SLOT\w*)=(\w+?)u", _twin_slots(fw / "Makefile")))
    assert flash.slots == (int(defs["TT_CKPT_SLOT0"], 0), int(defs["TT_CKPT_SLOT1"], 0))
    assert flash.slot_bytes == int(defs["TT_CKPT_SLOT_SIZE"])
    assert flash_file.stat().st_size == 2 * flash.slot_bytes

    # A new twin starts from the checkpoint: its outputs are the trained model's, the same
    # bits as the saved parameters give, not the initial ones.
    restored = _infer(fw, d, tmp_path / "restored.npy")
    explicit = _infer(fw, d, tmp_path / "explicit.npy", "--state", str(tmp_path / "s.npz"))
    np.testing.assert_array_equal(restored, explicit)
    assert not np.array_equal(restored, initial)

    # The firmware validates the slot itself: one flipped payload byte and it boots without.
    image = bytearray(flash_file.read_bytes())
    image[HEADER + 5] ^= 0x01
    flash_file.write_bytes(bytes(image))
    np.testing.assert_array_equal(_infer(fw, d, tmp_path / "corrupt.npy"), initial)
    image[HEADER + 5] ^= 0x01
    flash_file.write_bytes(bytes(image))
    np.testing.assert_array_equal(_infer(fw, d, tmp_path / "again.npy"), restored)

    # --erase-flash forgets it; so does a rebuild.
    np.testing.assert_array_equal(_infer(fw, d, tmp_path / "erased.npy", "--erase-flash"),
                                  initial)
    assert not flash_file.exists()

    # Ctrl-C (to the whole process group, as a terminal sends it) on the twin: the step in
    # flight finishes, then --save and --checkpoint; the next twin boots with that checkpoint.
    metrics, saved = tmp_path / "m.jsonl", tmp_path / "s2.npz"
    p = subprocess.Popen([sys.executable, "-m", "tinytrain", "run", str(fw), "--qemu",
                          "--data", str(d), "--epochs", "1000", "--metrics", str(metrics),
                          "--save", str(saved), "--checkpoint"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + WAIT
    while (not metrics.exists() or metrics.read_text().count("\n") < 10) and p.poll() is None:
        assert time.monotonic() < deadline, "the twin made no progress"
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=WAIT)
    assert p.returncode == 130, (out, err)
    assert "checkpoint 1 written to flash" in out and flash_file.exists(), (out, err)
    with open_program(fw, qemu=True) as prog:
        assert prog.device_stats()["boot_checkpoint"] == 1
        params = prog.get_params()
    with np.load(saved) as f:
        for name, v in params.items():
            np.testing.assert_array_equal(f[name], v, err_msg=name)

    _build(fw)
    assert not flash_file.exists()  # no file: the next twin boots with erased flash


def _state(pid: int) -> str:
    """The process's state letter (Z: exited, not yet reaped), or "" if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_twin_does_not_outlive_a_killed_tinytrain(firmware: Path, tmp_path: Path) -> None:
    """The twin has a session of its own (Ctrl-C is tinytrain's to handle), so nothing but
    its parent-death signal stops it when tinytrain is killed outright."""
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "d.npz", x=rng.uniform(0, 1, (8, 1, 8, 8)).astype(np.float32),
             y=rng.integers(0, 10, 8))
    metrics = tmp_path / "m.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "tinytrain", "run", str(firmware), "--qemu",
                          "--data", str(tmp_path / "d.npz"), "--epochs", "1000",
                          "--metrics", str(metrics)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT
        while not metrics.exists() or not metrics.read_text():
            assert time.monotonic() < deadline and p.poll() is None, "the twin never trained"
            time.sleep(0.02)
        kids = [int(k) for k in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        twins = [k for k in kids if Path(f"/proc/{k}/comm").read_text().strip() == QEMU]
        assert len(twins) == 1, kids
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + WAIT
    while _state(twins[0]) not in ("", "Z"):
        assert time.monotonic() < deadline, f"QEMU {twins[0]} still runs"
        time.sleep(0.05)


def test_a_checkpoint_survives_the_twin_being_killed(firmware: Path, tmp_path: Path) -> None:
    """A checkpoint the firmware acknowledged reaches DIR/twin_flash.bin at once: QEMU killed
    outright afterwards (no orderly stop to save the flash) loses nothing, as a board's flash
    keeps what was written before a power cut."""
    import tinytrain as tt

    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (6, 1, 8, 8)).astype(np.float32)
    (firmware / TWIN_FLASH).unlink(missing_ok=True)
    with tt.connect(firmware, qemu=True) as m:
        for xi, yi in zip(x, rng.integers(0, 10, len(x)), strict=True):
            m.learn(xi, int(yi))
        seq = m.checkpoint()
        trained = m.params()
        assert (firmware / TWIN_FLASH).exists()  # before the twin stops
        m.device.transport.twin.proc.kill()  # no save_flash at stop: QEMU is already gone
        m.device.transport.twin.proc.wait()
    with open_program(firmware, qemu=True) as p:
        assert p.device_stats()["boot_checkpoint"] == seq
        for name, v in p.get_params().items():
            np.testing.assert_array_equal(v, trained[name], err_msg=name)
