"""SparseFedAvg: Flower's FedAvg for devices that train different parts of one model.

Built-in FedAvg averages whole arrays and refuses replies whose keys differ; a fleet of
tinytrain devices replies with the trained elements of the tensors each device's plan trains
(a bias-only device, a last-layers device, a device training 8 channels of a weight). This
strategy keeps a copy of each tensor per context (fleet/shares.py: devices whose trained
layers feeding it match), sends each device the elements it trains of its copies, averages
every element over the devices of the copy that trained it (aggregate.Master: a float master
copy, requantised to each tensor's scale), and records per round the bytes that crossed the
network and which nodes failed. Each round's train messages carry the server's schedule
(fleet/schedule.py: the devices' lr and local epochs).

A device built with --receive is sent, besides, the fleet's current values of the tensors it
receives (whole): with share all, every class then runs one model.

Only Flower's public API: the strategy's public methods and the Message API (FedAvg's own
reply check is private, so replies are sorted and their failures logged here, as it logs them).

With a drift correction (fleet/correction.py) every train message's config names the method,
mu and alpha, and under SCAFFOLD it carries the server's control variate for the device's
tensors; the replies' changes of the devices' variates update it (aggregate.Controls).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from tinytrain.fleet import records as rec
from tinytrain.fleet.aggregate import Controls, Master
from tinytrain.fleet.correction import Correction
from tinytrain.fleet.schedule import Schedule
from tinytrain.fleet.shares import SEP, Shares
from tinytrain.fleet.tensors import Trained


@dataclass
class RoundLog:
    """One round as the server saw it."""

    round: int
    devices: int = 0
    failed: list[int] = field(default_factory=list)
    samples: int = 0
    loss: float = float("nan")
    downlink: dict[int, int] = field(default_factory=dict)  # node -> tensor bytes sent
    uplink: dict[int, int] = field(default_factory=dict)  # node -> tensor bytes received
    controls: int = 0  # replies that carried a SCAFFOLD control variate's change
    lr: float | None = None  # the devices' learning rate this round (None: their own)
    lr_scale: float | None = None  # or the factor of each build's own lr this round


def split_replies(replies: Iterable[Message]) -> tuple[list[Message], list[Message]]:
    """The replies that carry content and the failed ones, each failure logged with its node
    and reason, in the words FedAvg's aggregate_train uses. Nothing else is checked: each
    device's reply has its own keys (FedAvg's consistency check would refuse them)."""
    if not replies:  # as FedAvg: an empty collection is not logged
        return [], []
    valid: list[Message] = []
    errors: list[Message] = []
    for m in replies:
        (errors if m.has_error() else valid).append(m)
    log(INFO, "aggregate_train: Received %s results and %s failures", len(valid), len(errors))
    for m in errors:
        log(INFO, "\t> Received error in reply from node %d: %s", m.metadata.src_node_id,
            m.error.reason)
    return valid, errors


def _elements(t: Trained | None, a: np.ndarray) -> np.ndarray:
    """What a device receives of a tensor: the elements it trains when every device of its
    copy trains the same ones (share matching), else the whole tensor."""
    return a if t is None else t.part(a)


class SparseFedAvg(FedAvg):
    """FedAvg over sparse, heterogeneous updates (see the module docstring). `plans` maps a
    node to what it trains (from the query before round 1); a node not in it gets every
    tensor. With `keep_rounds`, `history` maps each round to the tensors it sent out after
    aggregating (off by default: a round's copy of a large model is not small)."""

    def __init__(self, master: Master, plans: dict[int, list[Trained]],
                 shares: Shares | None = None, *, keep_rounds: bool = False,
                 correction: Correction | None = None, schedule: Schedule | None = None,
                 received: dict[int, list[Trained]] | None = None, **kw) -> None:
        kw.setdefault("fraction_evaluate", 0.0)
        super().__init__(**kw)
        self.master, self.plans, self.keep_rounds = master, plans, keep_rounds
        self.shares = shares or Shares(plans)
        self.received = received or {}  # node -> what it can be sent (built with --receive)
        self.correction = correction or Correction()
        self.schedule = schedule or Schedule()
        self.controls = Controls(master.kinds, {n: self.shares.keyed(p) for n, p in
                                                plans.items()}) \
            if self.correction.scaffold else None
        self.rounds: list[RoundLog] = []
        self.history: dict[int, dict[str, np.ndarray]] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        messages = list(super().configure_train(server_round, arrays, config, grid))
        sent = rec.from_arrays(arrays)
        work = self.schedule.at(server_round)  # this round's lr and local epochs
        log_ = RoundLog(server_round, lr=work.get("lr"), lr_scale=work.get("lr-scale"))
        out = []
        for m in messages:
            node = m.metadata.dst_node_id
            plan = self.plans.get(node)
            # a node's plan names its tensors; the server holds their copies (fleet/shares.py)
            copies = self.shares.copies(plan) if plan else \
                {n: self.shares.key(None, n) for n in {k.split(SEP)[0] for k in sent}}
            # a matched copy's devices all train the same elements: send only those
            trained = {t.name: t for t in plan or []} if self.shares.share == "matching" \
                else {}
            mine = {n: _elements(trained.get(n), sent[k]) for n, k in copies.items()
                    if k in sent}
            # and the fleet's values of what it receives: each such tensor's one average
            # (server_app.check_received), so the device runs what the classes training it do
            mine |= {t.name: sent[t.name] for t in self.received.get(node, [])
                     if t.name in sent}
            cfg = m.content[rec.CONFIG]
            content = RecordDict({rec.ARRAYS: rec.to_arrays(mine), rec.CONFIG: cfg})
            log_.downlink[node] = rec.payload_bytes(mine)
            for k, v in work.items():
                cfg[k] = v
            if self.correction.on:
                cfg["correction"], cfg["mu"] = self.correction.method, self.correction.mu
                cfg["alpha"] = self.correction.alpha
            if self.controls is not None:
                by_key = self.controls.sent(copies.values())
                c = {n: _elements(trained.get(n), by_key[k]) for n, k in copies.items()
                     if k in by_key}
                content[rec.CONTROL] = rec.to_arrays(c)
                log_.downlink[node] += rec.payload_bytes(c)
            out.append(Message(content=content, message_type=MessageType.TRAIN,
                               dst_node_id=node))
        self.rounds.append(log_)
        return out

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid, errors = split_replies(replies)
        log_ = self.rounds[-1] if self.rounds and self.rounds[-1].round == server_round \
            else RoundLog(server_round)
        got = []
        for m in valid:
            r = rec.read_reply(m.content)
            self.plans[m.metadata.src_node_id] = r.plan
            r = self.shares.reply(r)
            log_.uplink[m.metadata.src_node_id] = rec.payload_bytes(r.parts) + \
                rec.payload_bytes(r.control or {})
            got.append((r, float(m.content[rec.METRICS].get("train-loss", np.nan))))
        log_.failed = sorted(m.metadata.src_node_id for m in errors)
        log_.devices = len(got)
        log_.controls = sum(r.control is not None for r, _ in got)
        log_.samples = sum(r.samples for r, _ in got)
        if log_.samples:
            log_.loss = sum(r.samples * loss for r, loss in got) / log_.samples
        sent = self.master.update(r for r, _ in got)
        if self.controls is not None:
            self.controls.update(r for r, _ in got)
        if self.keep_rounds:
            self.history[server_round] = sent
        log(INFO, "tinytrain round %d: %d devices (%d failed), %d samples, loss %.4f, "
            "uplink %d B, downlink %d B", server_round, log_.devices, len(log_.failed),
            log_.samples, log_.loss, sum(log_.uplink.values()), sum(log_.downlink.values()))
        metrics = MetricRecord({"devices": log_.devices, "failed": len(log_.failed),
                                rec.SAMPLES: log_.samples, "train-loss": log_.loss})
        return rec.to_arrays(sent), metrics
