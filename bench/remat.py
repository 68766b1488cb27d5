"""What rematerialisation buys: SRAM, whether the board's linker accepts the program, and the
instructions it costs, for TTE's three int8 networks at 128x128.

    python bench/remat.py                          # everything (about an hour on 2 cores)
    python bench/remat.py --models mbv2 --no-instructions   # planner and linker only
    python bench/remat.py --plans last:24,bias --json remat.json

For each network and plan (`bias`, `last:16`, `last:24`, `last:32` and the network's three
largest TTE schemes) three builds are compared: `--remat off`, and `--remat auto` (the default)
for each board, which recomputes only as much as that board needs. Columns:
- arena and total: the planner's figures (`build`'s SRAM figure);
- F746 / nRF: "fits" when `tinytrain build --board B` links the firmware (the linker's verdict,
  which also counts the firmware's own statics); a plan the planner already puts above the
  board's SRAM is not linked (its ELF could only be larger): "no";
- instructions per training sample on the STM32F746's QEMU twin (Cortex-M7, `-icount`,
  `tinytrain.device.bench.measure`), with the recompute ops' own share. The nRF52840's plan is
  measured on the M7 twin too, built for the F746 with --max-sram set to the nRF52840's budget
  (both boards reserve the same stack and link buffers, so the recompute chosen is the same).
  A build that does not link on the F746 has no count ("-").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torch_models import export  # noqa: E402
from tests.tte_schemes import NETWORKS, SCHEMES  # noqa: E402
from tinytrain.boards import load_board, sram_limits  # noqa: E402
from tinytrain.device.bench import measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.passes.pipeline import Options, compile_model  # noqa: E402
from tinytrain.reports.report import memory_report  # noqa: E402

SHORT = {"mbv2": "MobileNetV2-w0.35", "proxyless": "ProxylessNAS-w0.3", "mcunet": "MCUNet-5FPS"}
PLANS = ("bias", "last:16", "last:24", "last:32")
BOARDS = ("stm32f746", "nrf52840")
STEPS = 2  # measured training steps per build (counts repeat exactly; bench_qemu checks it)


def _schemes(net: str) -> dict[str, str]:
    """The network's three largest TTE schemes, named by their budget (e.g. "TTE 99 KB")."""
    kbs = sorted(kb for n, kb in SCHEMES if n == net)[-3:]
    return {f"TTE {kb} KB": SCHEMES[net, kb] for kb in kbs}


def _budget(board: str) -> int:
    return min(sram_limits(load_board(board), None))[0]


def _plan(path: Path, opts: Options) -> dict:
    g, plan = compile_model(path, opts)
    r = memory_report(g, plan, load_board(opts.board))
    return {"arena": r["sram_bytes"]["arena"], "total": r["sram_bytes"]["total"],
            "recompute_macs": r["macs"]["recompute"],
            "step_macs": r["macs"]["forward"] + r["macs"]["backward"],
            "remat": len(r["remat"])}


def _link(path: Path, opts: Options, out: Path, max_sram: int | None = None) -> dict | None:
    try:
        r = build(path, out, opts, max_sram=max_sram)
    except TinyTrainError as e:
        return {"fits": False, "why": str(e).splitlines()[0]}
    return {"fits": True, "sram_used": r["firmware"]["sram_used"]}


def _count(out: Path, steps: int) -> dict:
    m = measure(out, steps=steps)
    return {"instructions": m["step"]["instructions"],
            "recompute": m["phases"].get("recompute", 0.0)}


def run(net: str, path: Path, calib: Path, plans: dict[str, str], tmp: Path,
        instructions: bool, steps: int) -> list[dict]:
    rows = []
    for label, spec in plans.items():
        base = Options(update=spec, quantize="int8", calib=calib, board="stm32f746")
        row: dict = {"network": net, "plan": label, "update": spec}
        # the three builds: off, auto for the F746, auto for the nRF52840
        variants = {"off": replace(base, remat="off"), "stm32f746": base,
                    "nrf52840": replace(base, board="nrf52840")}
        for key, opts in variants.items():
            try:
                row[key] = _plan(path, opts)
            except TinyTrainError as e:
                row[key] = {"error": str(e).splitlines()[0]}
                continue
            boards = BOARDS if key == "off" else (key,)
            for b in boards:
                if row[key]["total"] > _budget(b):
                    row[key][b] = {"fits": False, "why": "planned SRAM above the board's"}
                else:
                    row[key][b] = _link(path, replace(opts, board=b), tmp / f"{key}-{b}")
        if instructions:
            for key in ("off", "stm32f746", "nrf52840"):
                v = row.get(key, {})
                if "error" in v:
                    continue
                same = key != "off" and v["remat"] == 0 and "instructions" in row["off"]
                if same:  # nothing recomputed: the build is the plain one
                    v.update(instructions=row["off"]["instructions"], recompute=0.0)
                    continue
                out = tmp / f"count-{key}"
                # the nRF52840's plan on the M7 twin: the F746 with the nRF's budget
                max_sram = _budget("nrf52840") if key == "nrf52840" else None
                opts = replace(variants[key], board="stm32f746")
                if v["total"] > _budget("stm32f746") or not _link(path, opts, out,
                                                                  max_sram)["fits"]:
                    continue
                v.update(_count(out, steps))
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _kb(n: float) -> str:
    return f"{n / 1024:.1f}"


def _fits(v: dict, board: str) -> str:
    f = v.get(board)
    return "-" if f is None else "fits" if f["fits"] else "no"


def _ins(v: dict, off: dict) -> str:
    if "instructions" not in v:
        return "-"
    s = f"{v['instructions'] / 1e6:.1f} M"
    if v.get("recompute"):
        plain = v["instructions"] - v["recompute"]
        s += f" (recompute {100 * v['recompute'] / plain:.1f} %"
        if "instructions" in off and off is not v:
            s += f"; vs off {100 * (v['instructions'] / off['instructions'] - 1):+.1f} %"
        s += ")"
    return s


HEADER = ("| network | plan | off: arena / total KB | F746 / nRF | instructions (M7) "
          "| auto F746: arena / total KB | F746 | instructions (M7) "
          "| auto nRF: arena / total KB | nRF | instructions (M7) |\n"
          "|---|---|---:|---|---:|---:|---|---:|---:|---|---:|")


def _line(r: dict) -> str:
    off, a, n = r["off"], r["stm32f746"], r["nrf52840"]

    def mem(v: dict) -> str:
        if "error" in v:
            return v["error"][:40]
        extra = f" (+{100 * v['recompute_macs'] / v['step_macs']:.1f} % MACs)" \
            if v.get("recompute_macs") else ""
        return f"{_kb(v['arena'])} / {_kb(v['total'])}{extra}"

    return (f"| {r['network']} | {r['plan']} | {mem(off)} | {_fits(off, 'stm32f746')} / "
            f"{_fits(off, 'nrf52840')} | {_ins(off, off)} | {mem(a)} | {_fits(a, 'stm32f746')} "
            f"| {_ins(a, off)} | {mem(n)} | {_fits(n, 'nrf52840')} | {_ins(n, off)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mbv2,proxyless,mcunet",
                    help=f"comma-separated: {', '.join(SHORT)}")
    ap.add_argument("--plans", default=None, help="comma-separated --update specs (default: "
                    "bias, last:16/24/32 and the three largest TTE schemes)")
    ap.add_argument("--no-instructions", action="store_true", help="skip the QEMU counts")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        calib = tmp / "calib.npz"
        np.savez(calib, x=np.random.default_rng(0).uniform(0, 1, (2, 3, 128, 128))
                 .astype(np.float32))
        print("\n### Rematerialisation on TTE's networks (int8, 128x128)\n")
        print(HEADER, flush=True)
        for short in args.models.split(","):
            net = SHORT[short.strip()]
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = export(NETWORKS[net](), tmp / f"{short}.onnx")
            plans = ({p: p for p in args.plans.split(",")} if args.plans
                     else {**{p: p for p in PLANS}, **_schemes(net)})
            rows += run(net, path, calib, plans, tmp, not args.no_instructions, args.steps)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
