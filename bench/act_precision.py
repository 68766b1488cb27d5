"""What the int8 forward's activation rounding costs training, and what finer or stochastic
activations would win back: bench/auto_plan.py's int8 MobileNetV2 task and plan in PyTorch
only (no C builds), one plan, several pretrained networks and sample orders.

    python bench/act_precision.py [--networks 8] [--orders 10] [--plan SPEC] [--json FILE]

Arms, each the plan trained in fp32 with the same samples, orders, lr and batch (auto_plan's
int8 table's: batch INT8_BATCH, lr INT8_LR), held-out accuracy through the arm's forward:
  - fp32: PyTorch, no rounding (the issue's bar is int8 within 0.5 point of it);
  - int8: through the int8 build's forward (bench/int8_forward.py), exact fp32 updates: the
    best any int8 update rule can do, what the int8 arms of auto_plan.py match;
  - int8, stochastic: the same, each activation rounded down or up at random while training
    (exact on average; inference rounds to nearest): would dithering the device's
    requantisation during training win the points back at no SRAM?
  - 16-bit activations: every activation on a grid 256 times finer over the same range
    (TFLite's 16x8 mode's resolution), the weights still int8.
Each arm's difference to fp32 is taken run by run and its standard error over the networks'
means (auto_plan.mean_se). The SRAM lines say what the plan needs with int8 activations (the
build's planner) and at least what 16-bit ones would add: the int8 activation, saved-for-backward
and ring bytes live at the int8 plan's peak, once more (the planner has no 16-bit
activations; the peak could move, so this is a lower bound).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import auto_plan  # noqa: E402  (the task, the networks, the PyTorch runs)
from int8_forward import build_quant, with_activations  # noqa: E402

from tinytrain.autoplan.planner import compile_plan  # noqa: E402
from tinytrain.boards import load_board  # noqa: E402
from tinytrain.reports.memory import buffer_table  # noqa: E402
from tinytrain.reports.report import memory_report  # noqa: E402

# auto_plan's 64 KB plan (README): biases of the last 49 layers, the 16 expand convs at 1/8 of
# their input channels, the plan whose int8 arms lose 1.5 points to PyTorch fp32
PLAN_64KB = ("tte:n_bias=49,idx=3-6-9-12-15-18-21-24-27-30-33-36-39-42-45-48,ratio="
             + "-".join(["0.125"] * 16))
ARMS = {"fp32": None, "int8": (8, "nearest"), "int8, stochastic": (8, "stochastic"),
        "16-bit activations": (16, "nearest")}
# int8 buffers at the peak that 16-bit activations would double (reports/memory.py's kinds;
# the streams' rings are "scratch")
ACTIVATION_KINDS = ("activations", "saved for backward", "scratch")


def sram(task: auto_plan.Task, spec: str) -> dict[str, int]:
    """The plan's SRAM with int8 activations, and its int8 activation bytes (activations,
    saved for backward, the streams' rings) live at its peak."""
    g, plan = compile_plan(task.g0, task.opts, spec)
    r = memory_report(g, plan, load_board("host"))
    m = buffer_table(g, plan, r["sram_bytes"])
    k = m["peak_step"]
    act = sum(b["bytes"] for b in m["buffers"] if b["first_step"] <= k <= b["last_step"]
              and b["kind"] in ACTIVATION_KINDS and g.t(b["name"]).dtype == "s8")
    return {"total": int(r["sram_bytes"]["total"]), "activations_at_peak": int(act)}


def run(networks: int, orders: int, spec: str, work: Path, log) -> dict:
    d = auto_plan.mobilenet_task()
    accs: dict[str, list[float]] = {a: [] for a in ARMS}
    memory = None
    for seed in range(auto_plan.SEED, auto_plan.SEED + networks):
        t0 = time.perf_counter()
        task, _, state = auto_plan.mobilenet_world(d, seed, work)
        plan = auto_plan.torch_plan(task, spec)
        q8 = build_quant(task.g0, spec, task.opts)
        if memory is None:
            memory = sram(task, spec)
        for arm, how in ARMS.items():
            quant = None if how is None else with_activations(q8, *how)
            accs[arm] += auto_plan.torch_runs(state, plan, d, auto_plan.INT8_LR,
                                              auto_plan.INT8_BATCH, orders, quant)
        log(f"network {seed}: " + ", ".join(
            f"{a} {100 * np.mean(v[-orders:]):.1f} %" for a, v in accs.items())
            + f" ({time.perf_counter() - t0:.0f} s)")
    return {"plan": spec, "networks": networks, "orders": orders, "lr": auto_plan.INT8_LR,
            "batch": auto_plan.INT8_BATCH, "accuracy": accs, "sram": memory}


def table(res: dict) -> str:
    n = res["networks"]
    ref = res["accuracy"]["fp32"]
    lines = [f"plan `{res['plan']}`, {n} networks x {res['orders']} sample orders, batch "
             f"{res['batch']}, lr {res['lr']}", "",
             "| activations | held-out accuracy | vs fp32 (points) | within 0.5 |",
             "|---|---:|---:|---|"]
    for arm, accs in res["accuracy"].items():
        m, se = auto_plan.mean_se(100 * np.asarray(accs), n)
        if arm == "fp32":
            lines.append(f"| {arm} | {m:.1f} ± {se:.1f} % | | |")
            continue
        g, gse = auto_plan.mean_se(auto_plan.gap(accs, ref), n)
        lines.append(f"| {arm} | {m:.1f} ± {se:.1f} % | {g:+.2f} ± {gse:.2f} | "
                     f"{'yes' if auto_plan.meets(g, gse) else 'no'} |")
    s = res["sram"]
    lines += ["", f"SRAM of the plan (int8 activations): {s['total'] / 1024:.1f} KB; with "
              f"16-bit activations at least {(s['total'] + s['activations_at_peak']) / 1024:.1f}"
              f" KB (the {s['activations_at_peak'] / 1024:.1f} KB of int8 activations, saved "
              "tensors and rings at the int8 peak, twice)"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", type=int, default=8, help="pretrained from seeds 0, 1, ...")
    ap.add_argument("--orders", type=int, default=10, help="sample orders per network")
    ap.add_argument("--plan", default=PLAN_64KB, help="the --update spec (default: auto_plan's "
                    "64 KB plan)")
    ap.add_argument("--jobs", type=int, default=auto_plan.JOBS,
                    help="PyTorch processes at a time (default: every core)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    auto_plan.JOBS = max(1, a.jobs)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        res = run(a.networks, a.orders, a.plan, Path(tmp), log)
    print(table(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
