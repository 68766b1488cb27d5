"""`tinytrain report`: where every byte of SRAM goes, buffer by buffer and step by step.

SRAM is the arena, whose buffers change from step to step, plus components that stay the same
(trainable parameters, their gradient accumulators and optimizer state, and on a board the
link's buffers and the stack). Their sum with the arena's planned size is the one SRAM figure
`build` and `report` print and the linked ELF is compared with (report.py).
"""

from __future__ import annotations

from typing import Any

from tinytrain.ir import ACTIVATION, GRAD, INPUT, LABEL, LOSS, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.passes.memory_plan import Plan, step_nodes
from tinytrain.reports.layers import LayerCapture, layer_table

# The kinds of the arena's buffers, which change from step to step ...
ARENA_KINDS = ("input", "activations", "saved for backward", "gradients", "masks", "scratch",
               "outputs")
# ... and the SRAM components that stay the same, by their names in report.json's sram_bytes.
CONSTANT = {"trainable_params": "trainable params", "param_grads": "param gradients",
            "optimizer_state": "optimizer state", "fleet_correction": "fleet correction",
            "received": "received pointers", "link_buffers": "link buffers",
            "stack": "stack"}
CATEGORIES = ARENA_KINDS + tuple(CONSTANT.values())
PEAK_BUFFERS = 5  # the largest buffers named as live at the peak


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


def buffer_table(g: Graph, plan: Plan, sram: dict[str, int] | None = None) -> dict[str, Any]:
    """Every arena buffer with its kind and lifetime, and the SRAM over the program's steps.
    `sram` is report.json's sram_bytes (memory_report), whose total is the SRAM figure; without
    it the constant components are the trainable parameters and their state."""
    nodes = step_nodes(g)
    backward_reads = set()
    for n in nodes:
        if n.phase == "backward":
            backward_reads.update(n.inputs)
    scratch = ({n.outputs[1] for n in nodes if n.op == "row_stream"}  # the stages' row rings
               | {n.outputs[0] for n in nodes if n.op == "row_stream_backward"})
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
    if sram is None:
        ts = g.tensors.values()
        sram = {"arena": plan.arena_size,
                "trainable_params": sum(t.nbytes for t in ts if t.kind == PARAM and t.trainable),
                "param_grads": sum(t.nbytes for t in ts if t.kind == PARAM_GRAD),
                "optimizer_state": sum(t.nbytes for t in ts if t.kind == OPT_STATE)}
        sram["total"] = sum(sram.values())
    constant = {CONSTANT[k]: v for k, v in sram.items() if k in CONSTANT}
    live = [0] * len(nodes)
    for r in rows:
        for k in range(max(r["first_step"], 0), min(r["last_step"], len(nodes) - 1) + 1):
            live[k] += r["bytes"]
    peak_k = max(range(len(live)), key=lambda k: (live[k], -k), default=-1)
    at_peak = [r for r in rows if r["first_step"] <= peak_k <= r["last_step"]]
    by_kind = {c: sum(r["bytes"] for r in at_peak if r["kind"] == c) for c in ARENA_KINDS}
    totals = {c: sum(r["bytes"] for r in rows if r["kind"] == c) for c in ARENA_KINDS}
    return {
        "arena_bytes": plan.arena_size,
        "sram_bytes": sram["total"],  # the SRAM figure: the plan, as `build` prints it
        "sram": sram,
        "peak_live_bytes": live[peak_k] if live else 0,  # arena bytes live at the peak step
        "peak_sram_bytes": (live[peak_k] if live else 0) + sum(constant.values()),
        "peak_step": peak_k,
        "peak_op": step_name(peak_k),
        "peak_by_kind": {k: v for k, v in by_kind.items() if v},  # the arena's, at the peak
        "peak_buffers": [{"name": r["name"], "kind": r["kind"], "bytes": r["bytes"]} for r in
                         sorted(at_peak, key=lambda r: (-r["bytes"], r["name"]))[:PEAK_BUFFERS]],
        "totals_by_kind": {k: v for k, v in {**totals, **constant}.items() if v},
        "steps": [{"step": k, "op": n.name, "phase": n.phase, "live_bytes": live[k]}
                  for k, n in enumerate(nodes)],
        "buffers": rows,
    }


def kb(n: float) -> str:
    return f"{n / 1024:.1f} KB"


SRAM_PARTS = (("arena", "arena"), ("trainable_params", "trainable params"),
              ("param_grads", "param gradients"), ("optimizer_state", "optimizer state"),
              ("fleet_correction", "fleet correction"), ("received", "received pointers"),
              ("link_buffers", "link buffers"),
              ("stack", "stack"))
UNPLANNED_PARTS = (("firmware_state", "firmware statics"), ("libc", "newlib"),
                   ("alignment", "alignment"))


def sram_lines(s: dict[str, int], capacity: int | None,
               fw: dict[str, Any] | None = None) -> list[str]:
    """The SRAM figure, the same in `build`, `report` and the ELF check: the plan (arena +
    every constant component), of the board's capacity; with a linked firmware, what the ELF
    reserves and where the difference comes from (firmware_size.unplanned_sram)."""
    of = f" of {capacity // 1024} KB" if capacity else ""
    lines = [f"SRAM {kb(s['total'])}{of} planned = " + " + ".join(
        f"{name} {kb(s[k])}" for k, name in SRAM_PARTS if k in s)]
    if fw:
        extra = fw["sram_used"] - fw["planned_sram"]
        why = fw.get("unplanned_sram", {})
        parts = ", ".join(f"{name} {why[k]} B" for k, name in UNPLANNED_PARTS if k in why)
        lines.append(f"linked firmware.elf: {kb(fw['sram_used'])} static SRAM = plan "
                     f"{'+' if extra >= 0 else '-'} {abs(extra)} B" + (f" ({parts})" if parts
                                                                        else ""))
    return lines


def format_peak(m: dict[str, Any]) -> str:
    """Where the most SRAM is live, and what: the arena's buffers by kind, the largest ones."""
    kinds = ", ".join(f"{k} {kb(v)}" for k, v in m["peak_by_kind"].items())
    big = ", ".join(f"{b['name']} {kb(b['bytes'])}" for b in m.get("peak_buffers", []))
    return (f"peak {kb(m['peak_sram_bytes'])} live at step {m['peak_step']} ({m['peak_op']}) = "
            f"constant {kb(m['peak_sram_bytes'] - m['peak_live_bytes'])} + arena buffers "
            f"{kb(m['peak_live_bytes'])} ({kinds})"
            + (f"; largest live buffers: {big}" if big else ""))


def format_table(m: dict[str, Any]) -> str:
    lines = [f"{'buffer':40s} {'kind':20s} {'bytes':>10s} {'offset':>10s} {'first':>6s} "
             f"{'last':>6s}"]
    for r in m["buffers"]:
        lines.append(f"{r['name'][:40]:40s} {r['kind']:20s} {r['bytes']:10d} {r['offset']:10d} "
                     f"{r['first_step']:6d} {r['last_step']:6d}")
    lines.append("")
    lines.append("totals by kind (bytes): " + ", ".join(
        f"{k} {v}" for k, v in m["totals_by_kind"].items()))
    lines += sram_lines(m["sram"], m.get("sram_capacity"), m.get("firmware_sram"))
    lines.append(format_peak(m))
    return "\n".join(lines)


# The peak figures report.json repeats from memory.json (build's summary, the budget check).
PEAK_KEYS = ("peak_live_bytes", "peak_sram_bytes", "peak_step", "peak_op", "peak_by_kind",
             "peak_buffers", "totals_by_kind")


def memory_details(g: Graph, plan: Plan, report: dict[str, Any],
                   capture: LayerCapture) -> dict[str, Any]:
    """memory.json: the buffer table over the report's SRAM components, the board's capacity,
    and the per-layer table (computed here, where the IR is, so `report DIR` needs no
    recompiling). `capture` is the layer_report.LayerCapture compile_model ran with."""
    m = buffer_table(g, plan, report["sram_bytes"])
    m.update(board=report["board"], sram_capacity=report.get("sram_capacity"),
             layers=layer_table(g, plan, m["buffers"], capture))
    return m
