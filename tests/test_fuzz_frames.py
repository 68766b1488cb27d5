"""Malformed frames to the host firmware compiled with ASan/UBSan (tests/fuzz/frames.py):
random bytes, bad CRCs and escapes, cut frames, other link versions, unknown commands,
out-of-range labels, NaN/Inf samples, short and long samples, parameter reads and writes
outside the parameters, wrong payload lengths; between them, the valid samples of a clean
run. No sanitizer report, no crash, and the parameters afterwards equal the clean run's."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.fuzz.frames import FAMILIES, fuzz_against_clean  # noqa: E402
from tests.torch_models import MLP, export  # noqa: E402

FRAMES = 3000  # 200 per family in CI; bench/fuzz_frames.py is the long run
SAMPLES = 20


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_malformed_frames_change_nothing(tmp_path, cli):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(MLP(), tmp_path / "mlp.onnx")
    build = tmp_path / "b"
    cli("build", model, "--out", build, "--lr", "0.05", "--momentum", "0.9")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (SAMPLES, 64)).astype(np.float32)
    y = rng.integers(0, 10, (SAMPLES, 1)).astype(np.int32)
    r = fuzz_against_clean(build, FRAMES, 5, x, y, tmp_path / "sanitizer")
    if r is None:
        pytest.skip("this gcc has no sanitizer runtime")
    assert r["reports"] == ""
    assert set(r["sent"]) == set(FAMILIES) and sum(r["sent"].values()) == FRAMES
    assert r["stats"]["steps"] == SAMPLES  # only the valid samples trained
    for k in r["want"]:
        np.testing.assert_array_equal(r["params"][k], r["want"][k], err_msg=k)
