"""8. Automatic update plans (`--update auto`, `tinytrain plan`): contribution analysis on the
user's data, a branch-and-bound search with the real memory planner, measured candidates.

Modules: budget (the SRAM a plan may use), space (the plans searched), planner (the exact SRAM
of a plan, cached), engines (fine-tuning a candidate: numpy simulation or host C build),
contribution (what each part of a plan is worth), search (best plan within a budget),
choose (the whole procedure, and `build --update auto`: choose, then build),
frontier_report (tables and the plot).
"""

from .budget import sram_budget
from .choose import (
    AUTO,
    PLAN_FILE,
    AutoOptions,
    AutoPlan,
    Session,
    build_auto,
    choose_plan,
    resolve_for_build,
)
from .contribution import AnalysisConfig

__all__ = ["AUTO", "PLAN_FILE", "AnalysisConfig", "AutoOptions", "AutoPlan", "Session",
           "build_auto", "choose_plan", "resolve_for_build", "sram_budget"]
