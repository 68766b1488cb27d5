"""Peak SRAM of on-device training plans for the MCU reference models (128x128, batch 1).

    python bench/memory.py          # fp32; Markdown tables; add --json FILE to keep the numbers
    python bench/memory.py --int8   # the same models quantised (--quantize int8), next to TTE
    python bench/memory.py --int8 --board stm32f746   # all fifteen TTE schemes built and linked
                                                      # for a board (bench/board_fit.py)

With --int8 each model is quantised by tinytrain's post-training quantiser, calibrated on two
random images (memory does not depend on the scales), and the full-update fp32 figure is
printed alongside, since TTE's 2939/2745/3650 KB "full update" baselines are fp32 training.

For each model and update plan, with and without the memory passes (fused updates, 1-bit
ReLU masks, split partial weights, row-streamed stem, backward reordering, in-place ops):
peak SRAM = planned arena + trainable parameters + gradient buffers + optimizer state
(plain SGD, as TTE's main results). Frozen parameters live in flash. Numbers come from the
planner, the same figures `tinytrain build` reports and the linked binary reserves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torch_models import export  # noqa: E402
from tests.tte_schemes import MAIN_SCHEME, NETWORKS, SCHEMES, TTE_PEAK_KB  # noqa: E402
from tinytrain.boards import load_board  # noqa: E402
from tinytrain.passes.pipeline import Options, compile_model  # noqa: E402
from tinytrain.reports.report import memory_report  # noqa: E402

# TTE's three networks, each with its 99 KB-class shipped scheme and TTE's published peak.
MODELS = {name: (make, SCHEMES[name, MAIN_SCHEME[name]], TTE_PEAK_KB[name])
          for name, make in NETWORKS.items()}
PLANS = ("full", "last:8", "last:4", "last:2", "bias", "TTE scheme", "none")


def measure(path: Path, update: str, passes: bool, calib: Path | None = None) -> dict:
    q = {"quantize": "int8", "calib": calib} if calib else {}
    g, plan = compile_model(path, Options(update=update, memory_passes=passes, **q))
    r = memory_report(g, plan, load_board("host"))
    return {"sram": r["sram_bytes"]["total"], "arena": plan.arena_size,
            "params": r["sram_bytes"]["trainable_params"], "grads": r["sram_bytes"]["param_grads"],
            "trainable": r["params"]["trainable"], "macs_bwd": r["macs"]["backward"]}


def kb(n: int) -> str:
    return f"{n / 1024:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ap.add_argument("--int8", action="store_true", help="quantise the models to int8 first")
    ap.add_argument("--board", help="build and link all fifteen TTE schemes for this board "
                    "instead (int8; the table of bench/board_fit.py)")
    args = ap.parse_args()
    if args.board:
        import board_fit

        board_fit.main(["--board", args.board] + (["--json", str(args.json)] if args.json
                                                    else []))
        return
    dtype = "int8" if args.int8 else "fp32"
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, scheme, tte_kb) in MODELS.items():
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = export(make(), Path(tmp) / "m.onnx")
            calib = None
            if args.int8:
                calib = Path(tmp) / "calib.npz"
                rng = np.random.default_rng(0)
                np.savez(calib, x=rng.uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
            rows = {}
            for plan in PLANS:
                spec = scheme if plan == "TTE scheme" else plan
                rows[plan] = {"spec": spec, "without": measure(path, spec, False, calib),
                              "with": measure(path, spec, True, calib)}
            results[name] = {"rows": rows, "tte_int8_kb": tte_kb,
                             "fp32_full": measure(path, "full", False) if args.int8 else None}

    for name, res in results.items():
        rows = res["rows"]
        print(f"\n### {name} @128x128, batch 1, {dtype}\n")
        print("| plan | trainable params | peak SRAM KB without passes | arena KB | "
              "peak SRAM KB with passes | arena KB | saved |")
        print("|---|---|---|---|---|---|---|")
        for plan, r in rows.items():
            a, b = r["without"], r["with"]
            print(f"| {plan} | {b['trainable']:,} | {kb(a['sram'])} | {kb(a['arena'])} | "
                  f"{kb(b['sram'])} | {kb(b['arena'])} | {a['sram'] / b['sram']:.2f}x |")
        full = rows["full"]["without"]["sram"]
        best = rows["TTE scheme"]["with"]["sram"]
        floor = rows["none"]["with"]["sram"]
        print(f"\nfull update without passes ÷ TTE scheme with passes: **{full / best:.1f}x** "
              f"({kb(full)} KB → {kb(best)} KB in {dtype}; TTE reports "
              f"{res['tte_int8_kb']} KB in int8). Floor: inference alone needs {kb(floor)} KB "
              f"in {dtype}, so no {dtype} plan can reach more than {full / floor:.1f}x.")
        if res["fp32_full"]:
            f32 = res["fp32_full"]["sram"]
            print(f"fp32 full update ({kb(f32)} KB, the kind of baseline TTE's full-update "
                  f"figures are) ÷ int8 TTE scheme with passes: **{f32 / best:.1f}x**.")
        print(f"scheme: `{rows['TTE scheme']['spec']}`")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
