"""Run a simulated fleet with Flower's own `flwr run` and its simulation engine, isolated.

`flwr run` starts a local SuperLink that outlives it, keeps its first environment and reads
its connections from $FLWR_HOME; its `--stream` exit code is 0 even when the run fails. So
each simulation here gets a fresh FLWR_HOME and free ports, turns off Flower's telemetry and
its runtime dependency installation (the app's dependencies are this environment's), and is
judged by the files the ServerApp writes; the SuperLink it started is stopped by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.device.runner import load_program_info
from tinytrain.errors import TinyTrainError
from tinytrain.fleet.correction import Correction
from tinytrain.fleet.schedule import Schedule
from tinytrain.fleet.server_step import ServerStep
from tinytrain.fleet.shares import SEP, Shares, check_received
from tinytrain.fleet.tensors import Trained, received_tensors, trained_tensors

APP_TOML = '''# A Flower app: tinytrain's ClientApp (one device each) and ServerApp (SparseFedAvg).
# Keys: builds (device classes; simulated node k uses class k mod n), data (the pooled .npz,
# split over the nodes by `partition`: iid, labels:K, dirichlet:ALPHA), local-epochs, seed,
# num-rounds, fraction-train, min-nodes, server-lr and server-momentum (FedAvgM; 1 and 0 are
# FedAvg), server-optimizer (avgm, or adam: FedAdam with server-beta1, server-beta2 and
# server-tau), server-lr-decay (the server's lr times this every round), out (fleet_final.npz
# and fleet_rounds.json), keep-rounds (and every round's tensors in fleet_round_tensors.npz),
# correction (none, or scaffold, prox, restricted joined by '+'), mu and alpha (the devices'
# drift correction; builds with --fleet-correction), share (matching: a tensor's copies by
# the trained layers feeding it; all: one average), lr and lr-decay (the devices' rate in
# round r: lr * lr-decay^(r-1); 0: each build's own).
# Paths absolute: Flower runs the apps from its own folders.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "tinytrain-fleet"
version = "1.0.0"
description = "Federated on-device training of tinytrain builds with Flower"
license = "Apache-2.0"
dependencies = ["tinytrain-mcu[fleet]"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "tinytrain"

[tool.flwr.app.components]
serverapp = "tinytrain.fleet.server_app:app"
clientapp = "tinytrain.fleet.client_app:app"

[tool.flwr.app.config]
num-rounds = 3
fraction-train = 1.0
min-nodes = 2
local-epochs = 1
server-lr = 1.0
server-momentum = 0.0
server-optimizer = "avgm"
server-beta1 = 0.9
server-beta2 = 0.99
server-tau = 0.001
server-lr-decay = 1.0
seed = 0
builds = ""
data = ""
partition = "iid"
out = ""
keep-rounds = false
correction = "none"
mu = 0.0
alpha = 1.0
share = "matching"
lr = 0.0
lr-decay = 1.0
'''
RESULTS = ("fleet_final.npz", "fleet_rounds.json")
ROUND_TENSORS = "fleet_round_tensors.npz"


@dataclass
class FleetRun:
    """A finished run: per-round log, each node's plan, the fleet's tensors (every copy,
    fleet/shares.py), the wall time, with `keep_rounds` the fleet's tensors after each round
    (round number -> tensors), and each node's copies (node -> {tensor: key})."""

    rounds: list[dict]
    plans: dict[str, list[dict]]
    final: dict[str, np.ndarray]
    seconds: float
    log: str
    per_round: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    copies: dict[str, dict[str, str]] = field(default_factory=dict)

    def tensors(self, plan: list[Trained], round: int | None = None
                ) -> dict[str, np.ndarray]:
        """The fleet's tensors by name for a device that trains `plan` (its copies,
        fleet/shares.py), after `round` (None: the end). A plan no node reported gets each
        tensor's first copy."""
        tensors = self.final if round is None else self.per_round[round]
        mine = [t.to_json() for t in plan]
        node = next((n for n, p in self.plans.items() if p == mine), None)
        copies = self.copies.get(node, {}) if node is not None else {}
        first: dict[str, str] = {}
        for k in sorted(tensors):  # name@0 before name@1; a tensor of one copy is its name
            first.setdefault(k.split(SEP)[0], k)
        return {n: tensors[copies.get(n, k)] for n, k in first.items()}


def write_app(directory: Path) -> Path:
    """Write the Flower app (a pyproject.toml naming tinytrain's apps) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(APP_TOML)
    return directory


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml(v: object) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) \
        else str(v)


def simulate(builds: list[Path], data: Path, out: Path, nodes: int, rounds: int, *,
             local_epochs: int = 1, partition: str = "iid", seed: int = 0,
             fraction: float = 1.0, server: ServerStep | None = None,
             timeout: float = 3600.0, keep_rounds: bool = False,
             correction: str = "none", mu: float = 0.0, alpha: float = 1.0,
             share: str = "matching", lr: float | None = None,
             lr_decay: float = 1.0) -> FleetRun:
    """Federate `nodes` simulated devices (node k: build k mod len(builds), its share of
    `data`) for `rounds` rounds; the results go to `out`. `keep_rounds` keeps the tensors of
    every round too (FleetRun.per_round), e.g. to evaluate the fleet's model round by round.
    `correction`, `mu`, `alpha`: the devices' drift correction (tinytrain.fleet.correction);
    `share`: which devices share a tensor's average (tinytrain.fleet.shares); `lr`,
    `lr_decay`: the devices' learning rate by round (None: each build's own); `server`: the
    server's step (tinytrain.fleet.server_step; None: FedAvg)."""
    Correction(correction, mu, alpha)  # a bad method or mu fails here, not in every node
    server = server or ServerStep()
    Shares({}, share)
    preflight_received(builds, share)
    Schedule(lr, lr_decay, local_epochs)
    flwr = Path(sys.executable).with_name("flwr")
    if not flwr.exists() and shutil.which("flwr") is None:
        raise TinyTrainError("Flower is not installed: pip install 'tinytrain-mcu[fleet]'")
    flwr_cmd = str(flwr) if flwr.exists() else "flwr"
    cfg = {"builds": ",".join(str(Path(b).resolve()) for b in builds),
           "data": str(Path(data).resolve()), "out": str(Path(out).resolve()),
           "num-rounds": rounds, "min-nodes": nodes, "local-epochs": local_epochs,
           "partition": partition, "seed": seed, "fraction-train": fraction,
           "server-lr": float(server.lr), "server-momentum": float(server.momentum),
           "server-optimizer": server.optimizer, "server-beta1": float(server.beta1),
           "server-beta2": float(server.beta2), "server-tau": float(server.tau),
           "server-lr-decay": float(server.lr_decay),
           "keep-rounds": keep_rounds, "correction": correction, "mu": float(mu),
           "alpha": float(alpha), "share": share, "lr": float(lr or 0.0),
           "lr-decay": float(lr_decay)}
    with tempfile.TemporaryDirectory(prefix="tt-flwr-") as tmp:
        home, app = Path(tmp) / "home", write_app(Path(tmp) / "app")
        home.mkdir()
        env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
               "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
               "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
               "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        for f in (*RESULTS, ROUND_TENSORS):  # an earlier run's files must not pass for ours
            (Path(out) / f).unlink(missing_ok=True)
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                [flwr_cmd, "run", str(app), "--stream", "--run-config",
                 " ".join(f"{k}={_toml(v)}" for k, v in cfg.items()),
                 "--federation-config", f"num-supernodes={nodes}"],
                env=env, capture_output=True, text=True, timeout=timeout)
            log = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            log = f"flwr run did not finish in {timeout:.0f} s\n{e.stdout or ''}"
        finally:
            _stop(home)
        seconds = time.monotonic() - t0
    if not all((Path(out) / f).exists() for f in RESULTS):
        tail = "\n".join(log.strip().splitlines()[-25:])
        raise TinyTrainError(f"the simulated fleet did not finish; Flower's last lines:\n{tail}")
    info = json.loads((Path(out) / RESULTS[1]).read_text())
    with np.load(Path(out) / RESULTS[0]) as f:
        final = {k: f[k] for k in f.files}
    per_round: dict[int, dict[str, np.ndarray]] = {}
    if keep_rounds and (Path(out) / ROUND_TENSORS).exists():
        with np.load(Path(out) / ROUND_TENSORS) as f:
            for k in f.files:
                r, name = k.split("/", 1)
                per_round.setdefault(int(r), {})[name] = f[k]
    return FleetRun(info["rounds"], info["plans"], final, seconds, log, per_round,
                    info.get("copies", {}))


def preflight_received(builds: list[Path], share: str) -> None:
    """The survey's check of received tensors (server_app.check_received) on the builds
    themselves, before Flower starts: a mistake is a clear error, not a failed run."""
    infos = {Path(b): load_program_info(Path(b)) for b in builds}
    kinds = {t.name: Trained(t.name, t.shape, t.dtype, t.scale)
             for info in infos.values() for t in trained_tensors(info)}
    check_received(kinds, {f"the build {b}": received_tensors(info)
                           for b, info in infos.items()}, share)


def _stop(home: Path) -> None:
    """Stop the processes the run left behind (they name this FLWR_HOME in their command)."""
    out = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout
    for pid in (int(p) for p in out.split()):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
