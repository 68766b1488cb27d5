"""Memory and compute figures of a compiled program, as report.json and a printed summary."""

from __future__ import annotations

from typing import Any

from tinytrain.boards import Board
from tinytrain.ir import CONST, PARAM, Graph
from tinytrain.passes.memory_layout import constant_sram, in_flash
from tinytrain.passes.memory_plan import Plan
from tinytrain.passes.pipeline import macs
from tinytrain.passes.receive import received
from tinytrain.reports.memory import format_peak, sram_lines


def memory_report(g: Graph, plan: Plan, board: Board) -> dict[str, Any]:
    ts = list(g.tensors.values())
    trainable = sum(t.nbytes for t in ts if t.kind == PARAM and t.trainable)
    frozen = sum(t.nbytes for t in ts if in_flash(t) and t.kind in (PARAM, CONST))
    sram = {"arena": plan.arena_size, **constant_sram(g, board)}
    sram["total"] = sum(sram.values())
    # trainable parameters also keep their initial values in flash so tt_init() can reset them
    flash = {"frozen_params": frozen, "trainable_init": trainable}
    flash["total"] = sum(flash.values())
    checkpoint = None
    if board.is_mcu:  # checkpoint slots sized for the trainable parameters and the training
        # state, each entry padded to the board's write unit; the program the rest
        from tinytrain.codegen.render import checkpoint_entries, flash_layout

        lay = flash_layout(g, board)  # the layout the build links with
        flash["checkpoint_slot"] = lay.slot_bytes
        flash["program_region"] = lay.program_bytes
        params, state = checkpoint_entries(g)
        # the firmware keeps the state whenever it fits the slot (tt_checkpoint.c geom_get)
        with_state = board.checkpoint_bytes(params + state) <= lay.slot_bytes
        state = state if with_state else []
        n_received = len(received(g))  # first among the entries, padded (tt_checkpoint.h)
        checkpoint = {"bytes": board.checkpoint_bytes(params + state),
                      "params": sum(params[n_received:]), "received": sum(params[:n_received]),
                      "state": sum(state), "with_state": with_state, "slot": lay.slot_bytes}
    return {
        "board": board.name,
        "sram_capacity": board.sram_bytes,  # None: not limited (the host)
        "model": g.meta.get("model_name"),
        "model_sha256": g.meta.get("model_sha256"),
        "loss": g.meta.get("loss"),
        "update": g.meta.get("update"),
        "sgd": g.meta.get("sgd"),
        "sram_bytes": sram,
        "flash_bytes": flash,
        "checkpoint": checkpoint,  # what one checkpoint holds (None: no checkpoint flash)
        "macs": macs(g),
        "soft_float": _soft_float(g, board),
        "remat": list(g.meta.get("remat", [])),  # saved activations recomputed (passes/remat)
        # int8 weights whose scales were widened for training (passes/weight_headroom)
        "weight_headroom": g.meta.get("weight_headroom"),
        # --rounding master: the weights whose forward reads the 16-bit master, and the int8
        # weights trained in part, which read their floor (their shadow holds just the slice)
        "master_read": _master_read(g),
        "params": {"trainable": sum(t.size for t in ts if t.kind == PARAM and t.trainable),
                   "frozen": sum(t.size for t in ts if t.kind == PARAM and not t.trainable)},
        # --receive: frozen tensors the link can replace (passes/receive.py), in link order
        "received": {"plan": g.meta.get("receive"), "tensors": received(g),
                     "bytes": sum(g.t(n).nbytes for n in received(g))} if received(g) else None,
        "nodes": {ph: sum(1 for n in g.nodes if n.phase == ph)
                  for ph in ("forward", "loss", "backward", "update")},
    }


def _soft_float(g: Graph, board: Board) -> dict[str, Any] | None:
    """On a core without an FPU (board.soft_float_per_mac, measured on its twin): the fp32
    MACs of a step (the backward; the forward too for an fp32 model) and what they cost."""
    if not board.soft_float_per_mac:
        return None
    m = macs(g)
    int8 = any(n.op.endswith("_q8") for n in g.nodes if n.phase == "forward")
    fp32 = m["backward"] + m["recompute"] + (0 if int8 else m["forward"])
    return {"instructions_per_mac": board.soft_float_per_mac, "fp32_macs": fp32,
            "instructions": round(fp32 * board.soft_float_per_mac)}


def _master_read(g: Graph) -> dict[str, list[str]] | None:
    if g.meta.get("sgd", {}).get("rounding") != "master":
        return None
    whole = sorted(g.meta.get("master_read", {}))
    floored = sorted(t.name for t in g.params(trainable=True)
                     if t.dtype == "s8" and t.name not in whole)
    return {"whole": whole, "floored": floored}


CODE_ROWS = 6  # objects named in the summary's code line; report.json has them all


def kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


def summary(r: dict[str, Any]) -> str:
    s, f, m = r["sram_bytes"], r["flash_bytes"], r["macs"]
    fw = r.get("firmware")
    lines = [f"board {r['board']}: {r['params']['trainable']} trainable / "
             f"{r['params']['frozen']} frozen parameters"]
    lines += ["  " + line for line in sram_lines(s, r.get("sram_capacity"), fw)]
    lines += [
        f"  flash {kb(f['total'])} = frozen params {kb(f['frozen_params'])} + trainable "
        f"initial values {kb(f['trainable_init'])} (code not included)",
        f"  MACs  forward {m['forward']:,}  backward {m['backward']:,} per sample"
        + (f"  recompute {m['recompute']:,} (+{100 * m['recompute'] / step:.1f} %)"
           if m.get("recompute") and (step := m["forward"] + m["backward"]) else ""),
    ]
    if r.get("fp32_mac") == "fused":
        lines.append("  fp32 1x1 backward sums: fused multiply-adds (--fp32-mac fused; a host "
                     "build with the same option computes the same bits)")
    if r.get("soft_float"):
        sf = r["soft_float"]
        lines.append(f"  fp32 in soft-float (no FPU on this core): ~{sf['instructions_per_mac']:g}"
                     f" instructions per fp32 MAC (measured on the twin), so the step's "
                     f"{sf['fp32_macs']:,} fp32 MACs cost ~{sf['instructions'] / 1e6:.1f} M "
                     "instructions")
    if r.get("remat"):
        lines.append(f"  rematerialised: {len(r['remat'])} saved activations are recomputed in "
                     "the backward instead of kept (--remat off keeps them)")
    if r.get("received"):
        rc = r["received"]
        lines.append(f"  received ({rc['plan']}): {len(rc['tensors'])} frozen tensors, "
                     f"{kb(rc['bytes'])}, replaceable over the link: "
                     + ", ".join(rc["tensors"]))
    if r.get("weight_headroom"):
        h = r["weight_headroom"]
        lines.append(f"  int8: the scales of the {len(h['weights'])} trained weights are "
                     f"{h['factor']:g}x calibration's, room to grow (--weight-headroom 1 "
                     "keeps them)")
    if r.get("master_read"):
        mr = r["master_read"]
        lines.append(f"  int8 master: {len(mr['whole'])} trained weights read their 16-bit "
                     "master in the forward and input gradient"
                     + (f"; {len(mr['floored'])} trained in part read their floor, as "
                        "--rounding shadow" if mr["floored"] else ""))
    if r.get("checkpoint"):
        c = r["checkpoint"]
        lines.append(f"  checkpoint {kb(c['bytes'])} in each of two {kb(c['slot'])} flash "
                     f"slots: parameters {kb(c['params'])}"
                     + (f" + received {kb(c['received'])}" if c.get("received") else "")
                     + (f" + training state {kb(c['state'])}" if c["with_state"] else
                        " (no room for the training state: it is not kept)"))
    if fw:
        code = sum(r.get("kernels", {}).get("code_by_object", {}).values())
        lines.append(f"  linked firmware.elf: flash {kb(fw['flash_used'])} (code {kb(code)}, "
                     f"constants and .data {kb(fw['flash_used'] - code)}); stack reserve "
                     f"{kb(fw['stack_reserved'])}, deepest chain ~{fw['stack_estimate']} B")
        by_obj = r.get("kernels", {}).get("code_by_object", {})
        if by_obj:  # largest first (device/kernel_choice.code_by_object)
            top = list(by_obj.items())[:CODE_ROWS]
            rest = sum(by_obj.values()) - sum(v for _, v in top)
            lines.append("  code by object (kernel family): " + ", ".join(
                f"{k} {kb(v)}" for k, v in top)
                + (f", {len(by_obj) - len(top)} more {kb(rest)}" if rest else ""))
        generic = r.get("kernels", {}).get("generic", [])
        if generic:
            lines.append("  kernels kept generic to fit the flash: " + ", ".join(
                f"{g['family']} ({len(g['layers'])} layers, ~{kb(g['freed_estimate'])})"
                for g in generic))
    if "memory" in r:
        lines.append(f"  update {r.get('update')}; {format_peak(r['memory'])}")
    return "\n".join(lines)
