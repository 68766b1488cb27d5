"""`tinytrain report`, budget failures and plan errors, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"


def test_report_lists_buffers_totals_and_peak(tmp_path, cli):
    cli("build", EXAMPLE, "--out", tmp_path / "b", "--update", "bias")
    text = cli("report", tmp_path / "b").stdout
    assert "saved for backward" in text and "masks" in text and "peak" in text
    m = json.loads(cli("report", tmp_path / "b", "--json").stdout)
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert m["sram_bytes"] == report["sram_bytes"]["total"]
    assert m["arena_bytes"] == report["sram_bytes"]["arena"]
    assert m["peak_live_bytes"] <= m["arena_bytes"]
    assert m["peak_op"] == report["memory"]["peak_op"]
    for b in m["buffers"]:  # every buffer inside the arena, with a lifetime
        assert 0 <= b["offset"] and b["offset"] + b["bytes"] <= m["arena_bytes"]
        assert b["first_step"] <= b["last_step"]
    cli("report", tmp_path / "b", "--plot", tmp_path / "arena.png")
    assert (tmp_path / "arena.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_that_does_not_fit_fails_before_compiling(tmp_path, cli):
    proc = cli("build", EXAMPLE, "--out", tmp_path / "b", "--max-sram", "20", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "does not fit" in proc.stderr and "arena" in proc.stderr
    assert "--update bias" in proc.stderr and "(fits)" in proc.stderr
    assert not (tmp_path / "b").exists()
    cli("build", EXAMPLE, "--out", tmp_path / "b", "--max-sram", "20", "--update", "bias")


def test_invalid_plans_list_the_trainable_layers(tmp_path, cli):
    bad = tmp_path / "plan.toml"
    bad.write_text('[[layer]]\nname = "nope"\nweight = true\n')
    for spec in ("last:99", "tte:n_bias=1,idx=9,ratio=1", "tte:n_bias=1,idx=3,ratio=1.5",
                 str(bad), "sometimes"):
        proc = cli("build", EXAMPLE, "--out", tmp_path / "b", "--update", spec, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, spec
        if spec != "sometimes":
            assert "trainable layers" in proc.stderr and "conv2" in proc.stderr, spec
        assert not (tmp_path / "b").exists()
