"""TTE's three networks with their ~99 KB schemes train on the STM32F746's QEMU twin and on the
Corstone-300's (Cortex-M55: the Helium kernels) over the serial link, with int8 samples on the
wire: losses and read-back parameters bit-identical to the host build of the same model (int8
forward is integer arithmetic; the fp32 backward is built with -ffp-contract=off and the loss
uses tinytrain's own expf/logf on both). The Corstone-300 fuses the 1x1 backward's
multiply-adds (its board's fp32_fma: Helium's VFMA); its host build does so with --fp32-mac
fused, and the two agree bit for bit."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.tte_schemes import MAIN_SCHEME, NETWORKS, SCHEMES, TTE_PEAK_KB
from tinytrain.boards import load_board
from tinytrain.device.state_file import read as read_saved

STEPS = 20  # the bar: at least 20 training steps on the twin
SRAM_CEILING = 256 * 1024  # the whole linked firmware (link buffers, stack) fits an nRF52840's


pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")


def _run(cli, out, data):
    cli("run", out, *(["--qemu"] if (out / "firmware.elf").exists() else []), "--data", data,
        "--metrics", out / "m.jsonl", "--save", out / "state.npz")
    losses = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    return losses, read_saved(out / "state.npz").params


@pytest.mark.parametrize("board", ["stm32f746", "corstone300"])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_tte_scheme_trains_on_the_twin_like_the_host(name, board, tmp_path, cli, tte_onnx):
    model = tte_onnx[name]
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
    np.savez(tmp_path / "train.npz", x=rng.uniform(0, 1, (STEPS, 3, 128, 128))
             .astype(np.float32), y=rng.integers(0, 10, STEPS))
    plan = SCHEMES[(name, MAIN_SCHEME[name])]
    fused = load_board(board).fp32_fma
    for b in ("host", board):  # the host's --fp32-mac as the board's auto
        cli("build", model, "--out", tmp_path / b, "--board", b, "--update", plan,
            "--quantize", "int8", "--calib", tmp_path / "calib.npz",
            "--fp32-mac", "fused" if fused else "separate")
    report = json.loads((tmp_path / board / "report.json").read_text())
    assert report["fp32_mac"] == ("fused" if board == "corstone300" else "separate")
    s = report["sram_bytes"]
    assert s["arena"] + s["trainable_params"] <= TTE_PEAK_KB[name] * 1024, s
    assert report["firmware"]["sram_used"] <= SRAM_CEILING, report["firmware"]
    assert s["link_buffers"] < 2048  # the sample is not buffered: it streams into the model
    host, host_p = _run(cli, tmp_path / "host", tmp_path / "train.npz")
    twin, twin_p = _run(cli, tmp_path / board, tmp_path / "train.npz")
    assert len(twin) == STEPS and twin == host
    assert twin_p.keys() == host_p.keys()
    for k in host_p:
        np.testing.assert_array_equal(twin_p[k], host_p[k], err_msg=k)
