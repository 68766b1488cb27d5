"""Bad .tflite input fails at `tinytrain build` with one clear line and exit code 2, never a
traceback, and leaves no output behind (the TFLite counterpart of tests/test_bad_input.py).

Every case drives the real CLI in a subprocess. A failed build must leave no output directory
(nor a temporary sibling), and a good earlier build passed as --out must survive unchanged.
One near-miss must *not* fail: a per-channel quantized_dimension that does not match the
weight layout but has the right number of scales, which TFLite Micro accepts; it must build
and stay bit-exact with LiteRT's reference kernels.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from tests.tflite_build import ModelBuilder, Options, run_reference  # noqa: E402
from tinytrain.device.runner import HostProgram  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building the good reference program needs gcc and make")

MAX_CHARS = 1200
H, W, C, F, CLASSES = 6, 6, 3, 4, 3  # the small conv model: HxWxC input, F filters


# ---- helpers -----------------------------------------------------------------------------

def tt(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}  # a common terminal width: long lines must not wrap
    return subprocess.run([sys.executable, "-m", "tinytrain", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def tt_many(jobs: dict[object, tuple[list, Path]]) -> dict[object, subprocess.CompletedProcess]:
    """Run independent CLI calls a few at a time (each is mostly interpreter start-up)."""
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 1) + 1)) as pool:
        futures = {key: pool.submit(tt, *args, cwd=cwd) for key, (args, cwd) in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


def assert_user_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2 and exactly one line on stderr that matches every needle (regex)."""
    err = r.stderr.strip()
    shown = f"\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}"
    assert "Traceback" not in r.stderr, shown
    assert r.returncode == 2, shown
    assert err.startswith("error: "), shown
    assert len(err.splitlines()) == 1, shown
    assert len(err) <= MAX_CHARS, shown
    for needle in needles:
        assert re.search(needle, err), f"expected /{needle}/ in stderr{shown}"
    return err


def snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


# ---- models --------------------------------------------------------------------------------

def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-127, 128, shape).astype(np.int8)


def conv_model(*, act_dtype: str = "int8", w_zero_point: object = 0, w_scales: int = F,
               w_axis: int = 0, cin: int = C, float_input: bool = False,
               short_bias: bool = False, transpose_input: bool = False) -> bytes:
    """input -> CONV_2D 3x3 SAME (RELU, per-channel weights) -> RESHAPE -> FULLY_CONNECTED.

    act_dtype "int16" makes it 16x8 quantised (int16 activations, int64 bias, zero points 0);
    float_input puts a QUANTIZE in front; short_bias gives the FC bias buffer one value less
    than its shape. The other keyword arguments damage the conv weights."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    zp = 0 if act_dtype == "int16" else 5
    bias_dtype = "int64" if act_dtype == "int16" else "int32"
    s_in, s_mid, s_out = 0.05, 0.04, 0.1
    if float_input:
        x = mb.tensor((1, H, W, cin), "float32", name="x")
        xq = mb.tensor((1, H, W, cin), act_dtype, scale=s_in, zero_point=zp, name="x_quant")
        mb.op("QUANTIZE", [x], [xq])
    elif transpose_input:  # an NCHW input and its layout change, as PyTorch exports have
        x = mb.tensor((1, cin, H, W), act_dtype, scale=s_in, zero_point=zp, name="x")
        perm = mb.tensor((4,), "int32", data=np.array([0, 2, 3, 1]), name="perm")
        xq = mb.tensor((1, H, W, cin), act_dtype, scale=s_in, zero_point=zp, name="x_nhwc")
        mb.op("TRANSPOSE", [x, perm], [xq], Options("TransposeOptions"))
    else:
        x = xq = mb.tensor((1, H, W, cin), act_dtype, scale=s_in, zero_point=zp, name="x")
    s_w = rng.uniform(0.002, 0.01, w_scales)
    w = mb.tensor((F, 3, 3, cin), "int8", scale=s_w, zero_point=w_zero_point, axis=w_axis,
                  data=_weights(rng, (F, 3, 3, cin)), name="conv_w")
    b = mb.tensor((F,), bias_dtype, data=rng.integers(-500, 500, F), name="conv_b")
    y1 = mb.tensor((1, H, W, F), act_dtype, scale=s_mid, zero_point=zp, name="conv_out")
    mb.op("CONV_2D", [xq, w, b], [y1], Options("Conv2DOptions", padding="SAME", stride_w=1,
                                               stride_h=1, fused_activation_function="RELU"))
    shape = mb.tensor((2,), "int32", data=np.array([1, H * W * F]), name="flat_shape")
    y2 = mb.tensor((1, H * W * F), act_dtype, scale=s_mid, zero_point=zp, name="flat")
    mb.op("RESHAPE", [y1, shape], [y2], Options("ReshapeOptions", new_shape=[1, H * W * F]))
    w2 = mb.tensor((CLASSES, H * W * F), "int8", scale=0.01,
                   data=_weights(rng, (CLASSES, H * W * F)), name="fc_w")
    b2 = mb.tensor((CLASSES,), bias_dtype, data=rng.integers(-500, 500, CLASSES), name="fc_b")
    if short_bias:
        mb.tensors[b2].data = mb.tensors[b2].data[:-1]
    y = mb.tensor((1, CLASSES), act_dtype, scale=s_out, zero_point=zp, name="logits")
    mb.op("FULLY_CONNECTED", [y2, w2, b2], [y], Options("FullyConnectedOptions"))
    return mb.build([x], [y])


def svdf_model(nameless: bool = False, unsigned_state: bool = False) -> bytes:
    """int8 FULLY_CONNECTED then SVDF (operator 1), as in keyword-spotting models; nameless:
    no tensor has a name, as in TFLite Micro's keyword_scrambled_8bit.tflite; unsigned_state:
    the int16 state scaled 1/65536 around zero point -32768, as in TFLite Micro's keyword
    model (LiteRT loads it)."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder(nameless=nameless)
    x = mb.tensor((1, 16), "int8", scale=0.05, zero_point=-3, name="x")
    w = mb.tensor((8, 16), "int8", scale=0.01, data=_weights(rng, (8, 16)), name="fc_w")
    h = mb.tensor((1, 8), "int8", scale=0.05, zero_point=-3, name="features")
    mb.op("FULLY_CONNECTED", [x, w, -1], [h], Options("FullyConnectedOptions"))
    units, rank, memory = 4, 1, 10
    wf = mb.tensor((units * rank, 8), "int8", scale=0.01, data=_weights(rng, (units * rank, 8)),
                   name="svdf_weights_feature")
    wt = mb.tensor((units * rank, memory), "int16", scale=0.001,
                   data=rng.integers(-1000, 1000, (units * rank, memory)),
                   name="svdf_weights_time")
    bias = mb.tensor((units,), "int32", data=np.zeros(units), name="svdf_bias")
    state = mb.tensor((1, units * rank * memory), "int16",
                      scale=1 / 65536 if unsigned_state else 0.001,
                      zero_point=-32768 if unsigned_state else 0, name="svdf_state")
    y = mb.tensor((1, units), "int8", scale=0.05, zero_point=-3, name="svdf_out")
    mb.op("SVDF", [h, wf, wt, bias, state], [y], Options("SVDFOptions", rank=rank,
                                                          fused_activation_function="RELU"))
    return mb.build([x], [y])


def lstm_model() -> bytes:
    """A float UNIDIRECTIONAL_SEQUENCE_LSTM (operator 0) over 5 steps of 4 features, time-major
    (which the importer refuses: Keras's converter writes batch-major ones, which train)."""
    rng = np.random.default_rng(2)
    mb = ModelBuilder()
    steps, n_in, n_cell = 5, 4, 8
    x = mb.tensor((1, steps, n_in), "float32", name="sequence")

    def const(shape: tuple[int, ...], name: str) -> int:
        return mb.tensor(shape, "float32", data=rng.normal(0, 0.3, shape), name=name)

    gates = ("input", "forget", "cell", "output")
    w_in = [const((n_cell, n_in), f"w_{g}") for g in gates]
    w_rec = [const((n_cell, n_cell), f"r_{g}") for g in gates]
    biases = [const((n_cell,), f"b_{g}") for g in gates]
    out_state = mb.tensor((1, n_cell), "float32", name="output_state")
    cell_state = mb.tensor((1, n_cell), "float32", name="cell_state")
    y = mb.tensor((1, steps, n_cell), "float32", name="lstm_out")
    inputs = [x, *w_in, *w_rec, -1, -1, -1, *biases, -1, -1, out_state, cell_state,
              -1, -1, -1, -1]
    mb.op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y],
          Options("UnidirectionalSequenceLSTMOptions", fused_activation_function="TANH",
                  cell_clip=0.0, proj_clip=0.0, time_major=True))
    return mb.build([x], [y])


def while_model() -> bytes:
    """A float WHILE (operator 0), as the converter writes a Keras 3 LSTM or GRU. Its subgraphs
    are not written: the operator is refused before they matter."""
    mb = ModelBuilder()
    x = mb.tensor((1, 4), "float32", name="x")
    y = mb.tensor((1, 4), "float32", name="loop_out")
    mb.op("WHILE", [x], [y])
    return mb.build([x], [y])


def onnx_model() -> bytes:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu_0")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tflite_bad_input")


@pytest.fixture(scope="module")
def models(work: Path) -> dict[str, Path]:
    d = work / "models"
    d.mkdir()
    good = conv_model()
    blobs: dict[str, bytes] = {
        "good": good,
        "cut50": good[:len(good) // 2],
        "cut90": good[:len(good) * 9 // 10],
        "cut_last_byte": good[:-1],
        "cut3": good[:3],
        "random": np.random.default_rng(0).bytes(2000),
        "empty": b"",
        "onnx": onnx_model(),
        "svdf": svdf_model(),
        "svdf_nameless": svdf_model(nameless=True),
        "svdf_int16_zero_point": svdf_model(unsigned_state=True),
        "lstm": lstm_model(),
        "while": while_model(),
        "int16": conv_model(act_dtype="int16"),
        "int16_quantize": conv_model(act_dtype="int16", float_input=True),
        "asym_weights": conv_model(w_zero_point=[0, 3, -2, 0]),
        "scale_count": conv_model(w_scales=3),
        "short_buffer": conv_model(short_bias=True),
        # right count (F scales), wrong axis: axis 3 of (F, 3, 3, cin) with cin == F
        "qdim_mismatch": conv_model(w_axis=3, cin=F),
    }
    paths = {}
    for key, blob in blobs.items():
        paths[key] = d / f"{key}.tflite"
        paths[key].write_bytes(blob)
    return paths


@pytest.fixture(scope="module")
def good_build(work: Path, models: dict[str, Path]) -> Path:
    parent = work / "builds"
    parent.mkdir()
    r = tt("build", models["good"], "--out", parent / "gb", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (parent / "gb" / "report.json").is_file()
    return parent / "gb"


# ---- tinytrain build -----------------------------------------------------------------------

NOT_TFLITE = (r"not a TFLite flatbuffer \(no 'TFL3' identifier\)",
              r"truncated or not a \.tflite file", r"re-convert")
TRUNCATED = (r"not a valid TFLite model", r"past the end of its \d+ bytes",
             r"truncated or damaged", r"re-convert")
SUPPORTED = r"Supported TFLite operators: .*\bCONV_2D\b.*\bFULLY_CONNECTED\b.*\bSOFTMAX\b"
INT16 = r"int16 .*not supported|int16 activations .*are not"

BUILD_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # name: (model key, regexes the message must match)
    "truncated_50pct": ("cut50", TRUNCATED),
    "truncated_90pct": ("cut90", TRUNCATED),
    "truncated_last_byte": ("cut_last_byte", TRUNCATED),
    "truncated_3_bytes": ("cut3", NOT_TFLITE),
    "random_bytes": ("random", NOT_TFLITE),
    "empty_file": ("empty", (r"empty \(0 bytes\)", r"re-convert")),
    "onnx_named_tflite": ("onnx", (r"not a TFLite flatbuffer", r"ONNX model",
                                   r"rename it to .*\.onnx")),
    "svdf": ("svdf", (r"operator 1 \('svdf_out', SVDF\)", r"the operator SVDF is not supported",
                      SUPPORTED)),
    "svdf_int16_zero_point": ("svdf_int16_zero_point", (
        r"operator 1 \('svdf_out', SVDF\)", r"the operator SVDF is not supported", SUPPORTED)),
    "svdf_nameless": ("svdf_nameless", (r"operator 1 \('tensor7', SVDF\)",
                                        r"the operator SVDF is not supported", SUPPORTED)),
    "lstm": ("lstm", (r"operator 0 \('lstm_out', UNIDIRECTIONAL_SEQUENCE_LSTM\)",
                      r"time_major=true is not supported")),
    "keras3_rnn_while": ("while", (r"operator 0 \('loop_out', WHILE\)",
                                   r"Keras 3 LSTM or GRU", r"export a PyTorch LSTM or GRU "
                                   r"through ONNX", SUPPORTED)),
    "int16_input": ("int16", (r"input 'x'", INT16)),
    "int16_after_quantize": ("int16_quantize", (r"operator 0 \('x_quant', QUANTIZE\)",
                                                r"tensor 'x_quant'", INT16)),
    "asymmetric_weights": ("asym_weights", (r"operator 0 \('conv_out', CONV_2D\)",
                                            r"weights 'conv_w' are asymmetric",
                                            r"zero points \[-2, 0, 3\]", r"symmetric")),
    "scale_count": ("scale_count", (r"operator 0 \('conv_out', CONV_2D\)",
                                    r"weights 'conv_w' have 3 scales for 4 output channels")),
    "short_buffer": ("short_buffer", (r"constant tensor 'fc_b' of shape \[3\] needs 12 bytes",
                                      r"its buffer has 8", r"damaged", r"re-convert")),
}


# cases also built over a copy of a good earlier build: one per stage that can fail (reading
# the file, checking the flatbuffer, telling ONNX apart, the op list, an op handler)
OVER_CASES = ("empty_file", "truncated_50pct", "onnx_named_tflite", "svdf", "asymmetric_weights")


@dataclass
class Failed:
    fresh: subprocess.CompletedProcess  # build into a new --out
    fresh_parent: Path
    over: subprocess.CompletedProcess | None  # build over a copy of a good earlier build
    over_dir: Path | None


@pytest.fixture(scope="module")
def build_failures(work: Path, models: dict[str, Path], good_build: Path) -> dict[str, Failed]:
    jobs, dirs = {}, {}
    for case, (key, _) in BUILD_CASES.items():
        fresh_parent, over_dir = work / f"fresh_{case}", work / f"over_{case}" / "gb"
        fresh_parent.mkdir()
        jobs[case, "fresh"] = (["build", models[key], "--out", fresh_parent / "out"], work)
        if case in OVER_CASES:
            shutil.copytree(good_build, over_dir, symlinks=True)
            jobs[case, "over"] = (["build", models[key], "--out", over_dir], work)
        dirs[case] = (fresh_parent, over_dir if case in OVER_CASES else None)
    res = tt_many(jobs)
    return {case: Failed(res[case, "fresh"], fresh_parent, res.get((case, "over")), over_dir)
            for case, (fresh_parent, over_dir) in dirs.items()}


@pytest.mark.parametrize("case", list(BUILD_CASES))
def test_build_rejects_bad_tflite(case: str, models: dict[str, Path], good_build: Path,
                                  build_failures: dict[str, Failed]) -> None:
    key, needles = BUILD_CASES[case]
    f = build_failures[case]
    err = assert_user_error(f.fresh, *needles)
    assert models[key].name in err, err
    assert os.listdir(f.fresh_parent) == [], "a failed build left files behind"
    if f.over is not None and f.over_dir is not None:
        assert f.over.returncode == 2 and f.over.stderr == f.fresh.stderr, f.over.stderr
        assert snapshot(f.over_dir) == snapshot(good_build), "a failed build changed the old build"
        assert os.listdir(f.over_dir.parent) == ["gb"], "a failed build left a temp dir behind"


# ---- the near-miss that must build ---------------------------------------------------------

def test_mismatched_quantized_dimension_builds_bit_exact(work: Path,
                                                         models: dict[str, Path]) -> None:
    """quantized_dimension 3 on (F, 3, 3, F) conv weights: the right number of scales on the
    wrong axis. TFLite Micro (and LiteRT) take the scales per output channel by count, and so
    must we."""
    out = work / "qdim_build"
    r = tt("build", models["qdim_mismatch"], "--out", out, "--update", "none", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    rng = np.random.default_rng(3)
    s_in, zp_in, s_out, zp_out = 0.05, 5, 0.1, 5
    qs = [rng.integers(-128, 128, (1, H, W, F)).astype(np.int8) for _ in range(30)]
    model = models["qdim_mismatch"].read_bytes()
    with HostProgram(out) as p:
        for q in qs:
            ref = run_reference(model, [q])[0].astype(np.int64).reshape(-1)
            x = (np.float32(s_in) * (q.astype(np.int32) - zp_in)).astype(np.float32)
            y = p.infer(x.reshape(-1))
            ours = (np.round(y.astype(np.float64) / s_out) + zp_out).astype(np.int64)
            assert np.array_equal(ours, ref)


def test_input_transpose_builds_and_matches_litert(work: Path) -> None:
    """A model whose first op is TRANSPOSE (NCHW -> NHWC) builds; samples are given in the
    model's own NCHW layout and the C program's outputs equal LiteRT's reference kernels."""
    from tinytrain.device.runner import HostProgram

    model = work / "transposed.tflite"
    model.write_bytes(conv_model(transpose_input=True))
    out = work / "transposed"
    r = tt("build", model, "--out", out, "--update", "none", cwd=work)
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "program.json").read_text())
    assert info["input_logical_shape"] == [C, H, W] and info["input_perm"] == [1, 2, 0]
    rng = np.random.default_rng(3)
    xs = rng.integers(-128, 128, (20, 1, C, H, W)).astype(np.int8)
    with HostProgram(out) as p:
        for x in xs:
            ref = run_reference(model.read_bytes(), [x])[0].reshape(-1)
            codes = np.transpose(x[0], (1, 2, 0))  # the host's reorder (tinytrain.device.data)
            ours = p.infer(codes)
            ours_q = np.round(ours / 0.1).astype(np.int64) + 5  # logits: scale 0.1, zp 5
            np.testing.assert_array_equal(ours_q, ref.astype(np.int64))
