"""What `--update auto` and `tinytrain plan` print: the chosen plan, the measured candidates,
the accuracy/memory frontier (a table, and with --plot a picture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinytrain.errors import OptionError

from .search import Found

PLAN_COLUMN = 58  # characters of a plan spec shown in tables (the TOML has all of it)


def score_text(v: float | None, metric: str) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f} %" if metric == "accuracy" else f"{-v:.4g} mse"


def _kb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f} KB"


def _spec(spec: str) -> str:
    return spec if len(spec) <= PLAN_COLUMN else spec[:PLAN_COLUMN - 3] + "..."


def _recompute(share: float) -> str:
    return f", recomputing {100 * share:.1f} % more MACs per step to fit" if share else ""


def format_choice(r: dict[str, Any], out: Path | None = None) -> str:
    """The chosen plan (report["auto_plan"]) with its SRAM, budget, predicted and measured
    held-out score, the other measured candidates and what the search tried."""
    m = r.get("metric", "accuracy")
    where = f" ({Path(out) / 'update_plan.toml'})" if out is not None else ""
    s, sec = r["searched"], r["seconds"]
    lines = [
        f"auto update plan{where}: {r['plan']}",
        f"  SRAM {_kb(r['sram'])} of a {_kb(r['budget'])} budget ({r['budget_from']})"
        + _recompute(r.get("recompute", 0.0)),
        f"  held-out {m}: {score_text(r['before'], m)} untrained -> "
        f"{score_text(r['measured'], m)} after fine-tuning with it (mean of "
        f"{r.get('orders', 1)} sample orders; predicted "
        f"{score_text(r['predicted'], m)}; {r['name']})",
        f"  search: {s['visited']} plans and partial plans visited, {s['sized']} sized by "
        f"the planner, {s['pruned']} subtrees cut"
        + (f" (stopped at --search-visits {s.get('bound')})" if s.get("stopped") else "")
        + "; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in sec.items()),
        "  measured candidates:",
        f"    {'candidate':<26} {'SRAM':>9} {'recompute':>9} {'predicted':>10} "
        f"{'measured':>9}  plan",
    ]
    for c in r["candidates"]:
        mark = "*" if c["plan"] == r["plan"] else " "
        rc = c.get("recompute", 0.0)
        lines.append(f"  {mark} {c['name']:<26} {_kb(c['sram']):>9} "
                     f"{f'+{100 * rc:.1f}%' if rc else '-':>9} "
                     f"{score_text(c['predicted'], m):>10} {score_text(c['measured'], m):>9}  "
                     f"{_spec(c['plan'])}")
    if r.get("toml"):
        lines += ["", r["toml"].rstrip()]
    return "\n".join(lines)


def format_frontier(rows: list[tuple[int, Found | None]], metric: str, before: float,
                    measured: dict[str, float] | None = None) -> str:
    """One row per budget: the best plan the search found within it, its predicted held-out
    score and, where that plan was fine-tuned for real, the measured one."""
    measured = measured or {}
    lines = [f"accuracy/memory frontier (held-out {metric}; untrained "
             f"{score_text(before, metric)}):",
             f"  {'budget':>9} {'plan SRAM':>10} {'recompute':>9} {'predicted':>10} "
             f"{'measured':>9}  plan"]
    last = None
    for b, f in rows:
        if f is None:
            lines.append(f"  {_kb(b):>9} {'-':>10} {'-':>9} {'-':>10} {'-':>9}  (none fits)")
            continue
        same = last is not None and f.scheme == last
        rc = f"+{100 * f.recompute:.1f}%" if f.recompute else "-"
        lines.append(f"  {_kb(b):>9} {_kb(f.sram):>10} {rc:>9} "
                     f"{score_text(f.predicted, metric):>10} "
                     f"{score_text(measured.get(f.scheme.spec), metric):>9}  "
                     + ("(same as above)" if same else _spec(f.scheme.spec)))
        last = f.scheme
    return "\n".join(lines)


def plot_frontier(rows: list[tuple[int, Found | None]], metric: str, before: float,
                  path: Path, chosen: tuple[int, float] | None = None,
                  baselines: tuple[tuple[str, int, float], ...] = ()) -> None:
    """The frontier as a step plot (predicted score against SRAM), with the measured chosen
    plan and the standard plans as points."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise OptionError("--plot needs matplotlib: pip install 'tinytrain-mcu[plot]'") from None

    scale = 100 if metric == "accuracy" else -1
    pts = [(f.sram / 1024, scale * f.predicted) for _, f in rows if f is not None]
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if pts:
        xs, ys = zip(*sorted(set(pts)))
        ax.step(xs, ys, where="post", color="tab:blue", label="best plan found (predicted)")
        ax.plot(xs, ys, "o", color="tab:blue", ms=4)
    ax.axhline(scale * before, color="grey", ls=":", label="untrained")
    # a dozen standard plans: no two may look alike, and none like the frontier or the star
    colours = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
               "tab:cyan", "tab:gray")
    for k, (name, sram, score) in enumerate(baselines):
        ax.plot(sram / 1024, scale * score, "s^Dv"[k // len(colours) % 4], ms=6,
                color=colours[k % len(colours)], label=f"{name} (measured)")
    if chosen:
        # under the points: the chosen plan is often a standard one, whose mark shows inside
        ax.plot(chosen[0] / 1024, scale * chosen[1], "*", ms=16, color="tab:red",
                label="chosen (measured)", zorder=1.9)
    ax.set_xlabel("planned SRAM (KB)")
    ax.set_ylabel("held-out accuracy (%)" if metric == "accuracy" else "held-out mse")
    ax.grid(alpha=0.3)
    # outside the axes: inside, it hid the points it names
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    try:
        fig.savefig(path, dpi=120)
    except (OSError, ValueError) as e:  # a missing directory, an unknown image format
        raise OptionError(f"cannot write the plot to {path}: {e}") from None
