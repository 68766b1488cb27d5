"""Forward parity with ONNX's own per-layer tests (the onnx wheel's pytorch-converted cases).

Each case directory holds model.onnx and test_data_set_*/{input_0,output_0}.pb. Everything goes
through the public CLI: `tinytrain build` for the host, then `tinytrain infer` on the case's
input. The model's batch axis N is treated as N samples (the program runs one at a time), so
the stacked outputs must equal the case's expected output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from tinytrain.cli.main import app

# The bar: "the generated C's output equals the expected output within 1e-5".
LAYER_PARITY_ATOL = 1e-5
LAYER_PARITY_RTOL = 1e-5

CASES_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"

# Glob patterns (not a fixed list), so a case added to the onnx wheel is picked up.
LAYER_PATTERNS = (
    "test_Conv2d*", "test_Linear*", "test_ReLU", "test_LeakyReLU*", "test_Sigmoid", "test_Tanh",
    "test_AvgPool2d*", "test_MaxPool2d*", "test_BatchNorm2d_eval", "test_ZeroPad2d",
    "test_ConstantPad2d", "test_Softmax", "test_LogSoftmax",
)


def _matches(pattern: str) -> list[Path]:
    return [p for p in CASES_DIR.glob(pattern) if (p / "model.onnx").is_file()]


CASES = sorted({p.name for pat in LAYER_PATTERNS for p in _matches(pat)})


def tt(*args: str | Path) -> str:
    """Run one `tinytrain` command in-process; fail with its output if it exits non-zero."""
    res = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, f"tinytrain {' '.join(map(str, args))} -> {res.exit_code}:\n" \
                               f"{res.output}"
    return res.output


def read_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def test_every_pattern_has_cases() -> None:
    """Guard against an onnx wheel without test data (or renamed cases) skipping silently."""
    assert CASES_DIR.is_dir(), f"{CASES_DIR} is missing from the installed onnx wheel"
    empty = [pat for pat in LAYER_PATTERNS if not _matches(pat)]
    assert not empty, f"no ONNX test case matches {empty} in {CASES_DIR}"


@pytest.fixture(scope="module")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("layer_builds")


@pytest.mark.parametrize("case", CASES)
def test_layer_forward_matches_onnx(case: str, build_root: Path,
                                    request: pytest.FixtureRequest) -> None:
    case_dir = CASES_DIR / case
    model = case_dir / "model.onnx"
    out_rank = len(onnx.load(str(model)).graph.output[0].type.tensor_type.shape.dim)
    # ce needs (N, classes) logits; anything else is built as a regressor.
    loss = ["--loss", "mse"] if out_rank != 2 else []
    build_dir = build_root / case
    tt("build", model, "--board", "host", "--out", build_dir, *loss)

    data_sets = sorted(case_dir.glob("test_data_set_*"))
    assert data_sets, f"{case} has no test_data_set_*"
    worst = 0.0
    for ds in data_sets:
        x = read_pb(ds / "input_0.pb")
        expected = read_pb(ds / "output_0.pb")
        work = build_root / f"{case}_{ds.name}"
        work.mkdir()
        np.savez(work / "in.npz", x=x)
        tt("infer", build_dir, "--data", work / "in.npz", "--out", work / "y.npy")
        got = np.load(work / "y.npy")
        assert got.shape == expected.shape, f"{ds.name}: shape {got.shape} != {expected.shape}"
        assert got.dtype == np.float32
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - expected))))
        np.testing.assert_allclose(got, expected, atol=LAYER_PARITY_ATOL,
                                   rtol=LAYER_PARITY_RTOL, err_msg=f"{case}/{ds.name}")
    request.node.user_properties.append(("max_abs_err", worst))  # shown in --junitxml
