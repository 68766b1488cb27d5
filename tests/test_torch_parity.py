"""Training parity with PyTorch autograd + torch.optim.SGD, step for step, through the CLI.

Same initial weights (the ONNX export of the torch model), same data order, same SGD settings:
the per-sample losses of the generated C program and the final weights must match PyTorch.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
from sklearn.datasets import load_digits  # noqa: E402

from tests.torch_models import MLP, DigitsCNN, OpsMix, TinyMobileNet, export  # noqa: E402

LOSS_RTOL = 1e-4  # the bar: per-step loss within 1e-4 relative (fp32 sums reordered)
WEIGHT_ATOL = 1e-4  # the bar for final weights; fp32 accumulation order differs
STEPS = 24  # optimizer steps compared (the issue asks for >= 20)

MODELS = {"mlp": MLP, "cnn": DigitsCNN, "mobilenet_se": TinyMobileNet, "ops_mix": OpsMix}
CONFIGS = {  # name: (batch, lr, momentum, weight decay)
    "b1": (1, 0.05, 0.0, 0.0),
    "b4": (4, 0.1, 0.0, 0.0),
    "b1_momentum": (1, 0.02, 0.9, 0.0),
    "b4_momentum_wd": (4, 0.05, 0.9, 1e-3),
}


def digits(model_cls, n):
    d = load_digits()
    x = (d.images[:n] / 16.0).astype(np.float32)
    x = x.reshape((n, *model_cls.input_shape))
    return x, d.target[:n].astype(np.int64)


def torch_train(model, x, y, batch, lr, momentum, wd, masks=(), optimizer="sgd"):
    """PyTorch SGD (or Adam) over x in order; returns the per-sample losses. `masks` lists
    (param, untrained input channels) whose gradients are zeroed before each step (partial
    updates: Adam's moments then stay 0, and 0 / (0 + eps) moves nothing)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd) if optimizer == "adam" \
        else torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: thread start-up would cost more than the math
    losses = []
    try:
        for k in range(0, len(x), batch):
            out = model(torch.from_numpy(x[k:k + batch]))
            per_sample = torch.nn.functional.cross_entropy(
                out, torch.from_numpy(y[k:k + batch]), reduction="none")
            opt.zero_grad()
            per_sample.mean().backward()
            for p, untrained in masks:
                p.grad[:, untrained] = 0.0  # conv OIHW and linear (out, in): axis 1 is the input
            opt.step()
            losses += per_sample.detach().tolist()
    finally:
        torch.set_num_threads(threads)
    return np.array(losses)


def torch_param_for(onnx_model, info_param):
    """Name of the torch parameter behind one of our trainable parameters."""
    src = info_param["source"]
    node = next(n for n in onnx_model.graph.node if n.name == src["node"])
    return node.input[1 if src["slot"] == "weight" else 2]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_pytorch(name, config, tmp_path, cli):
    batch, lr, momentum, wd = CONFIGS[config]
    cls = MODELS[name]
    torch.manual_seed(0)
    model = cls()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter is what we want
        path = export(model, tmp_path / f"{name}.onnx")
    x, y = digits(cls, STEPS * batch)
    np.savez(tmp_path / "train.npz", x=x, y=y)

    build = tmp_path / "build"
    cli("build", path, "--out", build, "--lr", lr, "--momentum", momentum,
        "--weight-decay", wd, "--batch", batch)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    ours = np.array([json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")])

    initial = {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
    model.train()
    ref = torch_train(model, x, y, batch, lr, momentum, wd)
    assert len(ours) == len(ref) == STEPS * batch
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)

    info = json.loads((build / "program.json").read_text())
    onnx_model = onnx.load(str(path))
    params = dict(model.named_parameters())
    state = np.load(tmp_path / "state.npz")
    assert len(info["trainable"]) == len(params)
    for p in info["trainable"]:
        theirs = params[torch_param_for(onnx_model, p)].detach().numpy()
        mine = state[p["name"]]
        if mine.ndim == 4:  # OHWI -> OIHW
            mine = mine.transpose(0, 3, 1, 2)
        np.testing.assert_allclose(mine, theirs, atol=WEIGHT_ATOL, rtol=0, err_msg=p["name"])
    moved = max(float(np.abs(params[k].detach().numpy() - v).max()) for k, v in initial.items())
    assert moved > 100 * WEIGHT_ATOL  # training really changed the weights


def test_mse_regression_matches_pytorch(tmp_path, cli):
    """--loss mse against torch's MSELoss (mean over the outputs), batch 2, momentum."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    model.input_shape = (64,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        path = export(model, tmp_path / "reg.onnx")
    x, labels = digits(MLP, 2 * STEPS)
    y = np.stack([labels / 9.0, x.mean(axis=1)], axis=1).astype(np.float32)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", path, "--out", build, "--loss", "mse", "--lr", 0.1, "--momentum", 0.5,
        "--batch", 2)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl")
    ours = np.array([json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")])

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    ref = []
    for k in range(0, len(x), 2):
        out = model(torch.from_numpy(x[k:k + 2]))
        per_sample = ((out - torch.from_numpy(y[k:k + 2])) ** 2).mean(dim=1)
        opt.zero_grad()
        per_sample.mean().backward()
        opt.step()
        ref += per_sample.detach().tolist()
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    assert np.mean(ref[-8:]) < np.mean(ref[:8])  # it learned something
