"""Two faithful ways to fine-tune a candidate plan and score it on held-out samples.

- `Simulator`: the numpy interpreter (tinytrain.ops.interp), the oracle the C code is tested
  against (fp32 to float rounding, int8 bit-exact forward and the same seeded rounding). Every
  candidate starts from the same pretrained weights, so the forward ops that read no trainable
  parameter compute the same values for a sample under every plan: they run once per sample,
  their outputs at the frozen/trained boundary are kept, and each candidate runs only its
  trained tail.
- `HostRunner`: the candidate compiled as the host C program (gcc: seconds) and driven over
  its pipe, about 1.5 ms per sample whatever the plan.

Measured (2 shared cores): the digits CNN simulates at ~1.5 ms per sample for the whole
network, so a candidate costs ~1 s against ~5 s of gcc: all simulated. The MobileNetV2-style
int8 net costs ~0.1 s per sample in numpy for its forward alone and ~80 ms even for its last 9
layers (numpy's int8 conv loops), against 7-11 s for a host build: all compiled. `measure_all`
decides per candidate: the simulator times PROBE_SAMPLES samples (prefix and tail) and
declines when its projection exceeds the host build's time (measured on the first one), and
host candidates build and run two at a time.

Both see the same samples in the same order (tinytrain.device.train.sample_order) and apply a
partial batch at each epoch's end, as `tinytrain run` does. A job may ask for several sample
orders (seeds): fine-tuning is chaotic enough that one order can rank two plans either way, so
candidates are validated on the mean of a few. Each order is its own Measurement, keyed by
`run_key`; a host candidate compiles once for all of them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tinytrain.boards import load_board
from tinytrain.device.train import sample_order
from tinytrain.errors import TinyTrainError
from tinytrain.ir import CONST, INPUT, PARAM, Graph, Node
from tinytrain.ops import interp
from tinytrain.passes.pipeline import Options
from tinytrain.quant.fixedpoint import dequantize, quantize

from .planner import compile_plan

PROBE_SAMPLES = 4  # training samples timed before the simulator projects its total
HOST_COMPILE_GUESS_S = 8.0  # a host build's gcc time before one was measured (MobileNetV2-size C)
HOST_SAMPLE_S = 0.002  # a host program's train or infer round trip, generously
HOST_WORKERS = min(2, os.cpu_count() or 1)  # host builds at once (the 2 cores)


@dataclass(frozen=True)
class Split:
    """Fine-tuning and held-out samples, x in the IR layout as real values."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray
    epochs: int
    seed: int

    @property
    def steps(self) -> int:
        return self.epochs * len(self.x_train)


Job = tuple[str, bool, int, tuple[int, ...]]  # (spec, train, share, sample-order seeds)


def run_key(spec: str, seed: int, base_seed: int) -> str:
    """The cache key of `spec` fine-tuned with sample order `seed` (the analysis's own order,
    `base_seed`, keeps the bare spec)."""
    return spec if seed == base_seed else f"{spec} @order={seed}"


@dataclass(frozen=True)
class Measurement:
    score: float  # held-out accuracy (ce), or minus the mean squared error (mse)
    loss: float  # held-out mean loss
    seconds: float
    engine: str  # "sim" or "host"


def held_out_score(out: np.ndarray, y: np.ndarray, loss: str) -> tuple[float, float]:
    """(score, mean loss) of outputs (N, ...) against labels or targets."""
    out = out.reshape(len(out), -1).astype(np.float64)
    if loss == "ce":
        z = out - out.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        nll = -logp[np.arange(len(y)), y.astype(np.int64)]
        return float((out.argmax(axis=1) == y).mean()), float(nll.mean())
    mse = float(((out - y.reshape(len(y), -1)) ** 2).mean())
    return -mse, mse


def _feed(g: Graph, x: np.ndarray) -> np.ndarray:
    """A real-valued sample as the model's input buffer holds it (interp.train's quantisation)."""
    t = g.t(g.inputs[0])
    if t.dtype == "s8":
        assert t.quant is not None
        x = quantize(x, t.quant.scale[0], t.quant.zero_point[0])
    return np.asarray(x).reshape(t.shape)


def _frozen_prefix(g: Graph) -> tuple[list[Node], list[Node]]:
    """Forward nodes that read only the sample and frozen values, and the rest."""
    known = {n for n, t in g.tensors.items()
             if t.kind in (INPUT, CONST) or (t.kind == PARAM and not t.trainable)}
    prefix, tail = [], []
    for n in g.nodes:
        if n.phase == "forward" and all(i in known for i in n.inputs):
            prefix.append(n)
            known.update(n.outputs)
        else:
            tail.append(n)
    return prefix, tail


class Simulator:
    """Fine-tunes candidates with the numpy interpreter, sharing their frozen prefixes."""

    def __init__(self, g0: Graph, opts: Options, split: Split) -> None:
        # what a plan learns does not depend on what it could receive (the memory oracle
        # prices --receive and rules out plans that cannot receive it)
        self.g0, self.opts, self.split = g0, replace(opts, receive=None), split
        self.x_all = np.concatenate([split.x_train, split.x_eval])
        self.values: dict[tuple, np.ndarray] = {}  # boundary tensor over all samples
        self.slow_tail: int | None = None  # tail length found too slow to simulate

    def _boundary(self, g: Graph, prefix: list[Node], tail: list[Node]) -> dict[str, np.ndarray]:
        made = {o: n for n in prefix for o in n.outputs}
        need = sorted({i for n in tail for i in n.inputs if i in made} |
                      {o for o in g.outputs if o in made})
        key = {name: (name, made[name].op, made[name].inputs) for name in need}
        missing = [name for name in need if key[name] not in self.values]
        if missing:
            sub = g.replace(nodes=tuple(prefix))
            env = interp.initial_state(g)
            cols: dict[str, list[np.ndarray]] = {name: [] for name in missing}
            for x in self.x_all:
                interp.run(sub, env, {g.inputs[0]: _feed(g, x)}, phases=("forward",))
                for name in missing:
                    cols[name].append(np.array(env[name]))
            for name in missing:
                self.values[key[name]] = np.stack(cols[name])
        return {name: self.values[key[name]] for name in need}

    def run(self, spec: str, limit_s: float | None = None, train: bool = True,
            share: int = 1, orders: tuple[int, ...] = ()) -> dict[int, Measurement] | None:
        """Fine-tune under plan `spec` (unless not `train`) once per sample-order seed in
        `orders` (default: the split's) and score each, or None when the projected time passes
        `limit_s`. The projection times PROBE_SAMPLES samples; the frozen prefix's cost counts
        1/`share`: that many candidates will reuse its outputs."""
        orders = orders or (self.split.seed,)
        g, _ = compile_plan(self.g0, self.opts, spec, memory_passes=False)
        prefix, tail_nodes = _frozen_prefix(g)
        tail = g.replace(nodes=tuple(tail_nodes))
        if limit_s is not None and not self._affordable(g, prefix, tail, limit_s, share,
                                                        len(orders)):
            return None
        bound = self._boundary(g, prefix, tail_nodes)
        return {seed: self._run_order(g, tail, bound, train, seed) for seed in orders}

    def _run_order(self, g: Graph, tail: Graph, bound: dict[str, np.ndarray], train: bool,
                   seed: int) -> Measurement:
        t0 = time.perf_counter()
        env = interp.initial_state(g)
        s, n = self.split, len(self.split.x_train)
        pending = 0
        for epoch in range(s.epochs if train else 0):
            for i in sample_order(n, epoch, True, seed):
                env.update({k: v[i] for k, v in bound.items()})
                _, pending = interp.train(tail, env, s.x_train[i], np.asarray([s.y_train[i]]),
                                          pending)
            if pending:  # a partial last batch, applied as `tinytrain run` does
                interp.run(tail, env, {}, phases=("update",))
                pending = 0
        outs = []
        for j, x in enumerate(s.x_eval):
            env.update({k: v[n + j] for k, v in bound.items()})
            interp.run(tail, env, {g.inputs[0]: _feed(g, x)}, phases=("forward",))
            outs.append(_real(g, env[g.outputs[0]]))
        score, loss = held_out_score(np.stack(outs), s.y_eval, g.meta.get("loss", "ce"))
        return Measurement(score, loss, time.perf_counter() - t0, "sim")

    def _affordable(self, g: Graph, prefix: list[Node], tail: Graph, limit_s: float,
                    share: int, orders: int = 1) -> bool:
        """Time the prefix and the trained tail on a few samples (on scratch state) and
        project the whole run. A tail too slow by itself is remembered by its node count:
        a longer tail of the same model is refused without probing."""
        if self.slow_tail is not None and len(tail.nodes) >= self.slow_tail:
            return False
        s = self.split
        sub = g.replace(nodes=tuple(prefix))
        env = interp.initial_state(g)
        t_prefix = t_tail = 0.0
        pending = 0
        k = min(PROBE_SAMPLES, len(s.x_train))
        for i in range(k):
            t1 = time.perf_counter()
            interp.run(sub, env, {g.inputs[0]: _feed(g, s.x_train[i])}, phases=("forward",))
            t2 = time.perf_counter()
            _, pending = interp.train(tail, env, s.x_train[i], np.asarray([s.y_train[i]]),
                                      pending)
            t_prefix, t_tail = t_prefix + t2 - t1, t_tail + time.perf_counter() - t2
        tail_s = t_tail / k * (s.steps + len(s.x_eval))
        if tail_s > limit_s:  # too slow even for one order
            self.slow_tail = min(self.slow_tail or len(tail.nodes), len(tail.nodes))
            return False
        tail_s *= orders
        if tail_s > limit_s:
            return False
        cached = self._cached(g, prefix, list(tail.nodes))
        prefix_s = 0.0 if cached or not prefix else t_prefix / k * len(self.x_all) / share
        return prefix_s + tail_s <= limit_s

    def _cached(self, g: Graph, prefix: list[Node], tail: list[Node]) -> bool:
        made = {o: n for n in prefix for o in n.outputs}
        need = {i for n in tail for i in n.inputs if i in made}
        return all((m, made[m].op, made[m].inputs) in self.values for m in need)

def _real(g: Graph, out: np.ndarray) -> np.ndarray:
    t = g.t(g.outputs[0])
    if t.dtype == "s8" and t.quant is not None:
        return dequantize(out, t.quant.scale[0], t.quant.zero_point[0])
    return np.asarray(out, np.float32)


class HostRunner:
    """Fine-tunes candidates as compiled host programs (what `tinytrain build --board host`
    makes, from the same passes)."""

    def __init__(self, g0: Graph, opts: Options, split: Split) -> None:
        self.g0, self.split = g0, split
        self.opts = replace(opts, board="host", receive=None)  # as the simulator's
        self.compile_s: float | None = None  # the last build's gcc time

    def estimate(self, orders: int = 1) -> float:
        s = self.split
        return ((self.compile_s or HOST_COMPILE_GUESS_S)
                + HOST_SAMPLE_S * (s.steps + len(s.x_eval)) * orders)

    def run(self, spec: str, train: bool = True,
            orders: tuple[int, ...] = ()) -> dict[int, Measurement]:
        """Build `spec` once and fine-tune a fresh program (the compiled-in pretrained weights)
        per sample-order seed."""
        from tinytrain.codegen.program import PROGRAM_JSON, program_info
        from tinytrain.codegen.render import render, write_files
        from tinytrain.device.runner import HostProgram
        from tinytrain.device.toolchain import compile_project

        t0 = time.perf_counter()
        board = load_board("host")
        g, plan = compile_plan(self.g0, self.opts, spec)
        s = self.split
        out: dict[int, Measurement] = {}
        with tempfile.TemporaryDirectory(prefix="tt-autoplan-") as tmp:
            d = Path(tmp)
            write_files(render(g, plan, board, kernels=self.opts.kernels), d)
            (d / PROGRAM_JSON).write_text(json.dumps(program_info(g, board)))
            t1 = time.perf_counter()
            compile_project(d, board)
            self.compile_s = time.perf_counter() - t1
            build_s = time.perf_counter() - t0
            for seed in orders or (s.seed,):
                t2 = time.perf_counter()
                with HostProgram(d) as p:
                    for epoch in range(s.epochs if train else 0):
                        for i in sample_order(len(s.x_train), epoch, True, seed):
                            p.train(s.x_train[i], np.asarray(s.y_train[i]).reshape(-1))
                        p.apply_update()
                    y = np.stack([p.infer(x) for x in s.x_eval])
                score, loss = self._score(g, y)
                out[seed] = Measurement(score, loss, build_s + time.perf_counter() - t2, "host")
                build_s = 0.0  # the build's time counts once
        return out

    def _score(self, g: Graph, out: np.ndarray) -> tuple[float, float]:
        s = self.split
        probs = g.meta.get("output_activation") == "softmax" or \
            g.meta.get("infer_output") not in (None, g.outputs[0])  # a TFLite SOFTMAX kept
        if probs and g.meta.get("loss") == "ce":  # the device answers probabilities
            out = np.log(np.maximum(out, np.finfo(np.float32).tiny))
        return held_out_score(out, s.y_eval, g.meta.get("loss", "ce"))


class Engines:
    """The cheaper faithful engine per candidate (see the module docstring)."""

    def __init__(self, g0: Graph, opts: Options, split: Split, engine: str = "auto") -> None:
        self.sim = Simulator(g0, opts, split)
        self.host = HostRunner(g0, opts, split)
        self.engine = engine
        self.host_ok = engine != "sim"

    def key(self, spec: str, seed: int) -> str:
        return run_key(spec, seed, self.sim.split.seed)

    def measure(self, spec: str, train: bool = True, share: int = 1) -> Measurement:
        """`share`: candidates (this one included) that start training at the same layer."""
        return self.measure_all([(spec, train, share, ())])[spec]

    def measure_all(self, jobs: list[Job],
                    done: Callable[[str, Measurement], None] | None = None
                    ) -> dict[str, Measurement]:
        """Measure (spec, train, share, orders) jobs, keyed by `run_key`: the simulator where
        it is cheaper, one after the other (numpy holds the GIL), then the rest as host
        builds, HOST_WORKERS at a time (gcc and the host programs are other processes)."""
        out: dict[str, Measurement] = {}

        def record(spec: str, ms: dict[int, Measurement]) -> None:
            for seed, m in ms.items():
                out[self.key(spec, seed)] = m
                if done:
                    done(self.key(spec, seed), m)

        host_jobs = []
        for spec, train, share, orders in jobs:
            ms = None
            if self.engine != "host":
                limit = self.host.estimate(len(orders) or 1) if self.host_ok else None
                ms = self.sim.run(spec, limit, train, share, orders)
            if ms is None:
                host_jobs.append((spec, train, orders))
            else:
                record(spec, ms)
        with ThreadPoolExecutor(max_workers=HOST_WORKERS) as pool:
            for (spec, _, _), ms in zip(host_jobs, pool.map(lambda j: self._host(*j),
                                                             host_jobs)):
                record(spec, ms)
        return out

    def _host(self, spec: str, train: bool, orders: tuple[int, ...]) -> dict[int, Measurement]:
        if self.host_ok:
            try:
                return self.host.run(spec, train, orders)
            except TinyTrainError:  # no C compiler here: the simulator, however long it takes
                self.host_ok = False
        ms = self.sim.run(spec, None, train, 1, orders)
        assert ms is not None
        return ms
