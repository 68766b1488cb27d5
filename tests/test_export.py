"""`tinytrain export` round trip, checked with onnxruntime, through the public CLI only.

For each small model: build, train 2 epochs (`run --save`), infer with the trained state, export
the trained ONNX file, and run that file in onnxruntime on the same test inputs. The exported
model must reproduce the generated C program's outputs, must pass onnx.checker, and must differ
from the original (training changed the weights that were written back).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from tinytrain.cli.main import app

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
nn = torch.nn

# onnxruntime and the generated C sum fp32 products in different orders, and the exported
# identity BatchNormalization (mean 0, var 1 - eps) is exactly 1 only to within an fp32 ulp.
EXPORT_ATOL = 1e-5
EXPORT_RTOL = 1e-5
# Training must move the outputs far more than the round-trip tolerance.
MIN_TRAINING_CHANGE = 100 * EXPORT_ATOL

OPSET = 17
N_TRAIN, N_TEST = 16, 8


def tt(*args: str | Path | float) -> str:
    """Run one `tinytrain` command in-process; fail with its output if it exits non-zero."""
    res = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, f"tinytrain {' '.join(map(str, args))} -> {res.exit_code}:\n" \
                               f"{res.output}"
    return res.output


# ---- models -------------------------------------------------------------------------------------

def _torch_export(model: nn.Module, shape: tuple[int, ...], path: Path, **kw) -> None:
    model.eval()
    x = torch.zeros((1, *shape))
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, **kw)


def conv_bn_model(path: Path) -> None:
    """Conv2d -> BatchNorm2d (eval, non-trivial running stats) -> ReLU -> GAP -> Flatten -> FC."""
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(4) * 0.5)
        bn.running_var.copy_(torch.rand(4) + 0.5)
        bn.weight.copy_(torch.rand(4) + 0.5)
        bn.bias.copy_(torch.randn(4) * 0.2)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), bn, nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    # PRESERVE keeps the BatchNormalization node: the EVAL export would fold it into the Conv
    # itself, and then tinytrain's Conv+BN fold and its BN-to-identity export go untested.
    _torch_export(model, (2, 6, 6), path, training=torch.onnx.TrainingMode.PRESERVE)


def mlp_gemm_model(path: Path) -> None:
    """Linear -> ReLU -> Linear, exported as two Gemm nodes."""
    torch.manual_seed(1)
    _torch_export(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (8,), path)


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by any onnxruntime that supports opset 17
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _init(name: str, a: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def matmul_add_model(path: Path) -> None:
    """Linear as MatMul + Add (bias as the Add's first operand), ReLU, then a bias-free MatMul."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["mm1"], name="fc1"),
        helper.make_node("Add", ["b1", "mm1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu"),
        helper.make_node("MatMul", ["r1", "w2"], ["y"], name="fc2"),
    ]
    inits = [_init("w1", rng.normal(0, 0.4, (6, 10))), _init("b1", rng.normal(0, 0.1, (10,))),
             _init("w2", rng.normal(0, 0.4, (10, 3)))]
    graph = helper.make_graph(
        nodes, "matmul_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    _save(graph, path)


def batchnorm_model(path: Path) -> None:
    """A standalone BatchNormalization (like ONNX's test_BatchNorm2d_eval), epsilon 1e-3."""
    rng = np.random.default_rng(3)
    c = 3
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
                            name="bn", epsilon=1e-3)
    inits = [_init("scale", rng.uniform(0.5, 1.5, c)), _init("bias", rng.normal(0, 0.3, c)),
             _init("mean", rng.normal(0, 0.5, c)), _init("var", rng.uniform(0.5, 2.0, c))]
    graph = helper.make_graph(
        [node], "batchnorm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, 4, 4])], inits)
    _save(graph, path)


def matmul_scalar_bias_model(path: Path) -> None:
    """MatMul + Add whose bias is one broadcast scalar: training gives it one value per unit."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
             helper.make_node("Add", ["mm", "b"], ["y"], name="fc_bias")]
    graph = helper.make_graph(
        nodes, "matmul_scalar_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [_init("w", rng.normal(0, 0.4, (5, 3))), _init("b", np.array([0.3]))])
    _save(graph, path)


def onnx_layer_case(name: str) -> Callable[[Path], None]:
    """A model from the onnx wheel's layer tests: IR version 3, weights also graph inputs,
    fixed batch size. (Not test_BatchNorm2d_eval: onnxruntime has no BatchNormalization-6.)"""
    src = Path(onnx.__file__).parent / "backend/test/data/pytorch-converted" / name / "model.onnx"

    def make(path: Path) -> None:
        shutil.copyfile(src, path)
    return make


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], None]
    input_shape: tuple[int, ...]
    classes: int | None  # None: a regressor trained with --loss mse on random targets
    must_have: str  # an op the source ONNX must contain, so the case tests what it claims


CASES = {
    "conv_bn_relu_gap_linear": Case(conv_bn_model, (2, 6, 6), 3, "BatchNormalization"),
    "linear_relu_linear_gemm": Case(mlp_gemm_model, (8,), 4, "Gemm"),
    "matmul_add": Case(matmul_add_model, (6,), 3, "MatMul"),
    "batchnorm_standalone": Case(batchnorm_model, (3, 4, 4), None, "BatchNormalization"),
    "matmul_scalar_bias": Case(matmul_scalar_bias_model, (5,), 3, "MatMul"),
    "onnx_test_Conv2d": Case(onnx_layer_case("test_Conv2d"), (3, 7, 5), None, "Conv"),
    "onnx_test_Linear_no_bias": Case(onnx_layer_case("test_Linear_no_bias"), (10,), 8, "MatMul"),
}


# ---- the round trip, once per model -------------------------------------------------------------

@dataclass(frozen=True)
class RoundTrip:
    source: Path
    trained: Path
    x_test: np.ndarray
    y_initial: np.ndarray  # tinytrain infer before training
    y_trained: np.ndarray  # tinytrain infer with the trained state


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # no "opset 6 is only supported on a best-effort basis" notes
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    b = inp.shape[0] if isinstance(inp.shape[0], int) else len(x)  # fixed batch: in chunks
    assert len(x) % b == 0
    return np.concatenate([sess.run(None, {inp.name: x[k:k + b]})[0]
                           for k in range(0, len(x), b)])


def _per_sample_output_shape(path: Path) -> tuple[int, ...]:
    dims = onnx.load(str(path)).graph.output[0].type.tensor_type.shape.dim[1:]
    return tuple(d.dim_value for d in dims)


@pytest.fixture(scope="module", params=sorted(CASES))
def round_trip(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> RoundTrip:
    case = CASES[request.param]
    d = tmp_path_factory.mktemp(request.param)
    src = d / "model.onnx"
    case.make(src)
    assert case.must_have in {n.op_type for n in onnx.load(str(src)).graph.node}

    rng = np.random.default_rng(42)
    x = rng.normal(0, 1, (N_TRAIN + N_TEST, *case.input_shape)).astype(np.float32)
    if case.classes is None:
        y = rng.normal(0, 1, (N_TRAIN + N_TEST, *_per_sample_output_shape(src)))
        y = y.astype(np.float32)
        loss = "mse"
    else:
        y = rng.integers(0, case.classes, N_TRAIN + N_TEST)
        loss = "ce"
    np.savez(d / "train.npz", x=x[:N_TRAIN], y=y[:N_TRAIN])
    np.savez(d / "test.npz", x=x[N_TRAIN:])

    build = d / "build"
    tt("build", src, "--board", "host", "--out", build, "--loss", loss, "--lr", 0.05)
    tt("infer", build, "--data", d / "test.npz", "--out", d / "y0.npy")
    tt("run", build, "--data", d / "train.npz", "--epochs", 2, "--save", d / "state.npz")
    tt("infer", build, "--data", d / "test.npz", "--out", d / "y.npy", "--state", d / "state.npz")
    tt("export", build, "--state", d / "state.npz", "--out", d / "trained.onnx")
    return RoundTrip(src, d / "trained.onnx", x[N_TRAIN:], np.load(d / "y0.npy"),
                     np.load(d / "y.npy"))


def test_exported_model_passes_checker(round_trip: RoundTrip) -> None:
    onnx.checker.check_model(onnx.load(str(round_trip.trained)), full_check=True)


def test_source_model_matches_untrained_program(round_trip: RoundTrip) -> None:
    """Sanity for the comparison below: the forward pass agrees before any training."""
    np.testing.assert_allclose(round_trip.y_initial, _ort(round_trip.source, round_trip.x_test),
                               atol=EXPORT_ATOL, rtol=EXPORT_RTOL)


def test_exported_model_reproduces_trained_program(round_trip: RoundTrip,
                                                   request: pytest.FixtureRequest) -> None:
    got = _ort(round_trip.trained, round_trip.x_test)
    assert got.shape == round_trip.y_trained.shape
    err = float(np.max(np.abs(got.astype(np.float64) - round_trip.y_trained)))
    request.node.user_properties.append(("max_abs_err", err))  # shown in --junitxml
    np.testing.assert_allclose(got, round_trip.y_trained, atol=EXPORT_ATOL, rtol=EXPORT_RTOL)


def test_training_changed_the_exported_model(round_trip: RoundTrip) -> None:
    before = _ort(round_trip.source, round_trip.x_test)
    after = _ort(round_trip.trained, round_trip.x_test)
    assert np.max(np.abs(after - before)) > MIN_TRAINING_CHANGE
    src, out = onnx.load(str(round_trip.source)), onnx.load(str(round_trip.trained))
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in src.graph.node]
    src_init = {i.name: numpy_helper.to_array(i) for i in src.graph.initializer}
    out_init = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    # node inputs the export pointed at a new initializer: (old input name, new value)
    written = [(a, out_init[b]) for n0, n in zip(src.graph.node, out.graph.node)
               for a, b in zip(n0.input, n.input) if b in out_init and b not in src_init]
    assert written, "the export wrote no trained value into the model"
    comparable = [(src_init[a], v) for a, v in written if a in src_init]
    assert not comparable or any(u.shape != v.shape or not np.array_equal(u, v)
                                 for u, v in comparable), "every written weight is unchanged"
