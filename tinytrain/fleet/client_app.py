"""The Flower ClientApp: one tinytrain device (host build, QEMU twin or board) of a fleet.

Flower runs it per message in a fresh process (deployment) or any worker (simulation), so
nothing stays open between rounds: the device's training state (momentum, int8 shadows, the
rounding counter) travels in the node's `context.state`, and so does its SCAFFOLD control
variate (fleet/correction.py). Where it finds its device:

- node config (deployment, `flower-supernode --node-config "build='out/dev' data='x.npz'"`):
  `build`, `data`, and `port` (a board, or `socket://host:port` for a twin's UART) or
  `qemu=true` (start the build's twin);
- run config (simulation): `builds` (comma-separated device classes; node k uses class
  k mod n), `data` (the pooled samples, split by `partition` over the simulated nodes
  with Flower's `partition-id` / `num-partitions`).

A failure (link error, a twin that dies, bad data) raises, which Flower reports as this
node's failed reply; the server's strategy aggregates the others.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from tinytrain.errors import OptionError
from tinytrain.fleet import records as rec
from tinytrain.fleet.correction import Correction
from tinytrain.fleet.local import Node, describe, train_round
from tinytrain.fleet.schedule import device_lr
from tinytrain.fleet.tensors import received_tensors

app = ClientApp()


def node_of(context: Context) -> Node:
    """The Node this context describes (see the module docstring)."""
    nc, rc = context.node_config, context.run_config
    epochs, seed = int(rc.get("local-epochs", 1)), int(rc.get("seed", 0))
    if "build" in nc:
        return Node(Path(str(nc["build"])), Path(str(nc["data"])), seed=seed, epochs=epochs,
                    qemu=bool(nc.get("qemu", False)),
                    port=str(nc["port"]) if nc.get("port") else None)
    builds = [b.strip() for b in str(rc.get("builds", "")).split(",") if b.strip()]
    if not builds or not str(rc.get("data", "")):
        raise OptionError("a simulated fleet needs `builds` (the device classes' build "
                          "directories, comma-separated) and `data` (the pooled .npz) in "
                          "its run config: flwr run . --run-config \"builds='...' data='...'\"")
    part, parts = int(nc.get("partition-id", 0)), int(nc.get("num-partitions", 1))
    return Node(Path(builds[part % len(builds)]), Path(str(rc["data"])), part=part,
                parts=parts, partition=str(rc.get("partition", "iid")), seed=seed,
                epochs=epochs)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """What this device trains, its starting tensors and what it can be sent (before the
    first round)."""
    node = node_of(context)
    plan, params = describe(node)
    content = rec.plan_content({t.name: params[t.name] for t in plan}, plan,
                               received_tensors(node.info()))
    return Message(content=content, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    node = node_of(context)
    tensors = rec.from_arrays(msg.content[rec.ARRAYS])
    state = (rec.from_arrays(context.state[rec.STATE]) if rec.STATE in context.state
             else None)
    cfg = msg.content[rec.CONFIG] if rec.CONFIG in msg.content else {}
    server_round = int(cfg.get("server-round", 0))
    corr = Correction(str(cfg.get("correction", "none")), float(cfg.get("mu", 0.0)),
                      float(cfg.get("alpha", 1.0)))
    control = rec.from_arrays(msg.content[rec.CONTROL]) if rec.CONTROL in msg.content else None
    own = (rec.from_arrays(context.state[rec.OWN_CONTROL]) if rec.OWN_CONTROL in context.state
           else None)
    lr = device_lr(cfg, node.info())  # the server's schedule, if it has one
    epochs = int(cfg["local-epochs"]) if "local-epochs" in cfg else None
    r = train_round(node, tensors, state, server_round, corr, control, own, lr, epochs)
    if r.state is not None:
        context.state[rec.STATE] = rec.to_arrays(r.state)
    elif rec.STATE in context.state:
        del context.state[rec.STATE]
    if r.control is not None:
        context.state[rec.OWN_CONTROL] = rec.to_arrays(r.control)
    return Message(content=rec.reply_content(r.parts, r.plan, r.samples, r.loss,
                                             r.control_delta), reply_to=msg)

