"""The time-series example (examples/timeseries: BasicMotions, a smartwatch turned 90° in its
mount) for a Conv1D net, a GRU and an LSTM: memory on two boards, instructions per training
sample on the STM32F746's twin, and held-out accuracy before and after adapting on the device.

    python bench/timeseries.py                  # Markdown table (needs arm-none-eabi-gcc, QEMU)
    python bench/timeseries.py --json FILE      # also keep the numbers
    python bench/timeseries.py --host           # accuracy from a host build (no QEMU run)
    python bench/timeseries.py --model gru      # a subset (repeatable)

Each model is built as it is (fp32) with one plan, `full` by default (`--update`), plain SGD
(lr 0.02, batch 1), every memory pass and `--remat auto`, for the stm32f746 (Cortex-M7) and
the nrf52840 (Cortex-M4F). "planned SRAM" is the planner's total (arena, trainable parameters,
gradients, link buffers, the 8 KB stack), which the build checks against the linker; "ELF
SRAM" and "ELF flash" are what the linked `firmware.elf` occupies. Instructions per training
sample are `tinytrain bench --qemu`'s mean over 10 steps on the adaptation windows, on the
STM32F746's twin (mps2-an500, -icount shift=0: 1 SysTick tick = 40 instructions); they are
not cycles. Accuracy is on the 120 held-out windows of the turned sensor (20 recordings)
before and after 5 epochs over the 120 adaptation windows (`tinytrain run --epochs 5
--shuffle --seed 1`), on the STM32F746's twin over the serial link, or with --host on this
machine (the same arithmetic: the column says where). A model whose build fails shows the
tinytrain error's first line.
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

from tinytrain.device.bench import measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.data import load_npz  # noqa: E402
from tinytrain.device.runner import open_program  # noqa: E402
from tinytrain.device.train import evaluate, train  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

EXAMPLE = ROOT / "examples" / "timeseries"
MODELS = {"conv1d": ("Conv1D", "conv1d"), "gru": ("GRU", "rnn"),
          "lstm": ("LSTM", "rnn")}  # file stem: (label, data files' prefix)
BOARDS = ("stm32f746", "nrf52840")
TWIN = "stm32f746"  # instructions and twin accuracy: its twin is the mps2-an500's M7
LR, EPOCHS, SEED = 0.02, 5, 1  # as examples/timeseries/README.md's commands
STEPS = 10  # training steps measured per model


def kb(n: float) -> str:
    return f"{n / 1024:,.1f}"


def first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def memory(name: str, board: str, plan: str, out: Path) -> dict:
    opts = Options(board=board, update=plan, sgd=SGDConfig(lr=LR))
    try:
        r = build(EXAMPLE / f"{name}.onnx", out, opts)
    except TinyTrainError as e:
        return {"built": False, "reason": first_line(e)}
    fw = r.get("firmware") or {}
    return {"built": True, "planned_sram": r["sram_bytes"]["total"],
            "elf_sram": fw.get("sram_used"), "elf_flash": fw.get("flash_used"),
            "trainable": r["params"]["trainable"]}


def adapt(out: Path, data: str, qemu: bool) -> dict:
    """Held-out accuracy, then EPOCHS shuffled epochs of plain SGD, then the accuracy again."""
    with open_program(out, qemu=qemu) as prog:
        x, y = load_npz(EXAMPLE / f"{data}_train.npz", prog.info)
        tx, ty = load_npz(EXAMPLE / f"{data}_test.npz", prog.info)
        before = evaluate(prog, tx, ty)
        stats = train(prog, x, y, epochs=EPOCHS, shuffle=True, seed=SEED)
        after = evaluate(prog, tx, ty)
    return {"before": before, "after": after, "final_train_loss": stats[-1].mean_loss}


def measure_model(name: str, plan: str, host: bool, tmp: Path) -> dict:
    label, data = MODELS[name]
    row: dict = {"model": label, "file": f"{name}.onnx", "plan": plan, "boards": {}}
    for board in BOARDS:
        t0 = time.monotonic()
        row["boards"][board] = r = memory(name, board, plan, tmp / f"{name}-{board}")
        print(f"{label} {board}: " + (f"planned SRAM {kb(r['planned_sram'])} KB" if r["built"]
              else "build fails: " + r["reason"]) + f" ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr)
    twin = tmp / f"{name}-{TWIN}"
    if row["boards"][TWIN]["built"]:
        t0 = time.monotonic()
        try:
            m = measure(twin, steps=STEPS, data=EXAMPLE / f"{data}_train.npz")
            row["instructions"] = m["step"]["instructions"]
            row["macs"] = sum((m["macs"] or {}).values())
        except TinyTrainError as e:
            row["instructions_error"] = first_line(e)
        print(f"{label}: instructions measured ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    where = "host" if host else f"{TWIN} twin"
    target = tmp / f"{name}-host" if host else twin
    built = True
    if host:
        try:
            build(EXAMPLE / f"{name}.onnx", target,
                  Options(board="host", update=plan, sgd=SGDConfig(lr=LR)))
        except TinyTrainError as e:
            built, row["accuracy_error"] = False, first_line(e)
    elif not row["boards"][TWIN]["built"]:
        built = False
    if built:
        t0 = time.monotonic()
        try:
            row["accuracy"] = {**adapt(target, data, qemu=not host), "where": where}
        except TinyTrainError as e:
            row["accuracy_error"] = first_line(e)
        print(f"{label}: adapted on the {where} ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr)
    return row


def pair(boards: list[dict], key: str) -> str:
    """One figure of each board, KB, "—" where the board's build failed."""
    return " / ".join(kb(x[key]) if x["built"] and x[key] is not None else "—" for x in boards)


def table(rows: list[dict]) -> str:
    out = ["| model | update | trainable params | planned SRAM KB (F746 / nRF52) | "
           "ELF SRAM KB (F746 / nRF52) | ELF flash KB (F746 / nRF52) | "
           "instructions / sample (M7 twin) | MACs / sample | accuracy before → after | where |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        b = [r["boards"][board] for board in BOARDS]
        head = f"| {r['model']} | `{r['plan']}` |"
        if not any(x["built"] for x in b):
            why = b[0]["reason"].replace("|", "\\|")
            out.append(f"{head} build fails: {why} | | | | | | | |")
            continue

        params = next(x["trainable"] for x in b if x["built"])
        instr = (f"{r['instructions']:,.0f}" if "instructions" in r
                 else r.get("instructions_error", "—"))
        macs = f"{r['macs']:,}" if r.get("macs") else "—"
        if "accuracy" in r:
            a = r["accuracy"]
            acc, where = f"{100 * a['before']:.1f} % → {100 * a['after']:.1f} %", a["where"]
        else:
            acc, where = r.get("accuracy_error", "—"), ""
        out.append(f"{head} {params:,} | {pair(b, 'planned_sram')} | "
                   f"{pair(b, 'elf_sram')} | {pair(b, 'elf_flash')} | {instr} | {macs} | "
                   f"{acc} | {where} |")
    fails = [(r["model"], board, r["boards"][board]["reason"]) for r in rows for board in BOARDS
             if not r["boards"][board]["built"] and any(x["built"] for x in r["boards"].values())]
    out += [f"\n{m} does not build for {board}: {why}" for m, board, why in fails]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", choices=sorted(MODELS), help="default: all")
    ap.add_argument("--update", default="full", help="the update plan (default: full)")
    ap.add_argument("--host", action="store_true",
                    help="adapt a host build for the accuracy columns (no twin run)")
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure_model(name, args.update, args.host, Path(tmp))
                for name in args.model or MODELS]
    print()
    print(table(rows))
    print(f"\nBasicMotions windows of 6 channels x 50 steps; plain SGD lr {LR}, batch 1, "
          f"{EPOCHS} shuffled epochs (seed {SEED}) over 120 windows of the turned sensor; "
          "accuracy on its 120 held-out windows.")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
