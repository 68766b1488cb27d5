"""Multi-op int8 TFLite models through the whole pipeline: `tinytrain build` (inference-only
and training builds), the C program's inference bit-exact with LiteRT's reference kernels, and
`tinytrain run` lowering the loss on a learnable task.

The models are written with tests/tflite_build.py the way a post-training quantiser makes
them: a float32 version of each model (seeded random He-initialised weights) is run in LiteRT
on calibration inputs, every activation gets an asymmetric int8 quantisation from its observed
range (randomly widened, so scales and zero points vary), weights are quantised per output
channel symmetrically and biases to int32 with scale s_in * s_w. Ops that TFLite requires to
keep their input's quantisation (pools, PAD, RESHAPE, CONCATENATION's inputs) share it;
SOFTMAX and LOGISTIC outputs use the fixed 1/256, -128.

Together the models cover every TFLite operator the importer supports (checked below).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import tinytrain

pytest.importorskip("ai_edge_litert")

from tests.tflite_build import ModelBuilder, Options  # noqa: E402
from tinytrain.device.runner import HostProgram  # noqa: E402
from tinytrain.frontend.tflite_ops import SUPPORTED  # noqa: E402

IN_SHAPE = (16, 16, 3)
CLASSES = 4
N_CALIB = 32  # calibration inputs for the activation ranges
N_FORWARD = 40  # random inputs per model for the bit-exact check
N_TRAIN, EPOCHS = 160, 5
# the loss must fall by at least this fraction between the first and the last epoch
MIN_LOSS_DROP = 0.2
ALIASES = {"SQUEEZE": "RESHAPE", "PADV2": "PAD"}  # handled by the same code as the key's op
# ops bit-exact with LiteRT in another test: an input TRANSPOSE needs an NCHW model input
ELSEWHERE = {
    "TRANSPOSE": "test_tflite_bad_input.py::test_input_transpose_builds_and_matches_litert",
    "UNIDIRECTIONAL_SEQUENCE_LSTM":
        "test_rnn.py::test_int8_keras_lstm_runs_as_litert_trains_and_exports"}


# ---- a model description, emitted as float32 (to calibrate) or as int8 ---------------------

@dataclass
class _Op:
    code: str
    inputs: list[int]  # activation handles
    output: int
    options: Options | None = None
    weight: np.ndarray | None = None  # float, TFLite layout, already on the int8 grid
    w_axis: int = 0  # output-channel axis of the weight
    bias: np.ndarray | None = None  # float
    const: list[np.ndarray] = field(default_factory=list)  # int32 operands after the weights


class Net:
    """Activations are integer handles; shapes are TFLite shapes (batch 1)."""

    def __init__(self, seed: int, float_io: bool = False) -> None:
        self.rng = np.random.default_rng(seed)
        self.float_io = float_io
        self.shapes: list[tuple[int, ...]] = []
        self.names: list[str] = []
        self.ops: list[_Op] = []
        self.ties: list[tuple[int, int]] = []  # handles that must share their quantisation
        self.fixed: dict[int, tuple[float, int]] = {}
        self.x = self._act(IN_SHAPE, "input")

    def _act(self, shape: tuple[int, ...], name: str) -> int:
        self.shapes.append((1, *shape))
        self.names.append(name)
        return len(self.shapes) - 1

    def _add(self, code: str, inputs: list[int], shape: tuple[int, ...], name: str,
             **kw) -> int:
        y = self._act(shape, name)
        self.ops.append(_Op(code, inputs, y, **kw))
        return y

    def _weights(self, shape: tuple[int, ...], axis: int, fan_in: int) -> np.ndarray:
        """He-initialised, then snapped to a per-channel symmetric int8 grid."""
        w = self.rng.normal(0, math.sqrt(2 / fan_in), shape).astype(np.float32)
        s = _channel_scales(w, axis)
        return np.round(w / s) * s

    # layers -----------------------------------------------------------------------------
    def conv(self, x: int, cout: int, k: int, stride: int, padding: str, act: str,
             name: str) -> int:
        _, h, w, cin = self.shapes[x]
        oh, ow = _out_hw(h, w, k, stride, padding)
        return self._add("CONV_2D", [x], (oh, ow, cout), name,
                         options=Options("Conv2DOptions", padding=padding, stride_w=stride,
                                         stride_h=stride, fused_activation_function=act),
                         weight=self._weights((cout, k, k, cin), 0, k * k * cin),
                         bias=self.rng.normal(0, 0.1, cout).astype(np.float32))

    def depthwise(self, x: int, mult: int, k: int, stride: int, padding: str, act: str,
                  name: str) -> int:
        _, h, w, cin = self.shapes[x]
        oh, ow = _out_hw(h, w, k, stride, padding)
        cout = cin * mult
        return self._add("DEPTHWISE_CONV_2D", [x], (oh, ow, cout), name,
                         options=Options("DepthwiseConv2DOptions", padding=padding,
                                         stride_w=stride, stride_h=stride, depth_multiplier=mult,
                                         fused_activation_function=act),
                         weight=self._weights((1, k, k, cout), 3, k * k), w_axis=3,
                         bias=self.rng.normal(0, 0.1, cout).astype(np.float32))

    def dense(self, x: int, units: int, act: str, name: str) -> int:
        n_in = self.shapes[x][-1]
        return self._add("FULLY_CONNECTED", [x], (units,), name,
                         options=Options("FullyConnectedOptions", fused_activation_function=act),
                         weight=self._weights((units, n_in), 0, n_in),
                         bias=self.rng.normal(0, 0.1, units).astype(np.float32))

    def binary(self, code: str, a: int, b: int, act: str, name: str) -> int:
        assert self.shapes[a] == self.shapes[b]
        opts = Options("AddOptions" if code == "ADD" else "MulOptions",
                       fused_activation_function=act)
        return self._add(code, [a, b], self.shapes[a][1:], name, options=opts)

    def pool(self, code: str, x: int, k: int, stride: int, padding: str, name: str) -> int:
        _, h, w, c = self.shapes[x]
        oh, ow = _out_hw(h, w, k, stride, padding)
        y = self._add(code, [x], (oh, ow, c), name,
                      options=Options("Pool2DOptions", padding=padding, stride_w=stride,
                                      stride_h=stride, filter_width=k, filter_height=k))
        self.ties.append((x, y))
        return y

    def mean_hw(self, x: int, name: str) -> int:
        """Global average pool: MEAN over H, W keeping the dims (its own quantisation)."""
        return self._add("MEAN", [x], (1, 1, self.shapes[x][-1]), name,
                         options=Options("ReducerOptions", keep_dims=True),
                         const=[np.array([1, 2], np.int32)])

    def reshape(self, x: int, shape: tuple[int, ...], name: str) -> int:
        y = self._add("RESHAPE", [x], shape, name,
                      options=Options("ReshapeOptions", new_shape=[1, *shape]),
                      const=[np.array([1, *shape], np.int32)])
        self.ties.append((x, y))
        return y

    def pad(self, x: int, p: int, name: str) -> int:
        _, h, w, c = self.shapes[x]
        y = self._add("PAD", [x], (h + 2 * p, w + 2 * p, c), name,
                      const=[np.array([[0, 0], [p, p], [p, p], [0, 0]], np.int32)])
        self.ties.append((x, y))
        return y

    def concat(self, xs: list[int], name: str) -> int:
        shape = list(self.shapes[xs[0]][1:])
        shape[-1] = sum(self.shapes[x][-1] for x in xs)
        y = self._add("CONCATENATION", xs, tuple(shape), name,
                      options=Options("ConcatenationOptions", axis=3))
        self.ties += [(x, y) for x in xs]
        return y

    def unary(self, code: str, x: int, name: str) -> int:
        opts = Options("SoftmaxOptions", beta=1.0) if code == "SOFTMAX" else None
        y = self._add(code, [x], self.shapes[x][1:], name, options=opts)
        if code in ("SOFTMAX", "LOGISTIC"):
            self.fixed[y] = (1 / 256, -128)
        return y

    def quantize(self, x: int, name: str) -> int:
        y = self._add("QUANTIZE", [x], self.shapes[x][1:], name)
        self.ties.append((x, y))  # the float side's entry is unused: one range for both
        return y

    def dequantize(self, x: int, name: str) -> int:
        y = self._add("DEQUANTIZE", [x], self.shapes[x][1:], name)
        self.ties.append((x, y))
        return y

    # emission ---------------------------------------------------------------------------
    def emit(self, quant: dict[int, tuple[float, int]] | None, output: int
             ) -> tuple[bytes, dict[int, int]]:
        """float32 model (quant None; QUANTIZE/DEQUANTIZE become identities) or int8 model.
        Returns the flatbuffer and handle -> TFLite tensor index."""
        mb = ModelBuilder()
        idx: dict[int, int] = {}
        float_handles = {self.x, output} if self.float_io else set()

        def act(h: int) -> int:
            if h not in idx:
                if quant is None or h in float_handles:
                    idx[h] = mb.tensor(self.shapes[h], "float32", name=self.names[h])
                else:
                    s, zp = quant[h]
                    idx[h] = mb.tensor(self.shapes[h], "int8", scale=s, zero_point=zp,
                                       name=self.names[h])
            return idx[h]

        act(self.x)
        for op in self.ops:
            if quant is None and op.code in ("QUANTIZE", "DEQUANTIZE"):
                idx[op.output] = act(op.inputs[0])
                continue
            ins = [act(h) for h in op.inputs]
            name = self.names[op.output]
            if op.weight is not None:
                ins += self._params(mb, op, quant, name)
            ins += [mb.tensor(c.shape, "int32", data=c, name=f"{name}_const{i}")
                    for i, c in enumerate(op.const)]
            mb.op(op.code, ins, [act(op.output)], op.options)
        return mb.build([idx[self.x]], [idx[output]]), idx

    def _params(self, mb: ModelBuilder, op: _Op, quant: dict | None, name: str) -> list[int]:
        w, b = op.weight, op.bias
        assert w is not None and b is not None
        if quant is None:
            return [mb.tensor(w.shape, "float32", data=w, name=f"{name}_w"),
                    mb.tensor(b.shape, "float32", data=b, name=f"{name}_b")]
        s_w = _channel_scales(w, op.w_axis)
        q_w = np.clip(np.round(w / s_w), -127, 127).astype(np.int8)
        s_in = np.float32(quant[op.inputs[0]][0])
        s_b = (s_in * s_w.reshape(-1)).astype(np.float32)
        q_b = np.round(b / s_b).astype(np.int32)
        return [mb.tensor(w.shape, "int8", scale=s_w.reshape(-1), zero_point=0, axis=op.w_axis,
                          data=q_w, name=f"{name}_w"),
                mb.tensor(b.shape, "int32", scale=s_b, zero_point=0, data=q_b,
                          name=f"{name}_b")]


def _out_hw(h: int, w: int, k: int, stride: int, padding: str) -> tuple[int, int]:
    if padding == "SAME":
        return -(-h // stride), -(-w // stride)
    return (h - k) // stride + 1, (w - k) // stride + 1


def _channel_scales(w: np.ndarray, axis: int) -> np.ndarray:
    """Symmetric per-channel scales, broadcastable against w."""
    other = tuple(a for a in range(w.ndim) if a != axis)
    return (np.abs(w).max(axis=other, keepdims=True) / 127).astype(np.float32)


# ---- calibration ---------------------------------------------------------------------------

def _interpreter(model: bytes, **kw):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=model,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF, **kw)
    it.allocate_tensors()
    return it


def calibrate(net: Net, output: int, xs: np.ndarray, seed: int) -> dict[int, tuple[float, int]]:
    """Activation quantisation from the float model's observed ranges, widened at random."""
    model, idx = net.emit(None, output)
    it = _interpreter(model, experimental_preserve_all_tensors=True)
    lo, hi = np.zeros(len(net.shapes)), np.zeros(len(net.shapes))  # ranges contain 0
    for x in xs:
        it.set_tensor(it.get_input_details()[0]["index"], x[None].astype(np.float32))
        it.invoke()
        for h, i in idx.items():
            v = it.get_tensor(i)
            lo[h], hi[h] = min(lo[h], v.min()), max(hi[h], v.max())
    parent = list(range(len(net.shapes)))

    def root(h: int) -> int:
        while parent[h] != h:
            h = parent[h]
        return h

    for a, b in net.ties:
        parent[root(a)] = root(b)
    rng = np.random.default_rng(seed)
    quant = {}
    for r in {root(h) for h in range(len(net.shapes))}:
        group = [h for h in range(len(net.shapes)) if root(h) == r]
        fixed = [net.fixed[h] for h in group if h in net.fixed]
        if fixed:
            q = fixed[0]
        else:
            g_lo = min(lo[h] for h in group) * rng.uniform(1.0, 1.3)
            g_hi = max(hi[h] for h in group) * rng.uniform(1.0, 1.3)
            s = np.float32((g_hi - g_lo) / 255)
            q = (float(s), int(np.clip(np.round(-128 - g_lo / s), -128, 127)))
        quant.update({h: q for h in group})
    return quant


# ---- the models ----------------------------------------------------------------------------

def residual_cnn() -> tuple[Net, int]:
    """int8 in, int8 softmax out: conv SAME/2 RELU6, depthwise x1, 1x1 conv, residual ADD
    (fused RELU), max pool, MEAN, RESHAPE, FC, SOFTMAX."""
    n = Net(seed=1)
    c1 = n.conv(n.x, 8, 3, 2, "SAME", "RELU6", "conv1")
    d1 = n.depthwise(c1, 1, 3, 1, "SAME", "RELU", "dw1")
    p1 = n.conv(d1, 8, 1, 1, "VALID", "NONE", "project1")
    r = n.binary("ADD", c1, p1, "RELU", "residual")
    m = n.pool("MAX_POOL_2D", r, 2, 2, "VALID", "maxpool")
    g = n.mean_hw(m, "gap")
    f = n.reshape(g, (8,), "flatten")
    logits = n.dense(f, CLASSES, "NONE", "logits")
    return n, n.unary("SOFTMAX", logits, "probs")


def float_io_branches() -> tuple[Net, int]:
    """float in/out: QUANTIZE, PAD, conv VALID/2 RELU, depthwise x2, HARD_SWISH * LOGISTIC
    gate (MUL), two AVERAGE_POOL_2D branches joined by CONCATENATION, RESHAPE, FC,
    DEQUANTIZE."""
    n = Net(seed=2, float_io=True)
    q = n.quantize(n.x, "quantized")
    p = n.pad(q, 1, "padded")
    c = n.conv(p, 8, 3, 2, "VALID", "RELU", "conv1")
    d = n.depthwise(c, 2, 3, 1, "SAME", "NONE", "dw2")
    gate = n.binary("MUL", n.unary("HARD_SWISH", d, "hswish"), n.unary("LOGISTIC", d, "sig"),
                    "NONE", "gated")
    a = n.pool("AVERAGE_POOL_2D", gate, 2, 2, "VALID", "pool_gated")
    b = n.pool("AVERAGE_POOL_2D", c, 3, 2, "SAME", "pool_skip")
    cat = n.concat([a, b], "concat")
    f = n.reshape(cat, (4 * 4 * 24,), "flatten")
    logits = n.dense(f, CLASSES, "NONE", "logits")
    return n, n.dequantize(logits, "logits_float")


def mlp() -> tuple[Net, int]:
    """int8 in, int8 logits out: stride-2 SAME max pool, RESHAPE, FC (RELU), FC."""
    n = Net(seed=3)
    m = n.pool("MAX_POOL_2D", n.x, 3, 2, "SAME", "maxpool")
    f = n.reshape(m, (8 * 8 * 3,), "flatten")
    h = n.dense(f, 16, "RELU", "hidden")
    return n, n.dense(h, CLASSES, "NONE", "logits")


MODELS: dict[str, Callable[[], tuple[Net, int]]] = {
    "residual_cnn": residual_cnn, "float_io_branches": float_io_branches, "mlp": mlp}
# an inference-only build and a training build (the one `tinytrain run` trains)
BUILD_ARGS = {"none": ["--update", "none"], "full": ["--update", "full", "--lr", "0.005"]}


def real_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Images with a per-sample offset per channel plus noise, and labels from a fixed random
    projection of the channel means (learnable through global pooling)."""
    offsets = rng.uniform(-0.6, 0.6, (n, 1, 1, IN_SHAPE[2]))
    x = (offsets + rng.normal(0, 0.3, (n, *IN_SHAPE))).astype(np.float32)
    proj = np.random.default_rng(1234).normal(size=(IN_SHAPE[2], CLASSES))
    y = np.argmax(x.mean(axis=(1, 2)) @ proj, axis=1)
    return x, y.astype(np.int64)


@dataclass
class Built:
    net: Net
    output: int
    quant: dict[int, tuple[float, int]]
    model: Path
    builds: dict[str, Path]

    @property
    def in_q(self) -> tuple[float, int]:
        return self.quant[self.net.x]

    @property
    def out_q(self) -> tuple[float, int]:
        """Quantisation of the int8 tensor the output is (or is dequantised from)."""
        last = self.net.ops[-1]
        h = last.inputs[0] if last.code == "DEQUANTIZE" else self.output
        return self.quant[h]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Built]:
    root = tmp_path_factory.mktemp("tflite_import")
    calib, _ = real_inputs(np.random.default_rng(0), N_CALIB)
    out: dict[str, Built] = {}
    jobs = []
    for i, (name, make) in enumerate(MODELS.items()):
        net, y = make()
        quant = calibrate(net, y, calib, seed=100 + i)
        model = root / f"{name}.tflite"
        model.write_bytes(net.emit(quant, y)[0])
        builds = {u: root / f"{name}_{u}" for u in BUILD_ARGS}
        out[name] = Built(net, y, quant, model, builds)
        jobs += [("build", model, "--out", d, *BUILD_ARGS[u]) for u, d in builds.items()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda args: tinytrain(*args), jobs))
    return out


def test_models_cover_every_supported_op():
    used = {op.code for make in MODELS.values() for op in make()[0].ops}
    assert {ALIASES.get(s, s) for s in SUPPORTED} - set(ELSEWHERE) <= used


def _quantize(x: np.ndarray, qp: tuple[float, int]) -> np.ndarray:
    return np.clip(np.round(x / np.float32(qp[0])) + qp[1], -128, 127).astype(np.int8)


def _feeds(b: Built, rng: np.random.Generator) -> list[np.ndarray]:
    """Half realistic inputs (as calibrated), half arbitrary: for int8 models uniformly random
    int8 values and the two constant extremes, for float models reals a quarter of a range
    beyond the input's quantisation range on each side."""
    real, _ = real_inputs(rng, N_FORWARD // 2)
    n = N_FORWARD - len(real)
    if b.net.float_io:
        s, zp = b.in_q
        lo, hi = s * (-128 - zp), s * (127 - zp)
        wide = rng.uniform(lo - (hi - lo) / 4, hi + (hi - lo) / 4, (n, *IN_SHAPE))
        return [v[None] for v in (*real, *wide.astype(np.float32))]
    noise = rng.integers(-128, 128, (n - 2, *IN_SHAPE)).astype(np.int8)
    extremes = [np.full(IN_SHAPE, v, np.int8) for v in (-128, 127)]
    return [v[None] for v in (*_quantize(real, b.in_q), *noise, *extremes)]


def _as_real(q: np.ndarray, qp: tuple[float, int]) -> np.ndarray:
    if q.dtype == np.float32:
        return q
    return (np.float32(qp[0]) * (q.astype(np.int32) - qp[1])).astype(np.float32)


def _as_int8(y: np.ndarray, qp: tuple[float, int]) -> np.ndarray:
    """The C API and DEQUANTIZE return scale * (q - zp); recover q exactly."""
    if y.dtype == np.int8:
        return y.astype(np.int64).reshape(-1)
    return (np.round(y.astype(np.float64) / qp[0]) + qp[1]).astype(np.int64).reshape(-1)


@pytest.mark.parametrize("update", list(BUILD_ARGS))
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_bit_exact_with_litert_reference(built, name, update):
    b = built[name]
    it = _interpreter(b.model.read_bytes())
    di, do = it.get_input_details()[0], it.get_output_details()[0]
    feeds = _feeds(b, np.random.default_rng(11))
    n_diff = 0
    with HostProgram(b.builds[update]) as p:
        for q in feeds:
            it.set_tensor(di["index"], q)
            it.invoke()
            ref = _as_int8(it.get_tensor(do["index"]), b.out_q)
            ours = _as_int8(p.infer(_as_real(q, b.in_q).reshape(-1)), b.out_q)
            n_diff += int(not np.array_equal(ours, ref))
    assert n_diff == 0, f"{n_diff} of {len(feeds)} inputs differ from LiteRT"


def test_outputs_are_not_degenerate(built):
    """The bit-exact check means something only if the outputs vary with the input."""
    for name, b in built.items():
        it = _interpreter(b.model.read_bytes())
        di, do = it.get_input_details()[0], it.get_output_details()[0]
        x, _ = real_inputs(np.random.default_rng(5), 20)
        outs = []
        for v in x:
            it.set_tensor(di["index"], (v if b.net.float_io else _quantize(v, b.in_q))[None])
            it.invoke()
            outs.append(_as_int8(it.get_tensor(do["index"]), b.out_q))
        assert len({o.tobytes() for o in outs}) > 10, name


def _epoch_losses(metrics: Path) -> list[float]:
    rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    epochs = sorted({r["epoch"] for r in rows})
    return [float(np.mean([r["loss"] for r in rows if r["epoch"] == e])) for e in epochs]


@pytest.mark.parametrize("name", list(MODELS))
def test_training_lowers_the_loss(built, name, tmp_path):
    x, y = real_inputs(np.random.default_rng(21), N_TRAIN)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=y)
    metrics = tmp_path / "m.jsonl"
    tinytrain("run", built[name].builds["full"], "--data", data, "--epochs", str(EPOCHS),
              "--shuffle", "--metrics", metrics)
    losses = _epoch_losses(metrics)
    assert losses[-1] < (1 - MIN_LOSS_DROP) * losses[0], losses
