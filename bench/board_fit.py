"""TTE's three networks with all fifteen of TTE's shipped sparse-update schemes, built for a
board: planned memory, the firmware's total, what the linked ELF really occupies, and whether
it fits (the linker's verdict, with the reason when it does not).

    python bench/board_fit.py --board stm32f746    # Markdown table; --json FILE keeps numbers
    python bench/board_fit.py --board nrf52840
    python bench/board_fit.py --board rp2040   # also rp2350, stm32u585

A program too big for the flash keeps some optimised kernel families generic (the "generic
kernels" column, with the flash each frees: tinytrain/device/kernel_choice.py); "code KB" is
the linked code alone, the rest of the ELF's flash is constants (frozen parameters, initial
values, kernel tables).

int8 models (tinytrain's quantiser, calibrated on two random images: memory does not depend
on the scales), 128x128, batch 1, plain SGD, stochastic rounding, every memory pass.
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
from tinytrain.device.build import build  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402


def kb(n: float) -> str:
    return f"{n / 1024:,.1f}"


def measure(model: Path, calib: Path, plan: str, board: str, out: Path) -> dict:
    opts = Options(update=plan, quantize="int8", calib=calib, board=board)
    try:
        r = build(model, out, opts)
    except TinyTrainError as e:
        return {"fits": False, "reason": str(e)}
    s, fw = r["sram_bytes"], r["firmware"]
    return {"fits": True, "arena": s["arena"], "trainable": s["trainable_params"],
            "planned_total": s["total"], "link_buffers": s["link_buffers"], "stack": s["stack"],
            "slot": r["flash_bytes"]["checkpoint_slot"],
            "program_region": r["flash_bytes"]["program_region"],
            "elf_flash": fw["flash_used"], "elf_sram": fw["sram_used"],
            "code": sum(r["kernels"]["code_by_object"].values()),
            "generic": [(g["family"], g["freed_estimate"]) for g in r["kernels"]["generic"]]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="stm32f746")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        calib = t / "calib.npz"
        np.savez(calib, x=np.random.default_rng(0).uniform(0, 1, (2, 3, 128, 128))
                 .astype(np.float32))
        for name, make in NETWORKS.items():
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = export(make(), t / f"{name}.onnx")
            for (net, budget), plan in SCHEMES.items():
                if net == name:
                    r = measure(model, calib, plan, args.board, t / "out")
                    rows.append({"model": name, "budget_kb": budget, "plan": plan, **r})
                    print(f"{name} {budget} KB: "
                          + (f"fits, ELF SRAM {kb(r['elf_sram'])} KB" if r["fits"] else
                             "does not fit: " + r["reason"].splitlines()[0]), file=sys.stderr)
    print(f"\n### TTE's schemes on {args.board} (int8, 128x128)\n")
    print("| model | scheme | arena + trainable KB | TTE peak KB | firmware total KB (plan + "
          "link buffers + stack) | checkpoint slot KB | program flash KB | ELF flash KB | "
          "code KB | ELF static SRAM KB | fits | generic kernels (KB freed) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        main_ = MAIN_SCHEME[r["model"]] == r["budget_kb"]
        tte = str(TTE_PEAK_KB[r["model"]]) if main_ else ""
        if r["fits"]:
            print(f"| {r['model']} | {r['budget_kb']} KB | {kb(r['arena'] + r['trainable'])} | "
                  f"{tte} | {kb(r['planned_total'])} | {kb(r['slot'])} | "
                  f"{kb(r['program_region'])} | {kb(r['elf_flash'])} | {kb(r['code'])} | "
                  f"{kb(r['elf_sram'])} | yes | "
                  + ", ".join(f"{f.removeprefix('tt_')} ({kb(n)})" for f, n in r["generic"])
                  + " |")
        else:
            reason = r["reason"].splitlines()
            why = "; ".join(x.strip() for x in reason[1:3]) or reason[0]
            print(f"| {r['model']} | {r['budget_kb']} KB | | {tte} | | | | | | | no: {why} | |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
