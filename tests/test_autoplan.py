"""Automatic update plans (tinytrain.autoplan): the search respects the SRAM budget exactly,
the chosen TOML plan compiles back to the same plan, the engines agree with the C program.

Small analysis settings keep each model's contribution analysis to a few seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.autoplan import AnalysisConfig, AutoOptions, Session, sram_budget
from tinytrain.autoplan.engines import HostRunner, Simulator
from tinytrain.autoplan.planner import MemoryOracle
from tinytrain.autoplan.search import Tried, search
from tinytrain.autoplan.space import Scheme
from tinytrain.boards import load_board
from tinytrain.errors import BuildError, OptionError
from tinytrain.passes.pipeline import Options, compile_model, load_model
from tinytrain.passes.prune import trained_params
from tinytrain.passes.update_plan import parse_plan, plan_to_toml
from tinytrain.reports.report import memory_report

DIGITS_CNN = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SPEECH = ROOT / "tests" / "fixtures" / "micro_speech_quantized.tflite"
FAST = AnalysisConfig(depth=4, epochs=1, max_train=60, max_eval=40, validate=3)
# Simulator vs compiled C on the same held-out samples: fp32 sums in another order (and an
# int8 stochastic rounding seeded alike but applied to such sums) may flip a borderline
# sample's arg-max; no more than this many of them.
ENGINE_FLIPS = 2


def _digits(path: Path, n: int) -> Path:
    from sklearn.datasets import load_digits

    d = load_digits()
    np.savez(path, x=(d.images[:n] / 16.0).astype(np.float32)[:, None],
             y=d.target[:n].astype(np.int64))
    return path


def _speech(path: Path, n: int) -> Path:
    """4 classes of smooth band patterns plus noise, as real values of the int8 input."""
    rng = np.random.default_rng(0)
    g = load_model(SPEECH)
    t = g.t(g.inputs[0])
    protos = rng.uniform(-100, 100, (4, 1960))
    y = rng.integers(0, 4, n)
    q = np.clip(protos[y] + rng.normal(0, 30, (n, 1960)), -128, 127).round()
    x = (q - t.quant.zero_point[0]) * t.quant.scale[0]
    np.savez(path, x=x.astype(np.float32), y=y.astype(np.int64))
    return path


MODELS = {
    "fp32 onnx": (DIGITS_CNN, {}, _digits),
    "onnx --quantize int8": (DIGITS_CNN, {"quantize": "int8"}, _digits),
    "int8 tflite": (SPEECH, {}, _speech),
}


@pytest.fixture(scope="module", params=list(MODELS))
def session(request, tmp_path_factory) -> Session:
    model, extra, make = MODELS[request.param]
    tmp = tmp_path_factory.mktemp("auto")
    data = make(tmp / "d.npz", 100)
    if extra.get("quantize"):
        extra = {**extra, "calib": data}
    opts = Options(board="host", **extra)
    s = Session(model, opts, load_board("host"), AutoOptions(data=data, config=FAST))
    s.contributions()
    return s


def _sram(model: Path, opts: Options, spec: str) -> int:
    """What `tinytrain build` reports for the plan, by its own compile path."""
    from dataclasses import replace

    g, p = compile_model(model, replace(opts, update=spec))
    return memory_report(g, p, load_board(opts.board))["sram_bytes"]["total"]


def test_search_respects_the_budget_exactly(session):
    s, c = session, session.contributions()
    small = s.oracle(Scheme(1).spec).sram
    big = s.oracle(s.space.last(s.space.n_layers).spec).sram
    for budget in np.linspace(small, big, 5).astype(int):
        found = search(s.space, lambda k: c.bias[k], c.gain, s.oracle, int(budget), want=3)
        assert found, budget
        assert [f.predicted for f in found] == sorted((f.predicted for f in found),
                                                      reverse=True)
        for f in found:  # within the budget by the build's own figure, not only the oracle's
            assert f.sram <= budget
            assert _sram(s.model, s.opts, f.scheme.spec) == f.sram
    # the best plan at a roomy budget, then a budget one byte below its exact SRAM
    best = search(s.space, lambda k: c.bias[k], c.gain, s.oracle, big, want=1)[0]
    tight = best.sram - 1
    found = search(s.space, lambda k: c.bias[k], c.gain, s.oracle, tight, want=5)
    assert all(f.scheme != best.scheme and f.sram <= tight for f in found)
    at = search(s.space, lambda k: c.bias[k], c.gain, s.oracle, best.sram, want=1)
    assert at and at[0].predicted >= best.predicted - 1e-12
    # and the whole procedure: every measured candidate, and the chosen one, fit
    plan = s.choose(tight, "test budget")
    assert plan.chosen.sram <= tight
    assert all(k.sram <= tight for k in plan.candidates)
    assert plan.chosen.measured == max(k.measured for k in plan.candidates)


def test_search_finds_the_optimum_of_the_predicted_score(session):
    """Best-first with pruning against brute force over the whole space (small here)."""
    s, c = session, session.contributions()
    import itertools

    dims = [[(i, 0.0)] + [(i, r) for r in s.space.ratios[i]] for i in s.space.weight_layers]
    every = [Scheme(k, tuple(w for w in combo if w[1]))
             for k in s.space.bias_depths for combo in itertools.product(*dims)]
    assert len(every) == s.space.size() <= 2000
    budget = int(np.mean([s.oracle(Scheme(1).spec).sram,
                          s.oracle(s.space.last(s.space.n_layers).spec).sram]))
    fit = [x for x in every if (s.oracle(x.spec).sram or budget + 1) <= budget]
    tried, fresh = Tried(), MemoryOracle(s.g0, s.opts, s.board)
    best = search(s.space, lambda k: c.bias[k], c.gain, fresh, budget, 1, tried=tried)[0]
    assert best.predicted == pytest.approx(max(c.predict(x) for x in fit), abs=1e-12)
    assert fresh(best.scheme.spec).sram <= budget
    assert fresh.calls < len(every) and tried.pruned > 0  # the bounds spared the planner


def test_toml_round_trips_into_update(session, tmp_path):
    s = session
    c = s.contributions()
    specs = {f.scheme.spec for f in search(s.space, lambda k: c.bias[k], c.gain, s.oracle,
                                           10**9, want=4)}
    specs |= {x.spec for x in (Scheme(1), s.space.last(s.space.n_layers))}
    specs |= {Scheme(s.space.weight_base, ((i, r),)).spec for i, rs in s.space.ratios.items()
              for r in rs}
    for k, spec in enumerate(sorted(specs)):
        plan = parse_plan(s.g0, spec)
        path = tmp_path / f"p{k}.toml"
        path.write_text(plan_to_toml(s.g0, plan, header=f"plan {spec}\nsecond line"))
        back = parse_plan(s.g0, str(path))
        assert trained_params(s.g0, back) == trained_params(s.g0, plan), spec
        assert _sram(s.model, s.opts, str(path)) == s.oracle(spec).sram, spec


def test_toml_writes_channel_lists_when_no_ratio_gives_them(tmp_path):
    g = load_model(DIGITS_CNN)
    from tinytrain.passes.update_plan import LayerUpdate, UpdatePlan

    plan = UpdatePlan("x", (LayerUpdate(), LayerUpdate(True, True, (0, 1, 2)),
                            LayerUpdate(True, True, (1, 4)), LayerUpdate(True, False),
                            LayerUpdate(True, True)))
    text = plan_to_toml(g, plan)
    assert "weight = 0.375" in text and "weight = [1, 4]" in text
    (tmp_path / "p.toml").write_text(text)
    assert parse_plan(g, str(tmp_path / "p.toml")).layers == plan.layers


def test_simulator_agrees_with_the_compiled_program(session):
    """The numpy simulation with shared frozen prefixes scores a plan as the C program does,
    for each of several sample orders (one host build serves them all)."""
    s = session
    s.contributions()
    split = s._engines.sim.split
    # a plan with a partial weight (analysis runs only: validation keys carry "@order=")
    spec = max((k for k in s.contributions().runs if "@" not in k), key=len)
    sim = Simulator(s.g0, s.opts, split)
    sim.run(Scheme(1).spec)  # fills the boundary cache with another plan's prefix first
    orders = (split.seed, split.seed + 1)
    a = sim.run(spec, orders=orders)
    b = HostRunner(s.g0, s.opts, split).run(spec, orders=orders)
    assert a is not None and set(a) == set(b) == set(orders)
    for k in orders:
        assert a[k].engine == "sim" and b[k].engine == "host"
        assert abs(a[k].score - b[k].score) * len(split.x_eval) <= ENGINE_FLIPS, (k, a, b)
    # the orders really differ: another order is another fine-tuning run
    assert a[orders[0]].loss != a[orders[1]].loss


def test_budget_from_the_board_or_max_sram():
    stm = load_board("stm32f746")
    b, text = sram_budget(stm, None)
    assert b == stm.sram_bytes - 2048 and "stm32f746" in text
    assert sram_budget(stm, 64 << 10)[0] == 64 << 10
    assert sram_budget(load_board("host"), 10_000)[0] == 10_000
    with pytest.raises(OptionError, match="--max-sram"):
        sram_budget(load_board("host"), None)


def test_too_small_a_budget_names_the_smallest_plan(tmp_path):
    data = _digits(tmp_path / "d.npz", 40)
    s = Session(DIGITS_CNN, Options(), load_board("host"), AutoOptions(data=data, config=FAST))
    need = _sram(DIGITS_CNN, Options(), "tte:n_bias=1")
    with pytest.raises(BuildError) as e:
        s.check_smallest(need - 1, "test")
    assert f"{need / 1024:.1f} KB" in str(e.value) and f"{need} B" in str(e.value)
    s.check_smallest(need, "test")  # exactly the smallest plan's size fits


def test_a_regressor_is_planned_on_its_mean_squared_error(tmp_path):
    """--loss mse: plans are scored by held-out mse (int8 TFLite sine regressor)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 2 * np.pi, (80, 1)).astype(np.float32)
    np.savez(tmp_path / "sine.npz", x=x, y=np.sin(x).astype(np.float32))
    model = ROOT / "tests" / "fixtures" / "hello_world_int8.tflite"
    opts = Options(loss="mse")
    s = Session(model, opts, load_board("host"),
                AutoOptions(data=tmp_path / "sine.npz", config=FAST))
    budget = s.oracle(s.space.last(2).spec).sram
    plan = s.choose(budget, "test")
    assert plan.metric == "-mse" and plan.chosen.sram <= budget
    assert all(k.measured <= 0 for k in plan.candidates)  # minus a mean squared error
    assert _sram(model, opts, str(_write(tmp_path / "p.toml", plan.toml))) == plan.chosen.sram


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_damaged_cache_is_measured_again(tmp_path):
    import json

    data = _digits(tmp_path / "d.npz", 40)
    auto = AutoOptions(data=data, config=FAST)
    s = Session(DIGITS_CNN, Options(), load_board("host"), auto, tmp_path)
    (tmp_path / "autoplan.json").write_text(json.dumps(
        {"version": 1, "memory_key": s.memory_key, "memory": {"tte:n_bias=1": {"bad": 1}}}))
    s = Session(DIGITS_CNN, Options(), load_board("host"), auto, tmp_path)
    assert s.oracle("tte:n_bias=1").sram == _sram(DIGITS_CNN, Options(), "tte:n_bias=1")


def test_prediction_of_plans_off_the_measured_grid(session):
    """The standard plans validated beside the searched ones (e.g. last:K with K off the bias
    grid, weights beyond the searched layers) still get a prediction."""
    c, n = session.contributions(), session.space.n_layers
    for k in range(1, n + 1):
        s = session.space.last(k)
        grid = max(d for d in c.bias if d <= k)
        assert c.predict(s) == pytest.approx(
            c.bias[grid] + sum(c.gain(i, 1.0) for i, _ in s.weights))
    assert c.gain(-1, 0.5) == 0.0


def test_standard_shapes_fit_and_are_the_largest_of_their_family(session):
    """The hand-style plans auto always measures: each fits, and a TTE-shaped plan trains as
    many blocks as fit at its ratio."""
    from tinytrain.autoplan.families import block_entries, tte_shaped

    s = session
    small = s.oracle(Scheme(1).spec).sram
    big = s.oracle(s.space.last(s.space.n_layers).spec).sram
    entries = block_entries(s.g0)
    assert entries
    seen_tte = False
    for budget in np.linspace(small, big, 4).astype(int):
        plans = s.baselines(int(budget), None)
        assert plans[0][1] == Scheme(1)
        for name, p in plans:
            assert s.oracle(p.spec).sram <= budget, (name, budget)
            if name.startswith("TTE-shaped"):
                seen_tte = True
                m, r = len(p.weights), p.weights[0][1]
                assert p == tte_shaped(s.space.n_layers, entries[-m:], r)
                if m < len(entries):
                    more = tte_shaped(s.space.n_layers, entries[-m - 1:], r)
                    assert (s.oracle(more.spec).sram or budget + 1) > budget
    assert seen_tte


def test_candidates_are_scored_on_the_mean_of_several_sample_orders(session):
    s = session
    budget = s.oracle(s.space.last(s.space.n_layers).spec).sram
    plan = s.choose(budget, "test budget")
    seeds = s.orders()
    assert plan.orders == len(seeds) == FAST.orders > 1
    runs = s.contributions().runs
    for k in plan.candidates:
        scores = [runs[s._engines.key(k.scheme.spec, seed)].score for seed in seeds]
        assert k.measured == pytest.approx(sum(scores) / len(scores), abs=1e-12)
    measured = {k.scheme.spec for k in plan.candidates}
    assert {p.spec for _, p in s.baselines(budget, None)} <= measured
    assert any(k.name.startswith("search") for k in plan.candidates)
