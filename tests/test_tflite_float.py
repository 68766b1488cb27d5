"""Float TFLite models (Keras's default export): each operator's forward against LiteRT, a model's
training against PyTorch autograd running the same file (tests/tflite_torch.py), the trained
weights exported back in place, `--quantize int8` of a float file, and clear refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tflite_build import ModelBuilder, Options, run_reference
from tests.tflite_torch import TFLiteTorch, sgd
from tinytrain.frontend.tflite_import import load_tflite
from tinytrain.ops.interp import run as run_ir

FORWARD_ATOL = 2e-5  # fp32 sums in another order than LiteRT's float kernels, values ~1
LOSS_RTOL = 1e-4  # per-step loss vs PyTorch (float64): fp32 rounding over 24 steps
WEIGHT_ATOL = 1e-4  # trained weights vs PyTorch after 24 steps, same reason
STEPS = 24
RNG = np.random.default_rng(0)


def _seed(n: int) -> None:
    """Restart the weights' generator: a model is the same whichever test builds it first."""
    RNG.bit_generator.state = np.random.default_rng(n).bit_generator.state


def _w(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.normal(size=shape) * scale).astype(np.float32)


def _conv(mb: ModelBuilder, x: int, shape_in: tuple, cout: int, k: int, stride: int = 1,
          padding: str = "SAME", act: str = "NONE", depthwise: bool = False,
          dilation: int = 1, name: str = "c") -> tuple[int, tuple]:
    _, h, w, cin = shape_in
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-w // stride)
    else:
        eff = (k - 1) * dilation + 1
        oh, ow = (h - eff) // stride + 1, (w - eff) // stride + 1
    wt = mb.tensor((1, k, k, cout) if depthwise else (cout, k, k, cin), "float32",
                   data=_w(*((1, k, k, cout) if depthwise else (cout, k, k, cin))),
                   name=name + "_w")
    b = mb.tensor((cout,), "float32", data=_w(cout, scale=0.1), name=name + "_b")
    y = mb.tensor((1, oh, ow, cout), "float32", name=name)
    opts = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function=act,
                dilation_w_factor=dilation, dilation_h_factor=dilation)
    if depthwise:
        mb.op("DEPTHWISE_CONV_2D", [x, wt, b], [y],
              Options("DepthwiseConv2DOptions", depth_multiplier=cout // cin, **opts))
    else:
        mb.op("CONV_2D", [x, wt, b], [y], Options("Conv2DOptions", **opts))
    return y, (1, oh, ow, cout)


def _dense(mb: ModelBuilder, x: int, n_in: int, n_out: int, act: str = "NONE",
           name: str = "fc") -> int:
    wt = mb.tensor((n_out, n_in), "float32", data=_w(n_out, n_in), name=name + "_w")
    b = mb.tensor((n_out,), "float32", data=_w(n_out, scale=0.1), name=name + "_b")
    y = mb.tensor((1, n_out), "float32", name=name)
    mb.op("FULLY_CONNECTED", [x, wt, b], [y],
          Options("FullyConnectedOptions", fused_activation_function=act))
    return y


def _unary(opcode: str, options: Options | None = None) -> Callable[[ModelBuilder, int], int]:
    def make(mb: ModelBuilder, x: int) -> int:
        y = mb.tensor((1, 6, 6, 4), "float32", name="y")
        mb.op(opcode, [x], [y], options)
        return y
    return make


def _binary_const(opcode: str, const: np.ndarray) -> Callable[[ModelBuilder, int], int]:
    def make(mb: ModelBuilder, x: int) -> int:
        c = mb.tensor(const.shape, "float32", data=const, name="c")
        y = mb.tensor((1, 6, 6, 4), "float32", name="y")
        mb.op(opcode, [x, c], [y], Options(f"{opcode.title()}Options"))
        return y
    return make


def _two_branches(opcode: str, act: str) -> Callable[[ModelBuilder, int], int]:
    def make(mb: ModelBuilder, x: int) -> int:
        a, _ = _conv(mb, x, (1, 6, 6, 4), 4, 1, name="a")
        b, _ = _conv(mb, x, (1, 6, 6, 4), 4, 3, name="b")
        y = mb.tensor((1, 6, 6, 4), "float32", name="y")
        mb.op(opcode, [a, b], [y], Options(f"{opcode.title()}Options",
                                           fused_activation_function=act))
        return y
    return make


def _pool(opcode: str, padding: str, k: int, s: int) -> Callable[[ModelBuilder, int], int]:
    def make(mb: ModelBuilder, x: int) -> int:
        o = -(-6 // s) if padding == "SAME" else (6 - k) // s + 1
        y = mb.tensor((1, o, o, 4), "float32", name="y")
        mb.op(opcode, [x], [y], Options("Pool2DOptions", padding=padding, stride_w=s,
                                        stride_h=s, filter_width=k, filter_height=k,
                                        fused_activation_function="RELU"))
        return y
    return make


def _mean(mb: ModelBuilder, x: int) -> int:
    ax = mb.tensor((2,), "int32", data=np.array([1, 2]), name="axes")
    y = mb.tensor((1, 1, 1, 4), "float32", name="y")
    mb.op("MEAN", [x, ax], [y], Options("ReducerOptions", keep_dims=True))
    return y


def _pad(mb: ModelBuilder, x: int) -> int:
    p = mb.tensor((4, 2), "int32", data=np.array([[0, 0], [1, 2], [0, 1], [0, 0]]), name="p")
    y = mb.tensor((1, 9, 7, 4), "float32", name="y")
    mb.op("PAD", [x, p], [y])
    return y


def _concat(mb: ModelBuilder, x: int) -> int:
    a, _ = _conv(mb, x, (1, 6, 6, 4), 3, 1, name="a")
    y = mb.tensor((1, 6, 6, 7), "float32", name="y")
    mb.op("CONCATENATION", [x, a], [y], Options("ConcatenationOptions", axis=3))
    return y


def _expand_squeeze(mb: ModelBuilder, x: int) -> int:
    """Keras's Conv1D: EXPAND_DIMS to (1, 1, T, C), a CONV_2D, SQUEEZE back."""
    r = mb.tensor((1, 36, 4), "float32", name="r")
    mb.op("RESHAPE", [x, mb.tensor((3,), "int32", data=np.array([1, 36, 4]), name="s")], [r],
          Options("ReshapeOptions", new_shape=[1, 36, 4]))
    e = mb.tensor((1, 1, 36, 4), "float32", name="e")
    mb.op("EXPAND_DIMS", [r, mb.tensor((), "int32", data=np.array(1), name="ax")], [e])
    c, shape = _conv(mb, e, (1, 1, 36, 4), 5, 3, stride=2, act="RELU", name="c1d")
    y = mb.tensor((1, shape[2], 5), "float32", name="y")
    mb.op("SQUEEZE", [c], [y], Options("SqueezeOptions", squeeze_dims=[1]))
    return y


OPS: dict[str, Callable[[ModelBuilder, int], int]] = {
    "conv_same_relu": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 5, 3, act="RELU")[0],
    "conv_valid_stride2_relu6": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 3, 3, 2, "VALID",
                                                     "RELU6")[0],
    "conv_same_stride2_relu_n1_to_1": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 3, 3, 2,
                                                          act="RELU_N1_TO_1")[0],
    "conv_dilated": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 2, 3, padding="VALID",
                                        dilation=2)[0],
    "depthwise_relu6": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 4, 3, 1, act="RELU6",
                                           depthwise=True)[0],
    "depthwise_multiplier2_stride2": lambda mb, x: _conv(mb, x, (1, 6, 6, 4), 8, 3, 2,
                                                         depthwise=True)[0],
    "add_relu": _two_branches("ADD", "RELU"),
    "mul": _two_branches("MUL", "NONE"),
    "sub_per_channel": _binary_const("SUB", _w(4)),
    "div_per_channel": _binary_const("DIV", 1.0 + np.abs(_w(4))),
    "mul_scalar": _binary_const("MUL", np.array([1.7], np.float32)),
    "add_spatial_const": _binary_const("ADD", _w(1, 6, 6, 4)),
    "avg_pool_same": _pool("AVERAGE_POOL_2D", "SAME", 3, 2),
    "max_pool_valid": _pool("MAX_POOL_2D", "VALID", 2, 2),
    "mean_keepdims": _mean,
    "pad": _pad,
    "concat": _concat,
    "relu": _unary("RELU"),
    "relu6": _unary("RELU6"),
    "logistic": _unary("LOGISTIC"),
    "tanh": _unary("TANH"),
    "hard_swish": _unary("HARD_SWISH"),
    "leaky_relu": _unary("LEAKY_RELU", Options("LeakyReluOptions", alpha=0.1)),
    "conv1d_expand_squeeze": _expand_squeeze,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_forward_matches_litert(name: str, tmp_path: Path) -> None:
    _seed(zlib.crc32(name.encode()))
    mb = ModelBuilder()
    x = mb.tensor((1, 6, 6, 4), "float32", name="x")
    y = OPS[name](mb, x)
    buf = mb.build([x], [y])
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(buf)
    xin = (RNG.random((1, 6, 6, 4), dtype=np.float32) * 4 - 2)
    ref = run_reference(buf, [xin])[0]
    g = load_tflite(path)
    assert all(not n.op.endswith("_q8") for n in g.nodes)  # the float path throughout
    env = {n: t.data for n, t in g.tensors.items() if t.data is not None}
    run_ir(g, env, {g.inputs[0]: xin[0]}, phases=("forward",))
    got = env[g.outputs[0]]
    np.testing.assert_allclose(got.reshape(-1), ref.reshape(-1), atol=FORWARD_ATOL, rtol=0)


def small_cnn(path: Path) -> Path:
    """What Keras writes for Normalization -> Conv2D(relu) -> DepthwiseConv2D(relu6) ->
    GlobalAveragePooling2D -> Dense -> softmax: the normalisation's variance is folded by
    SQRT at import (constants only), SUB and DIV become one frozen affine."""
    _seed(1)
    mb = ModelBuilder()
    x = mb.tensor((1, 8, 8, 2), "float32", name="x")
    mean = mb.tensor((2,), "float32", data=np.array([0.5, 0.4]), name="mean")
    var = mb.tensor((2,), "float32", data=np.array([0.09, 0.25]), name="var")
    sd = mb.tensor((2,), "float32", name="sd")
    mb.op("SQRT", [var], [sd])
    xs = mb.tensor((1, 8, 8, 2), "float32", name="xs")
    mb.op("SUB", [x, mean], [xs], Options("SubOptions"))
    xn = mb.tensor((1, 8, 8, 2), "float32", name="xn")
    mb.op("DIV", [xs, sd], [xn], Options("DivOptions"))
    c1, s1 = _conv(mb, xn, (1, 8, 8, 2), 6, 3, act="RELU", name="conv1")
    c2, s2 = _conv(mb, c1, s1, 6, 3, 2, act="RELU6", depthwise=True, name="dw")
    ax = mb.tensor((2,), "int32", data=np.array([1, 2]), name="axes")
    m = mb.tensor((1, 6), "float32", name="gap")
    mb.op("MEAN", [c2, ax], [m], Options("ReducerOptions", keep_dims=False))
    lo = _dense(mb, m, 6, 3, name="logits")
    pr = mb.tensor((1, 3), "float32", name="probs")
    mb.op("SOFTMAX", [lo], [pr], Options("SoftmaxOptions", beta=1.0))
    path.write_bytes(mb.build([x], [pr]))
    return path


def _data(n: int, shape: tuple[int, ...], classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, classes, n)


@pytest.mark.parametrize("update", ["full", "bias", "last:2"])
def test_training_matches_pytorch_and_exports_in_place(update: str, tmp_path: Path,
                                                       cli) -> None:
    model = small_cnn(tmp_path / "small.tflite")
    x, y = _data(STEPS, (8, 8, 2), 3)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", model, "--out", build, "--update", update, "--lr", 0.05)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]

    info = json.loads((build / "program.json").read_text())
    trained = {int(p["source"]["slot"].split(":")[1]) for p in info["trainable"]}
    net = TFLiteTorch(model)
    names = {net.tensor_name(i) for i in trained}
    want = {"full": {"conv1_w", "conv1_b", "dw_w", "dw_b", "logits_w", "logits_b"},
            "bias": {"conv1_b", "dw_b", "logits_b", "logits_w"},  # TinyTL: biases + classifier
            "last:2": {"dw_w", "dw_b", "logits_w", "logits_b"}}[update]
    assert names == want  # the folded normalisation is never a trained layer
    ref = sgd(net, x, y, 0.05, trained)
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)

    out = tmp_path / "trained.tflite"
    cli("export", build, "--state", tmp_path / "state.npz", "--out", out)
    exported = TFLiteTorch(out)
    for i in trained:
        np.testing.assert_allclose(exported.tensor(i), net.tensor(i), atol=WEIGHT_ATOL, rtol=0,
                                   err_msg=net.tensor_name(i))
    before = run_reference(model.read_bytes(), [x[:1]])[0]
    after = run_reference(out.read_bytes(), [x[:1]])[0]
    with torch.no_grad():
        probs = torch.softmax(net(torch.from_numpy(x[:1])), -1).numpy()
    np.testing.assert_allclose(after, probs, atol=FORWARD_ATOL)  # LiteRT runs the new weights
    assert np.abs(after - before).max() > 100 * FORWARD_ATOL


def test_quantize_int8_of_a_float_model_trains_and_exports_real_values(tmp_path: Path,
                                                                       cli) -> None:
    """--quantize int8 --calib on a float .tflite (as on an fp32 ONNX model): the folded
    normalisation quantises as a conv; the export writes dequantised weights into the float
    file, which LiteRT then runs close to the int8 build's own answers."""
    model = small_cnn(tmp_path / "small.tflite")
    x, y = _data(64, (8, 8, 2), 3)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "q8"
    cli("build", model, "--out", build, "--quantize", "int8", "--calib", tmp_path / "train.npz",
        "--lr", 0.05)
    info = json.loads((build / "program.json").read_text())
    assert info["float_source"] and {p["dtype"] for p in info["trainable"]} == {"s8", "s32"}
    cli("run", build, "--data", tmp_path / "train.npz", "--epochs", 3, "--metrics",
        tmp_path / "m.jsonl", "--save", tmp_path / "state.npz")
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    assert np.isfinite(losses).all() and np.mean(losses[-32:]) < np.mean(losses[:32])
    out = tmp_path / "trained.tflite"
    cli("export", build, "--state", tmp_path / "state.npz", "--out", out)
    state = np.load(tmp_path / "state.npz")
    net = TFLiteTorch(out)
    for p in info["trainable"]:
        i = int(p["source"]["slot"].split(":")[1])
        v = state[p["name"]]
        real = v * np.asarray(p["scale"]).reshape((-1,) + (1,) * (v.ndim - 1))
        if p["source"]["transform"] == "depthwise":  # IR (C, kh, kw, 1) -> file (1, kh, kw, C)
            real = real[..., 0].transpose(1, 2, 0)[None]
        np.testing.assert_allclose(net.tensor(i), real, rtol=1e-6, atol=1e-7,
                                   err_msg=p["name"])


def _single(opcode: str, in_shape: tuple, out_shape: tuple, *consts: np.ndarray,
            options: Options | None = None, weight_dtype: str = "float32") -> bytes:
    mb = ModelBuilder()
    x = mb.tensor(in_shape, "float32", name="x")
    cs = [mb.tensor(c.shape, weight_dtype if c.ndim > 1 else "float32", data=c,
                    scale=0.02 if weight_dtype == "int8" and c.ndim > 1 else None,
                    name=f"k{j}") for j, c in enumerate(consts)]
    y = mb.tensor(out_shape, "float32", name="y")
    mb.op(opcode, [x, *cs], [y], options)
    return mb.build([x], [y])


def _sub_of_two(mb: ModelBuilder, x: int) -> int:
    a = mb.tensor((1, 4), "float32", name="a")
    mb.op("RELU", [x], [a])
    y = mb.tensor((1, 4), "float32", name="y")
    mb.op("SUB", [x, a], [y], Options("SubOptions"))
    return y


def _squared_difference_of_acts(mb: ModelBuilder, x: int) -> int:
    m = mb.tensor((1, 1), "float32", name="m")
    mb.op("MEAN", [x, mb.tensor((1,), "int32", data=np.array([1]), name="ax")], [m],
          Options("ReducerOptions", keep_dims=True))
    y = mb.tensor((1, 4), "float32", name="y")
    mb.op("SQUARED_DIFFERENCE", [x, m], [y])
    return y


def _model(make: Callable[[ModelBuilder, int], int]) -> bytes:
    mb = ModelBuilder()
    x = mb.tensor((1, 4), "float32", name="x")
    return mb.build([x], [make(mb, x)])


BAD = {
    "dynamic_range": (_single("FULLY_CONNECTED", (1, 4), (1, 3),
                              np.ones((3, 4), np.int8), options=Options("FullyConnectedOptions"),
                              weight_dtype="int8"),
                      (r"operator 0 \('y', FULLY_CONNECTED\)", r"dynamic-range quantised",
                       r"full integer quantisation")),
    "sub_of_two_activations": (_model(_sub_of_two), (r"operator 1 \('y', SUB\)",
                                                     r"SUB of two activations")),
    "layer_norm": (_model(_squared_difference_of_acts),
                   (r"MEAN over axes \[1\] of a rank-2 tensor",)),
    "fused_tanh": (_single("FULLY_CONNECTED", (1, 4), (1, 3), np.ones((3, 4), np.float32),
                           options=Options("FullyConnectedOptions",
                                           fused_activation_function="TANH")),
                   (r"operator 0 \('y', FULLY_CONNECTED\)", r"fused activation TANH is not "
                    r"supported")),
    "unsupported_float_op": (_single("GATHER", (1, 4), (1, 2), np.array([0, 2], np.float32)),
                             (r"operator 0 \('y', GATHER\)",
                              r"the operator GATHER is not supported on float32 tensors",
                              r"float32: .*\bEXPAND_DIMS\b.*\bCONV_2D\b")),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unsupported_float_models_are_refused_clearly(case: str, tmp_path: Path, cli) -> None:
    buf, patterns = BAD[case]
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(buf)
    r = cli("build", path, "--out", tmp_path / "out", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    msg = " ".join((r.stdout + r.stderr).split())
    for p in patterns:
        assert re.search(p, msg), (p, msg)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_ops_lists_the_float_tflite_operators() -> None:
    """`tinytrain ops` names each float TFLite operator the importer takes: as the source of an
    IR op, or among those evaluated on constants."""
    from tinytrain.frontend.tflite_float import FLOAT_SUPPORTED

    wide = {**os.environ, "COLUMNS": "200"}  # no name broken across two lines of a cell
    out = subprocess.run([sys.executable, "-m", "tinytrain", "ops"], capture_output=True,
                         text=True, env=wide, check=True).stdout
    words = set(re.findall(r"[A-Z][A-Z0-9_]+", out))
    assert set(FLOAT_SUPPORTED) - {"TRANSPOSE"} <= words, set(FLOAT_SUPPORTED) - words
    assert "TRANSPOSE of the model input" in " ".join(out.split())


@pytest.mark.parametrize("name", ["tiny_keras_cnn", "tiny_keras_conv1d"])
def test_converter_written_models_train_like_pytorch(name: str, tmp_path: Path, cli) -> None:
    """TensorFlow's converter's own output (examples/keras/make_models.py): a Normalization's
    SUB, a Conv1D as EXPAND_DIMS + CONV_2D + RESHAPE, GlobalAveragePooling1D as MEAN."""
    model = Path(__file__).resolve().parents[1] / "examples" / "keras" / f"{name}.tflite"
    d = np.load(model.with_suffix(".npz"))
    x, y = np.concatenate([d["x"]] * 3).astype(np.float32), np.concatenate([d["y"]] * 3)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", model, "--out", build, "--lr", 0.05)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl")
    ours = [json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")]
    info = json.loads((build / "program.json").read_text())
    trained = {int(p["source"]["slot"].split(":")[1]) for p in info["trainable"]}
    net = TFLiteTorch(model)
    assert trained == set(net.tensor_of.values())  # full: every weight and bias the file holds
    np.testing.assert_allclose(ours, sgd(net, x, y, 0.05, trained), rtol=LOSS_RTOL,
                               atol=0)


def test_a_corrupt_long_permutation_is_quoted_not_dumped(tmp_path: Path, cli) -> None:
    """A damaged TRANSPOSE whose permutation has 60 entries: the message quotes its start."""
    mb = ModelBuilder()
    x = mb.tensor((1, 4, 4, 2), "float32", name="x")
    perm = mb.tensor((60,), "int32", data=np.arange(60) % 4, name="perm")
    y = mb.tensor((1, 4, 4, 2), "float32", name="y")
    mb.op("TRANSPOSE", [x, perm], [y], Options("TransposeOptions"))
    path = tmp_path / "perm60.tflite"
    path.write_bytes(mb.build([x], [y]))
    r = cli("build", path, "--out", tmp_path / "out", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "permutation [0, 1, 2, 3, 0, 1, 2, 3, ... (60 entries)]" in " ".join(r.stderr.split())
    assert len(r.stderr) < 600  # fits a screen


@pytest.mark.parametrize("scale,pattern", [
    (1e20, r"tensor '\S+' reaches inf on the calibration data"),
    (1e30, r"the int8 scale of bias '\S+' \(input scale x weight scale\) overflows float32"),
])
def test_quantize_of_overflowing_weights_names_the_tensor(scale: float, pattern: str,
                                                           tmp_path: Path, cli) -> None:
    """Weights so large that an int8 scale overflows float32: a clear error, not NaN."""
    import warnings

    from tests.torch_models import MLP, export

    torch.manual_seed(0)
    m = MLP()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(m, tmp_path / "big.onnx")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).random((8, 64), np.float32),
             y=np.zeros(8, np.int64))
    r = cli("build", path, "--out", tmp_path / "out", "--quantize", "int8", "--calib",
            tmp_path / "cal.npz", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert re.search(pattern, " ".join(r.stderr.split())), r.stderr


def keras_flatten_cnn(path: Path) -> Path:
    """A Keras Flatten with a dynamic batch, as the converter writes it: SHAPE ->
    STRIDED_SLICE -> PACK compute RESHAPE's target (int32 operators in a float model)."""
    _seed(2)
    mb = ModelBuilder()
    x = mb.tensor((1, 4, 4, 2), "float32", name="x")
    c, _ = _conv(mb, x, (1, 4, 4, 2), 3, 3, act="RELU", name="conv")
    shape = mb.tensor((4,), "int32", name="shape")
    mb.op("SHAPE", [c], [shape], Options("ShapeOptions", out_type=2))  # TensorType INT32
    one = [mb.tensor((1,), "int32", data=np.array([v]), name=f"ss{v}") for v in (0, 1)]
    batch = mb.tensor((), "int32", name="batch")
    mb.op("STRIDED_SLICE", [shape, one[0], one[1], one[1]], [batch],
          Options("StridedSliceOptions", shrink_axis_mask=1))
    target = mb.tensor((2,), "int32", name="target")
    mb.op("PACK", [batch, mb.tensor((), "int32", data=np.array(48), name="n")], [target],
          Options("PackOptions", values_count=2, axis=0))
    flat = mb.tensor((1, 48), "float32", name="flat")
    mb.op("RESHAPE", [c, target], [flat])
    lo = _dense(mb, flat, 48, 3, name="logits")
    pr = mb.tensor((1, 3), "float32", name="probs")
    mb.op("SOFTMAX", [lo], [pr], Options("SoftmaxOptions", beta=1.0))
    path.write_bytes(mb.build([x], [pr]))
    return path


def test_a_quantised_keras_flatten_model_exports(tmp_path: Path, cli) -> None:
    """The shape operators of a dynamic-batch Flatten fold at import; the file is still a
    float model, so a --quantize int8 build exports dequantised weights into it."""
    model = keras_flatten_cnn(tmp_path / "flat.tflite")
    x, y = _data(16, (4, 4, 2), 3)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    ref = run_reference(model.read_bytes(), [x[:1]])[0]
    with torch.no_grad():
        logits = TFLiteTorch(model)(torch.from_numpy(x[:1]))
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), ref, atol=FORWARD_ATOL)
    build = tmp_path / "q8"
    cli("build", model, "--out", build, "--quantize", "int8", "--calib", tmp_path / "train.npz")
    assert json.loads((build / "program.json").read_text())["float_source"]
    cli("run", build, "--data", tmp_path / "train.npz", "--save", tmp_path / "state.npz")
    cli("export", build, "--state", tmp_path / "state.npz", "--out", tmp_path / "out.tflite")
    assert run_reference((tmp_path / "out.tflite").read_bytes(), [x[:1]])[0].shape == (1, 3)
