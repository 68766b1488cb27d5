"""`tinytrain bench DIR --qemu | --port PORT`: what a training step, an inference and each op
cost, counted by the device's own tick counter.

On the QEMU twin (`--qemu`, started under `-icount shift=0`, DESIGN.md §6) the MPS2 SysTick
ticks once per 40 executed instructions: the counts are instructions. On a board (`--port`)
the firmware reads DWT->CYCCNT: the counts are core cycles, and when the build has a twin the
twin's instruction counts are measured too and printed beside them. The hello tells which
counter a device has (firmware/tt_port.h TT_TICKS_*); a twin reached over `--port` counts
instructions, a device that does not say is reported in raw ticks.

`tt_train_step` is timed as a whole (the train reply's tick count) and op by op (the
TT_PROFILE counters, read after every step). Instruction counts are deterministic, with two
caveats this module reports rather than hides: a tick reading is quantised (40 instructions
on a twin), and the step starts at an arbitrary phase within a tick (how long the UART poll
loop spun first), so one reading may differ by one tick; and data-dependent code (libm's
expf, ReLU masks, skipped non-finite steps) makes different samples or parameters cost
different counts. Cycles also depend on the board's caches and wait states. A single op
longer than 2^24 ticks (671 M instructions on a twin) would wrap its own counter
undetectably; a whole step that wraps is detected and unwrapped with the per-op sum.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.boards import Board, load_board
from tinytrain.codegen.program import REPORT_JSON
from tinytrain.device.data import load_npz
from tinytrain.device.link.device import TICKS_CYCLES, TICKS_NS, TICKS_SYSTICK, Device, DeviceInfo
from tinytrain.device.runner import load_program_info, open_program
from tinytrain.errors import BuildError

# -icount shift=0 runs 1 instruction per virtual ns and the MPS2 SysTick counts at 25 MHz
# (the twins of the M4F and M7; the AN505's at 20 MHz: QemuTwin.instructions_per_tick).
INSTRUCTIONS_PER_TICK = 40
# Unprofiled glue (input copy, loss check, counter reads) is a few % of a step; more means
# the per-op counters miss work.
AGREEMENT_TOLERANCE = 0.05
# Reruns of one sample from the initial parameters, to show the count does not drift.
REPEATS = 3
# Seconds before a request is resent: a long step under -icount can take a while.
REQUEST_TIMEOUT = 60.0
PHASES = ("forward", "loss", "backward", "recompute", "update")


def twin_instructions_per_tick(board: Board) -> float:
    """Instructions one SysTick tick of the board's twin counts under -icount shift=0: 40 on
    the MPS2 images, 50 on the AN505, 31.25 on the AN547 (its 32 MHz clock does not divide
    1 GHz, so its counts are exact to a tick, 31.25 instructions, not to one)."""
    return board.qemu.instructions_per_tick if board.qemu else INSTRUCTIONS_PER_TICK


def counter(info: DeviceInfo, board: Board | None = None) -> tuple[str, float, str]:
    """(unit, units per tick, what counts) of a device's tick counter, from its hello."""
    if info.tick_unit == TICKS_CYCLES:
        return "cycles", 1, "DWT->CYCCNT or SysTick on the core clock, core cycles"
    if info.tick_unit == TICKS_SYSTICK:
        per = INSTRUCTIONS_PER_TICK if board is None else twin_instructions_per_tick(board)
        return ("instructions", per,
                f"the MPS2 twin's SysTick under -icount shift=0: 1 tick = "
                f"{per:g} instructions; no DWT, so no cycles")
    if info.tick_unit == TICKS_NS:
        return "ns", 1, "the host's monotonic clock, nanoseconds"
    return "raw ticks", 1, "a counter the firmware does not name (older firmware)"


def measure(build_dir: Path, steps: int = 10, data: Path | None = None,
            seed: int = 0, port: str | None = None) -> dict[str, Any]:
    """Count a firmware build's step, inference and ops on its QEMU twin (port None) or on
    the device at `port`, in the unit of the device's counter."""
    build_dir = Path(build_dir)
    if steps < 1:
        raise BuildError(f"--steps must be at least 1, got {steps}")
    info = load_program_info(build_dir)
    board = load_board(info.get("board", "host"))
    xs, ys = _samples(info, data, steps, seed)
    ops = info.get("profile_ops", [])
    members = info.get("profile_members", [])  # their counters follow the ops'
    with open_program(build_dir, port=port, qemu=port is None, icount=port is None,
                      timeout=REQUEST_TIMEOUT) as dev:
        if dev.device.profile_ops != len(ops) + len(members):
            raise BuildError(f"{build_dir}: the firmware counts {dev.device.profile_ops} ops, "
                             f"program.json lists {len(ops) + len(members)}; rebuild")
        # a twin started here runs under -icount, whatever older firmware says of its ticks
        unit = counter(dev.device if port else replace(dev.device, tick_unit=TICKS_SYSTICK),
                       board)
        bits = dev.device.tick_bits
        dev.train_full(xs[0], ys[0])  # warm-up
        dev.apply_update()  # a partial batch would otherwise land inside the measured steps
        dev.profile(reset=True)
        step_ticks, skipped, wraps = [], 0, 0
        per_op = np.zeros(len(ops) + len(members), np.int64)
        for i in range(steps):
            r = dev.train_full(xs[i % len(xs)], ys[i % len(ys)])
            now = np.array(dev.profile(), np.int64)
            op_sum = int((now - per_op)[:len(ops)].sum())  # the members run inside ops
            ticks, k = _unwrap(r.ticks, op_sum, bits, len(ops))
            step_ticks.append(ticks)
            wraps += k > 0
            skipped += r.skipped
            per_op = now
        dev.profile(reset=True)
        for i in range(steps):
            dev.infer(xs[i % len(xs)])
        infer_ops = np.array(dev.profile(), np.int64)
        repeat_ticks = _repeats(dev, xs[0], ys[0])
    where = port or (board.qemu.machine if board.qemu else "")
    result = _result(build_dir, info, board.name, where, board.clock_hz, ops, steps,
                     step_ticks, per_op[:len(ops)], infer_ops[:len(ops)], repeat_ticks, skipped,
                     wraps, bits, "random" if data is None else str(data), seed, unit,
                     port is None)
    if info.get("count_members"):
        result["members"] = _members(members, per_op[len(ops):], steps, result)
    return result


def _members(members: list[dict[str, Any]], ticks: np.ndarray, steps: int,
             result: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the ops inside row and channel streams, each with its share of the step
    and of the stream it runs in (the rest of a stream is its loop and the calls' counting)."""
    u, per_tick = result["unit"], result["per_tick"]
    parent = {o["name"]: o[u] for o in result["ops"]}
    step = result["step"][u]
    out = []
    for k, m in enumerate(members):
        v = per_tick * float(ticks[k]) / steps
        out.append({"index": len(result["ops"]) + k, "name": m["name"], "op": m["op"],
                    "parent": m["parent"], "phase": m["phase"], "macs": m.get("macs", 0),
                    u: v, "share": 100.0 * v / step if step else 0.0,
                    "of_parent": 100.0 * v / parent[m["parent"]] if parent[m["parent"]]
                    else 0.0})
    return out


def with_twin(result: dict[str, Any], twin: dict[str, Any]) -> dict[str, Any]:
    """A board's result with its twin's instruction counts beside each figure."""
    ops = {o["index"]: o["instructions"] for o in twin["ops"]}
    return {**result, "twin": {"machine": twin["machine"],
                               "step": twin["step"]["instructions"],
                               "inference": twin["inference"]["instructions"],
                               "ops": [ops[o["index"]] for o in result["ops"]]}}


def _samples(info: dict[str, Any], data: Path | None, steps: int,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x in IR layout, targets) from an .npz, or seeded random ones shaped like the model's."""
    if data is not None:
        x, y = load_npz(Path(data), info)
        return x, y
    rng = np.random.default_rng(seed)
    n = steps
    x = rng.standard_normal((n, *info["input_shape_ir"])).astype(np.float32)
    if info["target_dtype"] == "s32":
        y = rng.integers(0, int(np.prod(info["output_shape_ir"])), n).astype(np.int32)
    else:
        y = rng.standard_normal((n, int(np.prod(info["target_shape"])))).astype(np.float32)
    return x, y


def _unwrap(ticks: int, op_sum: int, bits: int, n_ops: int) -> tuple[int, int]:
    """The step's true tick count and how many times its `bits`-wide counter wrapped: a step
    is never shorter than its ops (each op reading may be up to one tick long)."""
    deficit = op_sum - ticks - n_ops
    k = max(0, math.ceil(deficit / (1 << bits))) if bits < 32 else 0
    return ticks + (k << bits), k


def _repeats(dev: Device, x: np.ndarray, y: np.ndarray) -> list[int]:
    out = []
    for _ in range(REPEATS):
        dev.reset()  # the initial parameters again: the same instructions should run
        out.append(dev.train_full(x, y).ticks)
    return out


def _result(build_dir: Path, info: dict[str, Any], board: str, machine: str, clock_hz: int,
            ops: list[dict[str, str]], steps: int, step_ticks: list[int], per_op: np.ndarray,
            infer_ops: np.ndarray, repeat_ticks: list[int], skipped: int, wraps: int,
            bits: int, samples: str, seed: int, unit: tuple[str, int, str],
            twin: bool) -> dict[str, Any]:
    u, per_tick, what = unit
    step_mean = per_tick * float(np.mean(step_ticks))
    op_rows = [{"index": k, "name": o["name"], "op": o["op"], "phase": o["phase"],
                "macs": o.get("macs", 0), u: per_tick * float(per_op[k]) / steps,
                "share": 100.0 * per_tick * float(per_op[k]) / steps / step_mean}
               for k, o in enumerate(ops)]
    phases = {p: sum(r[u] for r in op_rows if r["phase"] == p) for p in PHASES}
    op_sum = sum(phases.values())
    fwd = [k for k, o in enumerate(ops) if o["phase"] == "forward"]
    report = build_dir / REPORT_JSON
    macs = json.loads(report.read_text()).get("macs") if report.exists() else None
    return {
        "build_dir": str(build_dir), "model": info.get("model_name"), "board": board,
        "machine": machine, "on_twin": twin, "clock_hz": clock_hz,
        "batch": info.get("sgd", {}).get("batch", 1),
        "samples": samples, "seed": seed, "steps": steps,
        "unit": u, "counter": what, "per_tick": per_tick, "tick_bits": bits,
        "step": {u: step_mean, "min": per_tick * min(step_ticks),
                 "max": per_tick * max(step_ticks), "ticks": step_ticks, "wrapped_steps": wraps,
                 "skipped_nonfinite": skipped},
        "inference": {u: per_tick * float(infer_ops[fwd].sum()) / steps,
                      "runs": steps,
                      "counts": "forward ops only, without the input copy and output head"},
        "ops": op_rows,
        "phases": {**phases, "glue": step_mean - op_sum},
        "profile_check": {"ops_sum": op_sum, "step": step_mean,
                          "ratio": op_sum / step_mean if step_mean else 0.0,
                          "tolerance": AGREEMENT_TOLERANCE,
                          "agrees": abs(1 - op_sum / step_mean) <= AGREEMENT_TOLERANCE
                          if step_mean else False},
        "repeat": {"ticks": repeat_ticks, "spread_ticks": max(repeat_ticks) - min(repeat_ticks)},
        "macs": macs,
    }


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


def _n(v: float) -> str:
    return f"{round(v):,}"


def format_table(result: dict[str, Any], top: int = 10) -> str:
    r, s, u = result, result["step"], result["unit"]
    tw = r.get("twin")
    src = (f"random samples (seed {r['seed']})" if r["samples"] == "random"
           else f"samples from {r['samples']}")
    where = (f"the QEMU twin of {r['board']} ({r['machine']})" if r["on_twin"]
             else f"{r['board']} at {r['machine']}")
    lines = [f"{r['model']} on {where}; counter: {r['counter']}",
             f"{r['steps']} training steps on {src}, batch {r['batch']}", "",
             f"training step  {_n(s[u]):>12} {u}  (mean; min {_n(s['min'])}, max "
             f"{_n(s['max'])})",
             f"inference      {_n(r['inference'][u]):>12} {u}  ({r['inference']['counts']})"]
    if tw:
        lines += [f"on the twin    {_n(tw['step']):>12} instructions per step "
                  f"({s[u] / max(tw['step'], 1):.2f} {u} per instruction), "
                  f"{_n(tw['inference'])} per inference ({tw['machine']})"]
    macs = r.get("macs")
    if macs:
        total = sum(macs.values())
        lines.append(f"MACs per step  {_n(total):>12}               "
                     f"({s[u] / max(total, 1):.1f} {u} per MAC)")
    if s["wrapped_steps"]:
        lines.append(f"note: the {r['tick_bits']}-bit step counter wrapped in "
                     f"{s['wrapped_steps']} steps; unwrapped with the per-op sums")
    if s["skipped_nonfinite"]:
        lines.append(f"note: {s['skipped_nonfinite']} steps had a non-finite loss and skipped "
                     "backward and update; they pull the mean down")
    if r["steps"] % r["batch"]:
        lines.append(f"note: {r['steps']} steps is not a multiple of batch {r['batch']}; the "
                     "update share is off")
    lines += ["", f"{'phase':<22}{u:>14}{'share':>8}"]
    present = {o["phase"] for o in r["ops"]} | {"glue"}
    for p, v in r["phases"].items():
        if p not in present:
            continue
        name = "glue (unprofiled)" if p == "glue" else p
        lines.append(f"{name:<22}{_n(v):>14}{100 * v / s[u]:>7.1f}%")
    order = sorted(range(len(r["ops"])), key=lambda k: -r["ops"][k][u])[:top]
    ops = [r["ops"][k] for k in order]
    width = max([len(o["name"]) for o in ops] + [4])
    extra = f"{'instructions':>14}" if tw else ""
    lines += ["", f"top {len(ops)} ops per training step",
              f"{'name':<{width}}  {'op':<24}{'phase':<10}{u:>14}{'share':>8}"
              f"{'per MAC':>9}{extra}"]
    for k, o in zip(order, ops, strict=True):
        per_mac = f"{o[u] / o['macs']:>9.2f}" if o.get("macs") else f"{'':>9}"
        twin_col = f"{_n(tw['ops'][k]):>14}" if tw else ""
        lines.append(f"{o['name']:<{width}}  {o['op']:<24}{o['phase']:<10}"
                     f"{_n(o[u]):>14}{o['share']:>7.1f}%{per_mac}{twin_col}")
    inside = r.get("members")
    if inside:
        order = sorted(range(len(inside)), key=lambda k: -inside[k][u])[:top]
        width = max([len(inside[k]["name"]) for k in order] + [4])
        lines += ["", f"top {len(order)} ops inside row and channel streams (counted one by "
                  "one: the build has profile_members)",
                  f"{'name':<{width}}  {'op':<24}{u:>14}{'share':>8}{'of its':>8}{'per MAC':>9}"]
        for k in order:
            m = inside[k]
            per_mac = f"{m[u] / m['macs']:>9.2f}" if m.get("macs") else f"{'':>9}"
            lines.append(f"{m['name']:<{width}}  {m['op']:<24}{_n(m[u]):>14}"
                         f"{m['share']:>7.1f}%{m['of_parent']:>7.1f}%{per_mac}")
    c, rep = r["profile_check"], r["repeat"]
    verdict = "agree" if c["agrees"] else f"DISAGREE by more than {100 * c['tolerance']:.0f}%"
    lines += ["", f"per-op sum {_n(c['ops_sum'])} vs whole step {_n(c['step'])} {u}: "
              f"{100 * c['ratio']:.1f}%, {verdict} (the rest is glue outside the ops)",
              f"same sample from the initial parameters, {len(rep['ticks'])} runs: "
              f"{', '.join(map(str, rep['ticks']))} ticks (a reading may be one tick off: the "
              "step starts at any phase of a tick)"]
    if r["clock_hz"] and u == "cycles":
        ms = 1e3 * s[u] / r["clock_hz"]
        lines.append(f"{ms:.2f} ms per step at {r['clock_hz'] / 1e6:g} MHz")
    elif r["clock_hz"] and u == "instructions":
        ms = 1e3 * s[u] / r["clock_hz"]
        lines.append(f"estimate, not a measurement: {ms:.2f} ms per step at "
                     f"{r['clock_hz'] / 1e6:g} MHz if the core ran 1 instruction per cycle")
    return "\n".join(lines)
