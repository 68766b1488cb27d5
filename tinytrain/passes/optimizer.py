"""Append the update nodes (phase "update", run once per batch) for every trainable param:
SGD (fp32 or int8), or Adam for fp32 parameters (--optimizer adam)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import CompileError, OptionError
from tinytrain.ir import OPT_STATE, Graph, Node, Tensor
from tinytrain.ops.adam import MOMENTS
from tinytrain.ops.adam import STEP as ADAM_STEP
from tinytrain.quant.update import ROUNDINGS

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class SGDConfig:
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch: int = 1
    qas: bool = True  # int8: quantisation-aware scaling of weight and bias steps
    rounding: str = "stochastic"  # int8: stochastic | shadow | master | truncate (quant/update)
    seed: int = 0  # int8 stochastic rounding stream
    optimizer: str = "sgd"  # sgd | adam (fp32 parameters only; PyTorch's torch.optim.Adam)
    beta1: float = 0.9  # Adam's moment decays and denominator term (PyTorch's defaults)
    beta2: float = 0.999
    eps: float = 1e-8

    def check(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise OptionError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, "
                              f"got '{self.optimizer}'")
        if self.optimizer == "adam":
            if self.momentum:
                raise OptionError("--momentum is SGD's; Adam's first moment decays at "
                                  "--beta1")
            for name, b in (("beta1", self.beta1), ("beta2", self.beta2)):
                if not 0 <= b < 1:
                    raise OptionError(f"--{name} must be in [0, 1), got {b}")
            if not self.eps > 0:
                raise OptionError(f"--eps must be positive, got {self.eps}")
        if not self.lr > 0:
            raise OptionError(f"--lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise OptionError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise OptionError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if self.batch < 1:
            raise OptionError(f"--batch must be >= 1, got {self.batch}")
        if self.rounding not in ROUNDINGS:
            raise OptionError(f"--rounding must be one of {', '.join(ROUNDINGS)}, "
                              f"got '{self.rounding}'")


def q8_steps(p: Tensor, cfg: SGDConfig) -> tuple[float, ...]:
    """Per-output-channel step constants of an int8 weight or int32 bias.

    With QAS the step in LSBs is lr * dL/dW_real / scale (TTE's G * s^-2 applied to the
    integer parameter); without it, lr * dL/dq = lr * scale * dL/dW_real. They stay float32
    (TTE cast them to int32, where they overflowed); a non-finite one is a compile error.
    """
    if p.quant is None:
        raise CompileError(f"int8 parameter {p.name} has no quantisation scale")
    n = p.shape[0]
    scales = np.asarray(p.quant.scale, np.float64)
    if scales.size == 1:
        scales = np.repeat(scales, n)
    if scales.size != n or not np.all(scales > 0):
        raise CompileError(f"parameter {p.name}: need {n} positive scales, got {p.quant.scale}")
    steps = cfg.lr / scales if cfg.qas else cfg.lr * scales
    s32 = steps.astype(np.float32)
    if not np.all(np.isfinite(s32)) or np.any(s32 == 0):
        bad = int(np.argmax(~np.isfinite(s32) | (s32 == 0)))
        raise CompileError(
            f"parameter {p.name}: the update constant for channel {bad} (lr {cfg.lr}, scale "
            f"{scales[bad]:.3g}) is not representable in float32; use a different --lr")
    return tuple(float(v) for v in s32)


def _partial(g: Graph, name: str) -> dict:
    """`channels` of a partial update (None: all) and, for a depthwise weight, the axis they
    index (`channel_axis` 0; absent: the last, input-channel axis)."""
    out = {"channels": g.meta.get("partial_channels", {}).get(name)}
    if name in g.meta.get("partial_axis", {}):
        out["channel_axis"] = g.meta["partial_axis"][name]
    return out


def add_optimizer(g: Graph, cfg: SGDConfig) -> Graph:
    cfg.check()
    tensors, nodes = [], []
    step_counter = Tensor("rng_step", (1,), OPT_STATE, dtype="s32")
    masters: dict[str, str] = {}  # weight -> its shadow, read whole by --rounding master
    for p in g.params(trainable=True):
        gname = f"{p.name}_grad"
        if gname not in g.tensors:
            continue  # nothing reaches this parameter's gradient
        if p.dtype in ("s8", "s32"):
            if cfg.optimizer != "sgd":
                raise OptionError(f"--optimizer {cfg.optimizer} needs fp32 parameters; "
                                  f"{p.name} is {'int8' if p.dtype == 's8' else 'int32'} "
                                  "(int8 training uses plain SGD with quantisation-aware "
                                  "scaling): build the float model, or use --optimizer sgd")
            if cfg.momentum or cfg.weight_decay:
                raise OptionError("int8 training uses plain SGD: --momentum and "
                                  "--weight-decay must be 0")
            if step_counter not in tensors:
                tensors.append(step_counter)
            inputs = [p.name, gname, step_counter.name]
            mode = ROUNDINGS[cfg.rounding]
            if mode == "shadow" and p.dtype == "s8":
                sh = Tensor(f"{p.name}_shadow", g.t(gname).shape, OPT_STATE, dtype="u8")
                tensors.append(sh)
                inputs.append(sh.name)
                if cfg.rounding == "master" and sh.shape == p.shape:
                    masters[p.name] = sh.name
            attrs = {"step": q8_steps(p, cfg), "mode": mode, "scale": 1.0 / cfg.batch,
                     "salt": zlib.crc32(f"{cfg.seed}:{p.name}".encode()), **_partial(g, p.name)}
            nodes.append(Node(f"{p.name}_sgd", "sgd_q8", tuple(inputs), (p.name,), attrs,
                              phase="update"))
            continue
        if cfg.optimizer == "adam":
            if ADAM_STEP not in [t.name for t in tensors]:
                tensors.append(Tensor(ADAM_STEP, (1,), OPT_STATE, dtype="s32"))
            moments = [Tensor(p.name + k, g.t(gname).shape, OPT_STATE) for k in MOMENTS]
            tensors += moments
            attrs = {"lr": cfg.lr, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps,
                     "wd": cfg.weight_decay, "scale": 1.0 / cfg.batch, **_partial(g, p.name)}
            nodes.append(Node(f"{p.name}_adam", "adam",
                              (p.name, gname, *(t.name for t in moments), ADAM_STEP),
                              (p.name,), attrs, phase="update"))
            continue
        inputs = [p.name, gname]
        if cfg.momentum:  # shaped like the gradient: a partial update keeps state for its slice
            m = Tensor(f"{p.name}_momentum", g.t(gname).shape, OPT_STATE)
            tensors.append(m)
            inputs.append(m.name)
        attrs = {"lr": cfg.lr, "momentum": cfg.momentum, "wd": cfg.weight_decay,
                 "scale": 1.0 / cfg.batch, **_partial(g, p.name)}
        nodes.append(Node(f"{p.name}_sgd", "sgd", tuple(inputs), (p.name,), attrs, phase="update"))
    meta = {**g.meta, "sgd": {"lr": cfg.lr, "momentum": cfg.momentum,
                              "weight_decay": cfg.weight_decay, "batch": cfg.batch,
                              "qas": cfg.qas, "rounding": cfg.rounding, "seed": cfg.seed}}
    if cfg.optimizer == "adam":  # (an SGD build's info stays as it was: no optimizer key)
        meta["sgd"] |= {"optimizer": "adam", "beta1": cfg.beta1, "beta2": cfg.beta2,
                        "eps": cfg.eps}
    tick = [Node("adam_tick", "adam_tick", (ADAM_STEP,), (ADAM_STEP,), phase="update")] \
        if any(n.op == "adam" for n in nodes) else []
    nodes = tick + nodes  # the step's number first: every update reads t
    if masters:
        meta["master_read"] = masters
    return g.with_tensors(tensors).replace(nodes=_read_masters(g.nodes, masters) + tuple(nodes),
                                           meta=meta)


# ops that can read a weight's master (its shadow appended as their last input, attr master)
MASTER_READERS = ("conv2d_q8", "dense_q8", "dense_logits_q8", "conv2d_backward_input_q8",
                  "dense_backward_input_q8")


def _read_masters(nodes: tuple[Node, ...], masters: dict[str, str]) -> tuple[Node, ...]:
    """--rounding master: the forward and input gradient of a weight trained whole read the
    16-bit master 256 w + s instead of w, its floor. A weight trained in part keeps the floored
    read (its shadow holds just the trained slice)."""
    out = []
    for n in nodes:
        w = n.inputs[1] if len(n.inputs) > 1 else None
        if n.op in MASTER_READERS and w in masters:
            n = Node(n.name, n.op, n.inputs + (masters[w],), n.outputs,
                     {**n.attrs, "master": True}, n.phase)
        out.append(n)
    return tuple(out)
