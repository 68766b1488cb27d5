"""The MLPerf Tiny reference architectures as TensorFlow's converter writes them from Keras
(examples/keras/, float32): each one's forward against LiteRT, its bias and last:2 training
against PyTorch autograd running the same file, a build for the STM32F746 whose planned SRAM is
the linked ELF's, and its `--quantize int8` build learning."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.tflite_build import run_reference
from tests.tflite_torch import TFLiteTorch, sgd
from tinytrain.device.runner import HostProgram

KERAS = ROOT / "examples" / "keras"
FORWARD_ATOL = 1e-5  # fp32 sums in another order than LiteRT's (outputs are probabilities)
LOSS_RTOL = 1e-4  # per-step loss vs PyTorch in float64: fp32 rounding over 24 steps
LR = 0.01
EPOCHS = 3  # 3 passes over the 8 committed samples: 24 steps
LEARNS = 0.98  # the int8 build's last-epoch loss at most this share of its first epoch's
UNPLANNED_SRAM = 4096  # the firmware's own statics beside the plan (link, UART state)

# model: (loss, how it fits the STM32F746's 320 KB SRAM and 1 MB flash)
MODELS = {
    "ds_cnn_kws": ("ce", ["--update", "last:2"]),
    "mobilenet_v1_025_96": ("ce", ["--update", "bias"]),  # last:2 is a 256 KB fp32 1x1 conv
    "resnet8_cifar": ("ce", ["--update", "last:2"]),
    # 1 MB of fp32 weights fill the whole flash: int8 on the board
    "dense_autoencoder": ("mse", ["--update", "bias", "--quantize", "int8", "--calib",
                                  str(KERAS / "dense_autoencoder.npz")]),
}
needs_arm = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                               reason="needs arm-none-eabi-gcc")


def _samples(name: str) -> tuple[np.ndarray, np.ndarray]:
    d = np.load(KERAS / f"{name}.npz")
    return d["x"].astype(np.float32), d["y"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_matches_litert(name: str, tmp_path: Path, cli) -> None:
    model = KERAS / f"{name}.tflite"
    loss = MODELS[name][0]
    cli("build", model, "--out", tmp_path / "b", "--update", "bias", "--loss", loss)
    x, _ = _samples(name)
    ref = np.concatenate([run_reference(model.read_bytes(), [v[None]])[0] for v in x])
    with HostProgram(tmp_path / "b") as p:
        ours = np.stack([p.infer(v.reshape(-1)) for v in x])
    np.testing.assert_allclose(ours.reshape(ref.shape), ref, atol=FORWARD_ATOL, rtol=0)


@pytest.mark.parametrize("update", ["bias", "last:2"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_pytorch(name: str, update: str, tmp_path: Path, cli) -> None:
    model = KERAS / f"{name}.tflite"
    loss = MODELS[name][0]
    x, y = _samples(name)
    x, y = np.concatenate([x] * EPOCHS), np.concatenate([y] * EPOCHS)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "b"
    cli("build", model, "--out", build, "--update", update, "--loss", loss, "--lr", LR)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    info = json.loads((build / "program.json").read_text())
    trained = {int(p["source"]["slot"].split(":")[1]) for p in info["trainable"]}
    ref = sgd(TFLiteTorch(model), x, y, LR, trained, loss)
    assert len(ours) == len(ref) == 8 * EPOCHS
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    assert abs(ref[-1] - ref[0]) > 100 * LOSS_RTOL * abs(ref[0])  # the weights moved


@needs_arm
@pytest.mark.parametrize("name", sorted(MODELS))
def test_builds_for_the_stm32f746(name: str, tmp_path: Path, cli) -> None:
    loss, fit = MODELS[name]
    out = tmp_path / "f746"
    cli("build", KERAS / f"{name}.tflite", "--board", "stm32f746", "--out", out, "--loss", loss,
        *fit)
    r = json.loads((out / "report.json").read_text())
    fw = r["firmware"]
    assert fw["planned_sram"] == r["sram_bytes"]["total"] <= r["sram_capacity"]
    assert 0 <= fw["sram_used"] - fw["planned_sram"] <= UNPLANNED_SRAM


@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantized_build_learns(name: str, tmp_path: Path, cli) -> None:
    """--quantize int8 --calib on the float file: last:2 at a larger rate fits the eight
    samples better epoch by epoch (slowly for the autoencoder, whose random inputs its last
    two layers alone reconstruct)."""
    loss = MODELS[name][0]
    x, y = _samples(name)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "q8"
    cli("build", KERAS / f"{name}.tflite", "--out", build, "--quantize", "int8", "--calib",
        tmp_path / "train.npz", "--update", "last:2", "--loss", loss, "--lr", 0.1)
    cli("run", build, "--data", tmp_path / "train.npz", "--epochs", 20, "--metrics",
        tmp_path / "m.jsonl")
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    assert np.isfinite(losses).all()
    assert np.mean(losses[-8:]) < LEARNS * np.mean(losses[:8]), losses
