"""The four MLPerf Tiny networks of examples/keras (float .tflite files written by TensorFlow's
converter from Keras) built for two boards: planned SRAM, and the linked firmware's SRAM and
flash, or why the build does not fit.

    python bench/keras_models.py                      # Markdown table (needs arm-none-eabi-gcc)
    python bench/keras_models.py --json FILE          # also keep the numbers
    python bench/keras_models.py --board nrf52840 --model ds_cnn_kws   # a subset (repeatable)

Each model is built as it is (fp32) and with `--quantize int8 --calib examples/keras/NAME.npz`
(its eight committed samples), for the update plans `bias` and `last:2`, batch 1, plain SGD,
every memory pass and `--remat auto`. The classifiers train with cross-entropy, the dense
autoencoder with `--loss mse` (a reconstruction: y = x). "planned SRAM" is the planner's total
(arena, trainable parameters, gradients, link buffers, stack), which the build checks against
the linker; "ELF SRAM" and "ELF flash" are what the linked `firmware.elf` occupies. A build
that does not fit fails with a tinytrain error, whose first line the table shows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinytrain.device.build import build  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

KERAS = ROOT / "examples" / "keras"
MODELS = {"ds_cnn_kws": "ce", "mobilenet_v1_025_96": "ce", "resnet8_cifar": "ce",
          "dense_autoencoder": "mse"}  # model: loss
BOARDS = ("stm32f746", "nrf52840")
PLANS = ("bias", "last:2")
PRECISIONS = ("fp32", "int8")


def kb(n: float) -> str:
    return f"{n / 1024:,.1f}"


def measure(name: str, plan: str, precision: str, board: str, out: Path) -> dict:
    q = {"quantize": "int8", "calib": KERAS / f"{name}.npz"} if precision == "int8" else {}
    opts = Options(board=board, update=plan, loss=MODELS[name], **q)
    try:
        r = build(KERAS / f"{name}.tflite", out, opts)
    except TinyTrainError as e:
        return {"fits": False, "reason": str(e).strip().splitlines()[0]}
    fw = r.get("firmware") or {}
    return {"fits": True, "planned_sram": r["sram_bytes"]["total"],
            "elf_sram": fw.get("sram_used"), "elf_flash": fw.get("flash_used"),
            "trainable": r["params"]["trainable"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", action="append", choices=BOARDS, help="default: both")
    ap.add_argument("--model", action="append", choices=sorted(MODELS), help="default: all four")
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or MODELS:
            for plan in PLANS:
                for precision in PRECISIONS:
                    for board in args.board or BOARDS:
                        t0 = time.monotonic()
                        r = measure(name, plan, precision, board, Path(tmp) / "out")
                        rows.append({"model": name, "plan": plan, "precision": precision,
                                     "board": board, **r})
                        print(f"{name} {plan} {precision} {board}: "
                              + (f"planned SRAM {kb(r['planned_sram'])} KB" if r["fits"]
                                 else "does not fit: " + r["reason"])
                              + f" ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    print("\n| model | plan | precision | board | trainable params | planned SRAM KB | "
          "ELF SRAM KB | ELF flash KB |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        head = f"| {r['model']} | `{r['plan']}` | {r['precision']} | {r['board']} |"
        if r["fits"]:
            elf = [kb(r[k]) if r[k] is not None else "—" for k in ("elf_sram", "elf_flash")]
            print(f"{head} {r['trainable']:,} | {kb(r['planned_sram'])} | {elf[0]} | "
                  f"{elf[1]} |")
        else:
            why = r["reason"].replace("|", "\\|")
            print(f"{head} does not fit: {why} | | | |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
