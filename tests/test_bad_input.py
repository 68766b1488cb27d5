"""Bad input reaches the user as one short paragraph and exit code 2, never a traceback.

Every case drives the real CLI in a subprocess (`python -m tinytrain ...`) so that an
uncaught exception would show up as a traceback on stderr.  Failed builds must leave no
output directory (and no `.NAME.tt-tmp-*` / `.NAME.tt-old-*` sibling) behind, and a
previously built directory passed as --out must survive a failed rebuild unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building the good reference program needs gcc and make")

MAX_LINES = 6
MAX_CHARS = 1200
N, CLASSES, IN_SHAPE = 5, 3, (1, 8, 8)


# ---- helpers -----------------------------------------------------------------------------

def start(*args: object, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "80"}  # a common terminal width: long lines would wrap
    return subprocess.Popen([sys.executable, "-m", "tinytrain", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(p: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def tt(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return finish(start(*args, cwd=cwd))


def tt_many(jobs: dict[object, tuple[list, Path]]) -> dict[object, subprocess.CompletedProcess]:
    """Run independent CLI calls a few at a time (each is mostly interpreter start-up)."""
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 1) + 1)) as pool:
        futures = {key: pool.submit(tt, *args, cwd=cwd) for key, (args, cwd) in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


def assert_user_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2 and one short paragraph on stderr that contains every needle (regex)."""
    err = r.stderr.strip()
    shown = f"\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}"
    assert "Traceback" not in r.stderr, shown
    assert r.returncode == 2, shown
    assert err.startswith("error: "), shown
    lines = err.splitlines()
    assert 1 <= len(lines) <= MAX_LINES and "" not in (s.strip() for s in lines), shown
    assert len(err) <= MAX_CHARS, shown
    for needle in needles:
        assert re.search(needle, err), f"expected /{needle}/ in stderr{shown}"
    return err


def snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


# ---- models and data (built once per module) ---------------------------------------------

class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(2 * 6 * 6, CLASSES)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class Pooled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(2, CLASSES)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class Recurrent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # one-way LSTMs train (tests/test_rnn.py); a bidirectional one is refused by name
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _export(module, example, path: Path, **kw) -> Path:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, str(path), dynamo=False,
                          input_names=["x"], output_names=["y"], **kw)
    return path


def _save(graph, path: Path) -> Path:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad_input")


@pytest.fixture(scope="module")
def models(work: Path) -> dict[str, Path]:
    d = work / "models"
    d.mkdir()
    good = _export(Small(), torch.randn(1, *IN_SHAPE), d / "good.onnx")
    m: dict[str, Path] = {"good": good}
    data = good.read_bytes()
    for key, n in (("cut50", len(data) // 2), ("cut90", len(data) * 9 // 10), ("cut3", 3),
                   ("cut_last_byte", len(data) - 1)):
        m[key] = d / f"{key}.onnx"
        m[key].write_bytes(data[:n])
    m["random"] = d / "random.onnx"
    m["random"].write_bytes(np.random.default_rng(0).bytes(2000))
    m["empty"] = d / "empty.onnx"
    m["empty"].write_bytes(b"")
    m["missing"] = d / "missing.onnx"
    m["lstm"] = _export(Recurrent(), torch.randn(1, 3, 4), d / "lstm.onnx")
    m["dyn_torch"] = _export(Pooled(), torch.randn(1, *IN_SHAPE), d / "dyn_torch.onnx",
                             dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}})

    w = numpy_helper.from_array(np.ones((4, CLASSES), np.float32), "W")
    m["erf"] = _save(helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["a"], name="matmul_0"),
         helper.make_node("Erf", ["a"], ["y"], name="my_erf")],
        "erf", [_vi("x", [1, 4])], [_vi("y", [1, CLASSES])], [w]), d / "erf.onnx")
    m["einsum"] = _save(helper.make_graph(
        [helper.make_node("Einsum", ["x", "W"], ["y"], name="my_einsum", equation="bi,ij->bj")],
        "einsum", [_vi("x", [1, 4])], [_vi("y", [1, CLASSES])], [w]), d / "einsum.onnx")
    m["dyn_helper"] = _save(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu_0")],
        "dyn", [_vi("x", ["N", 1, "H", 8])], [_vi("y", ["N", 1, "H", 8])]), d / "dyn_helper.onnx")
    m["two_inputs"] = _save(helper.make_graph(
        [helper.make_node("Add", ["x", "z"], ["a"], name="add_0"),
         helper.make_node("MatMul", ["a", "W"], ["y"], name="matmul_0")],
        "two", [_vi("x", [1, 4]), _vi("z", [1, 4])], [_vi("y", [1, CLASSES])], [w]),
        d / "two_inputs.onnx")
    return m


@pytest.fixture(scope="module")
def good_build(work: Path, models: dict[str, Path]) -> Path:
    parent = work / "builds"
    parent.mkdir()
    r = tt("build", models["good"], "--out", parent / "gb", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (parent / "gb" / "report.json").is_file()
    return parent / "gb"


@pytest.fixture(scope="module")
def data(work: Path) -> dict[str, Path]:
    d = work / "data"
    d.mkdir()
    rng = np.random.default_rng(0)
    x = rng.random((N, *IN_SHAPE), dtype=np.float32)
    y = np.arange(N) % CLASSES
    arrays = {
        "ok": {"x": x, "y": y},
        "wrong_x_shape": {"x": np.zeros((N, 1, 7, 8), np.float32), "y": y},
        "x_channels_last": {"x": np.zeros((N, 8, 8, 1), np.float32), "y": y},
        "no_y": {"x": x},
        "no_x": {"y": y},
        "label_too_big": {"x": x, "y": np.array([0, 1, CLASSES, 0, 1])},
        "label_negative": {"x": x, "y": np.array([0, -1, 2, 0, 1])},
        "float_labels": {"x": x, "y": y.astype(np.float32)},
        "y_too_short": {"x": x, "y": y[:-1]},
        "y_scalar": {"x": x, "y": np.array(1)},
    }
    p: dict[str, Path] = {}
    for name, a in arrays.items():
        p[name] = d / f"{name}.npz"
        np.savez(p[name], **a)
    p["text"] = d / "text.npz"
    p["text"].write_text("x,y\n1,2\n")
    p["empty"] = d / "empty.npz"
    p["empty"].write_bytes(b"")
    p["npy"] = d / "plain.npy"
    np.save(p["npy"], x)
    p["truncated"] = d / "truncated.npz"
    p["truncated"].write_bytes(p["ok"].read_bytes()[:200])
    p["missing"] = d / "missing.npz"
    return p


# ---- tinytrain build ---------------------------------------------------------------------

NOT_ONNX = (r"not a valid ONNX model", r"truncated|not an ONNX file", r"re-export")
SUPPORTED = (r"Supported ONNX ops: .*\bConv\b.*\bGemm\b.*\bRelu\b",)

BUILD_CASES = {
    # name: (model key, extra args, regexes the message must match)
    "truncated_50pct": ("cut50", [], NOT_ONNX),
    "truncated_90pct": ("cut90", [], NOT_ONNX),
    "truncated_3_bytes": ("cut3", [], NOT_ONNX),
    "truncated_last_byte": ("cut_last_byte", [], NOT_ONNX),
    "random_bytes": ("random", [], NOT_ONNX),
    "empty_file": ("empty", [], (r"empty \(0 bytes\)", r"re-export")),
    "missing_file": ("missing", [], (r"does not exist", r"\.onnx or \.tflite file")),
    "lstm": ("lstm", [], (r"node '[^']*LSTM[^']*' \(LSTM\)",
                          r"direction 'bidirectional' is not supported")),
    "erf": ("erf", [], (r"node 'my_erf' uses op Erf\b", r"cannot compile", *SUPPORTED)),
    "einsum": ("einsum", [], (r"node 'my_einsum' uses op Einsum\b", r"cannot compile",
                              *SUPPORTED)),
    "dynamic_hw_helper": ("dyn_helper", [], (r"input 'x'", r"dynamic dimension 'H' at axis 2",
                                             r"except the batch axis", r"static input shape")),
    "dynamic_hw_torch": ("dyn_torch", [], (r"input 'x'", r"dynamic dimension 'height' at axis 2",
                                           r"static input shape")),
    "two_inputs": ("two_inputs", [], (r"exactly one input", r"has 2 \(x, z\)")),
    "batch_0": ("good", ["--batch", "0"], (r"--batch must be >= 1, got 0",)),
    "lr_negative": ("good", ["--lr", "-1"], (r"--lr must be positive, got -1",)),
    "unknown_board": ("good", ["--board", "no_such_board"],
                      (r"unknown board 'no_such_board'", r"Available boards: .*\bhost\b")),
}


@dataclass
class Failed:
    fresh: subprocess.CompletedProcess  # build into a new --out
    over: subprocess.CompletedProcess  # build over a copy of a good earlier build
    fresh_parent: Path
    over_dir: Path


@pytest.fixture(scope="module")
def build_failures(work: Path, models: dict[str, Path], good_build: Path) -> dict[str, Failed]:
    jobs, dirs = {}, {}
    for case, (key, extra, _) in BUILD_CASES.items():
        fresh_parent, over_dir = work / f"fresh_{case}", work / f"over_{case}" / "gb"
        fresh_parent.mkdir()
        shutil.copytree(good_build, over_dir, symlinks=True)
        jobs[case, "fresh"] = (["build", models[key], "--out", fresh_parent / "out", *extra], work)
        jobs[case, "over"] = (["build", models[key], "--out", over_dir, *extra], work)
        dirs[case] = (fresh_parent, over_dir)
    res = tt_many(jobs)
    return {case: Failed(res[case, "fresh"], res[case, "over"], *dirs[case]) for case in dirs}


@pytest.mark.parametrize("case", list(BUILD_CASES))
def test_build_rejects_bad_input(case: str, models: dict[str, Path], good_build: Path,
                                 build_failures: dict[str, Failed]) -> None:
    key, _, needles = BUILD_CASES[case]
    f = build_failures[case]
    for r in (f.fresh, f.over):
        err = assert_user_error(r, *needles)
        if key != "good":  # bad-flag cases need not name the (fine) model file
            assert models[key].name in err, err
    fresh_out = f.fresh_parent / "out"
    assert f.fresh.stderr == f.over.stderr.replace(str(f.over_dir), str(fresh_out))
    assert os.listdir(f.fresh_parent) == [], "a failed build left files behind"
    assert snapshot(f.over_dir) == snapshot(good_build), "a failed build changed the old build"
    assert os.listdir(f.over_dir.parent) == ["gb"], "a failed build left a temp dir behind"


def test_build_out_is_a_file(work: Path, models: dict[str, Path]) -> None:
    parent = work / "out_file"
    parent.mkdir()
    (parent / "out").write_text("not a directory\n")
    r = tt("build", models["good"], "--out", parent / "out", cwd=work)
    assert_user_error(r, r"--out .*out is a file, not a directory", r"choose another --out")
    assert (parent / "out").read_text() == "not a directory\n"
    assert sorted(os.listdir(parent)) == ["out"]


def test_build_out_is_a_foreign_directory(work: Path, models: dict[str, Path]) -> None:
    parent = work / "out_foreign"
    (parent / "out").mkdir(parents=True)
    (parent / "out" / "notes.txt").write_text("mine\n")
    r = tt("build", models["good"], "--out", parent / "out", cwd=work)
    assert_user_error(r, r"out exists and is not a tinytrain build", r"choose another --out")
    assert snapshot(parent / "out") == {"notes.txt": hashlib.sha256(b"mine\n").hexdigest()}
    assert sorted(os.listdir(parent)) == ["out"]


# ---- tinytrain run / infer ---------------------------------------------------------------

SHAPE = r"\(N, 1, 8, 8\)"
RUN_CASES = {
    # name: (data key, regexes the message must match)
    "wrong_x_shape": ("wrong_x_shape", (r"x has shape \(5, 1, 7, 8\)", SHAPE)),
    "x_channels_last": ("x_channels_last", (r"x has shape \(5, 8, 8, 1\)", SHAPE)),
    "missing_y": ("no_y", (r"no array 'y'", r"labels")),
    "missing_x": ("no_x", (r"no array 'x'", r"it has: y", SHAPE)),
    "label_too_big": ("label_too_big", (r"labels must be in \[0, 3\)", r"found 0\.\.3")),
    "label_negative": ("label_negative", (r"labels must be in \[0, 3\)", r"found -1\.\.2")),
    "float_labels": ("float_labels", (r"y must be integer class labels", r"float32")),
    "y_length_mismatch": ("y_too_short", (r"x has 5 samples but y has shape \(4,\)",)),
    "y_scalar": ("y_scalar", (r"x has 5 samples but y has shape \(\)",)),
    "text_file": ("text", (r"not an \.npz file", r"numpy\.savez")),
    "empty_file": ("empty", (r"not an \.npz file", r"numpy\.savez")),
    "npy_file": ("npy", (r"single \.npy array", r"numpy\.savez\(path, x=\.\.\., y=\.\.\.\)")),
    "truncated_npz": ("truncated", (r"not a readable \.npz file", r"numpy\.savez")),
    "missing_file": ("missing", (r"data file .* does not exist",)),
}


@pytest.fixture(scope="module")
def run_failures(work: Path, good_build: Path, data: dict[str, Path]) -> dict[str, object]:
    jobs = {case: (["run", good_build, "--data", data[key], "--save", work / f"saved_{case}.npz",
                    "--metrics", work / f"metrics_{case}.jsonl"], work)
            for case, (key, _) in RUN_CASES.items()}
    return tt_many(jobs)


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_run_rejects_bad_data(case: str, work: Path, good_build: Path, data: dict[str, Path],
                              run_failures: dict[str, subprocess.CompletedProcess]) -> None:
    key, needles = RUN_CASES[case]
    err = assert_user_error(run_failures[case], *needles)
    assert data[key].name in err, err
    assert not (work / f"saved_{case}.npz").exists()
    assert not (work / f"metrics_{case}.jsonl").exists()


def test_run_good_data_works(work: Path, good_build: Path, data: dict[str, Path]) -> None:
    """The reference: the same build and a well-formed file train without complaint."""
    r = tt("run", good_build, "--data", data["ok"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert "epoch 1: mean loss" in r.stdout


def test_infer_rejects_bad_x(work: Path, good_build: Path, data: dict[str, Path]) -> None:
    out = work / "infer_out.npy"
    r = tt("infer", good_build, "--data", data["wrong_x_shape"], "--out", out, cwd=work)
    assert_user_error(r, r"wrong_x_shape\.npz: x has shape \(5, 1, 7, 8\)", SHAPE)
    assert not out.exists()


def _make_not_a_build(kind: str, root: Path, models: dict[str, Path]) -> Path:
    d = root / kind
    if kind == "missing_dir":
        return d
    if kind == "model_file":
        return models["good"]
    d.mkdir()
    if kind == "other_files":
        (d / "main.c").write_text("int main(void) { return 0; }\n")
    elif kind == "corrupt_program_json":
        (d / "program.json").write_text("{not json")
    elif kind == "wrong_program_json":
        (d / "program.json").write_text("[1, 2, 3]\n")
    return d


NOT_A_BUILD = (r"not a (tinytrain build directory|valid tinytrain program description)",
               r"tinytrain build MODEL --out DIR")


NOT_A_BUILD_KINDS = ["empty_dir", "other_files", "missing_dir", "model_file",
                     "corrupt_program_json", "wrong_program_json"]


@pytest.fixture(scope="module")
def non_build_runs(work: Path, models: dict[str, Path], data: dict[str, Path]) -> dict:
    root = work / "not_builds"
    root.mkdir()
    dirs = {kind: _make_not_a_build(kind, root, models) for kind in NOT_A_BUILD_KINDS}
    res = tt_many({kind: (["run", d, "--data", data["ok"]], work) for kind, d in dirs.items()})
    return {kind: (dirs[kind], res[kind]) for kind in dirs}


@pytest.mark.parametrize("kind", NOT_A_BUILD_KINDS)
def test_run_rejects_non_build_dir(kind: str, non_build_runs: dict) -> None:
    build_dir, r = non_build_runs[kind]
    err = assert_user_error(r, *NOT_A_BUILD)
    assert build_dir.name in err, err
