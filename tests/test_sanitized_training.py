"""The four parity models, an int8 TFLite model and a row-streamed + split int8 MobileNetV2
train 50 steps on the host build compiled with AddressSanitizer and UndefinedBehaviorSanitizer
(float-cast-overflow included): no sanitizer report, and the losses equal the plain build's
(the sanitizers must not change what the program computes)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests import sanitize  # noqa: E402
from tests.torch_models import MLP, DigitsCNN, MobileNetV2, OpsMix, TinyMobileNet, export  # noqa: E402
from tinytrain.device.runner import HostProgram  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
STEPS = 50
FIXTURES = Path(__file__).parent / "fixtures"
SCHEME = "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"


def _model(name: str, d: Path) -> tuple[Path, list[str]]:
    """A model file and its build options."""
    if name == "micro_speech_int8":
        return FIXTURES / "micro_speech_quantized.tflite", ["--update", "last:1"]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "mbv2_int8_streamed":
            path = export(MobileNetV2(0.35, 48, 10), d / "mbv2.onnx")
            rng = np.random.default_rng(0)
            np.savez(d / "calib.npz", x=rng.uniform(0, 1, (4, 3, 48, 48)).astype(np.float32))
            return path, ["--update", SCHEME, "--quantize", "int8", "--calib",
                          str(d / "calib.npz")]
        cls = {"mlp": MLP, "cnn": DigitsCNN, "mobilenet_se": TinyMobileNet, "ops_mix": OpsMix}
        return export(cls[name](), d / f"{name}.onnx"), ["--lr", "0.05"]


def _losses(build: Path, x, y, env=None) -> list[float]:
    with HostProgram(build, env=env, timeout=120.0) as prog:
        return [prog.train(xi, yi)[0] for xi, yi in zip(x, y, strict=True)]


@pytest.mark.parametrize("name", ["mlp", "cnn", "mobilenet_se", "ops_mix", "micro_speech_int8",
                                  "mbv2_int8_streamed"])
def test_training_is_clean_under_sanitizers(name, tmp_path, cli):
    path, extra = _model(name, tmp_path)
    plain, san = tmp_path / "plain", tmp_path / "san"
    cli("build", path, "--out", plain, *extra)
    shutil.copytree(plain, san)
    if not sanitize.rebuild(san):
        pytest.skip("this gcc has no sanitizer runtime")
    if name == "mbv2_int8_streamed":  # the passes this model is here for really ran
        code = (san / "model.c").read_text()
        assert "tt_conv2d_s8" in code and "_row" in code and "tt_cs_" in code
    import json

    info = json.loads((plain / "program.json").read_text())
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (STEPS, *info["input_shape_ir"])).astype(np.float32)
    classes = int(np.prod(info["output_shape_ir"]))
    if info["target_dtype"] == "s32":
        y = rng.integers(0, classes, (STEPS, 1)).astype(np.int32)
    else:
        y = rng.uniform(-1, 1, (STEPS, *info["target_shape"])).astype(np.float32)
    log = tmp_path / "sanitizer"
    got = _losses(san, x, y, env=sanitize.env(log))
    assert sanitize.reports(log) == ""
    assert got == _losses(plain, x, y)
