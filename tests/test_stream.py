"""Row streaming of the frozen stem, int8 ReLU masks, the in-place depthwise backward and
split partial weights (trained channels in SRAM, the rest in flash).

The passes may only move bytes: an int8 MobileNetV2 trained with them and with
--no-memory-passes must give bit-identical losses and parameters (int8 forward arithmetic is
exact, and the in-place backward adds its floats in the same order as the plain kernel).
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import tinytrain.passes.pipeline as pipeline_module
from tinytrain.device.build import build
from tinytrain.ir import Graph, Node, Tensor
from tinytrain.passes.memory_plan import peak_live, plan_memory
from tinytrain.passes.pipeline import Options, load_model, pipeline, quantize_model
from tinytrain.passes.stream import _ring_rows, _schedule, stream_rows

torch = pytest.importorskip("torch")

from tests.test_memory_passes import SRAM_MATCH_RTOL, _reserved_bytes  # noqa: E402
from tests.torch_models import MobileNetV2, export  # noqa: E402
from tinytrain.device.state_file import read as read_saved  # noqa: E402

STEPS = 4
SCHEME = "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"


@pytest.fixture(scope="module")
def mbv2(tmp_path_factory):
    """MobileNetV2-w0.35 at 48x48 and its int8 calibration set."""
    d = tmp_path_factory.mktemp("mbv2")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(MobileNetV2(0.35, 48, 10), d / "mbv2.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", x=rng.uniform(0, 1, (4, 3, 48, 48)).astype(np.float32))
    x = rng.uniform(0, 1, (STEPS, 3, 48, 48)).astype(np.float32)
    np.savez(d / "train.npz", x=x, y=rng.integers(0, 10, STEPS))
    return path, d


def _compile(path, d, skip=()):
    opts = Options(update=SCHEME, quantize="int8", calib=d / "calib.npz")
    g = load_model(path)
    g = quantize_model(g, opts)
    for name, fn in pipeline(opts):
        if name not in skip:
            g = fn(g)
    return g


def test_stem_is_streamed_and_lowers_the_forward_peak(mbv2):
    path, d = mbv2
    g = _compile(path, d)
    plain = _compile(path, d, skip=("stream",))
    stages = [n for n in g.nodes if n.op == "row_stream"]
    assert len(stages) == 1 and g.nodes[0] is stages[0]
    stage = stages[0]
    inner = stage.attrs["_rings"]
    planned = {b.name for b in plan_memory(g).buffers}
    assert inner and not set(inner) & planned  # the intermediates never exist whole
    for t, (_, rows, row_bytes) in inner.items():
        h, w, c = stage.attrs["_shapes"][t]
        assert rows < h and row_bytes == w * c
    assert peak_live(g, "forward") < peak_live(plain, "forward")
    assert plan_memory(g).arena_size <= plan_memory(plain).arena_size
    fwd = [n for n in g.nodes if n.phase == "forward"]
    assert len(fwd) < len([n for n in plain.nodes if n.phase == "forward"])


def test_int8_relu_masks_replace_saved_outputs(mbv2):
    path, d = mbv2
    g = _compile(path, d)
    masks = [n for n in g.nodes if n.op == "q8_clamp_mask"]
    assert masks
    backward_reads = {i for n in g.nodes if n.phase == "backward" for i in n.inputs}
    for m in masks:
        assert m.inputs[0] not in backward_reads  # the int8 output itself is not kept
        assert g.t(m.outputs[0]).nbytes == -(-g.t(m.inputs[0]).size // 8)


def test_depthwise_backward_runs_in_place(mbv2):
    path, d = mbv2
    g = _compile(path, d, skip=("channels",))  # which otherwise streams these blocks
    dw = [n for n in g.nodes if n.op == "conv2d_backward_input_q8" and g.t(n.outputs[0]).alias_of]
    assert dw and all(n.attrs["groups"] > 1 for n in dw)


def _conv(name, x, y, k, s, shapes):
    return Node(name, "conv2d_q8", (x, f"{name}_w"), (y,),
                {"kernel": (k, k), "stride": (s, s), "pads": (k // 2,) * 4, "dilation": (1, 1),
                 "groups": 1}), shapes


def test_ring_sizes_follow_the_kernel_windows():
    """3x3 stride-1 after 3x3 stride-1: the middle tensor keeps 3 rows; a 1x1 conv keeps 1;
    a stride-2 3x3 reads rows 2y-1..2y+1 and so keeps 3 of its input."""
    shapes = {"x": (64, 4, 2), "a": (64, 4, 2), "b": (64, 4, 2), "c": (64, 4, 2),
              "d": (32, 4, 2)}
    nodes = [_conv("n0", "x", "a", 3, 1, shapes)[0], _conv("n1", "a", "b", 1, 1, shapes)[0],
             _conv("n2", "b", "c", 3, 1, shapes)[0], _conv("n3", "c", "d", 3, 2, shapes)[0]]
    tensors = {t: Tensor(t, s, "activation", dtype="s8") for t, s in shapes.items()}
    tensors["x"] = Tensor("x", shapes["x"], "input", dtype="s8")
    for n in nodes:
        tensors[n.inputs[1]] = Tensor(n.inputs[1], (2, 3, 3, 2), "param", dtype="s8")
    g = Graph(tensors, tuple(nodes), ("x",), ("d",))
    sched = _schedule(g, nodes, "d")
    assert sorted(sched) == sorted({(k, r) for k, r in sched})  # every row computed once
    assert len(sched) == 64 * 3 + 32
    rows = _ring_rows(g, nodes, sched)
    assert rows == {"a": 1, "b": 3, "c": 3, "d": 1}
    streamed = stream_rows(g)
    assert streamed.nodes[0].op == "row_stream"


def test_update_inputs_are_converted_once_where_the_arena_allows(mbv2):
    """x_float gives channel-streamed 1x1 weight updates a float copy of their int8 input in
    the region's scratch only where the planner's arena does not grow."""
    path, d = mbv2
    g = _compile(path, d, skip=("channel_group",))
    plain = _compile(path, d, skip=("x_float", "channel_group"))
    assert plan_memory(g).arena_size == plan_memory(plain).arena_size
    before = {n.name: n for n in plain.nodes if n.op == "channel_stream"}
    converted = [n for n in g.nodes if n.op == "channel_stream" and n.attrs.get("x_float")]
    assert converted
    for n in converted:
        grown = g.t(n.attrs["scratch"]).size - plain.t(before[n.name].attrs["scratch"]).size
        assert grown == sum(g.t(x).size for x in n.attrs["x_float"])
        assert all(g.t(x).dtype == "s8" for x in n.attrs["x_float"])


def test_update_rows_are_grouped_where_the_arena_allows(mbv2):
    """channel_group keeps four gradient planes for the int8 1x1 updates that x_float left
    converting x per row (and the sinks beside them), and runs those once per four channels,
    only where the planner's arena does not grow."""
    path, d = mbv2
    # this model's regions all have room for x_float, so no update groups; without it, they do
    assert not [m for n in _compile(path, d).nodes if n.op == "channel_stream"
                for m in n.attrs["_nodes"] if m.name in n.attrs.get("_grouped", ())
                and m.op == "conv2d_weight_sgd_q8"]
    g = _compile(path, d, skip=("x_float",))
    plain = _compile(path, d, skip=("x_float", "channel_group"))
    assert plan_memory(g).arena_size == plan_memory(plain).arena_size
    before = {n.name: n for n in plain.nodes if n.op == "channel_stream"}
    grouped = [n for n in g.nodes if n.op == "channel_stream" and n.attrs.get("group")]
    assert len(grouped) >= 4
    for n in grouped:
        a = n.attrs
        grown = g.t(a["scratch"]).size - plain.t(before[n.name].attrs["scratch"]).size
        assert a["group"] == 4 and grown == 4 * a["plane"] * len(a["_held"])
        late = [m for m in a["_nodes"] if m.name in a["_grouped"]]
        assert {m.op for m in late} <= {"conv2d_weight_sgd_q8", "conv2d_backward_input_q8"}
        assert all(m.inputs[0] in a["_held"] for m in late)
        updates = [m for m in late if m.op == "conv2d_weight_sgd_q8"]
        assert all(m.inputs[1] not in a.get("x_float", {}) for m in updates)
    assert any(m.op == "conv2d_weight_sgd_q8" for n in grouped for m in n.attrs["_nodes"]
               if m.name in n.attrs["_grouped"])
    hoisted = [n for n in grouped if n.attrs.get("_hoisted")]  # sources, four channels a pass
    assert hoisted
    for n in hoisted:
        src = n.attrs["_nodes"][0]
        assert src.name == n.attrs["_hoisted"] and src.outputs[0] in n.attrs["_held"]


def _train(cli, path, d, out, *extra):
    cli("build", path, "--out", out, "--update", SCHEME, "--quantize", "int8", "--calib",
        d / "calib.npz", *extra)
    cli("run", out, "--data", d / "train.npz", "--metrics", out / "m.jsonl", "--save",
        out / "state.npz")
    losses = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    return losses, read_saved(out / "state.npz").params


def test_grouped_updates_train_bit_identically(mbv2, tmp_path, cli, monkeypatch):
    """Regions whose 1x1 updates read int8 x (x_float left out) update four rows per pass
    from kept planes: the build trains bit for bit like the one without memory passes."""
    path, d = mbv2
    monkeypatch.setattr(pipeline_module, "convert_update_inputs", lambda g: g)
    build(path, tmp_path / "a", Options(update=SCHEME, quantize="int8", calib=d / "calib.npz",
                                        kernels="reference"))
    code = (tmp_path / "a" / "model.c").read_text()
    assert "tt_cs_pw_weight_sgd_s8_g(" in code and "tt_cs_pw_input_add_s8_g(" in code
    assert "tt_cs_pw_input_s8_g(" in code  # the sources, four channels at a time
    cli("run", tmp_path / "a", "--data", d / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    grouped = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    grouped_p = read_saved(tmp_path / "state.npz").params
    plain, plain_p = _train(cli, path, d, tmp_path / "b", "--no-memory-passes", "--kernels",
                            "reference")
    assert len(grouped) == STEPS and grouped == plain
    assert grouped_p.keys() == plain_p.keys()
    for k in grouped_p:
        np.testing.assert_array_equal(grouped_p[k], plain_p[k], err_msg=k)


def test_streamed_build_trains_bit_identically(mbv2, tmp_path, cli):
    path, d = mbv2
    # the reference kernels on both sides: the memory passes, not the kernels, are compared
    fast, fast_p = _train(cli, path, d, tmp_path / "a", "--kernels", "reference")
    plain, plain_p = _train(cli, path, d, tmp_path / "b", "--no-memory-passes", "--kernels",
                            "reference")
    c = (tmp_path / "a" / "model.c").read_text()
    assert "tt_conv2d_s8_row" in c and "tt_cs_dw_input_s8" in c  # blocks channel by channel
    assert "tt_cs_pw_weight_sgd_s8f" in c  # 1x1 updates read x converted once (x_float)
    assert "tt_conv2d_s8_row" not in (tmp_path / "b" / "model.c").read_text()
    packed = [p for p in json.loads((tmp_path / "a" / "program.json").read_text())["trainable"]
              if "packed" in p]  # partial weights keep only their trained channels in SRAM
    assert packed and all(p["packed"]["stored_shape"][-1] < p["shape"][-1] for p in packed)
    from tinytrain.device.runner import HostProgram

    with HostProgram(tmp_path / "a") as prog:  # the link still speaks whole weights
        got = prog.get_params()
        entry = packed[0]
        w = got[entry["name"]].copy()
        assert list(w.shape) == entry["shape"]
        np.testing.assert_array_equal(w, fast_p[entry["name"]])
        trained = entry["packed"]["channels"]
        w[..., trained] = np.clip(w[..., trained].astype(np.int32) + 1, -128, 127)
        prog.set_params({**got, entry["name"]: w})
        np.testing.assert_array_equal(prog.get_params()[entry["name"]], w)
    assert len(fast) == STEPS and fast == plain
    assert fast_p.keys() == plain_p.keys()
    for k in fast_p:
        np.testing.assert_array_equal(fast_p[k], plain_p[k], err_msg=k)
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    plain_report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["sram_bytes"]["total"] < plain_report["sram_bytes"]["total"]
    predicted = report["sram_bytes"]["total"]  # the planner, rings and packed weights included
    reserved = _reserved_bytes(tmp_path / "a" / "tt_host")
    assert abs(reserved - predicted) <= SRAM_MATCH_RTOL * predicted, (predicted, reserved)


@pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")
def test_streamed_int8_build_on_the_stm32_twin_matches_the_host(mbv2, tmp_path, cli):
    """The streamed stem, the packed weights and the in-place depthwise backward built with
    arm-none-eabi-gcc -Werror and run on the STM32F746's QEMU twin over the serial link give
    the host build's losses and parameters exactly (int8 forward is integer arithmetic; the
    fp32 backward is built with -ffp-contract=off on both)."""
    path, d = mbv2
    host, host_p = _train(cli, path, d, tmp_path / "host")
    out = tmp_path / "fw"
    cli("build", path, "--out", out, "--update", SCHEME, "--quantize", "int8", "--calib",
        d / "calib.npz", "--board", "stm32f746")
    cli("run", out, "--qemu", "--data", d / "train.npz", "--metrics", out / "m.jsonl",
        "--save", out / "state.npz")
    twin = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    assert twin == host
    with np.load(out / "state.npz") as f:
        for k in host_p:
            np.testing.assert_array_equal(f[k], host_p[k], err_msg=k)
