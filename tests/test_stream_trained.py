"""Streaming that trains: a stem whose layers train their biases runs row by row both ways.

Forward (passes/stream.py): a bias gradient needs the layer's output gradient and the 1-bit
mask of its clamp, not its activations, so the stem streams anyway and each mask is written
row by row as its rows are made. A layer whose weight trains needs its input in the backward,
which is then never a row ring. Backward (passes/stream_backward.py): the stem's input
gradients, masks, residual sums and bias sums run row by row from the gradient entering it.
The passes only move bytes: the build trains to the bits of one without the memory passes, on
the host and on the STM32F746's twin, over 20 steps.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tinytrain.passes.memory_plan import peak_live
from tinytrain.passes.pipeline import Options, load_model, pipeline, quantize_model

torch = pytest.importorskip("torch")

from tests.mbv2_training import assert_same_training, mbv2_files, train_run  # noqa: E402

STEPS = 20
RES = 64  # the backward region pays off from here (at 48 the forward sets the arena)


@pytest.fixture(scope="module")
def mbv2(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream_trained")
    path = mbv2_files(d, RES, STEPS)
    return path, d


def _graph(path, d, update, skip=(), stop=None):
    opts = Options(update=update, quantize="int8", calib=d / "calib.npz")
    g = quantize_model(load_model(path), opts)
    for name, fn in pipeline(opts):
        if name == stop:
            break
        if name not in skip:
            g = fn(g)
    return g


def test_a_stem_that_trains_its_biases_streams_with_its_masks(mbv2):
    path, d = mbv2
    g = _graph(path, d, "bias")
    stage = next(n for n in g.nodes if n.op == "row_stream")
    inner = stage.attrs["_nodes"]
    trained = [n for n in inner if n.op == "conv2d_q8" and g.t(n.inputs[2]).trainable]
    masks = [n for n in inner if n.op == "q8_clamp_mask"]
    assert len(trained) >= 6 and len(masks) >= 6
    # the masks are the stage's outputs (whole, for the backward); the activations are not
    assert set(stage.outputs[2:]) == {m.outputs[0] for m in masks}
    backward_reads = {i for n in g.nodes if n.phase == "backward" for i in n.inputs}
    assert set(stage.outputs[2:]) <= backward_reads
    assert not {n.outputs[0] for n in inner if n.op == "conv2d_q8"} & backward_reads
    plain = _graph(path, d, "bias", skip=("stream",))
    assert peak_live(g, "forward") < 0.5 * peak_live(plain, "forward")


@pytest.mark.parametrize("idx", [0, 4])
def test_a_trained_weight_reads_a_whole_input(mbv2, idx):
    """A layer whose weight trains reads its input in the backward: in every stage the pass
    may choose from, that input is never one of the row rings (it is the sample or the
    stage's exit, whole)."""
    from tinytrain.passes.stream import _exits, _streamable, stream_stage

    path, d = mbv2
    g = _graph(path, d, f"tte:n_bias=52,idx={idx},ratio=1", stop="stream")
    prefix = []
    for n in g.nodes:
        if not _streamable(g, n):
            break
        prefix.append(n)
    cuts = _exits(g, prefix)
    assert cuts
    backward_reads = {i for n in g.nodes if n.phase == "backward" for i in n.inputs}
    for cut, exit_ in cuts:
        stage = next(n for n in stream_stage(g, cut, exit_).nodes if n.op == "row_stream")
        rings = set(stage.attrs["_rings"])
        assert not rings & backward_reads
        for m in stage.attrs["_nodes"]:
            if m.op == "conv2d_q8" and g.t(m.inputs[1]).trainable:
                assert m.inputs[0] not in rings and m.inputs[0] in backward_reads


def _train(cli, path, d, out, *args, qemu=False):
    return train_run(cli, path, d, out, "--update", "bias", "--quantize", "int8", "--calib",
                     d / "calib.npz", *args, qemu=qemu)


def _same(a, b):
    assert_same_training(a, b, STEPS)


@pytest.fixture(scope="module")
def plain(mbv2, tmp_path_factory):
    path, d = mbv2
    return _train(tinytrain_cli(), path, d, tmp_path_factory.mktemp("plain") / "b",
                  "--no-memory-passes")


def tinytrain_cli():
    from tests.conftest import tinytrain

    return tinytrain


def test_streamed_trained_stem_trains_bit_identically(mbv2, plain, tmp_path, cli):
    path, d = mbv2
    fast = _train(cli, path, d, tmp_path / "a")
    c = (tmp_path / "a" / "model.c").read_text()
    assert "tt_conv2d_s8" in c and "tt_row(&r[" in c and "tt_q8_clamp_mask" in c
    # ... and its backward runs row by row too: depthwise input gradients and bias sums
    assert "tt_dw_backward_input_s8_row" in c and "tt_bias_grad_row_f32" in c
    _same(fast, plain)
    r = json.loads((tmp_path / "a" / "report.json").read_text())
    assert r["memory"]["peak_op"] != "(before the step)"


@pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")
def test_streamed_trained_stem_on_the_twin(mbv2, plain, tmp_path, cli):
    path, d = mbv2
    twin = _train(cli, path, d, tmp_path / "fw", "--board", "stm32f746", qemu=True)
    _same(twin, plain)
