"""ONNX QDQ models from onnxruntime's quantize_static: built into the int8 IR with the file's
own scales, zero points, int8 weights and int32 biases, checked against onnxruntime."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import tinytrain
from onnx import numpy_helper
from test_quantize import digits, pretrained
from torch_models import DigitsCNN

from tinytrain.device.runner import HostProgram
from tinytrain.passes.pipeline import Options, compile_model

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

# onnxruntime requantises in float (and rounds half to even) where the TFLite-style kernels use
# integer multipliers, so outputs differ by ~1 LSB on some elements: not bit-exact, but the
# class almost always agrees and the logits stay within a couple of output steps on average
MIN_TOP1_AGREEMENT = 0.97
MAX_MEAN_LOGIT_ERR_STEPS = 2
CALIB_SAMPLES = 200


class _Digits(quantization.CalibrationDataReader):
    def __init__(self, x: np.ndarray) -> None:
        self.it = iter([{"x": v[None]} for v in x])

    def get_next(self) -> dict | None:
        return next(self.it, None)


def quantize_qdq(fp32: Path, out: Path, activation_type=None) -> Path:
    q = quantization
    x, _ = digits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q.quantize_static(str(fp32), str(out), _Digits(x[:CALIB_SAMPLES]),
                          quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=activation_type or q.QuantType.QInt8,
                          weight_type=q.QuantType.QInt8)
    return out


@pytest.fixture(scope="module")
def qdq(tmp_path_factory) -> tuple[Path, Path]:
    """(QDQ model, its build directory with the last two layers trainable)."""
    root = tmp_path_factory.mktemp("qdq")
    fp32 = pretrained(DigitsCNN(), root / "cnn.onnx", epochs=5)
    model = quantize_qdq(fp32, root / "cnn_qdq.onnx")
    tinytrain("build", model, "--out", root / "b", "--update", "last:2", "--lr", "0.01")
    return model, root / "b"


def test_qdq_inference_tracks_onnxruntime(qdq):
    model, build = qdq
    x, _ = digits()
    held = x[1200:1500]
    sess = ort.InferenceSession(str(model))
    ref = np.concatenate([sess.run(None, {"x": v[None]})[0] for v in held])
    g, _ = compile_model(model, Options(update="none"))
    step = g.t(g.outputs[0]).quant.scale[0]
    with HostProgram(build) as p:
        ours = np.stack([p.infer(v.reshape(-1)) for v in held])
    assert (ours.argmax(1) == ref.argmax(1)).mean() >= MIN_TOP1_AGREEMENT
    assert np.abs(ours - ref).mean() <= MAX_MEAN_LOGIT_ERR_STEPS * step


def test_qdq_weights_and_scales_are_the_files(qdq):
    model, _ = qdq
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(model)).graph.initializer}
    g, _ = compile_model(model, Options(update="none"))
    nodes = [m for n in g.nodes for m in (n.attrs["_nodes"] if n.op == "row_stream" else [n])]
    layers = [n for n in nodes if n.op in ("conv2d_q8", "dense_q8")]
    assert len(layers) == 5
    for n in layers:
        w, b = g.t(n.inputs[1]), g.t(n.inputs[2])
        key = n.name.strip("_").split("_")[0]  # "_stem_Conv" -> "stem"
        q = inits[f"{key}.weight_quantized"]
        ir = w.data if n.op == "dense_q8" else np.transpose(w.data, (0, 3, 1, 2))  # OHWI
        assert w.dtype == "s8" and np.array_equal(ir, q), n.name
        assert np.array_equal(np.asarray(w.quant.scale, np.float32),
                              inits[f"{key}.weight_scale"]), n.name
        assert b.dtype == "s32" and np.array_equal(b.data, inits[f"{key}.bias_quantized"])
        x_scale = g.t(n.inputs[0]).quant.scale[0]
        assert x_scale in {float(v) for k, v in inits.items() if k.endswith("_scale")
                           and v.size == 1}
    inp = g.t(g.inputs[0]).quant
    assert (inp.scale[0], inp.zero_point[0]) == (float(inits["x_scale"]),
                                                 int(inits["x_zero_point"]))


def test_qdq_training_lowers_the_loss(qdq, tmp_path):
    _, build = qdq
    x, y = digits()
    np.savez(tmp_path / "train.npz", x=x[1500:1700], y=y[1500:1700])
    r = tinytrain("run", build, "--data", tmp_path / "train.npz", "--epochs", 3)
    losses = [float(v) for v in re.findall(r"mean loss ([0-9.]+)", r.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0], r.stdout


def test_qdq_export_is_refused_clearly(qdq, tmp_path):
    _, build = qdq
    with HostProgram(build) as p:
        np.savez(tmp_path / "state.npz", **p.get_params())
    r = tinytrain("export", build, "--state", tmp_path / "state.npz", "--out",
                  tmp_path / "o.onnx", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "not supported yet" in r.stderr + r.stdout


def test_qdq_uint8_activations_are_rejected(qdq, tmp_path):
    model, _ = qdq
    fp32 = model.with_name("cnn.onnx")
    u8 = quantize_qdq(fp32, tmp_path / "u8.onnx", quantization.QuantType.QUInt8)
    r = tinytrain("build", u8, "--out", tmp_path / "o", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    out = " ".join((r.stderr + r.stdout).split())
    assert re.search(r"QuantizeLinear\).*uint8.*int8 activations only", out), out
    assert not (tmp_path / "o").exists()


def test_qdq_with_quantize_option_is_refused(qdq, tmp_path):
    model, _ = qdq
    r = tinytrain("build", model, "--out", tmp_path / "o", "--quantize", "int8", check=False)
    assert r.returncode == 2
    assert "already quantised (ONNX QDQ)" in " ".join((r.stderr + r.stdout).split())
