"""`--update auto` chooses by a count of search visits, not by seconds: the same data and
bound give the same plan on an idle machine and on one whose cores are all busy, with a
planner made slow, and with a warm planner cache."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.autoplan import AnalysisConfig, AutoOptions, Session
from tinytrain.autoplan.choose import AutoPlan
from tinytrain.autoplan.planner import MemoryOracle
from tinytrain.boards import load_board
from tinytrain.passes.pipeline import Options

DIGITS_CNN = ROOT / "examples" / "digits" / "digits_cnn.onnx"
FAST = AnalysisConfig(depth=4, epochs=1, max_train=60, max_eval=40, validate=3, orders=1)
BUDGET = 14 * 1024  # bytes: between the classifier alone (8.6 KB) and every layer
BOUND = 25  # visits: fewer than the ~150 this budget's whole search takes, so it stops early
SLOW = 0.02  # s added to every planner call of the slowed run


def _data(path: Path) -> Path:
    from sklearn.datasets import load_digits

    d = load_digits()
    np.savez(path, x=(d.images[:100] / 16.0).astype(np.float32)[:, None],
             y=d.target[:100].astype(np.int64))
    return path


def _choose(data: Path) -> AutoPlan:
    s = Session(DIGITS_CNN, Options(board="host"), load_board("host"),
                AutoOptions(data=data, config=FAST, search_visits=BOUND))
    return s.choose(BUDGET, "test budget")


def _key(p: AutoPlan) -> tuple:
    return (p.chosen.scheme.spec, [(k.name, k.scheme.spec, k.sram) for k in p.candidates],
            p.tried.visited, p.tried.sized, p.tried.pruned)


def test_the_same_plan_idle_busy_and_slow(tmp_path, monkeypatch) -> None:
    data = _data(tmp_path / "d.npz")
    idle = _choose(data)
    assert idle.tried.stopped and idle.tried.visited == BOUND  # the bound did stop it
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        busy = _choose(data)
    finally:
        for h in hogs:
            h.kill()
    planner = MemoryOracle.__call__

    def slowed(self, spec):
        time.sleep(SLOW)
        return planner(self, spec)

    monkeypatch.setattr(MemoryOracle, "__call__", slowed)
    slow = _choose(data)
    assert _key(busy) == _key(idle)
    assert _key(slow) == _key(idle)
    assert slow.seconds["search"] > SLOW * slow.tried.sized  # it did run slower
    monkeypatch.undo()
    unbounded = Session(DIGITS_CNN, Options(board="host"), load_board("host"),
                        AutoOptions(data=data, config=FAST, search_visits=10**6))
    whole = unbounded.choose(BUDGET, "test budget")
    assert not whole.tried.stopped and whole.tried.visited > BOUND


@pytest.mark.parametrize("args", [("--search-visits", "0")])
def test_a_bad_visit_bound_is_a_clean_error(cli, tmp_path, args) -> None:
    data = _data(tmp_path / "d.npz")
    r = cli("plan", DIGITS_CNN, "--data", data, "--max-sram", "14", *args, check=False)
    assert r.returncode == 2 and "--search-visits must be at least 1" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("build", DIGITS_CNN, "--update", "auto", "--data", data, "--max-sram", "14",
            "--out", tmp_path / "o", *args, check=False)
    assert r.returncode == 2 and "--search-visits must be at least 1" in r.stderr
    assert not (tmp_path / "o").exists()
