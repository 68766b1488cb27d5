"""`tinytrain run` as a user sees it: Ctrl-C saves and a resumed run continues from the saved
state; per-epoch lines as each epoch ends (plain lines when stderr is not a terminal); the
progress bars in a terminal (live loss and accuracy, the eval bar's real total); `--dump-ir`
names checked before compiling; `--help` groups and choices. The QEMU twin's flash survives a
restart of the twin: tests/test_run_ux_twin.py."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import queue
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, tinytrain
from tinytrain.device.runner import HostProgram

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="the host build needs gcc and make")

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
TRAIN_N = 1500  # an epoch of metrics (~100 bytes a line) is more than a 64 KB pipe holds
EVAL_N = 48
WAIT = 60.0  # seconds before a test gives up waiting for the CLI (it needs well under 5)


def _data(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(0, 1, (n, 1, 8, 8)).astype(np.float32),
            "y": rng.integers(0, 10, n).astype(np.int64)}


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """The digits CNN for the host: batch 1, no momentum, so its parameters are its state."""
    d = tmp_path_factory.mktemp("run_ux")
    tinytrain("build", DIGITS, "--out", d / "host", "--lr", "0.05")
    np.savez(d / "train.npz", **_data(TRAIN_N, 0))
    np.savez(d / "eval.npz", **_data(EVAL_N, 1))
    return d


def _start(*args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tinytrain", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _lines(stream) -> queue.Queue:  # noqa: ANN001
    """A thread that hands over the lines of `stream` as they arrive (None at the end)."""
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: queue.Queue, pattern: str, seen: list[str]) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        line = q.get(timeout=max(0.0, deadline - time.monotonic()))
        assert line is not None, f"stream ended without /{pattern}/: {seen}"
        seen.append(line)
        if re.search(pattern, line):
            return line
    raise AssertionError(f"no /{pattern}/ within {WAIT} s: {seen}")


def _metric_lines(path: Path) -> list[dict]:
    return [json.loads(s) for s in path.read_text().splitlines()]


def test_ctrl_c_saves_the_state_a_resumed_run_continues_from(digits: Path) -> None:
    """SIGINT to the whole process group (what Ctrl-C in a terminal does) mid-run: the step
    in flight finishes, --save holds exactly the parameters after the steps the metrics
    show, the exit code is 130; a run with --state trains on from those parameters."""
    d = digits
    metrics, saved = d / "m_int.jsonl", d / "state_int.npz"
    p = _start("run", d / "host", "--data", d / "train.npz", "--epochs", "100",
               "--metrics", metrics, "--save", saved, start_new_session=True)
    deadline = time.monotonic() + WAIT
    while (not metrics.exists() or metrics.read_text().count("\n") < 300) and p.poll() is None:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGINT)  # the host program has a session of its own: it survives
    out, err = p.communicate(timeout=WAIT)
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err, err
    done = _metric_lines(metrics)
    k = len(done)
    assert 300 <= k < 100 * TRAIN_N  # stopped early, not at the end
    assert f"saved trained parameters and training state after {k} steps to {saved}" in out, out
    assert f"continue with --state {saved}" in err, err

    # The same k steps on a fresh program: the losses and the parameters match exactly.
    data = _data(TRAIN_N, 0)
    with HostProgram(d / "host") as prog:
        losses = []
        for step in range(k):
            i = step % TRAIN_N
            losses.append(prog.train(data["x"][i], data["y"][i])[0])
            if i == TRAIN_N - 1:
                prog.apply_update()
        want = prog.get_params()
        next_loss = prog.train(data["x"][0], data["y"][0])[0]  # what a resumed run sees first
    assert [m["loss"] for m in done] == [float(v) for v in losses]
    with np.load(saved) as f:  # parameters by name; the training state and position beside
        assert sorted(k for k in f.files if "/" not in k) == sorted(want)
        for name, v in want.items():
            np.testing.assert_array_equal(f[name], v, err_msg=name)

    resumed = d / "m_resumed.jsonl"
    tinytrain("run", d / "host", "--data", d / "train.npz", "--state", saved,
              "--metrics", resumed)
    first = _metric_lines(resumed)[0]["loss"]
    assert first == float(next_loss)
    assert first != done[0]["loss"]  # not the untrained model's loss on that sample


def test_second_sigint_aborts_at_once() -> None:
    from tinytrain.device.train import StopRequest

    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background
    with StopRequest() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs in the main thread between bytecodes
        assert stop()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is before


def test_epoch_lines_appear_as_each_epoch_ends(digits: Path) -> None:
    """The metrics file is a FIFO that the test stops reading after epoch 1, so the run
    blocks early in epoch 2: the epoch-1 lines must be out by then, on stdout and, since
    stderr is not a terminal, as a plain progress line on stderr."""
    d = digits
    fifo = d / "metrics.fifo"
    os.mkfifo(fifo)
    p = _start("run", d / "host", "--data", d / "train.npz", "--epochs", "2",
               "--eval", d / "eval.npz", "--metrics", fifo)
    out_q, err_q = _lines(p.stdout), _lines(p.stderr)
    got: queue.Queue = queue.Queue()
    gate = threading.Event()

    def read_metrics() -> None:
        with open(fifo) as f:
            for n, line in enumerate(f, 1):
                got.put(line)
                if n == TRAIN_N:
                    gate.wait()  # stop reading: epoch 2's lines pile up in the pipe
    threading.Thread(target=read_metrics, daemon=True).start()
    try:
        for _ in range(TRAIN_N):
            got.get(timeout=WAIT)
        seen_err: list[str] = []
        line = _wait_for(err_q, r"^train epoch 1/2", seen_err)
        assert re.match(rf"train epoch 1/2: {TRAIN_N}/{2 * TRAIN_N} steps, mean loss "
                        r"[0-9.]+, accuracy [0-9.]+, eval accuracy [0-9.]+, ", line), line
        seen_out: list[str] = []
        _wait_for(out_q, r"^eval accuracy before: [0-9.]+$", seen_out)
        assert re.match(r"epoch 1: mean loss [0-9.]+  accuracy [0-9.]+  eval accuracy [0-9.]+$",
                        out_q.get(timeout=WAIT))
        assert p.poll() is None, "the run ended: the epoch line may have come at the end"
        assert got.qsize() < TRAIN_N  # epoch 2 is far from done
    finally:
        gate.set()
    assert p.wait(timeout=WAIT) == 0
    rest = []
    while (line := out_q.get(timeout=WAIT)) is not None:
        rest.append(line)
    assert re.match(r"epoch 2: mean loss", rest[0]) and rest[1].startswith("eval accuracy after")


def _run_in_terminal(args: list[object], cwd: Path) -> str:
    """The CLI with stdin/stdout/stderr on a pseudo-terminal of 150 columns; what it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    p = subprocess.Popen([sys.executable, "-m", "tinytrain", *map(str, args)], stdin=slave,
                         stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    buf, deadline = b"", time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            buf += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    assert p.wait(timeout=WAIT) == 0, buf.decode(errors="replace")[-2000:]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.decode(errors="replace"))


def test_terminal_bars_show_live_loss_and_the_eval_total(digits: Path) -> None:
    d = digits
    shown = _run_in_terminal(["run", d / "host", "--data", d / "train.npz", "--epochs", "2",
                              "--eval", d / "eval.npz"], d)
    evals = re.findall(r"eval\s+\S*\s+(\d+)/(\d+)", shown)
    assert evals and {int(t) for _, t in evals} == {EVAL_N}, evals  # was 360/0
    trains = re.findall(r"train\s+\S*\s+(\d+)/(\d+)\s+epoch (\d)/2\s+loss ([0-9.]+)\s+"
                        r"acc ([0-9.]+)", shown)
    assert trains, shown[-2000:]
    assert {int(t) for _, t, *_ in trains} == {2 * TRAIN_N}
    assert {e for *_, e, _, _ in trains} == {"1", "2"}  # the bar follows the epochs
    assert re.search(r"epoch 2: mean loss [0-9.]+  accuracy", shown)


def test_unknown_dump_ir_pass_is_refused_before_compiling(tmp_path: Path) -> None:
    from tinytrain.passes.pipeline import Options, pipeline

    names = ["import", *(n for n, _ in pipeline(Options()))]
    r = tinytrain("build", DIGITS, "--out", tmp_path / "b", "--dump-ir", "bogus", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "unknown pass 'bogus'" in r.stderr
    assert ", ".join(names) in r.stderr  # every valid name, in pipeline order
    assert not (tmp_path / "b").exists()
    r = tinytrain("build", DIGITS, "--out", tmp_path / "b", "--dump-ir", "fuse",
                  "--no-memory-passes", check=False)
    assert r.returncode == 2 and "only with the memory passes" in r.stderr, r.stderr
    assert "fuse" not in r.stderr.split("choose one of:")[1]


def test_dump_ir_prints_the_named_pass_once(tmp_path: Path) -> None:
    r = tinytrain("build", DIGITS, "--out", tmp_path / "b", "--dump-ir", "optimizer")
    assert r.stdout.count("\ninput input: ") + r.stdout.startswith("input input: ") == 1
    assert "[update]" in r.stdout  # after the optimizer pass: its update nodes


def test_help_groups_options_and_lists_the_choices() -> None:
    from tinytrain.boards import available
    from tinytrain.passes.add_loss import LOSSES
    from tinytrain.passes.pipeline import KERNELS
    from tinytrain.quant.update import ROUNDINGS

    h = tinytrain("build", "--help").stdout
    flat = " ".join(h.split())
    for heading in ("Target:", "Training (SGD):", "int8:", "Memory:", "Debugging:", "Examples:"):
        assert f"\n{heading}" in h or f"\n  {heading}" in h, heading
    assert "One of: " + ", ".join(available()) in flat
    for values in (LOSSES, ROUNDINGS, KERNELS, ("int8",)):
        assert "One of: " + ", ".join(values) in flat, values
    assert "tinytrain build examples/digits/digits_cnn.onnx --board stm32f746" in h
    h = tinytrain("run", "--help").stdout
    for heading in ("Data:", "Where it runs:", "Parameters and checkpoints:", "Examples:"):
        assert f"\n{heading}" in h or f"\n  {heading}" in h, heading
    assert all(len(line) <= 80 for line in h.splitlines()), h


@pytest.mark.parametrize("args, needle", [
    (["--board", "nope"],  # every board file's name, host among them
     r"unknown board 'nope'\. Available boards: [\w, ]*\bhost, [\w, ]*\bstm32f746\b"),
    (["--rounding", "nope"], r"--rounding must be one of stochastic, shadow, master, truncate"),
    (["--kernels", "nope"], r"--kernels must be one of optimized, reference"),
])
def test_bad_choices_are_still_clear_errors(args: list[str], needle: str,
                                            tmp_path: Path) -> None:
    r = tinytrain("build", DIGITS, "--out", tmp_path / "b", *args, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(needle, r.stderr), r.stderr


def test_erase_flash_needs_the_twin(digits: Path) -> None:
    r = tinytrain("run", digits / "host", "--data", digits / "train.npz", "--erase-flash",
                  check=False)
    assert r.returncode == 2 and "--erase-flash" in r.stderr and "--qemu" in r.stderr
