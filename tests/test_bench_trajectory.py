"""bench/trajectory.py: an int8 build's training move against its fp32 twin's, per parameter.

The digits CNN of test_new_head.py adapts its last conv and its head (fp32, int8 stochastic,
int8 shadow: same plan, lr, batch, samples). What the table must show is known from the
rounding rules themselves (quant/update.py): the shadow's forward reads its 16-bit master
floored, so every weight it has moved by less than an LSB reads about half an LSB low; the
stochastic rounding is unbiased. The fp32 moves are the oracle for the direction.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import tinytrain
from test_new_head import LR, task  # noqa: F401  (task: the module fixture)

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("bench_trajectory",
                                               ROOT / "bench" / "trajectory.py")
trajectory = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = trajectory  # its dataclass looks its module up while defined
_SPEC.loader.exec_module(trajectory)

PLAN, BATCH = "last:2", 4
# after one update the shadow has moved each touched weight by floor(step), one LSB down for
# every small negative step: the mean offset is about -0.5 x the share of weights touched
SHADOW_OFFSET_BELOW = -0.2
# stochastic rounding is unbiased: the offset averages +-1 LSB draws over 2,304 weights
STOCHASTIC_OFFSET_WITHIN = 0.1
# the int32 classifier bias has 1/(s_x s_w) steps per unit: it follows fp32 in direction
BIAS_COS_ABOVE = 0.99


@pytest.fixture(scope="module")
def builds(task, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    root = tmp_path_factory.mktemp("traj")
    common = ["--update", PLAN, "--lr", str(LR), "--batch", str(BATCH)]
    out = {"fp32": root / "fp32"}
    tinytrain("build", task["model"], "--out", out["fp32"], *common)
    for mode in ("stochastic", "shadow"):
        out[mode] = root / mode
        tinytrain("build", task["model"], "--out", out[mode], "--quantize", "int8", "--calib",
                  task["root"] / "calib.npz", "--new-head", "--rounding", mode, *common)
    return out


def _data(task) -> tuple[np.ndarray, np.ndarray]:  # noqa: F811
    with np.load(task["root"] / "ada.npz") as f:
        return f["x"], f["y"]


def _row(rows, step: int, part: str):
    """The row of the trained conv ('Conv') or head ('Gemm') parameter `part` at `step`."""
    return next(r for r in rows if r.step == step and part in r.name)


def test_shadow_reads_its_master_floored(task, builds):  # noqa: F811
    x, y = _data(task)
    rows, _ = trajectory.compare(builds["fp32"], builds["shadow"], x[:BATCH], y[:BATCH],
                                 at=(1,))
    conv = [r for r in rows if r.step == 1 and r.name.endswith("weight") and "Gemm" not in r.name]
    assert conv, [r.name for r in rows]
    w = conv[0]
    assert w.fp32_lsb > 0 and w.offset < SHADOW_OFFSET_BELOW, w
    head_bias = _row(rows, 1, "Gemm_bias")
    assert head_bias.cos > BIAS_COS_ABOVE, head_bias


def test_stochastic_is_unbiased_and_follows_fp32(task, builds):  # noqa: F811
    x, y = _data(task)
    rows, acc = trajectory.compare(builds["fp32"], builds["stochastic"], x, y, epochs=2,
                                   shuffle=True, seed=1, eval_set=(x[:50], y[:50]))
    last = max(r.step for r in rows)
    assert last == 2 * -(-len(y) // BATCH)  # every batch, each epoch's partial one included
    conv = [r for r in rows if r.name.endswith("weight") and "Gemm" not in r.name]
    assert all(abs(r.offset) < STOCHASTIC_OFFSET_WITHIN for r in conv), conv
    assert all(r.cos > 0 for r in conv), conv
    assert set(acc) == {"fp32", "int8"} and all(0 <= v <= 1 for v in acc.values())


def test_cli_prints_the_tables_and_checks_its_builds(task, builds):  # noqa: F811
    script = [sys.executable, str(ROOT / "bench" / "trajectory.py")]
    data = ["--data", str(task["root"] / "ada.npz")]
    r = subprocess.run(script + [str(builds["fp32"]), str(builds["shadow"]), *data, "--at", "1",
                                 "--eval", str(task["root"] / "test.npz")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "by error" in r.stdout and "held-out accuracy: fp32" in r.stdout
    ranked = r.stdout.split("by error")[1].splitlines()
    top = next(line for line in ranked if line.startswith("| ") and "`" in line)
    assert "weight" in top  # the shadow's floor makes a sub-LSB weight the worst row
    r = subprocess.run(script + [str(builds["shadow"]), str(builds["fp32"]), *data],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "fp32 build first" in r.stderr
    assert "Traceback" not in r.stderr
