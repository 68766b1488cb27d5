"""The memory report (issue 14, Done-when 5): one SRAM figure in `build`, `report` and the
linked ELF (the difference explained), a per-layer table with `--update`'s indices whose
totals are the plan's, on an fp32 ONNX model and int8 TFLite models with sparse plans, and a
plot with every SRAM component, the peak, the forward/backward boundary and the capacity."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import ROOT, tinytrain

from tinytrain.boards import load_board
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model
from tinytrain.reports.layers import LayerCapture
from tinytrain.reports.memory import memory_details
from tinytrain.reports.report import memory_report

EXAMPLE = ROOT / "examples" / "digits" / "digits_cnn.onnx"
FIXTURES = ROOT / "tests" / "fixtures"
DEMO = ("--lr", "0.05", "--momentum", "0.9", "--batch", "16")  # `make demo`'s build
needs_arm = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                               reason="needs gcc-arm-none-eabi (installed by .ci/run)")
# Linked static SRAM the plan does not hold: the firmware's own statics (link state, profiling
# ticks, the SGD scalars) and newlib's data, a few hundred bytes (as in test_boards.py).
UNPLANNED_SRAM = 2048
# The plan rounds each link buffer to 4 bytes (passes.memory_layout.link_buffer_bytes); the linker
# may not.
LINK_ROUNDING = 6


def _listed_layers(model: Path, out: Path, *extra: str) -> dict[int, str]:
    """index -> name from the layer listing an invalid --update prints."""
    p = tinytrain("build", model, "--out", out, "--update", "last:100000", *extra, check=False)
    assert p.returncode == 2 and "trainable layers" in p.stderr, p.stderr
    found = re.findall(r"^\s+(\d+)\s+(\S.*?)\s+\((?:conv2d|dense)", p.stderr, re.M)
    return {int(i): name for i, name in found}


def _gradient_peak(m: dict) -> int:
    """The most gradient bytes live at one step, from the buffer table."""
    live = [0] * len(m["steps"])
    for b in m["buffers"]:
        if b["kind"] == "gradients":
            for k in range(max(b["first_step"], 0), min(b["last_step"], len(live) - 1) + 1):
                live[k] += b["bytes"]
    return max(live, default=0)


def check_totals(m: dict, report: dict) -> list[dict]:
    """The table's totals are the plan's own figures (report.json, the buffer table's
    totals by kind); nothing with bytes or MACs is left outside a layer but shared state."""
    t, s, kinds = m["layers"], report["sram_bytes"], m["totals_by_kind"]
    plan = {"saved_bytes": kinds.get("saved for backward", 0) + kinds.get("masks", 0),
            "trainable_bytes": s["trainable_params"], "param_grad_bytes": s["param_grads"],
            "optimizer_bytes": s["optimizer_state"],
            "frozen_bytes": report["flash_bytes"]["frozen_params"],
            "macs_forward": report["macs"]["forward"],
            "macs_backward": report["macs"]["backward"]}
    assert set(plan) == set(t["summed"])
    for k, v in plan.items():
        assert sum(r[k] for r in t["rows"]) == t["totals"][k] == v, k
    assert t["totals"]["grad_peak_bytes"] == _gradient_peak(m)
    assert t["totals"]["grad_peak_bytes"] == max(r["grad_peak_bytes"] for r in t["rows"])
    layers = [r for r in t["rows"] if r["index"] is not None]
    for other in (r for r in t["rows"] if r["index"] is None):
        assert not any(other[k] for k in ("saved_bytes", "macs_forward", "macs_backward",
                                          "trainable_bytes", "frozen_bytes")), other
    assert [r["index"] for r in layers] == list(range(len(layers)))
    return layers


@pytest.fixture(scope="module")
def host_build(tmp_path_factory) -> Path:
    """The digits CNN built for the host with `make demo`'s training options."""
    out = tmp_path_factory.mktemp("host") / "digits"
    tinytrain("build", EXAMPLE, "--out", out, *DEMO)
    return out


def _compile(model: Path, update: str, loss: str = "ce", **opts) -> tuple[dict, dict, Any, list]:
    """What `build` writes to memory.json and report.json, without the C compiler; the
    final graph and the layers as --update numbers them."""
    capture = LayerCapture()
    g, plan = compile_model(model, Options(loss=loss, update=update, sgd=SGDConfig(0.01),
                                           **opts), capture)
    report = memory_report(g, plan, load_board("host"))
    return memory_details(g, plan, report, capture), report, g, capture.layers


def test_layer_table_of_the_digits_cnn(host_build, tmp_path, cli):
    """fp32 ONNX, every layer trains with momentum and batch 16: each layer's parameters are
    its ONNX initializers, its gradient accumulators and momentum the same again."""
    out = host_build
    m = json.loads((out / "memory.json").read_text())
    report = json.loads((out / "report.json").read_text())
    layers = check_totals(m, report)
    assert {r["index"]: r["layer"] for r in layers} == _listed_layers(EXAMPLE, tmp_path / "x")
    model = onnx.load(str(EXAMPLE))
    sizes = {i.name: int(np.prod(i.dims)) for i in model.graph.initializer}
    for r in layers:
        node = next(n for n in model.graph.node if n.name == r["layer"])
        assert r["trainable_bytes"] == 4 * sum(sizes[i] for i in node.input[1:]), r
        assert r["param_grad_bytes"] == r["optimizer_bytes"] == r["trainable_bytes"]
        assert r["trains"] == "w+b" and r["frozen_bytes"] == 0
        assert r["macs_forward"] > 0 and r["macs_backward"] > 0
    assert layers[0]["saved_bytes"] == 0  # the stem's weight gradient reads the sample itself
    text = cli("report", out, "--layers").stdout
    for r in layers:
        assert re.search(rf"^\s+{r['index']} {re.escape(r['layer'])}\s.*\s{r['macs_forward']:,}"
                         rf"\s+{r['macs_backward']:,}$", text, re.M), text
    totals = m["layers"]["totals"]
    assert re.search(rf"^\s+total\s.*\s{totals['macs_forward']:,}\s+{totals['macs_backward']:,}$",
                     text, re.M)
    assert json.loads(cli("report", out, "--json").stdout)["layers"] == m["layers"]


HELLO_PLAN = """\
[[layer]]
index = 0
bias = true
[[layer]]
index = 1
weight = 0.5
[[layer]]
index = 2
weight = true
"""


@pytest.mark.parametrize("name", ["micro_speech", "hello_world"])
def test_layer_table_of_int8_tflite_sparse_plans(name, tmp_path):
    """int8 TFLite models with sparse plans: a frozen weight in flash, a bias-only layer, a
    partial weight (half its input channels) whose trained and frozen parts add up to the
    whole weight; the rounding step counter every int8 update shares is the only "other"."""
    if name == "micro_speech":
        model, extra = FIXTURES / "micro_speech_quantized.tflite", ["--update",
                                                                   "tte:n_bias=2,idx=1,ratio=1"]
        trains = ["b", "w+b"]
    else:
        plan = tmp_path / "plan.toml"
        plan.write_text(HELLO_PLAN)
        model, extra = FIXTURES / "hello_world_int8.tflite", ["--update", str(plan), "--loss",
                                                              "mse"]
        trains = ["b", "w 8/16+b", "w+b"]
    m, report, _, _ = _compile(model, extra[1], *extra[3:])
    layers = check_totals(m, report)
    assert {r["index"]: r["layer"] for r in layers} == _listed_layers(model, tmp_path / "x")
    assert [r["trains"] for r in layers] == trains
    first = layers[0]  # its int8 weight stays in flash; its int32 bias trains in SRAM
    assert first["frozen_bytes"] > 0 and first["trainable_bytes"] > 0
    if name == "hello_world":  # 16x16 int8 weight + 16 int32 biases, however it was split
        assert layers[1]["trainable_bytes"] + layers[1]["frozen_bytes"] == 16 * 16 + 16 * 4
        assert layers[1]["trainable_bytes"] < 16 * 16 + 16 * 4 or layers[1]["frozen_bytes"] == 0
    assert report["sram_bytes"]["optimizer_state"] > 0  # the shared rounding counter
    assert m["layers"]["rows"][-1]["layer"] == "other"
    assert m["layers"]["rows"][-1]["optimizer_bytes"] == report["sram_bytes"]["optimizer_state"]


def _tte_trains(scheme: str, n: int, channels: list[int]) -> list[str]:
    """What TTE's scheme string says each of n layers trains (update_plan._tte's rules)."""
    f = dict(kv.split("=") for kv in scheme[4:].split(","))
    idx = [int(v) for v in f["idx"].split("-")]
    ratio = [float(v) for v in f["ratio"].split("-")]
    out = ["b" if i >= n - int(f["n_bias"]) else "-" for i in range(n)]
    for i, r in zip(idx, ratio):
        if r:
            k = math.ceil(r * channels[i])
            out[i] = ("w" if k == channels[i] else f"w {k}/{channels[i]}") + "+b"
    out[-1] = "w+b"
    return out


@pytest.mark.parametrize("net", ["TinyMobileNet-fp32", "MobileNetV2-w0.35-int8"])
def test_layer_table_through_the_memory_passes(net, tmp_path):
    """Streamed stems, channel-wise block backwards and split partial weights fold many
    layers into one node; the table still gives each layer its own MACs and bytes, with the
    plan's totals, and no backward before the first trained layer."""
    torch = pytest.importorskip("torch")
    from tests.torch_models import MobileNetV2, TinyMobileNet, export

    torch.manual_seed(0)
    if net == "TinyMobileNet-fp32":
        module, scheme, opts = TinyMobileNet(), "tte:n_bias=4,idx=7-10-13,ratio=0.5-0.5-1", {}
        x = None
    else:
        module, scheme = MobileNetV2(0.35, 48, 10), \
            "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"
        x = np.random.default_rng(0).uniform(0, 1, (4, 3, 48, 48)).astype(np.float32)
        np.savez(tmp_path / "calib.npz", x=x)
        opts = {"quantize": "int8", "calib": tmp_path / "calib.npz"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(module, tmp_path / "m.onnx")
    m, report, g, lys = _compile(path, scheme, **opts)
    ops = {n.op for n in g.nodes}
    if x is not None:  # the passes this test is about did run
        assert {"row_stream", "channel_stream", "merge_channels"} <= ops, ops
    layers = check_totals(m, report)
    channels = [ly.in_channels for ly in lys]
    assert len(layers) == len(lys)
    assert [r["trains"] for r in layers] == _tte_trains(scheme, len(layers), channels)
    first = min(i for i, r in enumerate(layers) if r["trains"] != "-")
    for r in layers:
        assert r["macs_forward"] > 0
        assert (r["macs_backward"] > 0) == (r["index"] >= first), r
        if r["trains"] == "-":
            assert r["trainable_bytes"] == 0 and r["frozen_bytes"] > 0


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory):
    """The digits CNN built for the STM32F746 as `make demo` builds it, with build's output."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs gcc-arm-none-eabi (installed by .ci/run)")
    out = tmp_path_factory.mktemp("demo") / "digits"
    p = tinytrain("build", EXAMPLE, "--board", "stm32f746", "--out", out, *DEMO)
    return out, p.stdout


def _sram_lines(text: str) -> list[str]:
    """The SRAM figure's line and the linked ELF's line under it."""
    lines = [ln.strip() for ln in text.splitlines()]
    return [ln for ln in lines if ln.startswith("SRAM ") or
            ln.startswith("linked firmware.elf: ") and "static SRAM" in ln]


@needs_arm
def test_one_sram_figure_in_build_report_and_the_elf(demo_build, cli):
    out, build_text = demo_build
    r = json.loads((out / "report.json").read_text())
    s, fw = r["sram_bytes"], r["firmware"]
    want = f"SRAM {s['total'] / 1024:.1f} KB of 320 KB planned = arena"
    report_text = cli("report", out).stdout
    layers_text = cli("report", out, "--layers").stdout
    lines = [_sram_lines(t) for t in (build_text, report_text, layers_text)]
    assert lines[0] == lines[1] == lines[2] and len(lines[0]) == 2, lines
    assert lines[0][0].startswith(want), lines
    # the ELF check compares the linked ELF with the same figure, and explains the difference
    assert fw["planned_sram"] == s["total"]
    extra, why = fw["sram_used"] - fw["planned_sram"], fw["unplanned_sram"]
    assert 0 <= extra <= UNPLANNED_SRAM, (extra, why)
    assert why["firmware_state"] + why["libc"] + why["alignment"] == extra
    assert why["firmware_state"] > 0 and why["libc"] >= 0
    assert lines[0][1] == (f"linked firmware.elf: {fw['sram_used'] / 1024:.1f} KB static SRAM "
                           f"= plan + {extra} B (firmware statics {why['firmware_state']} B, "
                           f"newlib {why['libc']} B, alignment {why['alignment']} B)")


@needs_arm
def test_the_plan_is_what_the_elf_holds(demo_build):
    """Independently of the map file: nm's planned symbols are the plan's components byte
    for byte, and every other static SRAM symbol is the explained firmware state or newlib."""
    out, _ = demo_build
    r = json.loads((out / "report.json").read_text())
    s, why = r["sram_bytes"], r["firmware"]["unplanned_sram"]
    nm = subprocess.run(["arm-none-eabi-nm", "-S", str(out / "firmware.elf")],
                        capture_output=True, text=True, check=True).stdout
    got = {"arena": 0, "state": 0, "link": 0, "other": 0}
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2] not in "bBdD":
            continue
        n, name = int(parts[1], 16), parts[3]
        key = ("arena" if name.endswith("_arena") else "state" if re.match(r"tt_[pgm]_", name)
               else "link" if name in ("rx", "tx") else "other")
        got[key] += n
    assert got["arena"] == s["arena"]
    assert got["state"] == s["trainable_params"] + s["param_grads"] + s["optimizer_state"]
    assert 0 <= s["link_buffers"] - got["link"] <= LINK_ROUNDING
    assert got["other"] == why["firmware_state"] + why["libc"]


NEWLIB_USER = """\
#include <errno.h>
#include <stdint.h>
volatile uint8_t tt_arena[1024] __attribute__((aligned(16)));
volatile float tt_p_w[10];
volatile uint32_t counter, tally[3];
int main(void) {
    errno = 0;
    tt_arena[counter] = (uint8_t)tt_p_w[counter];
    tally[counter]++;
    return errno;
}
"""


@needs_arm
def test_unplanned_sram_names_newlibs_data(tmp_path):
    """A program whose errno pulls in newlib's reentrancy struct: the map's breakdown gives
    newlib at least that struct, the firmware exactly its own unplanned statics, and the
    planned symbols nothing."""
    from tinytrain.device.firmware_size import section_sizes, unplanned_sram

    (tmp_path / "t.c").write_text(NEWLIB_USER)
    cflags = list(load_board("stm32f746").cflags)
    run = {"cwd": tmp_path, "check": True, "capture_output": True}
    subprocess.run(["arm-none-eabi-gcc", *cflags, "-O1", "-fdata-sections", "-c", "t.c"], **run)
    subprocess.run(["arm-none-eabi-gcc", *cflags, "--specs=nano.specs", "--specs=nosys.specs",
                    "-Wl,-Map,t.map", "-Wl,--gc-sections", "t.o", "-o", "t.elf"], **run)
    sizes = section_sizes(tmp_path / "t.elf", "arm-none-eabi-size")
    planned = 1024 + 10 * 4
    why = unplanned_sram(tmp_path / "t.map", sizes["sram_used"], planned)
    nm = subprocess.run(["arm-none-eabi-nm", "-S", "t.elf"], text=True, **run).stdout
    impure = next(int(ln.split()[1], 16) for ln in nm.splitlines() if ln.endswith(" impure_data"))
    assert why["firmware_state"] == 4 + 3 * 4  # counter and tally
    assert why["libc"] >= impure > 0
    assert 0 <= why["alignment"] < 16  # the arena's 16-byte alignment at most
    assert sum(why.values()) == sizes["sram_used"] - planned


def _demo_memory(out: Path) -> dict:
    return json.loads((out / "memory.json").read_text())


@needs_arm
def test_plot_shows_every_component_the_peak_the_phases_and_the_capacity(demo_build):
    pytest.importorskip("matplotlib")
    from matplotlib.transforms import Bbox

    from tinytrain.reports.plot import figure

    out, _ = demo_build
    m = _demo_memory(out)
    fig = figure(m)
    top, low = fig.axes

    def by_gid(gid: str) -> list:
        return fig.findobj(lambda a: a.get_gid() == gid)

    constant = {"trainable params": "trainable_params", "param gradients": "param_grads",
                "optimizer state": "optimizer_state", "link buffers": "link_buffers",
                "stack": "stack"}
    live_kinds = {b["kind"] for b in m["buffers"]}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for name, key in constant.items():  # the digits demo has all five
        assert m["sram"][key] > 0 and len(by_gid(f"component:{name}")) == 1, name
        assert any(t.startswith(name) for t in legend), (name, legend)
    for kind in live_kinds:
        assert len(by_gid(f"component:{kind}")) == 1 and f"arena: {kind}" in legend, kind
    assert {"saved for backward", "gradients", "masks"} <= live_kinds
    # the stacked components add up to the planned arena's content plus the constants
    n = len(m["steps"])
    live = [sum(b["bytes"] for b in m["buffers"] if b["first_step"] <= k <= b["last_step"])
            for k in range(n)]
    peak = max(range(n), key=lambda k: (live[k], -k))
    const = sum(m["sram"][k] for k in constant.values())
    (marker,) = by_gid("peak")
    assert list(marker.get_xdata()) == [peak] == [m["peak_step"]]
    assert marker.get_ydata()[0] == pytest.approx((const + live[peak]) / 1024)
    assert m["peak_op"] in by_gid("peak_label")[0].get_text()
    (cap,) = by_gid("capacity")
    assert list(cap.get_ydata()) == [320, 320]
    (planned,) = by_gid("planned")
    assert planned.get_ydata()[0] == pytest.approx(m["sram"]["total"] / 1024)
    assert marker.get_ydata()[0] <= planned.get_ydata()[0]
    fwd_end = max(s["step"] for s in m["steps"] if s["phase"] == "forward")
    bounds = by_gid("forward/backward")
    assert len(bounds) == 2 and all(b.get_xdata()[0] == fwd_end + 0.5 for b in bounds)
    assert len(by_gid("loss")) == 2
    # the legend is outside both panels
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    for ax in (top, low):
        assert not Bbox.intersection(box, ax.get_window_extent()), "legend covers a panel"


def test_plot_of_a_host_build_has_no_capacity_line(host_build, tmp_path, cli):
    pytest.importorskip("matplotlib")
    from tinytrain.reports.plot import figure

    m = json.loads((host_build / "memory.json").read_text())
    fig = figure(m)
    assert not fig.findobj(lambda a: a.get_gid() == "capacity")
    assert fig.findobj(lambda a: a.get_gid() == "peak")
    assert not fig.findobj(lambda a: a.get_gid() == "component:stack")  # no stack on a host
    cli("report", host_build, "--plot", tmp_path / "m.png")
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    bad = cli("report", host_build, "--plot", tmp_path / "no" / "dir" / "m.png", check=False)
    assert bad.returncode == 2 and "cannot write the plot" in bad.stderr
    assert "Traceback" not in bad.stderr
    # without matplotlib: a clear error naming the extra to install
    code = ("import sys; sys.modules['matplotlib'] = None; sys.argv = ['tinytrain', 'report', "
            f"{str(host_build)!r}, '--plot', {str(tmp_path / 'n.png')!r}]; "
            "from tinytrain.cli.main import main; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2 and "tinytrain-mcu[plot]" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
