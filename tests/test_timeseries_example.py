"""examples/timeseries (BasicMotions, a smartwatch turned 90° in its mount): the committed
windows are what the README says, the pretrained models read them as onnxruntime does, and the
Conv1D model built for the host adapts to the turned sensor through the Python API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tinytrain

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "timeseries"
WINDOWS, CHANNELS, STEPS, CLASSES = 120, 6, 50, 4
MODELS = {"conv1d": ("conv1d", (CHANNELS, STEPS), "Conv"), "gru": ("rnn", (STEPS, CHANNELS), "GRU"),
          "lstm": ("rnn", (STEPS, CHANNELS), "LSTM")}  # model: (data, input shape, its layer)


def _data(prefix: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(EXAMPLE / f"{prefix}_{split}.npz") as f:
        return f["x"], f["y"]


@pytest.mark.parametrize("split", ["train", "test"])
def test_windows(split: str) -> None:
    x, y = _data("conv1d", split)
    xr, yr = _data("rnn", split)
    assert x.shape == (WINDOWS, CHANNELS, STEPS) and x.dtype == np.float32
    assert np.isfinite(x).all()
    np.testing.assert_array_equal(xr, x.transpose(0, 2, 1))  # the same windows, steps first
    np.testing.assert_array_equal(yr, y)
    assert np.issubdtype(y.dtype, np.integer)
    assert np.bincount(y).tolist() == [WINDOWS // CLASSES] * CLASSES  # 5 recordings a class
    # normalised with the pretraining windows' statistics: near zero mean and unit spread
    assert abs(float(x.mean())) < 0.5 and 0.3 < float(x.std()) < 3


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_reads_the_windows(name: str) -> None:
    prefix, shape, layer = MODELS[name]
    m = onnx.load(EXAMPLE / f"{name}.onnx")
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, *shape]
    assert layer in {n.op_type for n in m.graph.node}
    sess = ort.InferenceSession(str(EXAMPLE / f"{name}.onnx"))
    x, y = _data(prefix, "test")
    pred = np.array([sess.run(None, {"x": s[None]})[0].argmax() for s in x])
    # pretrained on the sensor as mounted: every model is worse than its ~100 % there, but
    # better than nothing on most activities
    assert 0.2 < float(np.mean(pred == y)) < 0.9


@pytest.mark.parametrize("name", sorted(MODELS))
def test_adapts_on_the_host(name: str, tmp_path: Path, cli) -> None:
    prefix = MODELS[name][0]
    out = tmp_path / name
    cli("build", EXAMPLE / f"{name}.onnx", "--out", out, "--lr", "0.02")
    x, y = _data(prefix, "train")
    tx, ty = _data(prefix, "test")
    sess = ort.InferenceSession(str(EXAMPLE / f"{name}.onnx"))
    with tinytrain.connect(out) as model:
        assert model.input_shape == x.shape[1:] and model.classes == CLASSES
        before = model.classify(tx)
        want = np.array([sess.run(None, {"x": s[None]})[0].argmax() for s in tx])
        assert np.mean(before == want) > 0.98  # the imported forward is the ONNX model's
        order = np.random.default_rng(1).permutation(len(x))
        losses = [model.learn(x[i], int(y[i])).loss for i in order]
        after = model.classify(tx)
    assert np.mean(losses[-30:]) < np.mean(losses[:30])
    assert np.mean(after == ty) > np.mean(before == ty) + 0.1
