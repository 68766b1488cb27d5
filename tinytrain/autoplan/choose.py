"""`--update auto` and `tinytrain plan`: analyse, search, measure the best candidates, choose.

1. The budget (budget.py) and the smallest plan (the classifier alone): if even that does not
   fit, fail at once with its size.
2. Contribution analysis (contribution.py) on a held-out split of the user's data; the runs
   are cached in the build directory, keyed by everything that changes them.
3. Branch-and-bound search (search.py) with the real planner (planner.py).
4. The best `validate` searched plans, and the standard plan shapes that fit (families.py:
   the classifier alone, `bias`, `last:K`, TTE's block shape), are fine-tuned for real on the
   same split with `orders` sample orders each; the best mean is chosen (the additive
   prediction is a guide, the measurement decides).

A plan that fits the budget only by recomputing activations (passes/remat) is a candidate
like any other when its recompute stays within the allowance (`--remat N%`, or
DEFAULT_RECOMPUTE with `--remat auto`; `--remat off`: never). Recomputing is bit-exact, so it
learns what the plan learns without it; it is priced in time only, and between equal scores
the plan that recomputes less wins.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tinytrain.boards import Board
from tinytrain.errors import BuildError, OptionError
from tinytrain.passes.pipeline import Options, sha256
from tinytrain.passes.remat import parse_remat
from tinytrain.passes.update_plan import parse_plan, plan_to_toml
from tinytrain.version import __version__

from .budget import sram_budget
from .contribution import AnalysisConfig, Contributions, analyse, data_hash, split_data
from .engines import Engines, Measurement
from .families import standard_plans
from .planner import Footprint, MemoryOracle, compile_plan, import_model
from .search import Found, Tried, frontier, search
from .space import Scheme, Space, plan_space

AUTO = "auto"
CACHE_FILE = "autoplan.json"
PLAN_FILE = "update_plan.toml"
# plans and partial plans the search may visit per budget: MobileNetV2 at 128x128 needs
# ~1,100 at 32 KB and more at larger budgets; a visit costs 0.01-0.2 s of planning
DEFAULT_SEARCH_VISITS = 3000
# the most recompute `--remat auto` lets a candidate spend, as a share of the step's MACs: a
# deeper plan is worth about a sixth more time per step (last:24 on MobileNetV2 at 128x128
# needs 4 %, a plan with every block recomputed 5-23 %)
DEFAULT_RECOMPUTE = 0.15


def recompute_allowance(remat: str) -> float | None:
    """The share of extra MACs a candidate may recompute; None: no rematerialisation."""
    mode = parse_remat(remat)
    return None if mode == "off" else DEFAULT_RECOMPUTE if mode == "auto" else float(mode)


@dataclass(frozen=True)
class AutoOptions:
    data: Path | None = None  # TRAIN.npz: the samples the plan is chosen on
    search_visits: int = DEFAULT_SEARCH_VISITS
    config: AnalysisConfig = field(default_factory=AnalysisConfig)
    log: Callable[[str], None] | None = None  # progress lines


@dataclass(frozen=True)
class Candidate:
    name: str  # "search #1", "bias", "last:3", ...
    scheme: Scheme
    sram: int
    predicted: float
    measured: float
    recompute: float = 0.0  # extra MACs per step to fit the budget, a share of the step's


@dataclass
class AutoPlan:
    budget: int
    budget_text: str
    chosen: Candidate
    candidates: list[Candidate]
    contributions: Contributions
    tried: Tried
    toml: str
    seconds: dict[str, float]
    cache: dict[str, Any]
    frontier: list[tuple[int, Found | None]] = field(default_factory=list)
    metric: str = "accuracy"  # what the scores are: held-out accuracy, or "-mse"
    orders: int = 1  # sample orders each candidate's measured score is the mean of
    search_visits: int = DEFAULT_SEARCH_VISITS  # the search's bound
    workdir: Any = None  # build --update auto: the TemporaryDirectory holding the plan file

    def files(self) -> dict[str, str]:
        """What a build directory keeps: the plan and the measurement cache."""
        return {PLAN_FILE: self.toml, CACHE_FILE: json.dumps(self.cache, indent=1) + "\n"}

    def summary(self) -> dict[str, Any]:
        """For report.json."""
        c = self.chosen
        return {"plan": c.scheme.spec, "name": c.name, "metric": self.metric,
                "toml": self.toml, "sram": c.sram, "budget": self.budget,
                "budget_from": self.budget_text, "predicted": c.predicted,
                "measured": c.measured, "orders": self.orders,
                "before": self.contributions.before,
                "searched": {"visited": self.tried.visited, "pruned": self.tried.pruned,
                             "sized": self.tried.sized, "stopped": self.tried.stopped,
                             "bound": self.search_visits},
                "recompute": c.recompute,
                "candidates": [{"name": k.name, "plan": k.scheme.spec, "sram": k.sram,
                                "predicted": k.predicted, "measured": k.measured,
                                "recompute": k.recompute}
                               for k in self.candidates],
                "seconds": self.seconds}


def _key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Session:
    """One model, options and board: the imported graph, the space, the cached planner."""

    def __init__(self, model: Path, opts: Options, board: Board, auto: AutoOptions,
                 cache_dir: Path | None = None) -> None:
        if auto.data is None:
            raise OptionError("--update auto needs --data TRAIN.npz: labelled samples of the task "
                              "the device will learn, to measure what each layer's update is "
                              "worth")
        self.model, self.opts, self.board, self.auto = Path(model), opts, board, auto
        self.cfg = auto.config
        self.recompute = recompute_allowance(opts.remat)
        self.log = auto.log or (lambda s: None)
        self.cache_dir = cache_dir
        t0 = time.perf_counter()
        self.g0 = import_model(self.model, opts)
        self.space: Space = plan_space(self.g0, self.cfg.depth)
        calib = sha256(opts.calib) if opts.calib else None
        common = {"model": sha256(self.model), "loss": opts.loss, "sgd": asdict(opts.sgd),
                  "quantize": opts.quantize, "calib": calib, "new_head": opts.new_head,
                  "weight_headroom": opts.weight_headroom, "version": __version__}
        # what a plan costs also depends on the fleet's SRAM (b, received pointers), not on
        # what it learns: the measured scores stay valid without them
        self.memory_key = _key(**common, board=board.name, passes=opts.memory_passes,
                               fleet_correction=opts.fleet_correction, receive=opts.receive)
        self.measure_base = common
        old = self._read_cache()
        try:
            self.oracle = MemoryOracle(self.g0, opts, board, old.get("memory", {})
                                       if old.get("memory_key") == self.memory_key else {})
        except (TypeError, AttributeError):  # a damaged cache file: measure again
            self.oracle = MemoryOracle(self.g0, opts, board)
        self.old = old
        self.seconds = {"import": time.perf_counter() - t0}
        self._contrib: Contributions | None = None
        self._engines: Engines | None = None

    def _read_cache(self) -> dict[str, Any]:
        p = self.cache_dir / CACHE_FILE if self.cache_dir else None
        if p is None or not p.is_file():
            return {}
        try:
            d = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return d if isinstance(d, dict) and d.get("version") == 1 else {}

    # ---- 1. the smallest plan ----
    def check_smallest(self, budget: int, budget_text: str) -> None:
        s = Scheme(1)
        fp = self.oracle(s.spec)
        if fp.sram is not None and fp.sram <= budget:
            return
        if fp.sram is None:
            raise BuildError(f"no update plan of {self.model} can be built for {self.board.name}:"
                             f" training only the classifier fails: {fp.why}")
        r = self.oracle.report(s.spec)["sram_bytes"]
        parts = ", ".join(f"{k.replace('_', ' ')} {v / 1024:.1f} KB" for k, v in r.items()
                          if k != "total" and v)
        raise BuildError(
            f"{self.model} is too big for any update plan within the budget: the smallest plan, "
            f"training only the classifier (--update {s.spec}), needs {fp.sram / 1024:.1f} KB "
            f"of SRAM ({fp.sram} B: {parts}), over the {budget / 1024:.1f} KB budget "
            f"({budget} B: {budget_text}); give more memory (--max-sram or a bigger board), "
            "or a smaller model")

    # ---- 2. contribution analysis ----
    def contributions(self) -> Contributions:
        if self._contrib is not None:
            return self._contrib
        from tinytrain.codegen.program import program_info
        from tinytrain.device.data import load_npz

        t0 = time.perf_counter()
        g, _ = compile_plan(self.g0, self.opts, Scheme(1).spec)
        x, y = load_npz(self.auto.data, program_info(g, self.board))  # type: ignore[arg-type]
        split = split_data(x, y, self.cfg)
        self.measure_key = _key(**self.measure_base, data=data_hash(x, y),
                                config={k: v for k, v in asdict(self.cfg).items()
                                        if k not in ("validate", "engine", "orders")})
        known = {}
        if self.old.get("measure_key") == self.measure_key:
            try:
                known = {k: Measurement(**v) for k, v in self.old.get("runs", {}).items()}
            except (TypeError, AttributeError):  # a damaged cache file: measure again
                known = {}
        self._engines = Engines(self.g0, self.opts, split, self.cfg.engine)
        fresh = len(known) == 0
        self.log(f"contribution analysis: {len(split.x_train)} samples to fine-tune on "
                 f"({split.epochs} epochs), {len(split.x_eval)} held out"
                 + ("" if fresh else f"; {len(known)} runs cached"))
        self._contrib = analyse(self.space, self._engines, known, self.log)
        self.seconds["analysis"] = time.perf_counter() - t0
        return self._contrib

    def measure(self, schemes: list[Scheme]) -> None:
        """Fine-tune the schemes with every validation sample order not measured yet (into
        contributions().runs)."""
        c = self.contributions()
        assert self._engines is not None
        key = self._engines.key
        todo = []
        for s in schemes:
            seeds = tuple(k for k in self.orders() if key(s.spec, k) not in c.runs)
            if seeds:
                todo.append((s.spec, True, 1, seeds))
        if todo:
            c.runs.update(self._engines.measure_all(todo))

    # ---- 3. search ----
    def _search(self, budget: int, want: int, tried: Tried,
                max_flash: int | None) -> list[Found]:
        c = self.contributions()
        return search(self.space, lambda k: c.bias[k], c.gain, self.oracle, budget, want,
                      self.auto.search_visits, max_flash, tried, self.recompute)

    def size(self, spec: str, budget: int) -> Footprint:
        """The plan's footprint within `budget`: as it is, or with the least recompute that
        fits when the allowance permits it (else as it is, over the budget)."""
        return self.oracle.fit(spec, budget, self.recompute)

    def baselines(self, budget: int, max_flash: int | None) -> list[tuple[str, Scheme]]:
        """The standard plan shapes that fit (families.py)."""
        def fits(s: Scheme) -> bool:
            fp = self.size(s.spec, budget)
            return fp.sram is not None and fp.sram <= budget and \
                (max_flash is None or (fp.flash or 0) <= max_flash)

        return standard_plans(self.g0, self.space, fits)

    def validated(self, spec: str) -> float:
        """The mean held-out score of `spec` over the validation's sample orders."""
        c = self.contributions()
        assert self._engines is not None
        seeds = self.orders()
        return sum(c.runs[self._engines.key(spec, k)].score for k in seeds) / len(seeds)

    def orders(self) -> tuple[int, ...]:
        return tuple(self.cfg.seed + k for k in range(max(1, self.cfg.orders)))

    # ---- 4. choose ----
    def choose(self, budget: int, budget_text: str, max_flash: int | None = None) -> AutoPlan:
        self.check_smallest(budget, budget_text)
        c = self.contributions()
        t0 = time.perf_counter()
        tried = Tried()
        found = self._search(budget, max(1, self.cfg.validate), tried, max_flash)
        self.seconds["search"] = time.perf_counter() - t0
        self.log(f"search: {tried.visited} plans and partial plans visited, {tried.sized} "
                 f"sized by the planner ({self.oracle.calls} planner runs), {tried.pruned} "
                 f"subtrees cut"
                 + (f" (stopped at --search-visits {self.auto.search_visits})"
                    if tried.stopped else "")
                 + f"; {len(found)} best within {budget / 1024:.1f} KB in "
                 f"{self.seconds['search']:.1f} s")
        t0 = time.perf_counter()
        pool = [(f"search #{k + 1}", f.scheme) for k, f in enumerate(found)]
        pool += self.baselines(budget, max_flash)
        unique = list({s.spec: (name, s) for name, s in reversed(pool)}.values())[::-1]
        self.measure([s for _, s in unique])
        cands = []
        for name, s in unique:
            m = self.validated(s.spec)
            fp = self.size(s.spec, budget)
            cands.append(Candidate(name, s, int(fp.sram or 0), c.predict(s), m,
                                   fp.recompute / max(fp.macs, 1)))
            self.log(f"  measured {name} {s.spec}: held-out {m:.4f} (mean of "
                     f"{len(self.orders())} sample orders; predicted "
                     f"{c.predict(s):.4f}), SRAM {cands[-1].sram / 1024:.1f} KB"
                     + (f" recomputing {100 * cands[-1].recompute:.1f} % more MACs"
                        if fp.recompute else ""))
        # the best measured; ties to the better predicted, then the less recompute, then the
        # smaller plan
        chosen = max(cands, key=lambda k: (k.measured, k.predicted, -k.recompute, -k.sram))
        self.seconds["validation"] = time.perf_counter() - t0
        return AutoPlan(budget, budget_text, chosen, cands, c, tried,
                        self.toml(chosen, budget, budget_text), dict(self.seconds), self.cache(),
                        metric="accuracy" if self.opts.loss == "ce" else "-mse",
                        orders=len(self.orders()), search_visits=self.auto.search_visits)

    def frontier(self, budgets: list[int], max_flash: int | None = None,
                 tried: Tried | None = None) -> list[tuple[int, Found | None]]:
        c = self.contributions()
        return frontier(self.space, lambda k: c.bias[k], c.gain, self.oracle, budgets,
                        self.auto.search_visits, max_flash, tried,
                        self.recompute)

    def toml(self, chosen: Candidate, budget: int, budget_text: str) -> str:
        c = self.contributions()
        plan = parse_plan(self.g0, chosen.scheme.spec)
        head = (f"update plan chosen by tinytrain {__version__} (--update auto) for "
                f"{self.model.name} on {self.board.name}\n"
                f"as --update: {chosen.scheme.spec}\n"
                f"SRAM {chosen.sram} B ({chosen.sram / 1024:.1f} KB) of a {budget} B budget "
                f"({budget_text})"
                + (f", recomputing {100 * chosen.recompute:.1f} % more MACs per step "
                   "(--remat)" if chosen.recompute else "") + "\n"
                f"held-out score: {c.before:.4f} untrained, {chosen.measured:.4f} after "
                f"fine-tuning with this plan (mean of {len(self.orders())} sample orders; "
                f"predicted {chosen.predicted:.4f})\n"
                "edit freely and pass back with --update FILE.toml")
        return plan_to_toml(self.g0, plan, head)

    def cache(self) -> dict[str, Any]:
        c = self.contributions()
        return {"version": 1, "measure_key": self.measure_key, "memory_key": self.memory_key,
                "runs": c.to_json()["runs"], "memory": self.oracle.to_json()}


def choose_plan(model: Path, opts: Options, board: Board, auto: AutoOptions,
                max_sram: int | None = None, max_flash: int | None = None,
                cache_dir: Path | None = None) -> AutoPlan:
    """The plan for `tinytrain build --update auto`."""
    budget, text = sram_budget(board, max_sram)
    s = Session(model, opts, board, auto, cache_dir)
    s.check_smallest(budget, text)  # before any fine-tuning
    return s.choose(budget, text, max_flash)


def resolve_for_build(model: Path, out: Path, opts: Options, board: Board,
                      auto: AutoOptions | None, max_sram: int | None,
                      max_flash: int | None) -> tuple[AutoPlan, Options]:
    """`build --update auto`: choose the plan (reusing the measurements a previous auto build
    left in `out`) and return the options that build it from its TOML file, which lives as
    long as the returned AutoPlan (`plan_path`)."""
    import tempfile

    plan = choose_plan(model, opts, board, auto or AutoOptions(), max_sram, max_flash, out)
    plan.workdir = tempfile.TemporaryDirectory(prefix="tt-autoplan-")
    path = Path(plan.workdir.name) / PLAN_FILE
    path.write_text(plan.toml)
    # --remat N% capped what the planner may spend; the build recomputes the least that
    # fits, which is what the chosen plan was sized with
    remat = "off" if opts.remat == "off" else "auto"
    return plan, replace(opts, update=str(path), remat=remat)


def build_auto(model: Path, out: Path, opts: Options, auto: AutoOptions | None,
               on_pass: Any = None, max_sram: int | None = None,
               max_flash: int | None = None) -> dict[str, Any]:
    """`tinytrain build --update auto`: choose the plan, then build it like any TOML plan
    (tinytrain.device.build.build), with the choice in the report and the directory."""
    from tinytrain.boards import load_board
    from tinytrain.device.build import build, check_build

    board = load_board(opts.board)
    check_build(opts, Path(out))  # before the fine-tuning runs, not after
    if max_sram is not None:  # the budget --remat auto recomputes to meet
        opts = replace(opts, max_sram=max_sram)
    chosen, built = resolve_for_build(Path(model), Path(out), opts, board, auto, max_sram,
                                      max_flash)
    return build(model, out, built, on_pass, max_sram, max_flash, chosen=chosen)
