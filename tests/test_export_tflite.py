"""`tinytrain export` for int8 TFLite builds, through the real CLI.

Build, train (`run --save`), export the trained .tflite, and run it in LiteRT's reference
kernels: its int8 outputs must equal the trained C program's (`infer --state`) bit for bit and
differ from the original model's. Only the trained parameters' buffer bytes may change, and
every bad input is one clear line with exit code 2 and no file written.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tflite
from conftest import tinytrain

litert = pytest.importorskip("ai_edge_litert.interpreter")

from test_int8_tflite import (  # noqa: E402
    HELLO,
    SPEECH,
    as_int8,
    as_real,
    reference,
    run_ref,
    speech_like,
)
from tflite_build import ModelBuilder, Options  # noqa: E402

from tinytrain.export.to_tflite import _buffer_span  # noqa: E402

N_TRAIN, N_TEST = 120, 50


# ---- data: int8 inputs in the model's input quantisation, fed to the CLI as real values ----

def speech_inputs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """4 classes, each a fixed random band pattern plus noise."""
    rng = np.random.default_rng(seed)
    protos = speech_like(np.random.default_rng(99), 4).astype(np.float32)
    y = rng.integers(0, 4, n)
    q = np.clip(protos[y] + rng.normal(0, 10, (n, 49, 40)), -128, 127).astype(np.int8)
    return q.reshape(n, 1, 49, 40, 1), y.astype(np.int64)


def sine_inputs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """x in the model's domain [0, 2 pi]; a shifted sine as the new task."""
    it = reference(HELLO)
    s, zp = it.get_input_details()[0]["quantization"]
    x = np.random.default_rng(seed).uniform(0, 2 * np.pi, n)
    q = np.clip(np.round(x / s) + zp, -128, 127).astype(np.int8)
    y = 0.6 * np.sin(as_real(it, q).astype(np.float64)) + 0.3
    return q.reshape(n, 1, 1), y.astype(np.float32).reshape(n, 1)


@dataclass
class Case:
    model: Path
    args: list[str]
    inputs: Callable[[int, int], tuple[np.ndarray, np.ndarray]]


CASES = {
    "speech_fc": Case(SPEECH, ["--update", "last:1", "--lr", "0.01"], speech_inputs),
    # full update also writes the depthwise conv back (IR (cout,kh,kw,1) -> TFLite (1,kh,kw,cout))
    "speech_full": Case(SPEECH, ["--update", "full", "--lr", "0.01"], speech_inputs),
    "hello_full": Case(HELLO, ["--loss", "mse", "--update", "full", "--lr", "0.002"],
                       sine_inputs),
}


def save_data(path: Path, model: Path, q: np.ndarray, y: np.ndarray | None = None) -> Path:
    x = as_real(reference(model), q).reshape(len(q), -1)
    np.savez(path, x=x, **({} if y is None else {"y": y}))
    return path


@dataclass
class Trained:
    model: Path
    build: Path
    state: Path
    exported: Path


def train_and_export(root: Path, model: Path, args: list[str], q: np.ndarray,
                     y: np.ndarray) -> Trained:
    root.mkdir(parents=True, exist_ok=True)
    build = root / "build"
    tinytrain("build", model, "--out", build, *args)
    data = save_data(root / "train.npz", model, q, y)
    tinytrain("run", build, "--data", data, "--epochs", "2", "--save", root / "state.npz")
    tinytrain("export", build, "--state", root / "state.npz", "--out", root / "trained.tflite")
    return Trained(model, build, root / "state.npz", root / "trained.tflite")


@pytest.fixture(scope="module", params=list(CASES))
def trained(request, tmp_path_factory) -> Trained:
    c = CASES[request.param]
    q, y = c.inputs(1, N_TRAIN)
    return train_and_export(tmp_path_factory.mktemp(request.param), c.model, c.args, q, y)


def c_program_outputs(t: Trained, q: np.ndarray, tmp: Path) -> np.ndarray:
    """The trained C program's int8 outputs (its API speaks real values)."""
    tinytrain("infer", t.build, "--data", save_data(tmp / "x.npz", t.model, q), "--state",
              t.state, "--out", tmp / "y.npy")
    return as_int8(reference(t.model), np.load(tmp / "y.npy")).reshape(len(q), -1)


def litert_outputs(model: Path, q: np.ndarray) -> np.ndarray:
    it = reference(model)
    return np.array([run_ref(it, x) for x in q]).astype(np.int64)


def check_round_trip(t: Trained, q: np.ndarray, tmp: Path) -> None:
    ours = c_program_outputs(t, q, tmp)
    theirs = litert_outputs(t.exported, q)
    assert np.array_equal(ours, theirs), f"{(ours != theirs).any(axis=1).sum()} of {len(q)} differ"
    changed = (litert_outputs(t.model, q) != theirs).any(axis=1)
    assert changed.any(), "the exported model computes what the original did"


def test_litert_runs_export_bit_exact_with_c_program(trained, tmp_path):
    q = (speech_inputs if trained.model == SPEECH else sine_inputs)(2, N_TEST)[0]
    check_round_trip(trained, q, tmp_path)


def trained_buffers(t: Trained) -> set[int]:
    info = json.loads((t.build / "program.json").read_text())
    sg = tflite.Model.GetRootAsModel(t.model.read_bytes(), 0).Subgraphs(0)
    return {int(sg.Tensors(int(p["source"]["slot"].split(":")[1])).Buffer())
            for p in info["trainable"]}


def test_only_trained_buffer_bytes_change(trained):
    a, b = trained.model.read_bytes(), trained.exported.read_bytes()
    assert len(a) == len(b)
    ma = tflite.Model.GetRootAsModel(a, 0)
    mb = tflite.Model.GetRootAsModel(b, 0)
    assert ma.BuffersLength() == mb.BuffersLength()
    ours = trained_buffers(trained)
    allowed = np.zeros(len(a), bool)
    changed = set()
    for i in range(ma.BuffersLength()):
        sa, sb = _buffer_span(ma, i), _buffer_span(mb, i)
        assert sa == sb  # same layout: data patched in place
        if sa is None:
            continue
        start, n = sa
        if i in ours:
            allowed[start:start + n] = True
            if a[start:start + n] != b[start:start + n]:
                changed.add(i)
        else:
            assert a[start:start + n] == b[start:start + n], f"frozen buffer {i} changed"
    diff = np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)
    assert not (diff & ~allowed).any(), "bytes outside the trained buffers changed"
    assert changed, "no trained buffer changed"


# ---- bad input ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def speech_and_hello(tmp_path_factory) -> tuple[Trained, Trained]:
    root = tmp_path_factory.mktemp("bad")
    out = []
    for name, c in (("speech", CASES["speech_fc"]), ("hello", CASES["hello_full"])):
        q, y = c.inputs(3, 20)
        out.append(train_and_export(root / name, c.model, c.args, q, y))
    return out[0], out[1]


def _edit_state(src: Path, dst: Path, fn: Callable[[dict[str, np.ndarray]], None]) -> Path:
    with np.load(src) as f:
        state = {k: f[k] for k in f.files}
    fn(state)
    np.savez(dst, **state)
    return dst


def _first(s: dict[str, np.ndarray]) -> str:
    return next(iter(_params(s)))


def _params(s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The parameters of a state file (beside them: "state/..." and "run/position")."""
    return {k: v for k, v in s.items() if "/" not in k}


BAD = {
    "other_model": (None, r"none of this build's parameters.*another build"),
    "missing_param": (lambda s: s.pop(_first(s)), r"state file has no parameter '"),
    "wrong_shape": (lambda s: s.update({_first(s): s[_first(s)][None]}), r"has shape \[1, "),
    "float_state": (lambda s: s.update({k: v.astype(np.float32) for k, v in _params(s).items()}),
                    r"is float32 in the state file, the build expects int"),
    "widened_int8": (lambda s: s.update({k: v.astype(np.int32) for k, v in _params(s).items()}),
                     r"is int32 in the state file, the build expects int8"),
}


@pytest.mark.parametrize("case", [*BAD, "source_changed", "source_missing", "no_out_dir",
                                  "onnx_out"])
def test_bad_export_is_one_line_exit_2_and_writes_nothing(speech_and_hello, tmp_path, case):
    speech, hello = speech_and_hello
    build, state, out = speech.build, speech.state, tmp_path / "trained.tflite"
    if case in BAD:
        edit, pattern = BAD[case]
        state = hello.state if edit is None else _edit_state(state, tmp_path / "s.npz", edit)
    elif case.startswith("source"):
        build = tmp_path / "build"
        shutil.copytree(speech.build, build)
        src = build / "source_model.tflite"
        if case == "source_missing":
            src.unlink()
            pattern = r"source_model\.tflite is missing; rebuild"
        else:
            raw = bytearray(src.read_bytes())
            raw[len(raw) // 2] ^= 1
            src.write_bytes(bytes(raw))
            pattern = r"changed since the build \(sha256"
    elif case == "no_out_dir":
        out = tmp_path / "nowhere" / "trained.tflite"
        pattern = r"cannot write .*trained\.tflite"
    else:
        out = tmp_path / "trained.onnx"
        pattern = r"exports a \.tflite file"
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = tinytrain("export", build, "--state", state, "--out", out, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary left behind


# ---- a weight tensor shared by two layers ------------------------------------------------------

def shared_weight_model(path: Path) -> Path:
    """x -> FC(W) -> FC(W) -> FC(W3): the first two layers read the same constant tensor, as a
    converter's constant deduplication produces."""
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    acts = [mb.tensor((1, 4), scale=0.05, zero_point=z, name=f"a{i}")
            for i, z in enumerate((0, -10, 5, 0))]
    w = mb.tensor((4, 4), scale=0.02, data=rng.integers(-60, 61, (4, 4)), name="w_shared")
    w3 = mb.tensor((4, 4), scale=0.02, data=rng.integers(-60, 61, (4, 4)), name="w3")
    opts = Options("FullyConnectedOptions", fused_activation_function="NONE")
    for i, wi in enumerate((w, w, w3)):
        b = mb.tensor((4,), "int32", scale=0.001, data=rng.integers(-200, 201, 4), name=f"b{i}")
        mb.op("FULLY_CONNECTED", [acts[i], wi, b], [acts[i + 1]], opts)
    path.write_bytes(mb.build([acts[0]], [acts[-1]]))
    return path


def shared_inputs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.integers(-100, 101, (n, 1, 4)).astype(np.int8)
    return q, rng.normal(0, 1, (n, 4)).astype(np.float32)


def test_shared_weights_export_when_trained_apart_from_them(tmp_path):
    model = shared_weight_model(tmp_path / "shared.tflite")
    q, y = shared_inputs(1, 40)
    t = train_and_export(tmp_path / "bias", model, ["--loss", "mse", "--update", "bias",
                                                    "--lr", "0.05"], q, y)
    check_round_trip(t, shared_inputs(2, N_TEST)[0], tmp_path)


@pytest.mark.parametrize("update,pattern", [
    ("full", r"share one TFLite buffer .* trained to different values"),
    ("last:2", r"shares TFLite buffer \d+ with a frozen use of it"),
])
def test_shared_weights_that_diverge_are_refused(tmp_path, update, pattern):
    model = shared_weight_model(tmp_path / "shared.tflite")
    build = tmp_path / "b"
    tinytrain("build", model, "--out", build, "--loss", "mse", "--update", update, "--lr", "0.05")
    q, y = shared_inputs(1, 40)
    tinytrain("run", build, "--data", save_data(tmp_path / "d.npz", model, q, y), "--epochs",
              "2", "--save", tmp_path / "s.npz")
    out = tmp_path / "trained.tflite"
    proc = tinytrain("export", build, "--state", tmp_path / "s.npz", "--out", out, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(pattern, proc.stderr), proc.stderr
    assert not out.exists()
