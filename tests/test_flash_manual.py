"""`tinytrain flash` on a board tinytrain does not program ([flash] protocol = "none": the
Corstone-300, whose MPS3 loads its images from an SD card, and the Alif Ensemble E7, whose
Secure Enclave writes its MRAM for Alif's SETOOLS): exit 2 with one line that says so, how the
board is programmed instead (the board file's [flash] how) and which images the build holds;
never a traceback, whatever --port, --probe or --drive say."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.library_helpers import DIGITS_ONNX, build
from tinytrain.boards import load_board
from tinytrain.device.flashing import IMAGES, manual_programming

HOW = "copy an image to the SD card and list it in images.txt"
MANUAL_BOARDS = ("corstone300", "alif_e7_he")  # the package's boards with protocol "none"


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs gcc-arm-none-eabi (installed by .ci/run)")
    return {b: build(DIGITS_ONNX, tmp_path_factory.mktemp(b) / "fw", "--board", b, "--lr", "0.05")
            for b in MANUAL_BOARDS}


@pytest.fixture(scope="module")
def corstone300(builds) -> Path:
    return builds["corstone300"]


def _one_line_error(p) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and p.stderr.startswith("error: "), p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def _how(board: str, build_dir: Path) -> str:
    """The board file's [flash] how as the error quotes it (or the generic advice)."""
    how = load_board(board).flash.get("how")
    if how is None:
        return "vendor's tools"
    return " ".join(str(how).split()).rstrip(".").replace("DIR/", f"{build_dir}/")


@pytest.mark.parametrize("opts", [(), ("--port", "/dev/ttyACM0"), ("--probe",),
                                  ("--drive", "/media/x")])
@pytest.mark.parametrize("board", MANUAL_BOARDS)
def test_flash_says_how_the_board_is_programmed(builds, board, cli, opts):
    fw = builds[board]
    err = _one_line_error(cli("flash", fw, *opts, check=False))
    assert f"does not program {board}" in err and 'protocol of its board file is "none"' in err
    assert _how(board, fw) in err
    for name in IMAGES:  # the files the user takes to the board's own tools (those it has)
        assert (str(fw / name) in err) == (fw / name).exists()


def test_the_alif_board_says_setools(builds, cli):
    err = _one_line_error(cli("flash", builds["alif_e7_he"], check=False))
    assert "SETOOLS" in err and "app-write-mram" in err and "M55_HE" in err
    assert f"copy {builds['alif_e7_he'] / 'firmware.bin'} to" in err  # DIR/ is the build


def test_flash_reads_the_board_files_how(corstone300, cli, tmp_path):
    """A board file's [flash] how is what the error says to do (here a copy of corstone300.toml
    outside the package, which the build's program.json then names)."""
    text = (ROOT / "boards" / "corstone300.toml").read_text()
    # the same board with its [flash] table (and whatever how it has) replaced by ours
    text = re.sub(r"(?ms)^\[flash\]$.*?(?=^\[|\Z)", "", text)
    board = tmp_path / "mps3.toml"
    board.write_text(f'{text.rstrip()}\n\n[flash]\nprotocol = "none"\nhow = """{HOW}\n"""\n')
    assert load_board(str(board)).flash == {"protocol": "none", "how": HOW + "\n"}
    fw = tmp_path / "fw"
    shutil.copytree(corstone300, fw, ignore=shutil.ignore_patterns("su", "runtime"))
    info = json.loads((fw / "program.json").read_text())
    (fw / "program.json").write_text(json.dumps({**info, "board": str(board)}))
    assert not (fw / "firmware.bin").exists()  # its code memories lie 16 MB apart: no .bin
    err = _one_line_error(cli("flash", fw, check=False))
    assert "does not program mps3" in err and f"{HOW}. This build's images:" in err
    assert str(fw / "firmware.hex") in err and "firmware.bin" not in err


def test_manual_programming_only_for_boards_without_a_protocol(tmp_path):
    assert manual_programming(load_board("stm32f746"), tmp_path) is None
    assert manual_programming(load_board("rp2040"), tmp_path) is None
    text = (ROOT / "boards" / "stm32f746.toml").read_text()
    board = tmp_path / "noflash.toml"
    board.write_text(text[:text.index("[flash]")])  # no [flash] table at all
    msg = manual_programming(load_board(str(board)), tmp_path)
    assert msg is not None and "is not given" in msg and "vendor's tools" in msg
    assert msg.endswith("none (rebuild it)")
