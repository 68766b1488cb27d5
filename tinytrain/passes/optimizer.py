"""Append the SGD update nodes (phase "update", run once per batch) for every trainable param."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.errors import OptionError
from tinytrain.ir import OPT_STATE, Graph, Node, Tensor


@dataclass(frozen=True)
class SGDConfig:
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch: int = 1

    def check(self) -> None:
        if not self.lr > 0:
            raise OptionError(f"--lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise OptionError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise OptionError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if self.batch < 1:
            raise OptionError(f"--batch must be >= 1, got {self.batch}")


def add_optimizer(g: Graph, cfg: SGDConfig) -> Graph:
    cfg.check()
    tensors, nodes = [], []
    for p in g.params(trainable=True):
        gname = f"{p.name}_grad"
        if gname not in g.tensors:
            continue  # nothing reaches this parameter's gradient
        inputs = [p.name, gname]
        if cfg.momentum:  # shaped like the gradient: a partial update keeps state for its slice
            m = Tensor(f"{p.name}_momentum", g.t(gname).shape, OPT_STATE)
            tensors.append(m)
            inputs.append(m.name)
        attrs = {"lr": cfg.lr, "momentum": cfg.momentum, "wd": cfg.weight_decay,
                 "scale": 1.0 / cfg.batch,
                 "channels": g.meta.get("partial_channels", {}).get(p.name)}
        nodes.append(Node(f"{p.name}_sgd", "sgd", tuple(inputs), (p.name,), attrs, phase="update"))
    meta = {**g.meta, "sgd": {"lr": cfg.lr, "momentum": cfg.momentum,
                              "weight_decay": cfg.weight_decay, "batch": cfg.batch}}
    return g.with_tensors(tensors).replace(nodes=g.nodes + tuple(nodes), meta=meta)
