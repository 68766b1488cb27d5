"""`--new-head`: an int8 classifier re-initialised for new classes gets room to grow.

A digits CNN is pretrained in PyTorch on the digits 0-4, given a fresh 5-way head, quantised
(`--quantize int8`) and adapted to the digits 5-9 by training only its classifier. The oracle
is the same adaptation in fp32 PyTorch (same samples, order, learning rate).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tinytrain
from sklearn.datasets import load_digits
from torch import nn
from torch_models import DigitsCNN, export

from tinytrain.device.online import connect, load_state
from tinytrain.passes.new_head import HEAD_WEIGHT_HEADROOM, LOGIT_SPAN
from tinytrain.passes.pipeline import Options, import_model

ort = pytest.importorskip("onnxruntime")

LR, EPOCHS = 0.05, 3
# int8 + stochastic rounding against fp32 on 600 held-out digits: a few samples either way
# (measured: 51.3 % both); without --new-head the saturated head reaches 33.6 %
MAX_GAP_TO_FP32 = 0.03
SATURATED = 0.05  # of the head's int8 weights at +-127 without room (measured: 16 %)
# with room at most a tenth as many (measured: 1 weight of 80, its largest, since the loss
# reads the head's unrounded logits; 0 of 80, largest 124, when it read the int8 logits)
ROOM = 0.1
# the exported fp32 model against the int8 program it came from: int8 rounding flips a few
# near-tied predictions
MIN_EXPORT_AGREEMENT = 0.95


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("head")
    d = load_digits()
    x, y = (d.images / 16.0).astype(np.float32)[:, None], d.target.astype(np.int64)
    old, new = np.flatnonzero(y < 5), np.flatnonzero(y >= 5)
    torch.manual_seed(0)
    net = DigitsCNN()
    net.fc = nn.Linear(16, 5)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xt, yt = torch.tensor(x[old]), torch.tensor(y[old])
    for _ in range(10):
        for i in torch.randperm(len(xt)).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[i]), yt[i]).backward()
            opt.step()
    net.fc = nn.Linear(16, 5)  # the fresh head for the new classes
    net.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(net, root / "cnn.onnx")
    ada, test = new[:300], new[300:]
    np.savez(root / "calib.npz", x=x[old[:200]])
    np.savez(root / "ada.npz", x=x[ada], y=y[ada] - 5)
    np.savez(root / "test.npz", x=x[test], y=y[test] - 5)
    return {"root": root, "model": model, "net": net, "x": x, "y": y, "ada": ada,
            "test": test}


def int8_args(t: dict) -> list:
    return ["--quantize", "int8", "--calib", t["root"] / "calib.npz", "--update", "last:1",
            "--lr", str(LR)]


def adapt(t: dict, out: Path, *extra: str) -> float:
    tinytrain("build", t["model"], "--out", out, *int8_args(t), *extra)
    log = tinytrain("run", out, "--data", t["root"] / "ada.npz", "--eval",
                    t["root"] / "test.npz", "--epochs", str(EPOCHS), "--save",
                    out / "state.npz").stdout
    return float(re.search(r"eval accuracy after: ([0-9.]+)", log).group(1))


def torch_finetune(t: dict, params: Callable[[nn.Module], Iterable[nn.Parameter]],
                   epochs: int = EPOCHS) -> nn.Module:
    """The pretrained net with its fresh head after SGD on the adaptation digits (batch 1, in
    file order, as `tinytrain run` without --shuffle) of the parameters `params(net)`."""
    net = DigitsCNN()
    net.fc = nn.Linear(16, 5)
    net.load_state_dict(t["net"].state_dict())
    opt = torch.optim.SGD(params(net), lr=LR)
    x, y = torch.tensor(t["x"][t["ada"]]), torch.tensor(t["y"][t["ada"]] - 5)
    for _ in range(epochs):
        for i in range(len(x)):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[i:i + 1]), y[i:i + 1]).backward()
            opt.step()
    return net


def torch_adapt(t: dict) -> float:
    net = torch_finetune(t, lambda n: n.fc.parameters())
    with torch.no_grad():
        pred = net(torch.tensor(t["x"][t["test"]])).argmax(1).numpy()
    return float((pred == t["y"][t["test"]] - 5).mean())


def test_the_head_is_widened_and_nothing_else(task):
    opts = Options(quantize="int8", calib=task["root"] / "calib.npz")
    g0 = import_model(task["model"], opts)
    g1 = import_model(task["model"], Options(quantize="int8", calib=opts.calib, new_head=True))
    head = next(n for n in g1.nodes if g1.outputs[0] in n.outputs)
    w0, w1 = g0.t(head.inputs[1]), g1.t(head.inputs[1])
    s0, s1 = np.asarray(w0.quant.scale), np.asarray(w1.quant.scale)
    assert np.allclose(s1, s0 * HEAD_WEIGHT_HEADROOM, rtol=1e-6)
    # the same real weights on the coarser grid: within half a new step
    real0 = w0.data * s0[:, None]
    real1 = w1.data * s1[:, None]
    assert np.all(np.abs(real1 - real0) <= s1[:, None] / 2 + 1e-9)
    q = g1.t(g1.outputs[0]).quant
    assert q.scale[0] * (-128 - q.zero_point[0]) <= -LOGIT_SPAN + q.scale[0]
    assert q.scale[0] * (127 - q.zero_point[0]) >= LOGIT_SPAN - q.scale[0]
    assert g1.meta["new_head"]["layer"] == head.name
    for n0, n1 in zip(g0.nodes, g1.nodes, strict=True):
        if n1.name != head.name:
            assert n0 == n1
    changed = {k for k in g0.tensors if k in g1.tensors and
               (g0.t(k).quant != g1.t(k).quant or (g0.t(k).data is not None and
                not np.array_equal(g0.t(k).data, g1.t(k).data)))}
    assert changed == set(head.inputs[1:]) | {g1.outputs[0]}


def test_a_fresh_int8_head_learns_as_fp32_does(task, tmp_path):
    ref = torch_adapt(task)
    ours = adapt(task, tmp_path / "wide", "--new-head")
    # the calibrated scales (a head trained without --new-head gets 2x, not 8x)
    narrow = adapt(task, tmp_path / "narrow", "--weight-headroom", "1")
    assert ours >= ref - MAX_GAP_TO_FP32, (ours, ref)
    assert narrow < ours - MAX_GAP_TO_FP32, (narrow, ours)  # what --new-head is for
    # the saturation it prevents: without it the head's weights clip at +-127 and its logits
    # stay inside the calibrated (untrained) range; with it they grow beyond that range
    clipped = {b: (np.abs(load_state(tmp_path / b / "state.npz")[head_weight(task)]
                          .astype(np.int32)) == 127).mean() for b in ("narrow", "wide")}
    assert clipped["narrow"] > SATURATED and clipped["wide"] < ROOM * clipped["narrow"], clipped
    g = import_model(task["model"], Options(quantize="int8", calib=task["root"] / "calib.npz"))
    q = g.t(g.outputs[0]).quant
    calibrated = q.scale[0] * (127 - q.zero_point[0]) - q.scale[0] * (-128 - q.zero_point[0])
    logits = tinytrain_infer(tmp_path / "wide", task["x"][task["test"]])
    assert logits.max() - logits.min() > calibrated


def head_weight(t: dict) -> str:
    g = import_model(t["model"], Options(quantize="int8", calib=t["root"] / "calib.npz"))
    return next(n for n in g.nodes if g.outputs[0] in n.outputs).inputs[1]


def tinytrain_infer(build: Path, x: np.ndarray) -> np.ndarray:
    """The trained host program's real-valued logits (the public online API)."""
    with connect(build) as m:
        m.load_params(load_state(build / "state.npz"))
        return np.stack([m.predict(v) for v in x])


def test_the_trained_new_head_exports_to_onnx(task, tmp_path):
    out = tmp_path / "b"
    adapt(task, out, "--new-head")
    tinytrain("export", out, "--state", out / "state.npz", "--out", tmp_path / "t.onnx")
    x = task["x"][task["test"]]
    sess = ort.InferenceSession(str(tmp_path / "t.onnx"))
    theirs = np.concatenate([sess.run(None, {"x": v[None]})[0] for v in x])
    ours = tinytrain_infer(out, x)
    assert (theirs.argmax(1) == ours.argmax(1)).mean() >= MIN_EXPORT_AGREEMENT


def test_new_head_needs_an_int8_model(task, tmp_path):
    p = tinytrain("build", task["model"], "--out", tmp_path / "b", "--new-head", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--new-head widens an int8 classifier" in p.stdout + p.stderr
    assert not (tmp_path / "b").exists()


def test_tflite_head_behind_a_softmax_trains_and_exports_bit_exact(tmp_path):
    """micro_speech ends in an int8 SOFTMAX kept for inference: it is prepared again for the
    widened logits. The export writes the head's new scales in place, and LiteRT runs the
    exported file bit-exactly as the trained C program."""
    pytest.importorskip("ai_edge_litert.interpreter")
    from test_export_tflite import Trained, check_round_trip, save_data, speech_inputs
    from test_int8_tflite import SPEECH

    q, y = speech_inputs(1, 40)
    out = tmp_path / "b"
    tinytrain("build", SPEECH, "--out", out, "--new-head", "--update", "last:1")
    data = save_data(tmp_path / "d.npz", SPEECH, q, y)
    log = tinytrain("run", out, "--data", data, "--eval", data, "--epochs", "3", "--save",
                    tmp_path / "s.npz").stdout
    before, after = (float(v) for v in re.findall(r"eval accuracy \w+: ([0-9.]+)", log))
    assert after > before
    tinytrain("export", out, "--state", tmp_path / "s.npz", "--out", tmp_path / "t.tflite")
    check_round_trip(Trained(SPEECH, out, tmp_path / "s.npz", tmp_path / "t.tflite"),
                     speech_inputs(2, 30)[0], tmp_path)


def test_tflite_export_of_a_new_head_it_did_not_train_is_refused(tmp_path):
    from test_export_tflite import save_data, speech_inputs
    from test_int8_tflite import SPEECH

    out = tmp_path / "b"
    tinytrain("build", SPEECH, "--out", out, "--new-head", "--update", "none")
    q, y = speech_inputs(1, 4)
    tinytrain("run", out, "--data", save_data(tmp_path / "d.npz", SPEECH, q, y), "--save",
              tmp_path / "s.npz")
    p = tinytrain("export", out, "--state", tmp_path / "s.npz", "--out", tmp_path / "t.tflite",
                  check=False)
    assert p.returncode == 2 and "--new-head" in p.stdout + p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "t.tflite").exists()
