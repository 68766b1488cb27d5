"""An interrupted run goes on exactly where it stopped: `run --save` keeps the parameters, the
training state (model.h NAME_state over the link's g/s commands: momentum buffers, Adam's
moments and step counter, pending gradients, int8 shadow bytes, the stochastic rounding's
step counter) and the run's position;
`run --state FILE --resume` ends with the bits of a run never interrupted, wherever Ctrl-C
fell. The Python API's save/load does the same mid-batch. The device refuses a state it
could not run (a pending count outside the batch), changing nothing."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import time
from pathlib import Path

import numpy as np
import pytest

import tinytrain
from tests.conftest import ROOT
from tests.conftest import tinytrain as cli
from tests.test_run_ux import WAIT, _data, _metric_lines, _start
from tinytrain.device.link.transport import LinkError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="the host build needs gcc and make")

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
TRAIN_N = 1500  # as test_run_ux: an epoch of metrics outgrows a pipe
EPOCHS = 3
BUILDS = {  # what each keeps besides its parameters
    "fp32 momentum": ("--lr", "0.01", "--momentum", "0.9"),
    "int8 stochastic": ("--lr", "0.01", "--quantize", "int8", "--update", "last:3"),
    "int8 shadow": ("--lr", "0.01", "--quantize", "int8", "--update", "last:3", "--rounding",
                    "shadow"),
    "fp32 batch 4": ("--lr", "0.01", "--momentum", "0.9", "--batch", "4"),
    "adam batch 4": ("--lr", "0.001", "--optimizer", "adam", "--batch", "4"),  # moments, t
}
INTERRUPT_TRIES = 6  # Ctrl-C falls where it falls: until one lands mid-batch (3 in 4 do)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("resume")
    np.savez(d / "train.npz", **_data(TRAIN_N, 0))
    np.savez(d / "calib.npz", x=_data(64, 2)["x"])
    return d


def _build(work: Path, name: str, *extra: str) -> Path:
    out = work / name.replace(" ", "_")
    if not out.exists():
        calib = ("--calib", work / "calib.npz") if "int8" in BUILDS[name] else ()
        cli("build", DIGITS, "--out", out, *BUILDS[name], *calib, *extra)
    return out


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _interrupted(build: Path, work: Path, metrics: Path, saved: Path) -> int:
    """`run` stopped by Ctrl-C somewhere in its second epoch; returns the steps it trained."""
    p = _start("run", build, "--data", work / "train.npz", "--epochs", EPOCHS, "--shuffle",
               "--seed", "7", "--metrics", metrics, "--save", saved, start_new_session=True)
    deadline = time.monotonic() + WAIT
    while (not metrics.exists() or metrics.read_text().count("\n") < TRAIN_N + 200) \
            and p.poll() is None:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=WAIT)
    assert p.returncode == 130, (out, err)
    assert f"continue with --state {saved} --resume" in err, err
    return len(_metric_lines(metrics))


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_a_resumed_run_ends_as_one_never_interrupted(work, name):
    build = _build(work, name)
    tag = name.replace(" ", "_")
    whole_m, whole = work / f"{tag}_whole.jsonl", work / f"{tag}_whole.npz"
    cli("run", build, "--data", work / "train.npz", "--epochs", EPOCHS, "--shuffle", "--seed",
        "7", "--metrics", whole_m, "--save", whole)
    part_m, part, final = work / f"{tag}_part.jsonl", work / f"{tag}_part.npz", \
        work / f"{tag}_final.npz"
    batch = int(BUILDS[name][BUILDS[name].index("--batch") + 1]) if "--batch" in BUILDS[name] \
        else 1
    for _ in range(INTERRUPT_TRIES):
        part_m.unlink(missing_ok=True)  # a try waits for its own metrics, not the last one's
        k = _interrupted(build, work, part_m, part)
        if batch == 1 or k % batch:
            break
    assert TRAIN_N < k < EPOCHS * TRAIN_N
    # a batch cut by Ctrl-C is saved unapplied: its samples wait in the accumulators
    assert int(_load(part)["state/pending_samples"][0]) == k % batch
    position = _load(part)["run/position"]
    assert list(position) == [k // TRAIN_N, k % TRAIN_N, EPOCHS, 1, 7, TRAIN_N]

    # no --epochs/--shuffle/--seed: --resume takes the saved run's
    r = cli("run", build, "--data", work / "train.npz", "--state", part, "--resume",
            "--metrics", part_m, "--save", final)
    assert "(run finished)" in r.stdout
    want, got = _load(whole), _load(final)
    assert sorted(got) == sorted(want)
    assert any(k.startswith("state/") and k != "state/pending_samples" for k in want)
    for key, v in want.items():
        np.testing.assert_array_equal(got[key], v, err_msg=key)
    # the metrics go on where they stopped: the same steps, samples and losses
    assert _metric_lines(part_m) == _metric_lines(whole_m)

    # without the training state (as before it was saved) the run would not end so: the
    # state matters for this build
    params_only = work / f"{tag}_params.npz"
    np.savez(params_only, **{key: v for key, v in _load(part).items() if "/" not in key},
             **{"run/position": position})
    cli("run", build, "--data", work / "train.npz", "--state", params_only, "--resume",
        "--save", work / f"{tag}_lossy.npz")
    lossy = _load(work / f"{tag}_lossy.npz")
    assert any(not np.array_equal(lossy[key], v) for key, v in want.items()
               if "/" not in key)


def test_the_api_saves_and_loads_mid_batch(work):
    """Batch 4, saved after 6 samples (2 pending in the accumulators), loaded into a new
    process: the next samples train as if the first process had gone on."""
    out = work / "batch4"
    cli("build", DIGITS, "--out", out, "--lr", "0.01", "--momentum", "0.9", "--batch", "4")
    d = _data(14, 3)
    with tinytrain.connect(out) as m:
        for i in range(14):
            m.learn(d["x"][i], int(d["y"][i]))
        want_params, want_state = m.params(), m.device.get_state()
    with tinytrain.connect(out) as m:
        for i in range(6):
            m.learn(d["x"][i], int(d["y"][i]))
        saved = m.save(work / "mid_batch")
        assert int(m.device.get_state()["pending_samples"][0]) == 2
    with tinytrain.connect(out) as m:
        m.load(saved)
        for i in range(6, 14):
            m.learn(d["x"][i], int(d["y"][i]))
        got_params, got_state = m.params(), m.device.get_state()
    for k, v in {**want_params, **want_state}.items():
        np.testing.assert_array_equal({**got_params, **got_state}[k], v, err_msg=k)


def test_the_device_refuses_a_state_it_could_not_run(work):
    build = _build(work, "fp32 momentum")
    with tinytrain.connect(build) as m:
        before = m.device.get_state()
        for pending in (1, -1, 1 << 30):  # batch 1: only 0 samples can be pending
            with pytest.raises(LinkError, match="argument out of range"):
                m.device.request("s", struct.pack("<Ii", 0, pending))
        with pytest.raises(LinkError, match="argument out of range"):  # past the table
            m.device.request("g", struct.pack("<IH", 1 << 20, 4))
        with pytest.raises(LinkError, match="wrong payload length"):
            m.device.request("s", b"\0\0")
        bad = dict(before)
        bad["pending_samples"] = np.array([3], np.int32)
        with pytest.raises(LinkError, match="argument out of range"):
            m.device.set_state(bad)
        for k, v in m.device.get_state().items():
            np.testing.assert_array_equal(v, before[k], err_msg=k)
        wrong = {**before, "pending_samples": np.zeros(1, np.int64)}
        with pytest.raises(LinkError, match="pending_samples"):  # the host checks dtypes
            m.device.set_state(wrong)


def test_state_files_of_other_builds_and_bad_resumes_are_clear(work):
    fp32, plain = _build(work, "fp32 momentum"), work / "plain"
    cli("build", DIGITS, "--out", plain, "--lr", "0.01")  # no momentum buffers
    saved = work / "momentum_state.npz"
    cli("run", fp32, "--data", work / "train.npz", "--save", saved)
    # another optimizer, the same parameters: they load, the state does not, and it says so
    r = cli("run", plain, "--data", work / "train.npz", "--state", saved)
    assert "only its parameters were loaded" in r.stderr
    with tinytrain.connect(plain) as m, pytest.warns(UserWarning, match="only the parameters"):
        m.load(saved)
    # an older file (parameters only) still loads, with the API and the CLI
    old = work / "old.npz"
    np.savez(old, **{k: v for k, v in _load(saved).items() if "/" not in k})
    with tinytrain.connect(fp32) as m:
        m.load(old)
    for args, needle in (
            (("--resume",), "--resume needs --state FILE"),
            (("--state", old, "--resume"), "holds no run position"),
    ):
        r = cli("run", fp32, "--data", work / "train.npz", *args, check=False)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r
    np.savez(work / "short.npz", **_data(100, 0))
    r = cli("run", fp32, "--data", work / "short.npz", "--state", saved, "--resume",
            check=False)
    assert r.returncode == 2 and "over 1500 samples; --data has 100" in r.stderr, r.stderr
