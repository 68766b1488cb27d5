"""MobileNetV2 builds trained through the CLI and compared to the bit, shared by the tests of
the passes that may only move bytes (tests/test_remat.py, tests/test_stream_trained.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from tests.torch_models import MobileNetV2, export
from tinytrain.device.state_file import read as read_saved


def mbv2_files(d: Path, res: int, steps: int) -> Path:
    """MobileNetV2-w0.35 (10 classes) for res x res inputs as d/m.onnx, with 4 calibration
    inputs (d/calib.npz) and `steps` training samples (d/train.npz); all seeded."""
    import torch

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(MobileNetV2(0.35, res, 10), d / "m.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", x=rng.uniform(0, 1, (4, 3, res, res)).astype(np.float32))
    np.savez(d / "train.npz", x=rng.uniform(0, 1, (steps, 3, res, res)).astype(np.float32),
             y=rng.integers(0, 10, steps))
    return path


def train_run(cli, path: Path, d: Path, out: Path, *args, qemu: bool = False):
    """Build `path` into `out` with `args`, train one pass over d/train.npz (on the twin with
    qemu): (losses, saved parameters, report.json)."""
    cli("build", path, "--out", out, *args)
    cli("run", out, *(["--qemu"] if qemu else []), "--data", d / "train.npz", "--metrics",
        out / "m.jsonl", "--save", out / "state.npz")
    losses = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    report = json.loads((out / "report.json").read_text())
    return losses, read_saved(out / "state.npz").params, report


def assert_same_training(a, b, steps: int) -> None:
    """Two train_run results: the same `steps` losses and the same parameters, to the bit."""
    (la, pa, _), (lb, pb, _) = a, b
    assert len(la) == steps and la == lb
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
