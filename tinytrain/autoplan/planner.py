"""The real planner as an oracle: the SRAM `tinytrain build` reports for any plan, from the
compiler's own passes, with the model imported (and quantised) once and every answer cached.

Importing and calibrating an int8 model costs seconds; the passes after it cost 0.01-0.2 s
per plan, so the search can afford hundreds of exact answers.

A plan over the budget may still fit with rematerialisation (passes/remat). Its search plans
tens of candidates, so the oracle asks two cheaper questions first and caches both:
`floor(spec)`, the plan with every block recomputed (one planner run: what the search prunes
by), and only for a plan whose floor fits, `fit(spec, budget)`: the least recompute that meets
the budget, exactly as `build --remat auto` would choose it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tinytrain.boards import Board
from tinytrain.errors import TinyTrainError
from tinytrain.ir import Graph
from tinytrain.passes.memory_plan import Plan, plan_memory
from tinytrain.passes.pipeline import Options, import_model, pipeline
from tinytrain.passes.remat import rematerialise_all
from tinytrain.reports.report import memory_report

__all__ = ["Footprint", "MemoryOracle", "compile_plan", "import_model"]


ALL = "all"  # compile_plan(remat=ALL): every block recomputed


def compile_plan(g0: Graph, opts: Options, spec: str, memory_passes: bool | None = None,
                 remat: str | int = "off") -> tuple[Graph, Plan]:
    """compile_model's passes on an imported graph, for the update plan `spec`. `remat`:
    "off", ALL, or a budget in bytes (`--remat auto --max-sram` that budget)."""
    o = replace(opts, update=spec, check_ir=False, remat="off",
                memory_passes=opts.memory_passes if memory_passes is None else memory_passes)
    if isinstance(remat, int):
        o = replace(o, remat="auto", max_sram=remat)
    g = g0
    for name, fn in pipeline(o):
        g = rematerialise_all(g) if name == "remat" and remat == ALL else fn(g)
    return g, plan_memory(g)


@dataclass(frozen=True)
class Footprint:
    """What a plan needs: `sram` is report["sram_bytes"]["total"], the figure the build checks;
    None when the plan cannot be built at all (`why`)."""
    sram: int | None
    flash: int | None = None
    why: str = ""
    recompute: int = 0  # MACs recomputed per training step (rematerialisation)
    macs: int = 0  # the training step's MACs without them (forward + backward)


class MemoryOracle:
    """SRAM and flash of a plan by its `--update` spec, computed once per spec."""

    def __init__(self, g0: Graph, opts: Options, board: Board,
                 known: dict[str, Any] | None = None) -> None:
        self.g0, self.opts, self.board = g0, opts, board
        self.known: dict[str, Footprint] = {k: Footprint(**v) for k, v in (known or {}).items()}
        self.calls = 0  # planner runs (cache misses)
        self.seconds = 0.0

    def __call__(self, spec: str) -> Footprint:
        """The plan as it is, without rematerialisation."""
        return self._size(spec, spec, "off")

    def floor(self, spec: str) -> Footprint:
        """The plan with every block recomputed: about the least SRAM rematerialisation can
        reach (the search prunes by it; `fit` decides)."""
        return self._size(f"{spec} @remat:{ALL}", spec, ALL)

    def fit(self, spec: str, budget: int, allowance: float | None) -> Footprint:
        """The plan within `budget` bytes with the least recompute (none if it fits as it is),
        when that recompute is at most `allowance` of the step's MACs (None: no recompute);
        else the plan as it is, over the budget."""
        plain = self(spec)
        if allowance is None or plain.sram is None or plain.sram <= budget:
            return plain
        if (self.floor(spec).sram or budget + 1) > budget:
            return plain
        r = self._size(f"{spec} @remat:{budget}", spec, budget)
        ok = r.sram is not None and r.sram <= budget and r.recompute <= allowance * r.macs
        return r if ok else plain

    def _size(self, key: str, spec: str, remat: str | int) -> Footprint:
        hit = self.known.get(key)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        try:
            g, plan = compile_plan(self.g0, self.opts, spec, remat=remat)
            r = memory_report(g, plan, self.board)
            m = r["macs"]
            fp = Footprint(r["sram_bytes"]["total"], r["flash_bytes"]["total"], "",
                           m["recompute"], m["forward"] + m["backward"])
        except TinyTrainError as e:  # e.g. trainable parameters beyond the board's flash slots
            fp = Footprint(None, None, str(e).splitlines()[0])
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        self.known[key] = fp
        return fp

    def report(self, spec: str) -> dict[str, Any]:
        """The whole memory report of one plan (for error messages)."""
        g, plan = compile_plan(self.g0, self.opts, spec)
        return memory_report(g, plan, self.board)

    def to_json(self) -> dict[str, Any]:
        return {k: {"sram": v.sram, "flash": v.flash, "why": v.why,
                    "recompute": v.recompute, "macs": v.macs}
                for k, v in sorted(self.known.items())}
