"""`tinytrain build --update auto` and `tinytrain plan` through the real command line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.passes.pipeline import Options, compile_model
from tinytrain.passes.prune import trained_params
from tinytrain.passes.update_plan import parse_plan
from tinytrain.reports.report import memory_report

DIGITS_CNN = ROOT / "examples" / "digits" / "digits_cnn.onnx"
BUDGET_KB = 30  # between `bias` (10.7 KB) and `full` (42.4 KB) of the digits CNN on the host


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    root = tmp_path_factory.mktemp("digits")
    np.savez(root / "train.npz", x=x[:100], y=d.target[:100].astype(np.int64))
    np.savez(root / "test.npz", x=x[1500:], y=d.target[1500:].astype(np.int64))
    return root


def test_build_update_auto_end_to_end(cli, digits, tmp_path):
    out = tmp_path / "auto"
    p = cli("build", DIGITS_CNN, "--out", out, "--lr", "0.05", "--update", "auto", "--data",
            digits / "train.npz", "--max-sram", str(BUDGET_KB))
    rep = json.loads((out / "report.json").read_text())
    auto = rep["auto_plan"]
    # the plan's SRAM as searched is what the build reports, and it is within the budget
    assert auto["sram"] == rep["sram_bytes"]["total"] <= BUDGET_KB * 1024
    assert auto["measured"] == max(c["measured"] for c in auto["candidates"])
    # the standard plans were measured beside the searched ones (`bias` is n_bias=5 here)
    assert {"tte:n_bias=1", "tte:n_bias=5"} <= {c["plan"] for c in auto["candidates"]}
    assert f"auto update plan ({out / 'update_plan.toml'}): {auto['plan']}" in p.stdout
    assert "[[layer]]" in p.stdout and "contribution analysis" in p.stderr
    # the TOML builds the same program when passed back
    toml = out / "update_plan.toml"
    g = compile_model(DIGITS_CNN, Options(update=str(toml)))[0]
    assert trained_params(g, parse_plan(g, str(toml))) == \
        trained_params(g, parse_plan(g, auto["plan"]))
    again = tmp_path / "again"
    cli("build", DIGITS_CNN, "--out", again, "--lr", "0.05", "--update", toml)
    rep2 = json.loads((again / "report.json").read_text())
    assert rep2["sram_bytes"] == rep["sram_bytes"]
    assert (again / "model.c").read_text() == (out / "model.c").read_text()
    # it trains: held-out accuracy of the C program goes up
    log = cli("run", out, "--data", digits / "train.npz", "--eval", digits / "test.npz",
              "--epochs", "2").stdout
    before = float(log.split("eval accuracy before: ")[1].split()[0])
    after = float(log.split("eval accuracy after: ")[1].split()[0])
    assert after > before
    # a second auto build into the same directory reuses every measurement
    p = cli("build", DIGITS_CNN, "--out", out, "--lr", "0.05", "--update", "auto", "--data",
            digits / "train.npz", "--max-sram", str(BUDGET_KB))
    assert "runs cached" in p.stderr and "[1/" not in p.stderr
    assert json.loads((out / "report.json").read_text())["auto_plan"]["plan"] == auto["plan"]


def test_auto_on_a_board_fits_its_sram(cli, digits, tmp_path):
    """Without --max-sram the budget is the board's SRAM less the firmware's own statics;
    the STM32 build links (the linker's verdict) with the plan's figure as the build says."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    out = tmp_path / "stm"
    cli("build", DIGITS_CNN, "--board", "stm32f746", "--out", out, "--update", "auto",
        "--data", digits / "train.npz")
    rep = json.loads((out / "report.json").read_text())
    assert rep["auto_plan"]["budget"] == 320 * 1024 - 2048
    assert rep["firmware"]["planned_sram"] == rep["auto_plan"]["sram"] <= 320 * 1024 - 2048
    assert rep["firmware"]["sram_used"] <= 320 * 1024


def test_too_small_a_budget_fails_with_the_smallest_plan(cli, digits, tmp_path):
    g, p = compile_model(DIGITS_CNN, Options(update="tte:n_bias=1"))
    from tinytrain.boards import load_board

    need = memory_report(g, p, load_board("host"))["sram_bytes"]["total"]
    budget_kb = (need - 1) / 1024
    for args in (["build", DIGITS_CNN, "--out", tmp_path / "o", "--update", "auto"],
                 ["plan", DIGITS_CNN]):
        r = cli(*args, "--data", digits / "train.npz", "--max-sram", f"{budget_kb:.6f}",
                check=False)
        assert r.returncode == 2, r.stdout + r.stderr
        text = " ".join(r.stderr.split())
        assert "too big for any update plan" in text and f"({need} B" in text, text
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_auto_needs_data_and_a_budget(cli, digits, tmp_path):
    r = cli("build", DIGITS_CNN, "--out", tmp_path / "o", "--update", "auto", "--max-sram",
            "30", check=False)
    assert r.returncode == 2 and "--data" in r.stderr
    r = cli("build", DIGITS_CNN, "--out", tmp_path / "o", "--update", "auto", "--data",
            digits / "train.npz", check=False)
    assert r.returncode == 2 and "--max-sram" in r.stderr
    r = cli("build", DIGITS_CNN, "--out", tmp_path / "o", "--data", digits / "train.npz",
            check=False)
    assert r.returncode == 2 and "--update auto" in r.stderr
    assert "Traceback" not in r.stderr


def test_plan_prints_the_frontier(cli, digits, tmp_path):
    r = cli("plan", DIGITS_CNN, "--data", digits / "train.npz", "--max-sram", str(BUDGET_KB),
            "--lr", "0.05", "--budgets", "4", "--write", tmp_path / "p.toml", "--plot",
            tmp_path / "f.png", "--cache", tmp_path / "cache")
    assert r.stdout.startswith("accuracy/memory frontier")
    table = r.stdout.split("\n\n")[0].splitlines()[2:]  # budget, plan SRAM, recompute, predicted
    assert len(table) == 4 and "auto update plan: " in r.stdout
    # the best predicted accuracy never falls as the budget grows, and every plan fits
    predicted = [float(ln.split()[5]) for ln in table]
    assert all(float(ln.split()[2]) <= float(ln.split()[0]) for ln in table)
    assert predicted == sorted(predicted)
    assert (tmp_path / "f.png").stat().st_size > 1000
    g = compile_model(DIGITS_CNN, Options())[0]
    parse_plan(g, str(tmp_path / "p.toml"))  # a valid plan file
    r2 = cli("plan", DIGITS_CNN, "--data", digits / "train.npz", "--max-sram", str(BUDGET_KB),
             "--lr", "0.05", "--budgets", "4", "--cache", tmp_path / "cache")
    assert "runs cached" in r2.stderr and r2.stdout.split("\n\n")[0] == r.stdout.split("\n\n")[0]
