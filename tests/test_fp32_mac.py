"""`build --fp32-mac`: the channel-streamed 1x1 backward's multiply-adds fused (one rounding, as
Helium's VFMA) or separate (product and sum rounded, every other board's arithmetic).

The fused kernels against the reference kernels compiled with the same option, bit for bit,
on the host and the M55 twin: tests/test_kernels_opt_cs.py. The Corstone-300 (fused by its
board file) against a host build with --fp32-mac fused, bit for bit over 20 steps:
tests/test_tte_on_board.py. Here: the option through the CLI, and what fusing changes in
training, against the separate build of the same model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import tinytrain
from tests.library_helpers import DIGITS_ONNX

pytest.importorskip("torch")

from tests.mbv2_training import mbv2_files, train_run  # noqa: E402
from tests.tte_schemes import SCHEMES  # noqa: E402

STEPS = 20
RES = 48
# int8 weights round stochastically: a gradient one rounding apart moves a weight by one LSB
# only when its update lands within that rounding of a step (measured: never in these 20
# steps, the losses came out equal); the bar of test_kernels_opt_models.py allows for it
INT8_LOSS_RTOL = 2e-2
# fp32 weights take the gradients as they are: roundings apart, carried through 20 steps
# (measured: about 1e-7 relative), far below a wrong sum
FP32_RTOL = 1e-5
FP32_ATOL = 1e-6  # parameters near zero, where the relative difference means nothing
CASES = {  # --update and extra build options; int8 trains TTE's sparse scheme, fp32 everything
    "int8": (SCHEMES[("MobileNetV2-w0.35", 99)], ("--quantize", "int8")),
    "fp32": ("full", ("--momentum", "0.9")),
}


def _train(cli, path, d, out, case, mac):
    update, extra = CASES[case]
    if "--quantize" in extra:
        extra += ("--calib", d / "calib.npz")
    losses, params, _ = train_run(cli, path, d, out, "--update", update, *extra,
                                  "--fp32-mac", mac)
    return losses, params


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_host_build_trains_like_the_separate_one(tmp_path, cli, case):
    path = mbv2_files(tmp_path, RES, STEPS)
    sep, sep_p = _train(cli, path, tmp_path, tmp_path / "sep", case, "separate")
    fused, fused_p = _train(cli, path, tmp_path, tmp_path / "fused", case, "fused")
    code = (tmp_path / "fused" / "model.c").read_text()
    assert "tt_cs_pw_input_" in code and "tt_cs_pw_weight_sgd_" in code  # the fused kernels
    assert "-DTT_F32_FMA=1" in (tmp_path / "fused" / "Makefile").read_text()
    assert "TT_F32_FMA" not in (tmp_path / "sep" / "Makefile").read_text()
    report = json.loads((tmp_path / "fused" / "report.json").read_text())
    assert report["fp32_mac"] == "fused"
    assert json.loads((tmp_path / "sep" / "report.json").read_text())["fp32_mac"] == "separate"
    assert fused[0] == sep[0]  # nothing trained yet
    assert fused[-1] != fused[0]  # it trained
    assert sep_p.keys() == fused_p.keys()
    if case == "int8":
        np.testing.assert_allclose(fused, sep, rtol=INT8_LOSS_RTOL)
        return
    np.testing.assert_allclose(fused, sep, rtol=FP32_RTOL)
    for k in sep_p:
        np.testing.assert_allclose(fused_p[k], sep_p[k], rtol=FP32_RTOL, atol=FP32_ATOL,
                                   err_msg=k)
    assert any(not np.array_equal(fused_p[k], sep_p[k]) for k in sep_p)  # fused for real


def test_fused_without_an_fpu_is_refused(tmp_path):
    """The Pico's Cortex-M0+ has no FPU: its fmaf would be newlib's, which rounds twice."""
    r = tinytrain("build", DIGITS_ONNX, "--board", "rp2040", "--out", tmp_path / "b",
                  "--fp32-mac", "fused", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "needs an FPU with a fused multiply-add" in r.stderr + r.stdout
    assert not (tmp_path / "b").exists()


def test_unknown_fp32_mac_is_refused(tmp_path):
    r = tinytrain("build", tmp_path / "m.onnx", "--out", tmp_path / "b", "--fp32-mac", "fast",
                  check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--fp32-mac must be one of auto, fused, separate" in r.stderr + r.stdout
    assert not (tmp_path / "b").exists()
