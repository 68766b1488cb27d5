"""Instructions per training step and per inference of the fp32 parity models on both boards'
QEMU twins (-icount shift=0: 1 SysTick tick = 40 instructions), with the top ops.

    python bench/qemu_instructions.py             # Markdown table; --json FILE keeps the numbers

Each model (tests/torch_models.py: MLP, DigitsCNN, TinyMobileNet, OpsMix, seed-0 weights) is
built for stm32f746 (Cortex-M7, twin mps2-an500) and nrf52840 (Cortex-M4F, twin mps2-an386)
with plain SGD (lr 0.05, batch 1, full update) and measured by `tinytrain.device.bench.measure`
on seeded random samples: the same figures `tinytrain bench DIR --qemu` prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torch_models import MLP, DigitsCNN, OpsMix, TinyMobileNet, export  # noqa: E402
from tinytrain.device.bench import measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

MODELS = {"MLP": MLP, "DigitsCNN": DigitsCNN, "TinyMobileNet": TinyMobileNet, "OpsMix": OpsMix}
BOARDS = ("stm32f746", "nrf52840")
LR = 0.05  # the parity tests' learning rate
TOP = 3  # ops listed per model and board


def top_ops(res: dict) -> str:
    ops = sorted(res["ops"], key=lambda o: -o["instructions"])[:TOP]
    def label(o: dict) -> str:  # the op kind only when the node name does not say it
        name = o["name"].lstrip("_")
        return name if o["op"].split("_")[0] in name.lower() else f"{name} ({o['op']})"

    return ", ".join(f"{label(o)} {o['share']:.0f}%" for o in ops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the full measurements here")
    ap.add_argument("--steps", type=int, default=10, help="training steps per measurement")
    args = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls in MODELS.items():
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                onnx = export(cls(), Path(tmp) / f"{name}.onnx")
            for board in BOARDS:
                out = Path(tmp) / f"{name}-{board}"
                build(onnx, out, Options(board=board, sgd=SGDConfig(lr=LR)))
                results[f"{name}/{board}"] = measure(out, steps=args.steps)
                print(f"measured {name} on {board}", file=sys.stderr)
    print("| model | board | instructions / step | min..max | instructions / inference "
          "| instr. / MAC | per-op sum / step | top 3 ops (share of a step) |")
    print("|---|---|--:|--:|--:|--:|--:|---|")
    for key, r in results.items():
        name, board = key.split("/")
        s, macs = r["step"], sum((r["macs"] or {}).values())
        print(f"| {name} | {board} | {s['instructions']:,.0f} | {s['min']:,}..{s['max']:,} | "
              f"{r['inference']['instructions']:,.0f} | "
              f"{s['instructions'] / macs if macs else float('nan'):.1f} | "
              f"{100 * r['profile_check']['ratio']:.1f}% | {top_ops(r)} |")
    print(f"\n{args.steps} steps on seeded random samples; inference counts forward ops only. "
          "Same sample from the initial parameters, repeated (ticks): " +
          "; ".join(f"{k} {r['repeat']['ticks']}" for k, r in results.items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
