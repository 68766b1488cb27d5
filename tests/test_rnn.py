"""Recurrent layers from PyTorch (nn.LSTM, nn.GRU): a window of 32 steps trains like PyTorch
autograd (backpropagation through the whole window) over 24 samples, with full, input-only
(partial channels), recurrent-only and head-only plans; stacked, time-major, final-state and
initial-state exports; export back to ONNX (onnxruntime's forward of the trained file); the
planner's price of the gate trace; the STM32F746 twin; and the refusals of what does not
train."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite
import torch

from tests.torch_models import RecurrentNet, export_recurrent
from tinytrain.errors import TinyTrainError

LOSS_RTOL = 1e-4  # per-step loss vs PyTorch: fp32 sums in another order, over 24 steps
OUTPUT_ATOL = 1e-4  # the exported model's logits vs the PyTorch-trained model's, same reason
SAMPLES = 24
STEPS = 32  # the window: every sample back-propagates through all 32 steps
LR = 0.1
INPUT_RATIO = 0.5  # "input" plan: the first ceil(0.5 * 3) = 2 input channels of W
needs_twin = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or
                                shutil.which("qemu-system-arm") is None,
                                reason="needs arm-none-eabi-gcc and qemu-system-arm")

# one layer: 0 its input projection (W, Wb), 1 its recurrence (R, Rb), 2 the classifier
RECURRENT_ONLY = "[[layer]]\nindex = 1\nweight = true\n"
SPECS = {"full": "full", "input": f"tte:n_bias=1,idx=0,ratio={INPUT_RATIO}",
         "recurrent": "recurrent.toml", "head": "last:1"}


def _torch_params(m: RecurrentNet, plan: str) -> tuple[list[str], dict[str, list[int]]]:
    """PyTorch's parameters a plan trains, and the input channels masked out of some."""
    names = [n for n, _ in m.named_parameters()]
    if plan == "full":
        return names, {}
    if plan == "head":
        return ["fc.weight", "fc.bias"], {}
    if plan == "recurrent":
        return ["rnn.weight_hh_l0", "rnn.bias_hh_l0"], {}
    return (["rnn.weight_ih_l0", "rnn.bias_ih_l0", "fc.weight", "fc.bias"],
            {"rnn.weight_ih_l0": [2]})


def _data(n: int, channels: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Sine windows (N, T, C): the class sets the frequency, plus noise."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, n)
    t = np.arange(STEPS)
    x = np.stack([np.sin(2 * np.pi * (k + 1) * t[:, None] / STEPS
                         + rng.uniform(0, 6.3, (1, channels))) for k in y])
    return (x + 0.3 * rng.normal(size=x.shape)).astype(np.float32), y.astype(np.int64)


def _torch_train(m: RecurrentNet, plan: str, x: np.ndarray, y: np.ndarray) -> list[float]:
    trained, masks = _torch_params(m, plan)
    params = dict(m.named_parameters())
    for name, p in params.items():
        p.requires_grad_(name in trained)
    opt = torch.optim.SGD([params[n] for n in trained], lr=LR)
    out = []
    for k in range(len(x)):
        xk = torch.from_numpy(x[k:k + 1])
        logits = m(xk.transpose(0, 1) if m.time_major else xk)
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[k:k + 1]))
        opt.zero_grad()
        loss.backward()
        for name, channels in masks.items():
            params[name].grad[:, channels] = 0.0
        opt.step()
        out.append(float(loss.detach()))
    return out


def _build_and_train(cli, m: RecurrentNet, tmp: Path, spec: str, *board: str) -> list[float]:
    path = export_recurrent(m, tmp / "rnn.onnx")
    (tmp / "recurrent.toml").write_text(RECURRENT_ONLY)
    x, y = _data(SAMPLES)
    np.savez(tmp / "train.npz", x=x, y=y)
    spec = str(tmp / spec) if spec.endswith(".toml") else spec
    cli("build", path, "--out", tmp / "build", "--update", spec, "--lr", LR, *board)
    cli("run", tmp / "build", "--data", tmp / "train.npz", "--metrics", tmp / "m.jsonl",
        "--save", tmp / "state.npz", *(("--qemu",) if board else ()))
    return [json.loads(line)["loss"] for line in open(tmp / "m.jsonl")]


@pytest.mark.parametrize("plan", sorted(SPECS))
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_layer_trains_like_pytorch(cell: str, plan: str, tmp_path: Path, cli) -> None:
    torch.manual_seed(0)
    m = RecurrentNet(cell)
    ours = _build_and_train(cli, m, tmp_path, SPECS[plan])
    info = json.loads((tmp_path / "build" / "program.json").read_text())
    assert len(info["trainable"]) == len(_torch_params(m, plan)[0])
    x, y = _data(SAMPLES)
    ref = _torch_train(m, plan, x, y)
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    assert abs(ref[-1] - ref[0]) > 0.01  # it learned


@pytest.mark.parametrize("cell,variant", [
    ("lstm", dict(layers=2, time_major=True, from_state=True, initial_state=True)),
    ("gru", dict(layers=2, time_major=True, from_state=True, initial_state=True)),
    ("lstm", dict(layers=2)),
    ("gru", dict(from_state=True, initial_state=True)),
], ids=["lstm-2-time-major-state", "gru-2-time-major-state", "lstm-2", "gru-state"])
def test_stacked_time_major_and_stateful_exports_train(cell: str, variant: dict,
                                                       tmp_path: Path, cli) -> None:
    """Two layers, the time-major export, h_n[-1] as the head's input, a fixed h0 (and c0):
    PyTorch's other export forms train the same way; export writes every trained W, R and B
    back, and onnxruntime's forward of that file is the trained PyTorch model's."""
    import onnxruntime as ort

    torch.manual_seed(1)
    m = RecurrentNet(cell, **variant)
    ours = _build_and_train(cli, m, tmp_path, "full")
    x, y = _data(SAMPLES)
    np.testing.assert_allclose(ours, _torch_train(m, "full", x, y), rtol=LOSS_RTOL, atol=0)

    out = tmp_path / "trained.onnx"
    cli("export", tmp_path / "build", "--state", tmp_path / "state.npz", "--out", out)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for k in range(3):
        xk = x[k:k + 1].transpose(1, 0, 2) if m.time_major else x[k:k + 1]
        with torch.no_grad():
            want = m(torch.from_numpy(np.ascontiguousarray(xk))).numpy()
        got = sess.run(None, {"x": np.ascontiguousarray(xk)})[0]
        np.testing.assert_allclose(got, want, atol=OUTPUT_ATOL, rtol=0)


def test_the_planner_prices_the_gate_trace_only_when_bptt_needs_it(tmp_path: Path, cli) -> None:
    """Training the recurrence keeps every step's gates (4H floats a step for an LSTM, written
    over the input projection) and cell states (H) until the backward; a head-only plan frees
    them after the forward; R's gradient is applied as it is summed, never stored."""
    torch.manual_seed(0)
    path = export_recurrent(RecurrentNet("lstm", hidden=16), tmp_path / "rnn.onnx")
    peak, grads = {}, {}
    for plan in ("full", "last:1"):
        cli("build", path, "--out", tmp_path / plan, "--update", plan, "--board", "host")
        r = json.loads((tmp_path / plan / "report.json").read_text())
        peak[plan] = {b["name"]: b["bytes"] for b in r["memory"]["peak_buffers"]}
        grads[plan] = r["sram_bytes"]["param_grads"]
    gates, cells = STEPS * 4 * 16 * 4, STEPS * 16 * 4
    # the gates live in the input projection's buffer (in place), through the backward
    assert peak["full"]["_rnn_LSTM_input"] == gates and peak["full"]["_rnn_LSTM_cells"] == cells
    assert not any(name.endswith("_gates") for name in peak["full"])
    assert any(name.endswith("lstm_backward_out") for name in peak["full"])
    # the head-only plan peaks in the forward, before any gradient exists
    assert not any("backward" in name for name in peak["last:1"])
    assert sum(peak["full"].values()) > sum(peak["last:1"].values())
    assert grads == {"full": 0, "last:1": 0}  # batch 1: every gradient fused with its update


def test_tinytrain_ops_lists_the_recurrent_ops() -> None:
    out = subprocess.run([sys.executable, "-m", "tinytrain", "ops"], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "200"}, check=True).stdout
    rows = {cells[1].strip(): [c.strip() for c in cells[2:]]
            for cells in (ln.split("│") for ln in out.splitlines()) if len(cells) > 5}
    assert rows["lstm"][:4] == ["LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM, "
                                "UNIDIRECTIONAL_SEQUENCE_LSTM (int8, run in fp32)", "yes", "yes"]
    assert rows["gru"][:4] == ["GRU", "-", "yes", "yes"]
    assert rows["seq_step"][:4] == ["Gather", "STRIDED_SLICE", "yes", "yes"]


def _hand_made(tmp: Path, op: str, **attrs) -> Path:
    """A one-layer ONNX LSTM/GRU written by hand (T=8, C=3, H=4), its Y's last step to a
    Gemm."""
    from onnx import TensorProto, helper, numpy_helper

    g = {"LSTM": 4, "GRU": 3}[op] * 4
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n) for n, s in
             (("W", (1, g, 3)), ("R", (1, g, 4)), ("B", (1, 2 * g)), ("fc", (4, 2)))]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    inits.append(numpy_helper.from_array(np.array(7, np.int64), "last"))
    nodes = [helper.make_node(op, ["x", "W", "R", "B"], ["Y"], hidden_size=4, **attrs),
             helper.make_node("Squeeze", ["Y", "axes"], ["Ys"]),
             helper.make_node("Gather", ["Ys", "last"], ["h"], axis=0),
             helper.make_node("MatMul", ["h", "fc"], ["logits"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [8, 1, 3])], [helper.make_tensor_value_info(
            "logits", TensorProto.FLOAT, [1, 2])], inits)
    path = tmp / f"{op.lower()}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("op,attrs,says", [
    ("LSTM", dict(direction="bidirectional"), "direction 'bidirectional' is not supported"),
    ("GRU", dict(linear_before_reset=0), "linear_before_reset=0 is not supported"),
    ("LSTM", dict(clip=3.0), "attribute 'clip' is not supported"),
])
def test_what_does_not_train_is_refused_by_name(op: str, attrs: dict, says: str,
                                                tmp_path: Path) -> None:
    from tinytrain.frontend.onnx_import import load_onnx

    if attrs.get("direction") == "bidirectional":  # its weights have two directions
        path = _hand_made(tmp_path, op)
        model = onnx.load(str(path))
        model.graph.node[0].attribute.append(onnx.helper.make_attribute("direction",
                                                                        "bidirectional"))
        onnx.save(model, str(path))
    else:
        path = _hand_made(tmp_path, op, **attrs)
    with pytest.raises(TinyTrainError) as e:
        load_onnx(path)
    assert says in str(e.value) and f"({op})" in str(e.value)


def test_a_hand_made_time_major_model_imports_and_matches_onnxruntime(tmp_path: Path) -> None:
    """The numpy reference of the imported graph is onnxruntime's forward of the file."""
    import onnxruntime as ort

    from tinytrain.frontend.onnx_import import load_onnx
    from tinytrain.ops import interp

    for op in ("LSTM", "GRU"):
        path = _hand_made(tmp_path, op, **({"linear_before_reset": 1} if op == "GRU" else {}))
        g = load_onnx(path)
        x = np.random.default_rng(1).normal(size=(8, 1, 3)).astype(np.float32)
        env = interp.initial_state(g)
        interp.run(g, env, {g.inputs[0]: x[:, 0]}, phases=("forward",))
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
        np.testing.assert_allclose(env[g.outputs[0]].reshape(want.shape), want, atol=1e-5)


@needs_twin
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_layer_trains_on_the_m7_twin_and_fits_as_planned(cell: str, tmp_path: Path,
                                                                    cli) -> None:
    """The STM32F746 firmware on its QEMU twin trains as PyTorch does, and the linked ELF's
    static SRAM is the planner's figure plus the firmware's own statics."""
    torch.manual_seed(0)
    m = RecurrentNet(cell)
    twin = _build_and_train(cli, m, tmp_path, "full", "--board", "stm32f746")
    r = json.loads((tmp_path / "build" / "report.json").read_text())
    assert r["firmware"]["planned_sram"] == r["sram_bytes"]["total"]
    assert 0 <= r["firmware"]["sram_used"] - r["firmware"]["planned_sram"] <= 4096
    x, y = _data(SAMPLES)
    np.testing.assert_allclose(twin, _torch_train(m, "full", x, y), rtol=LOSS_RTOL, atol=0)


def test_recomputing_the_first_layers_trace_saves_its_bytes_and_changes_no_result(
        tmp_path: Path, cli) -> None:
    """`--remat 100%` recomputes a stacked LSTM's first trace in the backward (rebuilt from
    the window, which is kept anyway): a smaller arena, the same losses bit for bit."""
    torch.manual_seed(0)
    path = export_recurrent(RecurrentNet("lstm", hidden=16, layers=2), tmp_path / "rnn.onnx")
    x, y = _data(8)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    arena, losses = {}, {}
    for remat in ("off", "100%"):
        out = tmp_path / remat.strip("%")
        cli("build", path, "--out", out, "--remat", remat, "--board", "host")
        r = json.loads((out / "report.json").read_text())
        arena[remat] = r["sram_bytes"]["arena"]
        cli("run", out, "--data", tmp_path / "train.npz", "--metrics", out / "m.jsonl")
        losses[remat] = [json.loads(line)["loss"] for line in open(out / "m.jsonl")]
    assert losses["100%"] == losses["off"]
    assert arena["off"] - arena["100%"] >= STEPS * 5 * 16 * 4  # one layer's gates and cells


INT8_SIM_RTOL, INT8_SIM_ATOL = 1e-4, 2e-7  # C vs numpy of the same int8 + fp32 arithmetic
INT8_VS_FP32_ATOL = 0.05  # per-step loss of the int8 head + fp32 recurrence vs all-fp32


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_quantize_int8_keeps_the_recurrence_fp32_and_trains(cell: str, tmp_path: Path,
                                                            cli) -> None:
    """--quantize int8 of a recurrent model: the window and the classifier go int8, the input
    projection and the recurrence stay fp32 between a DEQUANTIZE and a QUANTIZE. The C
    program trains as the numpy simulation of the same graph does, and within a few hundredths
    of the all-fp32 PyTorch run."""
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.passes.pipeline import Options, compile_model

    torch.manual_seed(0)
    m = RecurrentNet(cell)
    path = export_recurrent(m, tmp_path / "rnn.onnx")
    x, y = _data(SAMPLES)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "q8"
    cli("build", path, "--out", build, "--quantize", "int8", "--calib", tmp_path / "train.npz",
        "--lr", LR)
    info = json.loads((build / "program.json").read_text())
    dtypes = {p["name"]: p["dtype"] for p in info["trainable"]}
    assert {dtypes[n] for n in dtypes if "_R" in n or "_W" in n} == {"f32"}
    assert {"s8", "s32"} <= set(dtypes.values())
    g, _ = compile_model(path, Options(quantize="int8", calib=tmp_path / "train.npz",
                                       sgd=SGDConfig(lr=LR)))
    ops = [n.op for n in g.nodes if n.phase == "forward"]
    assert cell in ops and "dense_q8" in ops and "quantize_q8" in ops
    ours, _ = _trains_as_simulated(build, g, x, y)
    np.testing.assert_allclose(ours, _torch_train(m, "full", x, y), atol=INT8_VS_FP32_ATOL,
                               rtol=0)


def _litert(path: Path, reference: bool = False):
    """LiteRT on a .tflite: a function from one window (its own dtype) to the output, the LSTM
    state reset before each window; and the input's (scale, zero point). `reference`: the
    BUILTIN_REF kernels, the bit-exact int8 oracle."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference else {}
    lite = Interpreter(model_path=str(path), **kw)
    lite.allocate_tensors()
    i, o = lite.get_input_details()[0], lite.get_output_details()[0]

    def run(x: np.ndarray) -> np.ndarray:
        lite.reset_all_variables()
        lite.set_tensor(i["index"], x[None])
        lite.invoke()
        return lite.get_tensor(o["index"])[0]

    return run, i["quantization"]


def _trains_as_simulated(build: Path, g, x: np.ndarray, y: np.ndarray) -> tuple[list, dict]:
    """Train the host program on (x, y) beside interp.train on graph g, step by step: each C
    loss is the simulation's (which then continues from the C parameters). Returns the C
    losses and the final simulation state."""
    from tinytrain.device.runner import HostProgram
    from tinytrain.ops import interp

    env, pending, losses = interp.initial_state(g), 0, []
    with HostProgram(build) as p:
        for v, label in zip(x, y):
            loss_c, _, _ = p.train(v.reshape(-1), np.array([label], np.int32))
            loss_np, pending = interp.train(g, env, v, np.array([label]), pending)
            assert loss_c == pytest.approx(loss_np, rel=INT8_SIM_RTOL, abs=INT8_SIM_ATOL)
            env.update({k: val.copy() for k, val in p.get_params().items()})
            losses.append(loss_c)
    return losses, env


# ---- Keras's LSTM as TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM (examples/keras/make_lstm.py) ----

KERAS_LSTM = Path(__file__).resolve().parents[1] / "examples" / "keras" / "tiny_keras_lstm"
LITERT_ATOL = 1e-5  # our fp32 forward vs LiteRT's fused kernel: the same sums, another order
# layers: 0 LSTM 1's input projection, 1 its recurrence, 2 and 3 LSTM 2's, 4 the classifier
KERAS_PLANS = {
    "full": "full",
    "head": "last:1",
    "recurrent": "[[layer]]\nindex = 1\nweight = true\n\n[[layer]]\nindex = 3\nweight = true\n",
    # the converter stores LSTM 1's i, c and o biases as one zero tensor: they train apart, and
    # a file written in place cannot hold three values in it, so the exported plan keeps
    # every LSTM bias frozen
    "weights": "".join(f"[[layer]]\nindex = {i}\nweight = true\nbias = false\n\n"
                       for i in range(4)) + "[[layer]]\nindex = 4\nweight = true\n",
}


def _keras_trained_tensors(net, plan: str) -> set[int]:
    """The file tensors a plan trains, for tests/tflite_torch.sgd."""
    codes = [net._code(net.sg.Operators(k)) for k in range(net.sg.OperatorsLength())]
    ops = tflite.BuiltinOperator
    lstm = [k for k, c in enumerate(codes) if c == ops.UNIDIRECTIONAL_SEQUENCE_LSTM]
    dense = [k for k, c in enumerate(codes) if c == ops.FULLY_CONNECTED]

    def inputs(k: int, js) -> set[int]:
        return {int(net.sg.Operators(k).Inputs(j)) for j in js}

    head = inputs(dense[0], (1, 2))
    recurrent = inputs(lstm[0], (5, 6, 7, 8)) | inputs(lstm[1], (5, 6, 7, 8))
    weights = set().union(*(inputs(k, (1, 2, 3, 4)) for k in lstm)) | recurrent | head
    return {"full": set(net.tensor_of.values()), "head": head, "recurrent": recurrent,
            "weights": weights}[plan]


def test_keras_lstm_forward_is_litert_s() -> None:
    """The imported graph's forward (numpy references) against the LiteRT outputs make_lstm.py
    stored: two stacked fused LSTMs, their cell clip, the STRIDED_SLICE of the last step."""
    from tinytrain.frontend.tflite_import import load_tflite
    from tinytrain.ops import interp

    g = load_tflite(KERAS_LSTM.with_suffix(".tflite"))
    assert [n.op for n in g.nodes].count("lstm") == 2
    d = np.load(KERAS_LSTM.with_suffix(".npz"))
    for x, want in zip(d["x"], d["out"]):
        env = interp.initial_state(g)
        interp.run(g, env, {g.inputs[0]: x}, phases=("forward",))
        z = env[g.outputs[0]].reshape(-1).astype(np.float64)
        p = np.exp(z - z.max())
        np.testing.assert_allclose(p / p.sum(), want, atol=LITERT_ATOL, rtol=0)


@pytest.mark.parametrize("plan", sorted(KERAS_PLANS))
def test_keras_lstm_trains_like_pytorch(plan: str, tmp_path: Path, cli) -> None:
    from tests.tflite_torch import TFLiteTorch, sgd

    x, y = _data(SAMPLES)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    spec = KERAS_PLANS[plan]
    if "[[layer]]" in spec:
        (tmp_path / "plan.toml").write_text(spec)
        spec = str(tmp_path / "plan.toml")
    build = tmp_path / "build"
    cli("build", KERAS_LSTM.with_suffix(".tflite"), "--out", build, "--update", spec,
        "--lr", LR)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    net = TFLiteTorch(KERAS_LSTM.with_suffix(".tflite"))
    ref = sgd(net, x, y, LR, _keras_trained_tensors(net, plan))
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)
    if plan != "weights":
        return
    # export writes each gate's trained block back to its own tensor; LiteRT runs the file
    out = tmp_path / "trained.tflite"
    cli("export", build, "--state", tmp_path / "state.npz", "--out", out)
    lite, _ = _litert(out)
    for k in range(3):
        with torch.no_grad():
            want = torch.softmax(net(torch.from_numpy(x[k:k + 1])), -1).numpy()
        np.testing.assert_allclose(lite(x[k])[None], want, atol=OUTPUT_ATOL)


def test_keras_lstm_biases_the_converter_merged_are_not_exported_blindly(tmp_path: Path,
                                                                        cli) -> None:
    """Training LSTM 1's biases gives its i, c and o gates three values for the one tensor the
    converter stored: export refuses, naming the way out, and writes nothing."""
    x, y = _data(4)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", KERAS_LSTM.with_suffix(".tflite"), "--out", build, "--update", "full")
    cli("run", build, "--data", tmp_path / "train.npz", "--save", tmp_path / "state.npz")
    r = cli("export", build, "--state", tmp_path / "state.npz", "--out",
            tmp_path / "trained.tflite", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "share one TFLite buffer" in r.stderr + r.stdout
    assert not (tmp_path / "trained.tflite").exists()


def _with_cell_clip(src: Path, dst: Path, clip: float) -> Path:
    """A copy of the model whose LSTMs clip their cell state at `clip` (the options field
    rewritten in place)."""
    import struct

    buf = bytearray(src.read_bytes())
    sg = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
    for k in range(sg.OperatorsLength()):
        table = sg.Operators(k).BuiltinOptions()
        if sg.Operators(k).BuiltinOptionsType() != \
                tflite.BuiltinOptions.UnidirectionalSequenceLSTMOptions:
            continue
        o = tflite.UnidirectionalSequenceLSTMOptions()
        o.Init(table.Bytes, table.Pos)
        field = o._tab.Offset(6)  # cell_clip
        assert field, "the converter always writes cell_clip"
        struct.pack_into("<f", buf, o._tab.Pos + field, clip)
    dst.write_bytes(bytes(buf))
    return dst


def test_a_cell_clip_that_holds_matches_litert_and_pytorch(tmp_path: Path, cli) -> None:
    """At a clip of 0.3 the cell state saturates on most steps: the forward is still LiteRT's,
    and training (no gradient through a held clip) is still PyTorch's with hardtanh."""
    from tests.tflite_torch import TFLiteTorch, sgd
    from tinytrain.frontend.tflite_import import load_tflite
    from tinytrain.ops import interp

    path = _with_cell_clip(KERAS_LSTM.with_suffix(".tflite"), tmp_path / "clip.tflite", 0.3)
    x, y = _data(SAMPLES)
    g = load_tflite(path)
    lite, _ = _litert(path)
    held = 0
    for k in range(3):
        env = interp.initial_state(g)
        interp.run(g, env, {g.inputs[0]: x[k]}, phases=("forward",))
        cells = [v for name, v in env.items() if name.endswith("_cells")]
        held += sum(int(np.sum(np.abs(c) >= 0.3)) for c in cells)
        z = env[g.outputs[0]].reshape(-1).astype(np.float64)
        np.testing.assert_allclose(np.exp(z) / np.exp(z).sum(), lite(x[k]),
                                   atol=LITERT_ATOL, rtol=0)
    assert held > 100  # the clip is what this test is about
    np.savez(tmp_path / "train.npz", x=x, y=y)
    cli("build", path, "--out", tmp_path / "build", "--update", "full", "--lr", LR)
    cli("run", tmp_path / "build", "--data", tmp_path / "train.npz", "--metrics",
        tmp_path / "m.jsonl")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    net = TFLiteTorch(path)
    np.testing.assert_allclose(ours, sgd(net, x, y, LR, set(net.tensor_of.values())),
                               rtol=LOSS_RTOL, atol=0)


KERAS_LSTM_INT8 = KERAS_LSTM.with_name("tiny_keras_lstm_int8.tflite")
INT8_LSTM_LSB = 1  # our fp32 recurrence vs LiteRT's integer LSTM (16-bit gates and cells),
# in steps of the int8 output: measured 1 at most, 0.15 on average, over 20 windows
INT8_EXPORT_LSB = 2  # the same after export rounds the trained weights onto the int8 grid


def _ours(g, env, q: np.ndarray) -> np.ndarray:
    from tinytrain.ops import interp

    interp.run(g, env, {g.inputs[0]: q}, phases=("forward",))
    return env[g.outputs[-1]].reshape(-1).astype(np.int64)


def test_int8_keras_lstm_runs_as_litert_trains_and_exports(tmp_path: Path, cli) -> None:
    """A fully int8 Keras LSTM (the converter's integer LSTM with 16-bit cell states) imports
    in mixed precision: its forward is LiteRT's reference kernels' within one output step; the
    C program trains as the numpy simulation of the same graph; export rounds the trained
    weights onto the file's grids, and LiteRT's forward of that file follows ours."""
    from tinytrain.frontend.tflite_import import load_tflite
    from tinytrain.ops import interp
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.passes.pipeline import Options, compile_model

    lite, (scale, zp) = _litert(KERAS_LSTM_INT8, reference=True)

    def litert(v: np.ndarray) -> np.ndarray:
        return lite(v).astype(np.int64)

    x, y = _data(SAMPLES)
    q = np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int8)
    g = load_tflite(KERAS_LSTM_INT8)
    assert [n.op for n in g.nodes].count("lstm") == 2
    for v in q[:8]:
        assert np.abs(_ours(g, interp.initial_state(g), v) - litert(v)).max() <= INT8_LSTM_LSB

    np.savez(tmp_path / "train.npz", x=x, y=y)
    # every LSTM bias frozen: the converter stores the zero ones as one buffer (see above)
    (tmp_path / "plan.toml").write_text(KERAS_PLANS["weights"])
    plan = str(tmp_path / "plan.toml")
    build = tmp_path / "build"
    cli("build", KERAS_LSTM_INT8, "--out", build, "--update", plan, "--lr", LR)
    info = json.loads((build / "program.json").read_text())
    assert {p["dtype"] for p in info["trainable"]} == {"f32", "s8"}  # the head has no bias
    tg, _ = compile_model(KERAS_LSTM_INT8, Options(update=plan, sgd=SGDConfig(lr=LR)))
    _, env = _trains_as_simulated(build, tg, x, y)
    np.savez(tmp_path / "state.npz", **{p["name"]: env[p["name"]] for p in info["trainable"]})
    out = tmp_path / "trained.tflite"
    cli("export", build, "--state", tmp_path / "state.npz", "--out", out)
    after_lite, _ = _litert(out, reference=True)
    moved = 0
    for v in q[:8]:
        after = after_lite(v).astype(np.int64)
        assert np.abs(_ours(tg, dict(env), v) - after).max() <= INT8_EXPORT_LSB
        moved += int(np.abs(after - litert(v)).max() > INT8_EXPORT_LSB)
    assert moved  # the exported file is the trained model, not the original
