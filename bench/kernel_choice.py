"""What keeping kernels generic to fit the flash costs: a TTE scheme that overflows a board's
flash with every optimised kernel, built for the board (the build keeps some families generic,
tinytrain/device/kernel_choice.py) and for the same board with twice the flash (every family
optimised), both trained on the board's QEMU twin: instructions per sample with and without
the choice, flash and code.

    python bench/kernel_choice.py                          # MCUNet-5FPS, 148 KB, stm32f746
    python bench/kernel_choice.py --network MobileNetV2-w0.35 --budget 138 --board nrf52840

The roomier board is the board's own file with its flash doubled (for the STM32F746 that is
the STM32F767's 2 MB with the same core): only the program's regions change. int8, 128x128,
seed-0 weights, two calibration images, batch 1, plain SGD, as bench/board_fit.py.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torch_models import export  # noqa: E402
from tests.tte_schemes import NETWORKS, SCHEMES  # noqa: E402
from tinytrain.boards import BOARDS_DIR, load_board  # noqa: E402
from tinytrain.device.bench import measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

STEPS = 2  # training steps measured (the count repeats to a tick: bench/speed.py)


def roomier(board: str, out: Path) -> Path:
    """The board's TOML with its flash doubled: more sectors of the last size, or a later
    flash_end, and the board layer taken from the package (load_board looks beside it)."""
    b = load_board(board)
    text = (BOARDS_DIR / f"{board}.toml").read_text()
    text = re.sub(r"flash_kb = \d+", f"flash_kb = {2 * (b.flash_bytes or 0) // 1024}", text)
    if b.flash_sectors:
        extra = b.flash_bytes // b.flash_sectors[-1]
        sizes = [s // 1024 for s in b.flash_sectors] + [b.flash_sectors[-1] // 1024] * extra
        text = re.sub(r"flash_sectors_kb = \[[^\]]*\]", f"flash_sectors_kb = {sizes}", text)
    else:
        end = b.flash_end + (b.flash_end - b.flash_base)
        text = re.sub(r"flash_end = 0x[0-9A-Fa-f_]+", f"flash_end = 0x{end:08X}", text)
    path = out / f"{board}-2x-flash.toml"
    path.write_text(text)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="MCUNet-5FPS", choices=sorted(NETWORKS))
    ap.add_argument("--budget", type=int, default=148, help="the scheme's KB (tests/tte_schemes)")
    ap.add_argument("--board", default="stm32f746")
    args = ap.parse_args()
    plan = SCHEMES[args.network, args.budget]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = export(NETWORKS[args.network](), t / "m.onnx")
        calib = t / "calib.npz"
        np.savez(calib, x=np.random.default_rng(0).uniform(0, 1, (2, 3, 128, 128))
                 .astype(np.float32))
        for label, board in ((args.board, args.board),
                             (f"{args.board}, flash doubled", str(roomier(args.board, t)))):
            out = t / f"b{len(rows)}"
            r = build(model, out, Options(update=plan, quantize="int8", calib=calib,
                                          board=board))
            m = measure(out, steps=STEPS)
            rows.append({"build": label, "instructions": m["step"]["instructions"],
                         "flash": r["firmware"]["flash_used"],
                         "program": r["flash_bytes"]["program_region"],
                         "code": sum(r["kernels"]["code_by_object"].values()),
                         "generic": [g["family"] for g in r["kernels"]["generic"]]})
            print(f"measured {label}: {rows[-1]['instructions'] / 1e6:.2f} M", file=sys.stderr)
    base = rows[-1]["instructions"]
    print(f"\n### {args.network}, TTE's {args.budget} KB scheme, on the {args.board} twin\n")
    print("| build | instructions / sample | vs all optimised | flash KB (program's) | code KB | "
          "kept generic |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['build']} | {r['instructions']:,.0f} | {r['instructions'] / base:.2f}× | "
              f"{r['flash'] / 1024:.1f} ({r['program'] / 1024:.0f}) | {r['code'] / 1024:.1f} | "
              f"{', '.join(r['generic']) or '-'} |")


if __name__ == "__main__":
    main()
