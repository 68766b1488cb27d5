"""`tinytrain report --plot`: every SRAM component over the steps of one training sample.

Two panels share the step axis. The upper one stacks all of SRAM: the constant components at
the bottom (trainable parameters, their gradient accumulators and optimizer state, on a board
the link's buffers and the stack), the arena's live buffers by kind on top; a dashed line is
the planned SRAM, the figure `build` prints (the arena's planned size includes the gaps
between its buffers, so the stack stays under it), a red line the board's capacity. The lower
panel zooms into the arena. Both mark the peak step, the end of the forward pass and the loss
step; the legend sits outside the axes so it never covers data.

`figure` returns the matplotlib Figure (its artists carry gids the tests look up); matplotlib
is optional (the `plot` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinytrain.errors import OptionError
from tinytrain.reports.memory import ARENA_KINDS, CONSTANT, kb

KIB = 1024
# Greys and muted blues for what stays the same, bright colours for the arena's kinds.
CONSTANT_COLORS = {"trainable params": "#4c72b0", "param gradients": "#8da0cb",
                   "optimizer state": "#b3c6e6", "link buffers": "#9e9e9e", "stack": "#cfcfcf"}
ARENA_COLORS = {"input": "#8c564b", "activations": "#2ca02c", "saved for backward": "#ff7f0e",
                "gradients": "#d62728", "masks": "#9467bd", "scratch": "#e377c2",
                "outputs": "#17becf"}


def components(m: dict[str, Any]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """The constant components (bytes) and the arena's live bytes per kind per step, for
    the components that are not empty."""
    n = len(m["steps"])
    arena = {k: [0] * n for k in ARENA_KINDS}
    for b in m["buffers"]:
        for k in range(max(b["first_step"], 0), min(b["last_step"], n - 1) + 1):
            arena[b["kind"]][k] += b["bytes"]
    constant = {name: m["sram"][k] for k, name in CONSTANT.items() if m["sram"].get(k)}
    return constant, {k: v for k, v in arena.items() if any(v)}


def _phases(m: dict[str, Any]) -> tuple[int, int]:
    """(last forward step, last loss step); -1 when there is none."""
    last = {"forward": -1, "loss": -1}
    for s in m["steps"]:
        if s["phase"] in last:
            last[s["phase"]] = s["step"]
    return last["forward"], max(last["loss"], last["forward"])


def _peak_text(m: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {kb(v)}" for k, v in m["peak_by_kind"].items())
    big = ", ".join(f"{b['name']} {kb(b['bytes'])}" for b in m.get("peak_buffers", [])[:3])
    return (f"peak {kb(m['peak_sram_bytes'])} at step {m['peak_step']}: {m['peak_op']}\n"
            f"arena live {kb(m['peak_live_bytes'])}: {kinds}" + (f"\nlargest: {big}" if big
                                                                  else ""))


def figure(m: dict[str, Any]):
    """The plot of a memory.json (memory_report.memory_details) as a matplotlib Figure."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.transforms import blended_transform_factory
    except ImportError:
        raise OptionError("--plot needs matplotlib: pip install 'tinytrain-mcu[plot]'") from None

    constant, arena = components(m)
    n = len(m["steps"])
    x = list(range(n))
    total, cap = m["sram"]["total"], m.get("sram_capacity")
    fig = Figure(figsize=(13, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    top, low = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))

    names = [*constant, *arena]
    ys = [[v / KIB] * n for v in constant.values()] + [[v / KIB for v in s]
                                                      for s in arena.values()]
    labels = [f"{k} {kb(v)}" for k, v in constant.items()] + [f"arena: {k}" for k in arena]
    colors = [CONSTANT_COLORS[k] for k in constant] + [ARENA_COLORS[k] for k in arena]
    if n:
        for p, name in zip(top.stackplot(x, *ys, labels=labels, colors=colors, step="mid"),
                           names):
            p.set_gid(f"component:{name}")
        if arena:
            low.stackplot(x, *[[v / KIB for v in s] for s in arena.values()],
                          colors=[ARENA_COLORS[k] for k in arena], step="mid")
    top.axhline(total / KIB, color="black", ls="--", lw=1, gid="planned",
                label=f"planned SRAM {kb(total)}")
    if cap:
        top.axhline(cap / KIB, color="tab:red", lw=1.5, gid="capacity",
                    label=f"{m.get('board', 'board')} capacity {cap // KIB} KB")
    low.axhline(m["arena_bytes"] / KIB, color="black", ls=":", lw=1, gid="arena",
                label=f"planned arena {kb(m['arena_bytes'])}")
    top.set_ylim(0, (max(cap, total) * 1.06 if cap else total * 1.6) / KIB)
    low.set_ylim(0, max(m["arena_bytes"], 1) * 1.3 / KIB)

    fwd_end, loss_end = _phases(m)
    for ax in (top, low):
        if fwd_end >= 0 and loss_end < n - 1:  # a backward pass follows
            ax.axvline(fwd_end + 0.5, color="0.25", lw=1.2, ls="-.", gid="forward/backward")
        if loss_end > fwd_end:
            ax.axvspan(fwd_end + 0.5, loss_end + 0.5, color="0.85", zorder=0, gid="loss")
        ax.set_xlim(-0.5, max(n, 1) - 0.5)
        ax.grid(axis="y", lw=0.3)
    at_top = blended_transform_factory(top.transData, top.transAxes)
    if fwd_end >= 0:
        top.text(fwd_end / 2, 0.92, "forward", transform=at_top, ha="center", va="top")
    if loss_end < n - 1:
        top.text((loss_end + n) / 2, 0.92, "backward", transform=at_top, ha="center", va="top")
    if loss_end > fwd_end:
        top.text((fwd_end + loss_end + 1) / 2, 0.85, "loss", transform=at_top, ha="center",
                 va="top", fontsize=8)

    k = m["peak_step"]
    if 0 <= k < n:
        top.plot([k], [m["peak_sram_bytes"] / KIB], "v", color="black", ms=9, gid="peak")
        low.plot([k], [m["peak_live_bytes"] / KIB], "v", color="black", ms=9, gid="peak_arena")
        # the text goes in the empty band above the stack, on the side with more room
        y_text = (m["peak_sram_bytes"] + (top.get_ylim()[1] * KIB - m["peak_sram_bytes"]) * 0.45)
        top.annotate(_peak_text(m), xy=(k, m["peak_sram_bytes"] / KIB),
                     xytext=(k, y_text / KIB), ha="right" if k > n / 2 else "left", va="center",
                     fontsize=8, gid="peak_label",
                     arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.8},
                     bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"})

    of = f" of {cap // KIB} KB" if cap else ""
    top.set_title(f"{m.get('board', '')}: SRAM {kb(total)}{of} planned, peak "
                  f"{kb(m['peak_sram_bytes'])} live at step {k} ({m['peak_op']})", fontsize=10)
    top.set_ylabel("SRAM (KB)")
    low.set_ylabel("arena (KB)")
    low.set_xlabel("step of one training sample (forward, loss, backward; the SGD update "
                   "runs once per batch, after these)")
    handles, texts = top.get_legend_handles_labels()
    h2, t2 = low.get_legend_handles_labels()
    fig.legend(handles + h2, texts + t2, loc="outside right upper", fontsize=8)
    return fig


def plot(m: dict[str, Any], path: Path | str) -> None:
    fig = figure(m)
    try:
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as e:  # a missing directory, an unknown image format
        raise OptionError(f"cannot write the plot to {path}: {e}") from None
