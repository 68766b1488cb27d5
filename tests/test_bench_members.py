"""`Options(profile_members=True)`: the ops inside row and channel streams counted one by one on
the STM32F746 twin, so that `tinytrain bench` (and bench/speed.py) can say which kernel inside
a stream costs what. An int8 MobileNetV2 at 48x48 with a TTE scheme has both kinds of stream.
The counting must not change what the program computes, must account for nearly all of each
stream, and costs nothing in a build that does not ask for it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tinytrain
from tinytrain.device.bench import format_table, measure
from tinytrain.device.runner import open_program

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")

SCHEME = "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"
STREAMS = ("row_stream", "row_stream_backward", "channel_stream")
# A stream's own work besides its members (its loop over rows or channels, ring pointers,
# the per-channel memsets) and the counting's timer reads: well under this share of it.
LOOP_SHARE = 0.2
# Counting every member call costs two timer reads per call: at most this share of the whole
# step (measured 3.0 % on this model, whose small planes make many calls; 0.8 % on
# MobileNetV2 at 128x128).
COUNTING_COST = 0.05
TICK = 40  # instructions per SysTick tick on the twin: each reading may be a tick off


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch")
    from tests.mbv2_training import mbv2_files
    from tinytrain.device.build import build
    from tinytrain.passes.pipeline import Options

    d = tmp_path_factory.mktemp("members")
    path = mbv2_files(d, 48, 3)
    # the plain build through the API, the counting one as a user would: the CLI
    build(path, d / "plain", Options(board="stm32f746", update=SCHEME, quantize="int8",
                                     calib=d / "calib.npz"))
    tinytrain("build", path, "--out", d / "members", "--board", "stm32f746", "--update",
              SCHEME, "--quantize", "int8", "--calib", d / "calib.npz", "--profile-members")
    return {"data": d / "train.npz", "plain": d / "plain", "members": d / "members"}


@pytest.fixture(scope="module")
def counts(builds) -> dict[str, dict]:
    return {k: measure(builds[k], steps=2, data=builds["data"]) for k in ("plain", "members")}


def test_program_json_lists_the_members(builds):
    for k in ("plain", "members"):
        info = json.loads((builds[k] / "program.json").read_text())
        kinds = {o["name"]: o["op"] for o in info["profile_ops"]}
        members = info["profile_members"]
        assert {kinds[m["parent"]] for m in members} >= {"row_stream", "channel_stream"}
        assert all(kinds[m["parent"]] in STREAMS for m in members)
        assert info.get("count_members", False) == (k == "members")
    code = (builds["plain"] / "model.c").read_text()
    assert "TT_MEMBER(" in code and "tt_prof_m0" not in code  # no counting compiled in
    assert "tt_prof_m0" in (builds["members"] / "model.c").read_text()


def test_members_account_for_their_streams(counts):
    plain, inside = counts["plain"], counts["members"]
    assert "members" not in plain
    members = inside["members"]
    by_parent: dict[str, list[dict]] = {}
    for m in members:
        by_parent.setdefault(m["parent"], []).append(m)
    streams = {o["name"]: o for o in inside["ops"] if o["op"] in STREAMS}
    assert by_parent.keys() == streams.keys()
    for name, kids in by_parent.items():
        total = streams[name]["instructions"]
        got = sum(k["instructions"] for k in kids)
        assert got <= total + TICK * len(kids), (name, got, total)
        assert got >= (1 - LOOP_SHARE) * total, (name, got, total)
        assert all(k["instructions"] > 0 for k in kids if k["macs"]), name
    # the row stream's stem conv is one of its members, with its MACs
    assert any(m["op"] == "conv2d_q8" and m["macs"] > 0 for m in members)
    assert "inside row and channel streams" in format_table(inside)
    assert "inside row and channel streams" not in format_table(plain)


def test_bench_cli_prints_the_members(builds):
    out = tinytrain("bench", builds["members"], "--qemu", "--steps", "1").stdout
    assert "inside row and channel streams" in out
    first = out.split("inside row and channel streams", 1)[1].splitlines()[2].split()
    assert first[1] in ("conv2d_q8", "conv2d_weight_sgd_q8", "conv2d_backward_input_q8",
                        "add_q8", "bias_sgd_q8", "mask_backward", "q8_clamp_backward")


def test_counting_changes_no_result_and_costs_little(builds, counts):
    step = {k: counts[k]["step"]["instructions"] for k in ("plain", "members")}
    assert step["plain"] < step["members"] <= (1 + COUNTING_COST) * step["plain"], step
    x = np.load(builds["data"])["x"]
    y = np.load(builds["data"])["y"]
    runs = {}
    for k in ("plain", "members"):
        with open_program(builds[k], qemu=True) as dev:
            info = json.loads((builds[k] / "program.json").read_text())
            xs = x.transpose(0, 2, 3, 1).reshape(len(x), *info["input_shape_ir"])
            losses = [dev.train(xs[i], y[i:i + 1])[0] for i in range(len(xs))]
            runs[k] = losses, dev.get_params()
    assert runs["plain"][0] == runs["members"][0]
    for name, v in runs["plain"][1].items():
        np.testing.assert_array_equal(v, runs["members"][1][name], err_msg=name)
