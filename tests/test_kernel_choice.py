"""Kernels under the board's flash (tinytrain/device/kernel_choice.py) and the ARMv6-M
instruction check (tinytrain/device/isa_check.py).

MCUNet-5FPS with TTE's 148 KB scheme is the build that stopped linking on the STM32F746 when
the optimised kernels grew (729 KB of the program's 640 KB): the build now keeps generic the
kernel families that free enough flash with the least work, and links."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tinytrain.device.isa_check import violations
from tinytrain.device.kernel_choice import MARGIN_BYTES, Family, choose, generic_name

needs_arm = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                               reason="needs gcc-arm-none-eabi (installed by .ci/run)")


def _fam(name: str, work: int, freed: int) -> Family:
    return Family(name, ("layer",), work, freed)


def test_choose_keeps_generic_the_cheapest_set_that_frees_enough():
    fams = [_fam("busy", 10_000_000, 10_000), _fam("big_idle", 100_000, 60_000),
            _fam("small", 1_000, 1_000), _fam("nothing", 0, 0), _fam("grows", 5, -500)]
    assert [f.name for f in choose(fams, 60_500 - MARGIN_BYTES)] == ["big_idle", "small"]
    assert [f.name for f in choose(fams, 50_000)] == ["big_idle"]  # small is not needed
    assert choose(fams, 10**9) == []  # all of them would not free enough: nothing is given up
    assert choose([_fam("grows", 5, -500)], 100) == []
    # two cheap families beat one that frees as much alone; one of them is enough for less
    ab = [_fam("a", 100, 10_000), _fam("b", 150, 10_000), _fam("c", 1_000, 20_000)]
    assert [f.name for f in choose(ab, 18_000)] == ["a", "b"]
    assert [f.name for f in choose(ab, 5_000)] == ["a"]


def test_generic_names():
    assert generic_name("tt_conv2d_s8_dw_pk_row") == "tt_conv2d_s8_row"
    assert generic_name("tt_conv2d_s8_pw") == "tt_conv2d_s8"
    assert generic_name("tt_cs_dw_input_s8_opt") == "tt_cs_dw_input_s8"


@needs_arm
@pytest.mark.parametrize("cpu, clean", [("cortex-m0plus", True), ("cortex-m3", False)])
def test_isa_check_finds_armv7m_instructions(cpu, clean, tmp_path):
    """The same C for the M0+ holds no ARMv7-M instruction; for the M3 (the RP2040's twin)
    its wide loads and CBZ are found, so the check can fail."""
    src = tmp_path / "f.c"
    src.write_text("int f(const int *p, int n) { int s = 0;\n"
                   "  for (int i = 0; i < n; i++) s += p[i] * 3 + (p[i] >> 7);\n"
                   "  return n ? s : -1; }\n"
                   "const int table[64] = {0x4f70e8bd, 0xf000f800};\n")  # data, not code
    obj = tmp_path / "f.o"
    import subprocess

    subprocess.run(["arm-none-eabi-gcc", f"-mcpu={cpu}", "-mthumb", "-O2", "-c", str(src),
                    "-o", str(obj)], check=True)
    bad = violations(obj)
    assert (bad == []) == clean, bad
    assert all("(f)" in b for b in bad)  # the table's words are never read as instructions


@needs_arm
def test_mcunet_148_kb_scheme_links_on_the_stm32f746_with_generic_kernels(tmp_path, cli,
                                                                           tte_onnx):
    pytest.importorskip("torch")
    from tests.tte_schemes import SCHEMES

    model = tte_onnx["MCUNet-5FPS"]
    np.savez(tmp_path / "calib.npz",
             x=np.random.default_rng(1).uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
    out = tmp_path / "fw"
    p = cli("build", model, "--board", "stm32f746", "--out", out, "--update",
            SCHEMES["MCUNet-5FPS", 148], "--quantize", "int8", "--calib", tmp_path / "calib.npz")
    assert "kernels kept generic to fit the flash" in p.stdout
    r = json.loads((out / "report.json").read_text())
    generic = {g["family"] for g in r["kernels"]["generic"]}
    assert "tt_conv2d_s8_dw" in generic  # the depthwise family: 12 layers, ~73 KB with packs
    assert r["firmware"]["flash_used"] <= r["flash_bytes"]["program_region"]
    code = (out / "model.c").read_text()
    assert "tt_conv2d_s8_dw" not in code and "tt_conv2d_s8_pw" in code  # pointwise kept
    by_obj = r["kernels"]["code_by_object"]
    assert "tt_q8_dw_opt" not in by_obj or by_obj["tt_q8_dw_opt"] < 8 * 1024
    assert 30 * 1024 < sum(by_obj.values()) < r["firmware"]["flash_used"] / 4
    sites = json.loads((out / "kernels.json").read_text())
    assert sorted(sites["generic"]) == sorted(generic)
