"""The fleet's task, shared by tests/test_fleet_flower.py and bench/fleet.py: the bundled
digits CNN trained elsewhere on upright digits (12 epochs on the first 600: ~90 % held out),
to be adapted by devices whose sensors see the digits turned by 90 degrees (~11 % before)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

from tinytrain.device.build import build
from tinytrain.device.runner import open_program
from tinytrain.device.train import train
from tinytrain.export.to_onnx import export_onnx
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"
PRETRAIN = 600  # the upright samples the model was trained on elsewhere
PRETRAIN_EPOCHS = 12


def turned_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(upright x, labels, turned x), x as (N, 1, 8, 8) in [0, 1]."""
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    return x, d.target, np.rot90(x, 1, axes=(2, 3)).copy()


def pretrained(work: Path) -> Path:
    """The model trained on the upright digits, as ONNX in `work` (built and trained there
    with tinytrain's host build, exported with tinytrain export)."""
    x, y, _ = turned_digits()
    build(DIGITS, work / "pre", Options(sgd=SGDConfig(lr=0.05, momentum=0.9, batch=16)))
    with open_program(work / "pre") as dev:
        train(dev, x[:PRETRAIN], y[:PRETRAIN], epochs=PRETRAIN_EPOCHS, shuffle=True, seed=1)
        export_onnx(work / "pre", dev.get_params(), work / "pretrained.onnx")
    return work / "pretrained.onnx"
