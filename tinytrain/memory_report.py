"""`tinytrain report`: where every byte of SRAM goes, buffer by buffer and step by step."""

from __future__ import annotations

from typing import Any

from tinytrain.ir import ACTIVATION, GRAD, INPUT, LABEL, LOSS, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.passes.memory_plan import Plan, step_nodes

CATEGORIES = ("input", "activations", "saved for backward", "gradients", "masks", "scratch",
              "outputs", "trainable params", "param gradients", "optimizer state")


def _category(g: Graph, name: str, backward_reads: set[str], scratch: set[str]) -> str:
    t = g.t(name)
    if name in scratch:
        return "scratch"
    if t.kind in (INPUT, LABEL):
        return "input"
    if t.kind == LOSS:
        return "outputs"
    if t.kind == GRAD:
        return "gradients"
    if t.kind == ACTIVATION and t.dtype == "u8":
        return "masks"
    return "saved for backward" if name in backward_reads else "activations"


def buffer_table(g: Graph, plan: Plan) -> dict[str, Any]:
    nodes = step_nodes(g)
    backward_reads = set()
    for n in nodes:
        if n.phase == "backward":
            backward_reads.update(n.inputs)
    scratch = {n.outputs[1] for n in nodes if n.op == "row_stream"}  # the stage's row rings
    views: dict[str, list[str]] = {}
    for v, r in plan.views.items():
        views.setdefault(r, []).append(v)

    def step_name(k: int) -> str:
        return "(before the step)" if k < 0 else "(returned)" if k >= len(nodes) else nodes[k].name

    rows = []
    for b in sorted(plan.buffers, key=lambda b: (plan.offsets[b.name], b.first, b.name)):
        saved = b.name in backward_reads or any(v in backward_reads for v in views.get(b.name, []))
        cat = _category(g, b.name, backward_reads | ({b.name} if saved else set()), scratch)
        rows.append({"name": b.name, "kind": cat, "bytes": b.size, "offset": plan.offsets[b.name],
                     "first_step": b.first, "last_step": b.last, "first_op": step_name(b.first),
                     "last_op": step_name(b.last), "views": sorted(views.get(b.name, []))})
    persistent = {
        "trainable params": sum(t.nbytes for t in g.tensors.values()
                                if t.kind == PARAM and t.trainable),
        "param gradients": sum(t.nbytes for t in g.tensors.values() if t.kind == PARAM_GRAD),
        "optimizer state": sum(t.nbytes for t in g.tensors.values() if t.kind == OPT_STATE),
    }
    live = [0] * (len(nodes) + 2)
    for r in rows:
        for k in range(max(r["first_step"], -1), r["last_step"] + 1):
            live[k + 1] += r["bytes"]
    peak_k = max(range(len(live)), key=lambda k: (live[k], -k))
    at_peak: dict[str, int] = {c: 0 for c in CATEGORIES}
    for r in rows:
        if r["first_step"] <= peak_k - 1 <= r["last_step"]:
            at_peak[r["kind"]] += r["bytes"]
    totals = {c: sum(r["bytes"] for r in rows if r["kind"] == c) for c in CATEGORIES}
    totals.update(persistent)
    at_peak.update(persistent)
    return {
        "arena_bytes": plan.arena_size,
        "sram_bytes": plan.arena_size + sum(persistent.values()),
        "peak_live_bytes": live[peak_k],
        "peak_step": peak_k - 1,
        "peak_op": step_name(peak_k - 1),
        "peak_by_kind": {k: v for k, v in at_peak.items() if v},
        "totals_by_kind": {k: v for k, v in totals.items() if v},
        "steps": [{"step": k, "op": n.name, "phase": n.phase, "live_bytes": live[k + 1]}
                  for k, n in enumerate(nodes)],
        "buffers": rows,
    }


def format_short(m: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {v / 1024:.1f} KB" for k, v in m["peak_by_kind"].items())
    return (f"  peak {m['sram_bytes'] / 1024:.1f} KB SRAM at step {m['peak_step']} "
            f"({m['peak_op']}): {kinds}")


def format_table(m: dict[str, Any]) -> str:
    lines = [f"{'buffer':40s} {'kind':20s} {'bytes':>10s} {'offset':>10s} {'first':>6s} "
             f"{'last':>6s}"]
    for r in m["buffers"]:
        lines.append(f"{r['name'][:40]:40s} {r['kind']:20s} {r['bytes']:10d} {r['offset']:10d} "
                     f"{r['first_step']:6d} {r['last_step']:6d}")
    lines.append("")
    lines.append("totals by kind (bytes): " + ", ".join(
        f"{k} {v}" for k, v in m["totals_by_kind"].items()))
    lines.append(f"arena {m['arena_bytes']} bytes; SRAM {m['sram_bytes']} bytes "
                 "(arena + trainable params + param gradients + optimizer state)")
    lines.append(format_short(m).strip())
    return "\n".join(lines)


def plot(m: dict[str, Any], path: str) -> None:
    """Arena over time: one rectangle per buffer (x = steps, y = offset)."""
    try:
        import matplotlib
    except ImportError:
        from tinytrain.errors import OptionError

        raise OptionError("--plot needs matplotlib: pip install 'tinytrain[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    colors = dict(zip(CATEGORIES, plt.cm.tab10.colors, strict=False))
    fig, ax = plt.subplots(figsize=(12, 6))
    for r in m["buffers"]:
        ax.add_patch(Rectangle((r["first_step"], r["offset"] / 1024),
                               r["last_step"] - r["first_step"] + 1, r["bytes"] / 1024,
                               facecolor=colors[r["kind"]], edgecolor="black", linewidth=0.2))
    for k, c in colors.items():
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=c, label=k))
    ax.set_xlim(-1, len(m["steps"]) + 1)
    ax.set_ylim(0, max(m["arena_bytes"], 1) / 1024 * 1.05)
    ax.set_xlabel("step (forward, loss, backward)")
    ax.set_ylabel("arena offset (KB)")
    ax.set_title(f"arena {m['arena_bytes'] / 1024:.1f} KB, peak at {m['peak_op']}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
