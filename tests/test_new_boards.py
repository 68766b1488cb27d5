"""The boards of issue "boards" (Pico, Pico 2, STM32U585) and the Corstone-300 end to end on
their QEMU twins: the
bundled digits CNN, fp32 and int8, built for each board and trained over the serial link for
24 steps, against the host build of the same model; a checkpoint written with the board's own
flash write unit; the Pico's firmware checked to hold only ARMv6-M instructions.

The twins: the Cortex-M33 boards run on mps2-an505 (an SSE-200 in its Secure state), the
RP2040's ARMv6-M code on mps2-an385 (a Cortex-M3, a strict superset: hence the instruction
check, so the twin cannot hide an instruction the M0+ lacks). The Corstone-300's twin is the
board itself (QEMU's mps3-an547 models the MPS3 FPGA image AN547), so its board image must run
there too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.library_helpers import DIGITS_ONNX, STEPS, build, digits
from tinytrain.boards import CKPT_HEADER_BYTES, load_board
from tinytrain.device.runner import HostProgram, open_program

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")

NEW_BOARDS = ("rp2040", "rp2350", "stm32u585", "corstone300", "alif_e7_he")
SHAPE = (1, 8, 8)  # one digit in the ONNX model's own layout
# fp32: host glibc and twin newlib differ in expf/logf by an ulp or two (tests/test_boards.py
# measures ~1e-7 relative on the losses over 24 steps)
LOSS_RTOL = 1e-5
PARAM_ATOL = 1e-5  # the same ulp-level libm differences, carried through 24 SGD steps


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    x, y = digits(STEPS, SHAPE)
    np.savez(d / "calib.npz", x=digits(64, SHAPE, start=STEPS)[0])
    return d, x, y


def _variant(kind: str, d) -> tuple[str, ...]:
    if kind == "int8":  # int8 training is plain SGD
        return ("--lr", "0.05", "--quantize", "int8", "--calib", str(d / "calib.npz"),
                "--update", "last:2")
    return ("--lr", "0.05", "--momentum", "0.9")


@pytest.fixture(scope="module")
def host_runs(data, tmp_path_factory):
    """Losses and parameters of the host build: the reference for every twin."""
    d, x, y = data
    out = {}
    for kind in ("fp32", "int8"):
        b = build(DIGITS_ONNX, tmp_path_factory.mktemp("host") / kind, *_variant(kind, d))
        with HostProgram(b) as p:
            out[kind] = _run(p, x, y)
    return out


def _run(prog, x, y):
    losses = [prog.train(xi.reshape(-1), yi)[0] for xi, yi in zip(x, y, strict=True)]
    return np.array(losses), prog.get_params()


@pytest.mark.parametrize("kind", ["fp32", "int8"])
@pytest.mark.parametrize("board", NEW_BOARDS)
def test_twin_trains_like_the_host(board, kind, data, host_runs, tmp_path):
    d, x, y = data
    fw = build(DIGITS_ONNX, tmp_path / board, "--board", board, *_variant(kind, d))
    assert (fw / "firmware.elf").exists() and (fw / "firmware_qemu.elf").exists()
    with open_program(fw, qemu=True) as p:
        assert p.device.board == board
        got_loss, got_params = _run(p, x, y)
        assert p.device_stats()["steps"] == STEPS
    want_loss, want_params = host_runs[kind]
    assert want_loss[-1] != want_loss[0]  # it did train
    assert got_params.keys() == want_params.keys()
    if kind == "int8":  # integer forward, the same fp32 backward order: bit for bit
        np.testing.assert_array_equal(got_loss, want_loss)
        for k, v in want_params.items():
            np.testing.assert_array_equal(got_params[k], v, err_msg=k)
    else:
        np.testing.assert_allclose(got_loss, want_loss, rtol=LOSS_RTOL)
        for k, v in want_params.items():
            np.testing.assert_allclose(got_params[k], v, atol=PARAM_ATOL, err_msg=k)
    r = json.loads((fw / "report.json").read_text())
    assert 0 < r["firmware"]["flash_used"] < 256 * 1024
    # each checkpoint entry padded to the board's write unit (the U585's quad-words: 16 B)
    ckpt = r["checkpoint"]
    unit = load_board(board).flash_write_unit
    assert (ckpt["bytes"] - CKPT_HEADER_BYTES) % unit == 0 and ckpt["bytes"] <= ckpt["slot"]
    sf = r["soft_float"]  # the M0+ prices its fp32 MACs (soft-float); the M33s have an FPU
    if board == "rp2040":
        m = r["macs"]
        assert sf["fp32_macs"] == m["backward"] + (m["forward"] if kind == "fp32" else 0)
        assert sf["instructions"] > 100 * sf["fp32_macs"]
        assert (fw / "firmware.uf2").exists()
    else:
        assert sf is None


def test_a_board_file_outside_the_package(tmp_path, cli):
    """`--board path/NAME.toml`: a user's board (here an STM32F746 with 2 MB of flash, as the
    STM32F767) builds with the package's board layer, and program.json keeps the path so the
    twin and the flasher find the board again."""
    text = (ROOT / "boards" / "stm32f746.toml").read_text()
    text = text.replace("flash_kb = 1024", "flash_kb = 2048").replace(
        "flash_sectors_kb = [32, 32, 32, 32, 128, 256, 256, 256]",
        "flash_sectors_kb = [32, 32, 32, 32, 128, 256, 256, 256, 256, 256, 256, 256]")
    (tmp_path / "boards").mkdir()
    board = tmp_path / "boards" / "f767.toml"
    board.write_text(text)
    fw = build(DIGITS_ONNX, tmp_path / "fw", "--board", str(board), "--lr", "0.05")
    assert json.loads((fw / "program.json").read_text())["board"] == str(board)
    r = json.loads((fw / "report.json").read_text())
    assert r["flash_bytes"]["program_region"] > 1024 * 1024  # the program has the new flash
    with open_program(fw, qemu=True) as p:
        assert p.device.board == "f767"
        assert np.isfinite(p.train(digits(1, SHAPE)[0][0].reshape(-1), 3)[0])
    bad = cli("build", DIGITS_ONNX, "--board", tmp_path / "nope.toml", "--out",
              tmp_path / "x", check=False)
    assert bad.returncode == 2 and "nope.toml does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_corstone300_board_image_runs_on_its_twin(data, tmp_path):
    """QEMU's mps3-an547 is the MPS3 FPGA image the board runs, so the image the MCC would load
    (firmware.elf) must answer on it exactly as firmware_qemu.elf does (its layer is the twin's
    mps2.c, which needs the AN547's UART address in the board's objects too). Its code memories
    lie 16 MB apart: no .bin, which would be mostly gap."""
    d, x, y = data
    fw = build(DIGITS_ONNX, tmp_path / "fw", "--board", "corstone300", *_variant("int8", d))
    assert not (fw / "firmware.bin").exists() and (fw / "firmware.hex").exists()
    shutil.copy(fw / "firmware.elf", fw / "firmware_qemu.elf")
    with open_program(Path(fw), qemu=True, timeout=0.5) as p:  # 40 tries: ~20 s if silent
        assert p.device.board == "corstone300"
        assert np.isfinite(p.train(x[0].reshape(-1), y[0])[0])
