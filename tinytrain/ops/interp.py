"""A numpy interpreter for IR graphs: runs each node's numpy reference.

It is the oracle for gradient rules (finite differences in tests) and a way to inspect what
the generated C should compute, without compiling anything.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.ops import get_op
from tinytrain.quant.fixedpoint import quantize

NP_TYPES = {"f32": np.float32, "s8": np.int8, "s32": np.int32, "u8": np.uint8}


def initial_state(g: Graph) -> dict[str, np.ndarray]:
    """Params and constants at their compiled-in values; gradients and optimizer state zero."""
    env: dict[str, np.ndarray] = {}
    for t in g.tensors.values():
        if t.kind in (PARAM, CONST):
            env[t.name] = np.array(t.data, NP_TYPES[t.dtype])
        elif t.kind in (PARAM_GRAD, OPT_STATE):
            env[t.name] = np.zeros(t.shape, NP_TYPES[t.dtype])
    return env


def train(g: Graph, env: dict[str, np.ndarray], x: np.ndarray, target: np.ndarray,
          pending: int) -> tuple[float, int]:
    """One sample exactly as the generated tt_train_step: forward, loss, backward, the update
    once a batch is complete, then the stochastic-rounding step counter. Returns (loss,
    samples pending); `x` holds real values (an int8 input is quantised as the C does)."""
    t_in = g.t(g.inputs[0])
    if t_in.dtype == "s8":
        assert t_in.quant is not None
        x = quantize(x, t_in.quant.scale[0], t_in.quant.zero_point[0])
    label = next(t for t in g.tensors.values() if t.kind == "label")
    target = np.asarray(target, NP_TYPES[label.dtype]).reshape(label.shape)
    run(g, env, {t_in.name: np.asarray(x).reshape(t_in.shape), label.name: target})
    pending += 1
    if pending == g.meta.get("sgd", {}).get("batch", 1):
        run(g, env, {}, phases=("update",))
        pending = 0
    if "rng_step" in env:
        env["rng_step"] = env["rng_step"] + 1
    return float(env["loss"].reshape(-1)[0]), pending


def run(g: Graph, env: dict[str, np.ndarray], feeds: Mapping[str, np.ndarray],
        phases: tuple[str, ...] = ("forward", "loss", "backward")) -> dict[str, np.ndarray]:
    """Execute the nodes of `phases` in order; `env` (params, grads, state) is updated in place."""
    env.update({k: np.asarray(v) for k, v in feeds.items()})
    for n in g.nodes:
        if n.phase not in phases:
            continue
        outs = get_op(n.op).forward(n, [env[i] for i in n.inputs])
        for o, v in zip(n.outputs, outs):
            if g.tensors[o].kind == PARAM_GRAD:
                env[o] = env[o] + v  # weight-gradient kernels accumulate
            else:
                env[o] = np.asarray(v).reshape(g.tensors[o].shape)
    return env
