"""Each memory pass removes what it should, and the memory the planner predicts is what the
linked binary reserves. Pinned arena sizes catch regressions."""

from __future__ import annotations

import re
import subprocess
import warnings

import pytest

from tinytrain.ir import GRAD, PARAM_GRAD
from tinytrain.passes.memory_plan import plan_memory
from tinytrain.passes.pipeline import Options, compile_model
from tinytrain.passes.schedule import schedule_backward
from tinytrain.passes.update_plan import layers

torch = pytest.importorskip("torch")

from tests.torch_models import (  # noqa: E402
    DigitsCNN,
    MCUNet5FPS,
    MobileNetV2,
    ProxylessNAS,
    TinyMobileNet,
    export,
)
from tests.tte_schemes import SCHEMES  # noqa: E402

SRAM_MATCH_RTOL = 0.02  # the bar: planner within 2 % of what the binary reserves
ARENA_GROWTH = 1.02  # pinned arenas may not grow more than 2 %
TTE_MBV2 = "tte:n_bias=25,idx=27-30-33-36-39-42-45-48,ratio=1-1-1-1-1-0.125-0.5-1"
TTE_MCUNET = "tte:n_bias=22,idx=21-24-27-30-36-39,ratio=1-1-1-1-0.125-0.25"
REFERENCE = {
    "mbv2": lambda: MobileNetV2(0.35, 128, 10),
    "proxyless": lambda: ProxylessNAS(0.3, 128, 10),
    "mcunet": lambda: MCUNet5FPS(128, 10),
}
# arena bytes measured when this test was written (fp32, batch 1, plain SGD, memory passes on)
PINNED_ARENA = {
    ("mbv2", "full"): 3892256,
    ("mbv2", TTE_MBV2): 983056,
    ("proxyless", "full"): 3248160,
    ("proxyless", "bias"): 671760,
    ("mcunet", "full"): 3433504,
    ("mcunet", TTE_MCUNET): 655376,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in {**REFERENCE, "cnn": DigitsCNN, "mnet": TinyMobileNet}.items():
            out[name] = export(make(), d / f"{name}.onnx")
    return out


@pytest.mark.parametrize(("model", "update"), sorted(PINNED_ARENA))
def test_pinned_arena_sizes(models, model, update):
    _, plan = compile_model(models[model], Options(update=update))
    assert plan.arena_size <= PINNED_ARENA[(model, update)] * ARENA_GROWTH, (
        f"arena grew from {PINNED_ARENA[(model, update)]} to {plan.arena_size} bytes")


def test_frozen_layers_keep_no_weight_gradient_or_saved_input(models):
    g, _ = compile_model(models["mnet"], Options(update="last:1", memory_passes=False))
    lys = layers(g)
    fc = lys[-1]
    backward = [n for n in g.nodes if n.phase == "backward"]
    assert {n.op for n in backward} <= {"dense_backward_weight", "bias_backward"}
    read = {i for n in backward for i in n.inputs}
    saved = {i for i in read if g.t(i).kind not in (GRAD, PARAM_GRAD)}
    assert saved == {fc.node.inputs[0]}  # only the classifier's input survives the forward
    grads = {t.name for t in g.tensors.values() if t.kind == PARAM_GRAD}
    assert grads == {f"{fc.weight}_grad", f"{fc.bias}_grad"}


def test_frozen_layers_still_backpropagate_to_earlier_trained_layers(models):
    g, _ = compile_model(models["cnn"], Options(update="tte:n_bias=0,idx=0,ratio=1"))
    lys = layers(g)
    ops = [n.op for n in g.nodes if n.phase == "backward"]
    # stem trains, so every later conv sends input gradients back, but computes no dW
    assert ops.count("conv2d_weight_sgd") == 1 and ops.count("conv2d_backward_input") >= 3
    frozen_w = {ly.weight for ly in lys[1:-1]}
    assert not frozen_w & {n.outputs[0] for n in g.nodes if n.phase == "backward"}


def test_partial_update_keeps_only_needed_channels(models):
    lys = layers(compile_model(models["mnet"], Options(update="none"))[0])
    pw = next(ly for ly in lys if ly.node.op == "conv2d" and ly.in_channels >= 8
              and ly.node.attrs["kernel"] == (1, 1))
    spec = f"tte:n_bias=1,idx={pw.index},ratio=0.25"
    g, _ = compile_model(models["mnet"], Options(update=spec, memory_passes=False))
    k = -(-pw.in_channels // 4)
    gather = [n for n in g.nodes if n.op == "gather_channels"]
    assert len(gather) == 1 and gather[0].attrs["channels"] == tuple(range(k))
    wgrad = next(n for n in g.nodes if n.op == "conv2d_backward_weight")
    assert wgrad.inputs[1] == gather[0].outputs[0]  # reads the k-channel copy, not x
    assert g.t(wgrad.outputs[0]).shape == g.t(pw.weight).shape[:-1] + (k,)
    assert pw.node.inputs[0] not in {i for n in g.nodes if n.phase == "backward"
                                     for i in n.inputs}


def test_fusion_removes_gradient_buffers(models):
    g, _ = compile_model(models["mnet"], Options(update=TTE_MBV2.replace("25", "3")
                                                 .split(",idx")[0] + ",idx=3,ratio=0.5"))
    assert not [t for t in g.tensors.values() if t.kind == PARAM_GRAD]
    assert not [n for n in g.nodes if n.op == "sgd"]
    unfused, _ = compile_model(models["mnet"], Options(update="full", memory_passes=False))
    assert [t for t in unfused.tensors.values() if t.kind == PARAM_GRAD]
    batch2, _ = compile_model(models["mnet"], Options(update="full", sgd=_sgd(batch=2)))
    assert [t for t in batch2.tensors.values() if t.kind == PARAM_GRAD]  # needs accumulation


def _sgd(**kw):
    from tinytrain.passes.optimizer import SGDConfig

    return SGDConfig(**kw)


def test_relu_backward_uses_mask_or_saved_output(models):
    g, _ = compile_model(models["cnn"], Options())
    fwd_clip = {n.inputs[0]: n for n in g.nodes if n.op == "clip" and n.phase == "forward"}
    backward_reads = {i for n in g.nodes if n.phase == "backward" for i in n.inputs}
    assert not backward_reads & set(fwd_clip)  # no pre-activation is saved for the backward
    assert any(n.op == "clip_mask" for n in g.nodes) or any(
        n.op == "clip_backward" for n in g.nodes)


def _compile_without(path, update, skip):
    from tinytrain.passes.pipeline import load_model, pipeline

    g = load_model(path)
    for name, fn in pipeline(Options(update=update)):
        if name not in skip:
            g = fn(g)
    return g


@pytest.mark.parametrize("model", sorted(REFERENCE))
@pytest.mark.parametrize("update", ["full", "last:4"])
def test_reorder_strictly_lowers_the_peak(models, model, update):
    """TTE's reordering: apply each update as soon as its gradient exists (fuse) and order the
    backward to free buffers early (schedule). Peak SRAM must drop strictly."""
    from tinytrain.boards import load_board
    from tinytrain.reports.report import memory_report

    def sram(g):
        return memory_report(g, plan_memory(g), load_board("host"))["sram_bytes"]["total"]

    before = sram(_compile_without(models[model], update, {"fuse", "schedule"}))
    after = sram(_compile_without(models[model], update, set()))
    assert after < before, (before, after)


def test_schedule_is_judged_by_the_planner(models):
    g = _compile_without(models["cnn"], "full", {"schedule", "inplace"})
    s = schedule_backward(g)
    assert plan_memory(s).arena_size <= plan_memory(g).arena_size
    if s.meta["scheduled"]:
        assert plan_memory(s).arena_size < plan_memory(g).arena_size
    else:
        assert s.nodes == g.nodes


def _reserved_bytes(binary) -> int:
    """Bytes of the static arena and SRAM parameter/gradient/state arrays in the linked ELF."""
    out = subprocess.run(["nm", "-S", "--size-sort", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    total = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and re.fullmatch(r"tt_arena|tt_[pgm]_\w+", parts[3]) \
                and not parts[3].endswith("_init") and parts[2] in "bBdD":
            total += int(parts[1], 16)
    return total


@pytest.mark.parametrize(("model", "update", "batch"),
                         [("cnn", "full", 1), ("cnn", "full", 4), ("mnet", "bias", 1),
                          ("mbv2", TTE_MBV2, 1)])
def test_planner_prediction_matches_linked_binary(models, tmp_path, cli, model, update, batch):
    import json

    cli("build", models[model], "--out", tmp_path / "b", "--update", update, "--batch", batch,
        "--momentum", 0.9)
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    predicted = report["sram_bytes"]["total"]
    reserved = _reserved_bytes(tmp_path / "b" / "tt_host")
    assert abs(reserved - predicted) <= SRAM_MATCH_RTOL * predicted, (predicted, reserved)


def test_greedy_order_is_a_valid_schedule_with_identical_results(models):
    """Whatever order the scheduler picks must respect every dependency and change no value."""
    import numpy as np

    from tinytrain.ops.interp import initial_state, run
    from tinytrain.passes.schedule import _greedy
    from tinytrain.passes.verify import verify

    g = _compile_without(models["mnet"], "full", {"schedule", "inplace"})
    head = [n for n in g.nodes if n.phase in ("forward", "loss")]
    back = [n for n in g.nodes if n.phase == "backward"]
    tail = [n for n in g.nodes if n.phase == "update"]
    s = g.replace(nodes=tuple(head + _greedy(g, back) + tail))
    verify(s)
    assert sorted(n.name for n in s.nodes) == sorted(n.name for n in g.nodes)
    x = np.random.default_rng(0).random(g.t(g.inputs[0]).shape).astype(np.float32)
    results = []
    for graph in (g, s):
        env = initial_state(graph)
        run(graph, env, {g.inputs[0]: x, "label": np.array([3], np.int32)},
            phases=("forward", "loss", "backward", "update"))
        results.append(env)
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)


# int8 (--quantize int8, TTE's ~99 KB shipped schemes, memory passes on): peak SRAM = arena +
# trainable params, measured with the link-streamed input, the per-channel pool gradient and
# channel streaming. The bar: full update ÷ sparse plan with the passes >= 20x.
PINNED_INT8_SRAM = {"mbv2": 123_932, "proxyless": 125_436, "mcunet": 166_300}
INT8_SCHEMES = {"mbv2": SCHEMES["MobileNetV2-w0.35", 99],
                "proxyless": SCHEMES["ProxylessNAS-w0.3", 98],
                "mcunet": SCHEMES["MCUNet-5FPS", 99]}
MIN_SPARSE_RATIO = 20.0  # TTE's 2,939 -> 141 KB is 21x; the issue asks for >= 20x


def _int8_sram(path, calib, update, passes=True):
    from tinytrain.boards import load_board
    from tinytrain.reports.report import memory_report

    g, plan = compile_model(path, Options(update=update, quantize="int8", calib=calib,
                                          memory_passes=passes))
    return memory_report(g, plan, load_board("host"))["sram_bytes"]["total"]


@pytest.fixture(scope="module")
def calib128(tmp_path_factory):
    import numpy as np

    path = tmp_path_factory.mktemp("calib") / "calib.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
    return path


@pytest.mark.parametrize("model", sorted(INT8_SCHEMES))
def test_int8_sparse_plan_is_20x_below_the_full_update(models, calib128, model):
    full = _int8_sram(models[model], calib128, "full", passes=False)
    sparse = _int8_sram(models[model], calib128, INT8_SCHEMES[model])
    assert sparse <= PINNED_INT8_SRAM[model] * ARENA_GROWTH, (
        f"int8 SRAM grew from {PINNED_INT8_SRAM[model]} to {sparse} bytes")
    assert full / sparse >= MIN_SPARSE_RATIO, (full, sparse)
