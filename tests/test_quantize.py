"""`--quantize int8`: the post-training quantiser against onnxruntime's fp32 model, and the C
training of quantised models (every int8 op's backward) against the numpy simulation."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tinytrain
from sklearn.datasets import load_digits
from torch_models import DigitsCNN, TinyMobileNet, export

from tinytrain.device.runner import HostProgram
from tinytrain.ops import interp
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model

ort = pytest.importorskip("onnxruntime")

# int8 inference of a calibrated model agrees with fp32 on nearly every digit
MIN_TOP1_AGREEMENT = 0.95
# int8 activations round at every layer; on average the logits stay within a couple of output
# quantisation steps of fp32 (the worst sample drifts further, the argmax check covers it)
MAX_MEAN_LOGIT_ERR_STEPS = 2
SIM_LOSS_RTOL, SIM_LOSS_ATOL = 1e-4, 2e-7  # as tests/test_int8_tflite.py
SIM_MAX_LSB, SIM_MAX_FLIPPED = 1, 0.02  # one rounding flip per step, on few elements
SIM_MIN_FLIPS = 2  # ...but a small tensor (a bias) may see a flip or two in one step


def digits() -> tuple[np.ndarray, np.ndarray]:
    d = load_digits()
    return (d.images / 16.0).astype(np.float32)[:, None], d.target.astype(np.int64)


def pretrained(model: torch.nn.Module, path: Path, epochs: int = 15) -> Path:
    torch.manual_seed(0)
    x, y = digits()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.tensor(x[:1200]), torch.tensor(y[:1200])
    for _ in range(epochs):
        for i in torch.randperm(len(xt)).split(32):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i]), yt[i]).backward()
            opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(model.eval(), path)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("q")
    torch.manual_seed(0)
    model = pretrained(DigitsCNN(), root / "cnn.onnx")
    x, _ = digits()
    np.savez(root / "calib.npz", x=x[:200])
    return model, root / "calib.npz"


def test_quantised_inference_tracks_fp32(cnn, tmp_path):
    model, calib = cnn
    out = tmp_path / "b"
    tinytrain("build", model, "--out", out, "--quantize", "int8", "--calib", calib,
              "--update", "none")
    x, _ = digits()
    held = x[1200:1500]
    sess = ort.InferenceSession(str(model))
    ref = np.concatenate([sess.run(None, {"x": v[None]})[0] for v in held])
    g, _ = compile_model(model, Options(update="none", quantize="int8", calib=calib))
    step = g.t(g.outputs[0]).quant.scale[0]
    with HostProgram(out) as p:
        ours = np.stack([p.infer(v.reshape(-1)) for v in held])
    assert (ours.argmax(1) == ref.argmax(1)).mean() >= MIN_TOP1_AGREEMENT
    assert np.abs(ours - ref).mean() <= MAX_MEAN_LOGIT_ERR_STEPS * step


@pytest.mark.parametrize("make,update,rounding", [
    (DigitsCNN, "full", "stochastic"), (TinyMobileNet, "full", "shadow"),
    (TinyMobileNet, "last:3", "stochastic"),
])
def test_quantised_training_matches_numpy_simulation(tmp_path, make, update, rounding):
    torch.manual_seed(1)
    model = pretrained(make(), tmp_path / "m.onnx", epochs=3)
    x, y = digits()
    np.savez(tmp_path / "calib.npz", x=x[:100])
    opts = ["--quantize", "int8", "--calib", tmp_path / "calib.npz", "--update", update,
            "--rounding", rounding, "--lr", "0.01"]
    tinytrain("build", model, "--out", tmp_path / "b", *opts)
    g, _ = compile_model(model, Options(update=update, quantize="int8",
                                        calib=tmp_path / "calib.npz",
                                        sgd=SGDConfig(lr=0.01, rounding=rounding)))
    env, pending, moved = interp.initial_state(g), 0, 0
    with HostProgram(tmp_path / "b") as p:
        for v, label in zip(x[1500:1530], y[1500:1530]):
            loss_c, _, _ = p.train(v.reshape(-1), np.array([label], np.int32))
            loss_np, pending = interp.train(g, env, v, np.array([label]), pending)
            assert loss_c == pytest.approx(loss_np, rel=SIM_LOSS_RTOL, abs=SIM_LOSS_ATOL)
            for name, val in p.get_params().items():
                diff = np.abs(val.astype(np.int64) - env[name].astype(np.int64))
                assert diff.max() <= SIM_MAX_LSB, name
                assert (diff > 0).sum() <= max(SIM_MIN_FLIPS, SIM_MAX_FLIPPED * diff.size), name
                moved += int((val != g.t(name).data).sum())
                env[name] = val.copy()
    assert moved > 0


@pytest.mark.parametrize("args,pattern", [
    (["--quantize", "int8"], r"needs --calib"),
    (["--quantize", "int4", "--calib", "CALIB"], r"--quantize supports 'int8'"),
    (["--quantize", "int8", "--calib", "BADCALIB"], r"x has shape \(3, 5\)"),
])
def test_quantize_option_errors(cnn, tmp_path, args, pattern):
    model, calib = cnn
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 5), np.float32))
    args = [str(calib) if a == "CALIB" else str(tmp_path / "bad.npz") if a == "BADCALIB"
            else a for a in args]
    r = tinytrain("build", model, "--out", tmp_path / "o", *args, check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    import re
    assert re.search(pattern, r.stderr + r.stdout), r.stderr
    assert not (tmp_path / "o").exists()
