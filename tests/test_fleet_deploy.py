"""A fleet deployed as Flower deploys it: a real SuperLink and one SuperNode per device on the
loopback, each SuperNode's node config naming its device (a firmware build run on its QEMU
twin; int8 builds, one training the classifier and one the biases, so int8 and int32 codes
cross the network), and `flwr run APP deploy` submitting tinytrain's app with SCAFFOLD (the
builds carry --fleet-correction: control variates cross the network both ways). One twin is
killed in the middle of round 1: that round is that node's failure, the other node's update
and control variate are aggregated, and in round 2 both train again."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

pytest.importorskip("flwr")

from tinytrain.device.build import build  # noqa: E402
from tinytrain.fleet.simulate import free_port, write_app  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
    reason="needs arm-none-eabi-gcc and qemu-system-arm")

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
RUN_TIMEOUT = 900  # s: two twins booting three times and 2 x 300 samples under QEMU
KILL_AFTER = 1.0  # s into the victim's round-1 training (it takes several seconds)
START_WAIT = 30.0  # s for the SuperLink / SuperNodes to come up


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port} after {START_WAIT} s")


def _twins_of(build_dir: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"qemu-system-arm.*{build_dir}"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def _kill_second_twin(build_dir: Path, stop: threading.Event, killed: list[int]) -> None:
    """The victim's twins: the first answers the fleet's query, the second trains round 1;
    kill that one mid-round."""
    seen: list[int] = []
    while not stop.is_set() and not killed:
        for pid in _twins_of(build_dir):
            if pid not in seen:
                seen.append(pid)
        if len(seen) >= 2:
            time.sleep(KILL_AFTER)
            os.kill(seen[1], signal.SIGKILL)
            killed.append(seen[1])
        time.sleep(0.05)


def test_superlink_supernodes_and_a_twin_killed_mid_round(tmp_path) -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    devices = []
    np.savez(tmp_path / "calib.npz", x=x[:200])
    for k, update in enumerate(("last:1", "bias")):  # each its own build directory (a
        b = tmp_path / f"dev{k}"  # twin's flash file); int8 codes cross the network
        build(DIGITS, b, Options(board="stm32f746", update=update, sgd=SGDConfig(lr=0.05),
                                 quantize="int8", calib=tmp_path / "calib.npz",
                                 fleet_correction=True))
        np.savez(tmp_path / f"data{k}.npz", x=x[300 * k:300 * (k + 1)],
                 y=digits.target[300 * k:300 * (k + 1)])
        devices.append(b)
    home = tmp_path / "flwr-home"
    home.mkdir()
    link = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    bindir = Path(sys.executable).parent
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs: list[subprocess.Popen] = []
    stop, killed = threading.Event(), []
    try:
        procs.append(subprocess.Popen(
            [str(bindir / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
             str(link), "--database", str(tmp_path / "state.db"),
             "--disable-runtime-dependency-installation"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_port(link, procs[0])
        for k, b in enumerate(devices):
            port = free_port()
            procs.append(subprocess.Popen(
                [str(bindir / "flower-supernode"), "--insecure", "--superlink",
                 f"127.0.0.1:{link}", "--port", str(port), "--node-config",
                 f"build='{b}' data='{tmp_path / f'data{k}.npz'}' qemu=true"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait_port(port, procs[-1])
        watcher = threading.Thread(target=_kill_second_twin, args=(devices[1], stop, killed))
        watcher.start()
        app = write_app(tmp_path / "app")
        out = tmp_path / "run"
        p = subprocess.run([str(bindir / "flwr"), "run", str(app), "deploy", "--stream",
                            "--run-config",
                            f"out='{out}' num-rounds=2 min-nodes=2 correction='scaffold'"],
                           env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    finally:
        stop.set()
        for q in procs:
            q.send_signal(signal.SIGTERM)
        for q in procs:
            try:
                q.wait(timeout=20)
            except subprocess.TimeoutExpired:
                q.kill()
        for b in devices:
            for pid in _twins_of(b):
                os.kill(pid, signal.SIGKILL)
    assert killed, "the victim's round-1 twin never started"
    log = out / "fleet_rounds.json"
    assert log.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    rounds = json.loads(log.read_text())["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert rounds[0]["devices"] == 1 and len(rounds[0]["failed"]) == 1
    assert rounds[0]["samples"] == 300  # the survivor's update alone
    assert rounds[1]["devices"] == 2 and not rounds[1]["failed"]  # the twin boots again
    assert [r["controls"] for r in rounds] == [1, 2]  # each reply's control variate change
    # round 2: each device got its tensors and the server's c for them (float32 an element)
    # and replied with its tensors and its c_i's change
    plans = json.loads(log.read_text())["plans"]
    item = {"s8": 1, "s32": 4, "f32": 4}
    for node, plan in plans.items():
        want = sum(int(np.prod(t["shape"])) * (item[t["dtype"]] + 4) for t in plan)
        assert rounds[1]["downlink"][node] == rounds[1]["uplink"][node] == want
    final = dict(np.load(out / "fleet_final.npz"))
    # the classifier follows trained biases on one device and the input on the other: each
    # class trains a copy of its own (fleet/shares.py); conv2's bias only the bias class
    copies = json.loads(log.read_text())["copies"]
    assert sorted(c["fc_weight"] for c in copies.values()) == ["fc_weight@0", "fc_weight@1"]
    assert {"fc_bias@0", "fc_bias@1", "conv2_bias"} <= set(final)
    for k, a in final.items():  # codes in the tensors' own dtypes
        assert a.dtype == (np.int8 if k.startswith("fc_weight") else np.int32), k
