"""The Flower ServerApp: ask every device what it trains, then run SparseFedAvg.

Run config: `num-rounds`, `fraction-train` (share of nodes per round), `min-nodes` (wait for
this many devices; the default 2), `server-lr` and `server-momentum` (FedAvgM's server step; 1
and 0: FedAvg), or `server-optimizer` adam with `server-lr`, `server-beta1`, `server-beta2` and
`server-tau` (FedAdam: fleet/server_step.py), `server-lr-decay` (the server's lr in round r is
server-lr * server-lr-decay^(r-1)), `out` (a directory: the final tensors
`fleet_final.npz` and the per-round log `fleet_rounds.json`, written atomically), `keep-rounds`
(also write the tensors after every round to `fleet_round_tensors.npz`, keyed `ROUND/TENSOR`),
`correction` (none, scaffold or prox: the devices' drift correction, fleet/correction.py; their
builds need --fleet-correction), `mu` (FedProx's proximal weight), `alpha` (the restricted
softmax's scale of absent classes' logits) and `share` (matching: a tensor is averaged over the
devices that train it in the same context, fleet/shares.py; all: over every device that trains
it, and devices built with --receive are sent the average of what they receive, so every
class runs one model), `lr` and `lr-decay` (the devices' learning rate in round r is
lr * lr-decay^(r-1), set over the link; 0, the default, leaves each device's own) and
`local-epochs` (sent every round).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from tinytrain.errors import DataError
from tinytrain.fleet import records as rec
from tinytrain.fleet.aggregate import Master
from tinytrain.fleet.correction import Correction
from tinytrain.fleet.schedule import Schedule
from tinytrain.fleet.server_step import ServerStep
from tinytrain.fleet.shares import Shares, check_received
from tinytrain.fleet.strategy import SparseFedAvg
from tinytrain.fleet.tensors import Trained

app = ServerApp()
QUERY_TIMEOUT = 600.0  # s: a twin boots and answers in seconds; a board over a slow link more
WAIT_STEP = 1.0  # s between looks for connected nodes


def wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = list(grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() > deadline:
            return nodes
        time.sleep(WAIT_STEP)


def survey(grid: Grid, nodes: list[int], step: ServerStep | None = None,
           share: str = "matching"
           ) -> tuple[Master, dict[int, list[Trained]], Shares, dict[int, list[Trained]]]:
    """The fleet's starting tensors (the union of what the devices train, a copy per
    context: fleet/shares.py), each node's plan, the copies and what each node can be sent
    (built with --receive), from a query to every node."""
    msgs = [Message(content=RecordDict(), message_type=MessageType.QUERY, dst_node_id=n)
            for n in nodes]
    kinds: dict[str, Trained] = {}
    plans: dict[int, list[Trained]] = {}
    received: dict[int, list[Trained]] = {}
    arrays: dict[int, dict[str, np.ndarray]] = {}
    for reply in grid.send_and_receive(msgs, timeout=QUERY_TIMEOUT):
        if reply.has_error():
            continue
        node = reply.metadata.src_node_id
        arrays[node], plans[node] = rec.read_plan(reply.content)
        received[node] = rec.read_received(reply.content)
        for t in plans[node]:
            if t.name in kinds and (kinds[t.name].shape != t.shape
                                    or kinds[t.name].dtype != t.dtype):
                raise DataError(f"two devices disagree on tensor '{t.name}' "
                                f"({kinds[t.name].shape} {kinds[t.name].dtype} and {t.shape} "
                                f"{t.dtype}): federate builds of one model")
            kinds.setdefault(t.name, Trained(t.name, t.shape, t.dtype, t.scale))
    if not plans:
        raise DataError("no device answered the fleet's first query; check that the "
                        "SuperNodes run and can reach their devices")
    check_received(kinds, {f"node {n}": r for n, r in received.items()}, share)
    shares = Shares(plans, share)
    start: dict[str, np.ndarray] = {}
    keyed: dict[str, Trained] = {}
    for node, plan in plans.items():
        for name, key in shares.copies(plan).items():
            start.setdefault(key, arrays[node][name])
            keyed.setdefault(key, kinds[name].renamed(key))
    return Master(start, keyed, step), plans, shares, received


def write_results(out: Path, sent: dict[str, np.ndarray], strategy: SparseFedAvg,
                  plans: dict[int, list[Trained]]) -> None:
    """fleet_final.npz (the fleet's tensors: every copy, fleet/shares.py), fleet_rounds.json
    (the rounds, each node's plan and its copies) and with keep-rounds every round's tensors,
    each written whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".npz")
    os.close(fd)
    np.savez(tmp, **sent)
    os.replace(tmp, out / "fleet_final.npz")
    log = {"rounds": [asdict(r) for r in strategy.rounds],
           "plans": {str(n): [t.to_json() for t in p] for n, p in plans.items()},
           "copies": {str(n): strategy.shares.copies(p) for n, p in plans.items()}}
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(log, fh, indent=1)
    os.replace(tmp, out / "fleet_rounds.json")
    if strategy.history:  # a round number has no '/', so the key splits at the first one
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".npz")
        os.close(fd)
        np.savez(tmp, **{f"{r}/{n}": a for r, t in strategy.history.items() for n, a in t.items()})
        os.replace(tmp, out / "fleet_round_tensors.npz")


def server_step(cfg: Mapping[str, Any]) -> ServerStep:
    """The server's step from the run config (FedAvg when it names none)."""
    d = ServerStep()
    return ServerStep(str(cfg.get("server-optimizer", d.optimizer)),
                      float(cfg.get("server-lr", d.lr)),
                      float(cfg.get("server-momentum", d.momentum)),
                      float(cfg.get("server-beta1", d.beta1)),
                      float(cfg.get("server-beta2", d.beta2)),
                      float(cfg.get("server-tau", d.tau)),
                      float(cfg.get("server-lr-decay", d.lr_decay)))


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    correction = Correction(str(cfg.get("correction", "none")), float(cfg.get("mu", 0.0)),
                            float(cfg.get("alpha", 1.0)))
    min_nodes = int(cfg.get("min-nodes", 2))
    nodes = wait_for_nodes(grid, min_nodes, QUERY_TIMEOUT)
    master, plans, shares, received = survey(grid, nodes, server_step(cfg),
                                             str(cfg.get("share", "matching")))
    strategy = SparseFedAvg(master, plans, shares, received=received,
                            fraction_train=float(cfg.get("fraction-train", 1.0)),
                            min_train_nodes=min(min_nodes, len(plans)),
                            min_available_nodes=min_nodes,
                            keep_rounds=bool(cfg.get("keep-rounds", False)),
                            correction=correction,
                            schedule=Schedule(float(cfg["lr"]) if cfg.get("lr") else None,
                                              float(cfg.get("lr-decay", 1.0)),
                                              int(cfg.get("local-epochs", 1))))
    strategy.start(grid, rec.to_arrays(master.sent()), num_rounds=int(cfg.get("num-rounds", 3)),
                   train_config=ConfigRecord())
    if cfg.get("out"):
        write_results(Path(str(cfg["out"])), master.sent(), strategy, plans)
