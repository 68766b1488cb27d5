"""Instructions per training sample on the QEMU twins, beside TTE and AIfES, with each op's
instructions per MAC beside the floor, sorted by the instructions left above it (the next gap
to close is the top row).

    python bench/speed.py                   # every board, optimised kernels; --json FILE
    python bench/speed.py --reference       # also the portable reference kernels, for the ratio
    python bench/speed.py --board stm32f746

TTE's three networks (int8, 128x128, tests/torch_models.py, each with its shipped ~99 KB
scheme, plain SGD, stochastic rounding, every memory pass; by default with trained weights,
calibrated and measured on held-out digits, bench/pretrain.py; `--weights random` for seed-0
initialisation, uniform calibration and Gaussian samples, the figures before), AIfES's two
fp32 examples (MLP 64-32-10; CNN 1x16x16 c3x3x8-pool-c3x3x16-pool-fc10; full update, SGD
batch 1) and the digits CNN of the parity tests (fp32, full update, SGD batch 1; its last
conv's gradients read the global pool's per-channel gradient, tt_pooled_opt.c). Counts come
from `tinytrain.device.bench.measure` (`-icount shift=0`: 1 SysTick tick = 40 instructions),
the figures `tinytrain bench DIR --qemu` prints; the per-op table takes the ops inside row
and channel streams one by one from a second build with `profile_members` (whose counting
adds 1-3 %: the step column stays the plain build's). Instructions under QEMU are not cycles: a
Cortex-M7 dual-issues and flash wait states differ. On a real board the firmware's step and
per-op counters read DWT->CYCCNT, i.e. cycles.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrain import accuracy, digits_rgb, pretrain  # noqa: E402  (bench/pretrain.py)

from tests import ckernel  # noqa: E402  (the kernel microbenchmarks, run on the M55 twin)
from tests.torch_models import MLP, AifesCNN, DigitsCNN, export  # noqa: E402
from tests.tte_schemes import MAIN_SCHEME, NETWORKS, SCHEMES  # noqa: E402
from tinytrain.boards import load_board  # noqa: E402
from tinytrain.device.bench import PHASES, measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import load_program_info  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

# The M7 and M4F; the M33 boards (mps2-an505 twin, SysTick at 20 MHz: 50 instructions a
# tick) and the RP2040's M0+ (ARMv6-M code on the mps2-an385's M3, fp32 in soft-float).
BOARDS = ("stm32f746", "nrf52840", "rp2350", "stm32u585", "rp2040", "corstone300")
# TTE's measured cycles per training sample on the STM32F746 (its paper's ms at 216 MHz).
TTE_CYCLES = {"MobileNetV2-w0.35": 80.6e6, "ProxylessNAS-w0.3": 95.7e6, "MCUNet-5FPS": 117.9e6}
# AIfES's instructions per training sample (SGD batch 1) for its two examples, as counted on
# the same twin by the issue that set the target.
AIFES_INSTRUCTIONS = {"AIfES MLP 64-32-10": 282_510, "AIfES CNN 16x16": 13.40e6}
TARGET_VS_TTE = 0.5  # the bar: <= 0.5x TTE's cycles
TARGET_VS_TTE_HELIUM = 0.25  # on a core with Helium (issue "helium"): <= 0.25x
TARGET_VS_AIFES = 1 / 25  # and >= 25x fewer instructions than AIfES
DIGITS_TARGET = 500_000  # the digits CNN's whole step
# Instructions per MAC a kernel cannot go below on these cores: two int8 MACs per SMLAD (int8
# forward), one fp32 multiply-accumulate per VMLA (every backward; loads not counted).
FLOOR_INT8, FLOOR_FP32 = 0.5, 1.0
# With Helium (M-profile vector extension): sixteen int8 MACs per VMLADAV, four fp32 MACs per
# VFMA. The kernels keep the reference's rounding (product and sum rounded apart: VMUL then
# VADD), so their own fp32 floor is 1/2; the table still measures against 1/4.
HELIUM_CPUS = ("cortex-m55", "cortex-m85")
FLOOR_HELIUM_INT8, FLOOR_HELIUM_FP32 = 1 / 16, 1 / 4
TOP = 6  # ops listed per model, by instructions above their floor
LR = 0.05
CALIB = 64  # calibration samples (trained weights: training digits)


def _int8_models(tmp: Path, weights: str, wanted: list[str]) -> list[dict]:
    """TTE's networks, int8, with trained weights (pretrained on the digits, calibrated on
    training digits, measured on held-out ones) or seed-0 random ones (uniform calibration,
    Gaussian samples)."""
    calib, samples = tmp / "calib.npz", None
    if weights == "trained":
        x_tr, y_tr, x_te, y_te = digits_rgb(128)
        np.savez(calib, x=x_tr[:CALIB])
        samples = tmp / "samples.npz"
        np.savez(samples, x=x_te, y=y_te.astype(np.int32))
    else:
        np.savez(calib, x=np.random.default_rng(0).uniform(0, 1, (2, 3, 128, 128))
                 .astype(np.float32))
    out = []
    for name, make in NETWORKS.items():
        if not any(w in name for w in wanted):
            continue
        torch.manual_seed(0)
        net, acc = make(), None
        if weights == "trained":
            pretrain(net, x_tr, y_tr)
            acc = accuracy(net, x_te, y_te)
            print(f"pretrained {name} on the digits at 128x128: {100 * acc:.1f} % held out "
                  "(fp32)", file=sys.stderr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = export(net, tmp / f"{name}.onnx")
        out.append({"name": name, "path": path, "kind": "int8", "data": samples,
                    "weights": weights, "fp32_accuracy": acc,
                    "opts": {"update": SCHEMES[name, MAIN_SCHEME[name]], "quantize": "int8",
                             "calib": calib}, "anchor": ("TTE cycles", TTE_CYCLES[name])})
    return out


def _models(tmp: Path, weights: str, wanted: list[str]) -> list[dict]:
    out = _int8_models(tmp, weights, wanted)
    for name, cls in (("AIfES MLP 64-32-10", MLP), ("AIfES CNN 16x16", AifesCNN),
                      ("digits CNN", DigitsCNN)):
        if not any(w in name for w in wanted):
            continue
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = export(cls(), tmp / f"{name.replace(' ', '_')}.onnx")
        anchor = (("AIfES instructions", AIFES_INSTRUCTIONS[name]) if name in AIFES_INSTRUCTIONS
                  else ("target", DIGITS_TARGET))
        out.append({"name": name, "path": path, "kind": "fp32", "data": None,
                    "weights": "random", "opts": {"sgd": SGDConfig(lr=LR)}, "anchor": anchor})
    return out


def _helium(board: str) -> bool:
    return load_board(board).cpu in HELIUM_CPUS


def _floor(kind: str, phase: str, board: str) -> float:
    if _helium(board):
        return FLOOR_HELIUM_INT8 if kind == "int8" and phase == "forward" else FLOOR_HELIUM_FP32
    return FLOOR_INT8 if kind == "int8" and phase == "forward" else FLOOR_FP32


def _leaves(r: dict, inside: dict | None) -> list[dict]:
    """The ops of measurement `r`, with each row or channel stream replaced by the ops it
    runs, counted one by one in `inside` (a profile_members build's measurement), and the
    rest of the stream (its loop, ring bookkeeping and the counting) as its own row."""
    if not inside or not inside.get("members"):
        return r["ops"]
    kids: dict[str, list[dict]] = {}
    for m in inside["members"]:
        kids.setdefault(m["parent"], []).append(m)
    whole = {o["name"]: o for o in inside["ops"]}
    out = []
    for o in r["ops"]:
        if o["name"] not in kids:
            out.append(o)
            continue
        out += kids[o["name"]]
        rest = whole[o["name"]]["instructions"] - sum(k["instructions"] for k in kids[o["name"]])
        out.append({"name": f"{o['name']} (loop)", "op": o["op"], "phase": o["phase"],
                    "instructions": rest, "macs": 0})
    return out


def _row(m: dict, board: str, kernels: str, r: dict, inside: dict | None = None) -> dict:
    label, anchor = m["anchor"]
    vs_tte = TARGET_VS_TTE_HELIUM if _helium(board) else TARGET_VS_TTE
    target = (anchor * vs_tte if m["kind"] == "int8" else
              anchor * TARGET_VS_AIFES if label.startswith("AIfES") else anchor)
    ops = [{"name": o["name"], "op": o["op"], "instructions": o["instructions"],
            "macs": o.get("macs", 0), "floor": _floor(m["kind"], o["phase"], board)}
           for o in _leaves(r, inside)]
    for o in ops:  # what the op executes beyond floor x MACs
        o["above"] = o["instructions"] - o["floor"] * o["macs"]
    ranked = sorted(ops, key=lambda o: -o["above"])
    return {"model": m["name"], "board": board, "kernels": kernels, "kind": m["kind"],
            "weights": m["weights"], "fp32_accuracy": m.get("fp32_accuracy"),
            "instructions": r["step"]["instructions"], "anchor_label": label,
            "anchor": anchor, "target": target, "macs": sum((r["macs"] or {}).values()),
            "phases": r["phases"], "floor_total": sum(o["floor"] * o["macs"] for o in ops),
            "top": ranked[:TOP], "ops": ranked}  # every op, for --json readers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", choices=BOARDS, action="append")
    ap.add_argument("--reference", action="store_true",
                    help="also measure the portable reference kernels")
    ap.add_argument("--steps", type=int, default=2, help="training steps per measurement")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--weights", choices=("trained", "random"), default="trained",
                    help="TTE's networks: pretrained on the digits (default) or seed-0 random")
    ap.add_argument("--models", help="only models whose name contains one of these "
                    "(comma list, e.g. AIfES,digits)")
    args = ap.parse_args()
    kernels = ("optimized", "reference") if args.reference else ("optimized",)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        wanted = args.models.split(",") if args.models else [""]
        for m in _models(t, args.weights, wanted):
            for board in args.board or BOARDS:
                for k in kernels:
                    out = t / f"{m['name']}-{board}-{k}".replace(" ", "_")
                    build(m["path"], out, Options(board=board, kernels=k, **m["opts"]))
                    steps = args.steps if m["kind"] == "int8" else 10 * args.steps
                    r = measure(out, steps=steps, data=m["data"])
                    inside = None
                    if k == "optimized" and load_program_info(out).get("profile_members"):
                        # the streams' ops one by one, from a second build that counts them
                        # (the step above stays the plain build's: counting costs ~1 %)
                        counted = out.with_name(out.name + "-members")
                        build(m["path"], counted, Options(board=board, kernels=k,
                                                          profile_members=True, **m["opts"]))
                        inside = measure(counted, steps=steps, data=m["data"])
                    rows.append(_row(m, board, k, r, inside))
                    print(f"measured {m['name']} on {board} ({k}): "
                          f"{rows[-1]['instructions'] / 1e6:.2f} M", file=sys.stderr)
    print("| model | board | kernels | weights | instructions / sample | instr. / MAC | floor | "
          "anchor | ratio | target | meets |")
    print("|---|---|---|---|---:|---:|---:|---|---:|---:|---|")
    for r in rows:
        ratio = r["instructions"] / r["anchor"]
        w = r["weights"] + (f" ({100 * r['fp32_accuracy']:.0f} %)" if r["fp32_accuracy"]
                            else "")
        print(f"| {r['model']} | {r['board']} | {r['kernels']} | {w} | {r['instructions']:,.0f} | "
              f"{r['instructions'] / max(r['macs'], 1):.2f} | {r['floor_total']:,.0f} | "
              f"{r['anchor_label']} {r['anchor']:,.0f} | {ratio:.2f}× | ≤ {r['target']:,.0f} | "
              f"{'yes' if r['instructions'] <= r['target'] else 'no'} |")
    print(f"\n### top {TOP} ops per sample by instructions above the floor (optimised kernels; "
          "floor: 0.5 instructions per int8 MAC with SMLAD, 1 per fp32 MAC with VMLA; on the "
          "M55, 1/16 with VMLADAV and 1/4 with VFMA; the ops inside row and channel streams one "
          "by one, from a build with profile_members)\n")
    print("| model | board | op | kind | instructions | MACs | instr. / MAC | floor | "
          "above floor |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["kernels"] != "optimized":
            continue
        for o in r["top"]:
            per = f"{o['instructions'] / o['macs']:.2f}" if o["macs"] else ""
            print(f"| {r['model']} | {r['board']} | {o['name'].lstrip('_')} | {o['op']} | "
                  f"{o['instructions']:,.0f} | {o['macs']:,} | {per} | {o['floor']} | "
                  f"{o['above']:,.0f} |")
    _by_board(rows)
    if any(_helium(b) for b in args.board or BOARDS):
        _helium_kernels()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


def _by_board(rows: list[dict]) -> None:
    """Instructions per sample of each model on each board's twin, against the M4F, and where
    each board's step goes (forward, backward, update: the phases' share)."""
    boards = [b for b in BOARDS if any(r["board"] == b for r in rows)]
    opt = {(r["model"], r["board"]): r for r in rows if r["kernels"] == "optimized"}
    models = list(dict.fromkeys(r["model"] for r in rows))
    print("\n### instructions per sample by board (optimised kernels; ratio to the M4F)\n")
    print("| model | " + " | ".join(boards) + " |")
    print("|---|" + "---:|" * len(boards))
    for m in models:
        base = opt.get((m, "nrf52840"))
        cells = []
        for b in boards:
            r = opt.get((m, b))
            cells.append("" if r is None else f"{r['instructions'] / 1e6:,.2f} M" + (
                f" ({r['instructions'] / base['instructions']:.2f}×)" if base else ""))
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("\n### where the step goes (share of the phases' instructions)\n")
    print("| model | board | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---:|" * len(PHASES))
    for (m, b), r in opt.items():
        total = sum(r["phases"].values()) or 1
        print(f"| {m} | {b} | " + " | ".join(
            f"{100 * r['phases'].get(ph, 0) / total:.0f} %" for ph in PHASES) + " |")


# The Helium kernels' microbenchmarks (tests/ckernel), each line "name ... instr/MAC" on the
# M55 twin: program, the runtime files it links, its define, and per kernel the line's pattern
# (the kernel's instructions per MAC in group 1), its floor and what reaches the floor.
HELIUM_BENCHES = (
    ("test_conv_opt.c", ("tt_q8_core.c", "tt_q8_master.c", "tt_q8_conv_opt.c", "tt_q8_mve.c",
                         "tt_q8_stem_mve.c"),
     "BENCH", (("int8 pointwise forward (tt_q8_pw_mve)", r"^pw .* opt\s+([\d.]+)\s+opt_row",
                FLOOR_HELIUM_INT8, "VMLADAV"),
               # 27 taps: two VMLADAVs an output (the row form, as the firmware streams it)
               ("int8 3x3x3 stem forward, by rows (tt_q8_stem_mve)",
                r"^reg .*3->16\s+k3 s2 .* opt_row\s+([\d.]+)", 2 / 27, "VMLADAV"))),
    ("test_cs_opt.c", ("tt_channel_stream.c", "tt_q8_core.c", "tt_q8_master.c",
                       "tt_f32_bwd_opt.c", "tt_f32_mve.c", "tt_f32_mask_mve.c", "tt_f32_fma.c"),
     "CS_BENCH TT_F32_FMA=1",  # the M55 boards fuse the 1x1 sums (--fp32-mac auto)
     (("1x1 input gradient, 4 planes (tt_cs_pw_input_s8_mve)",
       r"^bench pw_input_s8_g .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("1x1 input gradient, 1 plane (tt_cs_pw_input_s8_mve)",
       r"^bench pw_input_s8 .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("1x1 input-gradient sink, 4 channels (tt_cs_pw_input_add_s8_mve)",
       r"^bench pw_input_add_s8_g .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("1x1 input-gradient sink, 1 channel (tt_cs_pw_input_add_s8_mve)",
       r"^bench pw_input_add_s8 .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      # the weight gradients' sums with their update (stochastic rounding) per MAC
      ("1x1 weight gradient, 4 rows from int8 x (tt_cs_pw_wgrad4_s8_mve)",
       r"^bench pw_weight_sgd_s8_g .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("1x1 weight gradient, 1 row from int8 x (tt_cs_pw_wgrad_s8_mve)",
       r"^bench pw_weight_sgd_s8 .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("1x1 weight gradient from float x (tt_cs_pw_wgrad_f32_mve)",
       r"^bench pw_weight_sgd_s8f .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"),
      ("3x3 depthwise input gradient (tt_cs_dw_input_mve; larger maps: FPU)",
       r"^bench dw_input_s8 .* opt\s+([\d.]+)", FLOOR_HELIUM_FP32, "VFMA"))),
    ("test_dw_opt.c", ("tt_q8_core.c", "tt_q8_binary.c", "tt_q8_dw_opt.c", "tt_q8_mve.c",
                       "tt_q8_add_mve.c"),
     "TT_DW_BENCH",
     (("int8 depthwise forward (tt_q8_dw_mve)",
       r"^dw (?!.*dead).* opt\s+([\d.]+) instr/MAC", FLOOR_HELIUM_INT8, "VMLADAV"),)),
)


def _helium_kernels() -> None:
    """Each Helium kernel's instructions per MAC over the benchmark networks' geometries (the
    kernel tests' microbenchmarks on the M55 twin), beside its floor."""
    import re

    print("\n### Helium kernels on the M55 twin (instructions per MAC over the networks' "
          "geometries, from the kernel microbenchmarks)\n")
    print("| kernel | geometries | mean | best | worst | floor | floor's instruction |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for program, files, define, kernels in HELIUM_BENCHES:
            res = ckernel.run(ckernel.HERE / program, "m55", Path(tmp) / program,
                              sources=[ckernel.RUNTIME[f] for f in files], defines=define.split())
            if res.returncode != 0:
                raise SystemExit(f"{program} failed on the M55 twin:\n{res.stdout[-2000:]}")
            for name, pattern, floor, how in kernels:
                v = [float(x) for x in re.findall(pattern, res.stdout, re.M)]
                if v:
                    print(f"| {name} | {len(v)} | {sum(v) / len(v):.2f} | {min(v):.2f} | "
                          f"{max(v):.2f} | {floor:.4g} | {how} |")


if __name__ == "__main__":
    main()
