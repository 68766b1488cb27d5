"""1-D convolutions from PyTorch (nn.Conv1d plain and depthwise, BatchNorm1d, MaxPool1d,
AdaptiveAvgPool1d): a window of 32 steps trains like PyTorch autograd over 24 steps with full,
sparse (partial channels) and head-only plans, on the host and on the STM32F746's twin, and the
planned SRAM is the linked ELF's."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.torch_models import Conv1dNet, export

LOSS_RTOL = 1e-4  # per-step loss vs PyTorch: fp32 sums in another order, over 24 steps
WEIGHT_ATOL = 1e-4  # trained weights vs PyTorch after 24 steps, same reason
STEPS = 24
LR = 0.05
# layers (from the input): 0 conv 3->8 (k5), 1 depthwise 8 (k3, stride 2), 2 pointwise 8->16,
# 3 the classifier
PLANS = {
    "full": ({0: None, 1: None, 2: None, 3: None}, {0, 1, 2, 3}),
    "sparse": ({2: [0, 1, 2, 3], 3: None}, {2, 3}),  # half of layer 2's input channels
    "depthwise_partial": ({1: [0, 1, 2, 3], 3: None}, {1, 3}),  # half of the depthwise's
    "head": ({3: None}, {3}),
}
SPECS = {"full": "full", "sparse": "tte:n_bias=2,idx=2,ratio=0.5",
         "depthwise_partial": "tte:n_bias=1,idx=1,ratio=0.5", "head": "last:1"}
needs_twin = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or
                                shutil.which("qemu-system-arm") is None,
                                reason="needs arm-none-eabi-gcc and qemu-system-arm")


def _model(tmp_path: Path) -> tuple[Conv1dNet, Path]:
    torch.manual_seed(0)
    m = Conv1dNet()
    with torch.no_grad():  # a BatchNorm1d that folds into something other than the identity
        m.net[1].running_mean.uniform_(-0.5, 0.5)
        m.net[1].running_var.uniform_(0.5, 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter is what we want
        path = export(m, tmp_path / "conv1d.onnx")
    return m, path


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sine windows: the class sets the frequency, plus noise (3 channels, 32 steps)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, n)
    t = np.arange(32)
    x = np.stack([np.sin(2 * np.pi * (k + 1) * t / 32 + rng.uniform(0, 6.3, (3, 1)))
                  for k in y]) + 0.3 * rng.normal(size=(n, 3, 32))
    return x.astype(np.float32), y.astype(np.int64)


def _layers(m: Conv1dNet) -> list[torch.nn.Module]:
    return [mod for mod in m.net if isinstance(mod, (torch.nn.Conv1d, torch.nn.Linear))]


def _torch_reference(m: Conv1dNet, plan: str, x: np.ndarray, y: np.ndarray) -> list[float]:
    """The BN folds into the first conv in the exported model: train that folded conv."""
    m.eval()
    conv, bn = m.net[0], m.net[1]
    with torch.no_grad():
        s = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        conv.weight.mul_(s[:, None, None])
        conv.bias.copy_((conv.bias - bn.running_mean) * s + bn.bias)
    m.net[1] = torch.nn.Identity()
    weights, biases = PLANS[plan]
    layers = _layers(m)
    for p in m.parameters():
        p.requires_grad_(False)
    masks = []
    for i, channels in weights.items():
        layers[i].weight.requires_grad_(True)
        if channels is not None:
            dw = isinstance(layers[i], torch.nn.Conv1d) and layers[i].groups > 1
            axis = 0 if dw else 1  # a depthwise weight's channels are its outputs
            untrained = sorted(set(range(layers[i].weight.shape[axis])) - set(channels))
            masks.append((layers[i].weight, untrained, axis))
    for i in biases:
        layers[i].bias.requires_grad_(True)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=LR)
    out = []
    for k in range(len(x)):
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x[k:k + 1])),
                                                 torch.from_numpy(y[k:k + 1]))
        opt.zero_grad()
        loss.backward()
        for w, untrained, axis in masks:
            if axis == 0:
                w.grad[untrained] = 0.0
            else:
                w.grad[:, untrained] = 0.0
        opt.step()
        out.append(float(loss))
    return out


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_conv1d_trains_like_pytorch(plan: str, tmp_path: Path, cli) -> None:
    m, path = _model(tmp_path)
    x, y = _data(STEPS)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", path, "--out", build, "--update", SPECS[plan], "--lr", LR)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    info = json.loads((build / "program.json").read_text())
    weights, biases = PLANS[plan]
    assert len(info["trainable"]) == len(weights) + len(biases)
    ref = _torch_reference(m, plan, x, y)
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    assert abs(ref[-1] - ref[0]) > 0.01  # it learned

    # export writes each trained Conv1d weight back as (O, I, k)
    out = tmp_path / "trained.onnx"
    cli("export", build, "--state", tmp_path / "state.npz", "--out", out)
    g = onnx.load(str(out))
    convs = [n for n in g.graph.node if n.op_type in ("Conv", "Gemm")]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in g.graph.initializer}
    for i in weights:
        np.testing.assert_allclose(inits[convs[i].input[1]],
                                   _layers(m)[i].weight.detach().numpy(), atol=WEIGHT_ATOL,
                                   rtol=0, err_msg=f"layer {i}")


@needs_twin
def test_conv1d_trains_on_the_m7_twin_and_fits_as_planned(tmp_path: Path, cli) -> None:
    """The STM32F746 firmware on its QEMU twin trains as PyTorch does (sparse plan), and the
    linked ELF's static SRAM is the planner's figure plus the firmware's own statics."""
    m, path = _model(tmp_path)
    x, y = _data(STEPS)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    out = tmp_path / "f746"
    cli("build", path, "--board", "stm32f746", "--out", out, "--update", SPECS["sparse"],
        "--lr", LR)
    r = json.loads((out / "report.json").read_text())
    assert r["firmware"]["planned_sram"] == r["sram_bytes"]["total"]
    assert 0 <= r["firmware"]["sram_used"] - r["firmware"]["planned_sram"] <= 4096
    cli("run", out, "--qemu", "--data", tmp_path / "train.npz", "--metrics",
        tmp_path / "m.jsonl")
    twin = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    np.testing.assert_allclose(twin, _torch_reference(m, "sparse", x, y), rtol=LOSS_RTOL,
                               atol=0)
