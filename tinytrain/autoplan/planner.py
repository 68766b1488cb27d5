"""The real planner as an oracle: the SRAM `tinytrain build` reports for any plan, from the
compiler's own passes, with the model imported (and quantised) once and every answer cached.

Importing and calibrating an int8 model costs seconds; the passes after it cost 0.01-0.2 s
per plan, so the search can afford hundreds of exact answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from tinytrain.boards import Board
from tinytrain.compiler import Options, import_model, pipeline
from tinytrain.errors import TinyTrainError
from tinytrain.ir import Graph
from tinytrain.passes.memory_plan import Plan, plan_memory
from tinytrain.report import memory_report

__all__ = ["Footprint", "MemoryOracle", "compile_plan", "import_model"]


def compile_plan(g0: Graph, opts: Options, spec: str,
                 memory_passes: bool | None = None) -> tuple[Graph, Plan]:
    """compile_model's passes on an imported graph, for the update plan `spec`."""
    # rematerialisation is left to the build of the chosen plan (its search would multiply
    # the cost of each of the hundreds of answers)
    o = replace(opts, update=spec, check_ir=False, remat="off",
                memory_passes=opts.memory_passes if memory_passes is None else memory_passes)
    g = g0
    for _, fn in pipeline(o):
        g = fn(g)
    return g, plan_memory(g)


@dataclass(frozen=True)
class Footprint:
    """What a plan needs: `sram` is report["sram_bytes"]["total"], the figure the build checks;
    None when the plan cannot be built at all (`why`)."""
    sram: int | None
    flash: int | None = None
    why: str = ""


class MemoryOracle:
    """SRAM and flash of a plan by its `--update` spec, computed once per spec."""

    def __init__(self, g0: Graph, opts: Options, board: Board,
                 known: dict[str, Any] | None = None) -> None:
        self.g0, self.opts, self.board = g0, opts, board
        self.known: dict[str, Footprint] = {k: Footprint(**v) for k, v in (known or {}).items()}
        self.calls = 0  # planner runs (cache misses)
        self.seconds = 0.0

    def __call__(self, spec: str) -> Footprint:
        hit = self.known.get(spec)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        try:
            g, plan = compile_plan(self.g0, self.opts, spec)
            r = memory_report(g, plan, self.board)
            fp = Footprint(r["sram_bytes"]["total"], r["flash_bytes"]["total"])
        except TinyTrainError as e:  # e.g. trainable parameters beyond the board's flash slots
            fp = Footprint(None, None, str(e).splitlines()[0])
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        self.known[spec] = fp
        return fp

    def report(self, spec: str) -> dict[str, Any]:
        """The whole memory report of one plan (for error messages)."""
        g, plan = compile_plan(self.g0, self.opts, spec)
        return memory_report(g, plan, self.board)

    def to_json(self) -> dict[str, Any]:
        return {k: {"sram": v.sram, "flash": v.flash, "why": v.why}
                for k, v in sorted(self.known.items())}
