"""PyTorch training through an int8 build's forward: bench/auto_plan.py's MobileNetV2 with every
tensor the int8 build rounds fake-quantised at the build's own scales, zero points and clamps.

It separates what int8 costs the model from what it costs the trainer. A build's int8 forward
rounds its input and every activation to 8 bits, and its weights to the build's grids (the
calibrated per-channel scales, those the plan trains widened by --weight-headroom, the fresh
head's by --new-head). PyTorch here runs that forward (activations rounded with a
straight-through gradient, as the int8 build's backward treats them; the ReLU6 after a conv
masks at 0 and 6, as the build's clamp mask does) and trains the plan's parameters in fp32,
continuously: updates with no rounding at all, the best any int8 update rule could do through
that forward. The loss reads the head's unrounded logits, as the build's does
(ops/dense_logits_q8.py); held-out accuracy is measured through the whole int8 forward,
logits rounded, as `tinytrain run --eval` measures the device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tinytrain.ir import Graph
from tinytrain.passes.pipeline import Options
from tinytrain.passes.update_plan import parse_plan
from tinytrain.passes.weight_headroom import widen_trained_weights

Quant = tuple[float, int]  # (scale, zero point) of an int8 tensor


def fake_quant(x: torch.Tensor, q: Quant, lo: int = -128, hi: int = 127) -> torch.Tensor:
    """x rounded to the int8 grid (scale, zp), clamped to [lo, hi]; gradient straight through."""
    s, zp = q
    r = (torch.clamp(torch.round(x / s) + zp, lo, hi) - zp) * s
    return x + (r - x).detach()


def widened(g0: Graph, spec: str, opts: Options) -> Graph:
    """The int8 graph whose forward the build of plan `spec` runs: `g0` with the weights the
    plan trains on their widened grids (passes/weight_headroom.py)."""
    return widen_trained_weights(g0, parse_plan(g0, spec), opts.weight_headroom)


def build_quant(g0: Graph, spec: str, opts: Options) -> dict:
    """What the int8 build of plan `spec` rounds, from its imported graph `g0` (quantised,
    --new-head applied): per conv/dense layer in order its real weight and bias and its
    output's (scale, zp, clamp); the residual adds' and the pool's output quantisation; the
    input's."""
    g = widened(g0, spec, opts)
    layers = []
    for n in g.nodes:
        if n.op not in ("conv2d_q8", "dense_q8"):
            continue
        w, b, a = g.t(n.inputs[1]), g.t(n.inputs[2]), n.attrs
        ws = np.asarray(w.quant.scale, np.float32).reshape((-1,) + (1,) * (w.data.ndim - 1))
        layers.append({"w": w.data.astype(np.float32) * ws,
                       "b": (b.data.astype(np.float64) * np.asarray(b.quant.scale)
                             ).astype(np.float32),
                       "y": (a["y_scale"], a["y_zp"]), "clamp": (a["act_min"], a["act_max"])})
    adds = [g.t(n.outputs[0]).quant for n in g.nodes if n.op == "add_q8"]
    pool = next(n for n in g.nodes if n.op == "mean_q8").attrs
    x = g.t(g.inputs[0]).quant
    return {"layers": layers, "adds": [(q.scale[0], q.zero_point[0]) for q in adds],
            "pool": (pool["out_scale"], pool["out_zp"]), "input": (x.scale[0], x.zero_point[0])}


class Int8Forward(nn.Module):
    """A bench MobileNetV2 (bn=False) run as the int8 build runs it (see the module doc);
    `round_logits`: the head's output rounded too (inference), else left real (the loss).

    Two what-ifs for bench/act_precision.py, read from `quant` (with_activations): the
    activations (every conv, add and pool output; not the input sample, nor the logits) on a
    grid 2^(bits - 8) times finer over the same range ("act_bits": 16 is TFLite's 16x8 mode's
    resolution), and rounded stochastically while training ("act_rounding": "stochastic";
    inference, under no_grad, rounds to nearest)."""

    def __init__(self, net: nn.Module, quant: dict) -> None:
        super().__init__()
        self.net, self.q = net, quant
        self.round_logits = False
        self.finer = 2 ** (quant.get("act_bits", 8) - 8)
        self.stochastic = quant.get("act_rounding", "nearest") == "stochastic"
        self.mods = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        assert len(self.mods) == len(quant["layers"])
        with torch.no_grad():
            for m, ly in zip(self.mods, quant["layers"], strict=True):
                m.weight.copy_(torch.tensor(ly["w"]).reshape(m.weight.shape))
                m.bias.copy_(torch.tensor(ly["b"]))
        for m, ly in zip(self.mods[:-1], quant["layers"], strict=False):
            m.register_forward_hook(lambda _m, _i, y, ly=ly: self.act(y, ly["y"], *ly["clamp"]))
        head = quant["layers"][-1]
        self.mods[-1].register_forward_hook(
            lambda _m, _i, y: fake_quant(y, head["y"], *head["clamp"]) if self.round_logits else y)
        skips = [b for b in net.features if getattr(b, "skip", False)]
        assert len(skips) == len(quant["adds"])
        for b, q in zip(skips, quant["adds"], strict=True):
            b.forward = lambda x, b=b, q=q: self.act(x + b.body(x), q)

    def act(self, x: torch.Tensor, q: Quant, lo: int = -128, hi: int = 127) -> torch.Tensor:
        """An activation rounded as the what-ifs say (as fake_quant by default)."""
        f = self.finer
        s, zp = q
        grid = (float(s) / f, int(zp) * f)
        if self.stochastic and torch.is_grad_enabled():
            return stochastic_quant(x, grid, lo * f, hi * f + f - 1)
        return fake_quant(x, grid, lo * f, hi * f + f - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.net.features(fake_quant(x, self.q["input"]))
        p = self.act(nn.functional.adaptive_avg_pool2d(f, 1), self.q["pool"])
        return self.net.fc(torch.flatten(p, 1))


def stochastic_quant(x: torch.Tensor, q: Quant, lo: int, hi: int) -> torch.Tensor:
    """fake_quant rounding down or up with the probabilities that make it exact on average."""
    s, zp = q
    r = (torch.clamp(torch.floor(x / s + torch.rand_like(x)) + zp, lo, hi) - zp) * s
    return x + (r - x).detach()


def with_activations(quant: dict, bits: int = 8, rounding: str = "nearest") -> dict:
    """`quant` with Int8Forward's what-ifs set (act_bits, act_rounding)."""
    if bits < 8 or rounding not in ("nearest", "stochastic"):
        raise ValueError(f"activations of {bits} bits rounded {rounding!r}")
    return {**quant, "act_bits": bits, "act_rounding": rounding}
