"""--optimizer adam through the CLI: what it costs, what it keeps, and what it refuses.

Its numerics are checked against torch.optim.Adam step for step in test_sparse_parity.py
(whole tensors, input channels, a depthwise weight's rows) and, with a fleet's correction,
against ops/adam.py's NumPy reference in test_fleet_correction.py; an interrupted Adam run
resumes bit for bit in test_resume.py."""

from __future__ import annotations

import json

import numpy as np
from conftest import ROOT

from tinytrain.fleet.tensors import trained_tensors

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"


def _data(tmp_path):
    from sklearn.datasets import load_digits

    d = load_digits()
    np.savez(tmp_path / "train.npz", x=(d.images[:40] / 16.0).astype(np.float32)[:, None],
             y=d.target[:40])
    return tmp_path / "train.npz"


def test_adam_build_prices_its_moments(tmp_path, cli) -> None:
    out = tmp_path / "b"
    p = cli("build", DIGITS, "--update", "bias", "--optimizer", "adam", "--lr", "0.01",
            "--batch", "4", "--out", out)
    info = json.loads((out / "program.json").read_text())
    report = json.loads((out / "report.json").read_text())
    plan = trained_tensors(info)
    elements = sum(int(np.prod(t.part_shape())) for t in plan)
    # two moments per trained element and the step counter
    assert report["sram_bytes"]["optimizer_state"] == 8 * elements + 4
    assert "optimizer state" in p.stdout
    names = {e["name"] for e in info["state"]}
    assert {"adam_step", *(f"{t.name}_adam_{k}" for t in plan for k in "mv")} <= names
    assert info["sgd"]["optimizer"] == "adam"



def test_adam_refusals_are_clear(tmp_path, cli) -> None:
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).random((8, 1, 8, 8),
                                                                       np.float32))
    for args, msg in ((("--quantize", "int8", "--calib", tmp_path / "calib.npz"),
                       "--optimizer adam needs fp32 parameters"),
                      (("--momentum", "0.9"), "--momentum is SGD's"),
                      (("--beta2", "1"), "--beta2 must be in [0, 1)"),
                      (("--eps", "0"), "--eps must be positive")):
        p = cli("build", DIGITS, "--update", "bias", "--optimizer", "adam", *args,
                "--out", tmp_path / "x", check=False)
        assert p.returncode != 0 and msg in p.stdout + p.stderr, p.stdout + p.stderr
        assert "Traceback" not in p.stdout + p.stderr
        assert not (tmp_path / "x").exists()
    p = cli("build", DIGITS, "--optimizer", "rmsprop", "--out", tmp_path / "x", check=False)
    assert p.returncode != 0 and "--optimizer must be one of sgd, adam" in p.stdout + p.stderr
    out = tmp_path / "b"
    cli("build", DIGITS, "--update", "bias", "--optimizer", "adam", "--out", out)
    p = cli("run", out, "--data", _data(tmp_path), "--momentum", "0.5", check=False)
    assert p.returncode != 0 and "an Adam build has none" in p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
