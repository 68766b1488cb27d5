"""The `tinytrain` command line. Every user error exits with code 2 and one paragraph."""

from __future__ import annotations

import json
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from tinytrain import __version__
from tinytrain.errors import TinyTrainError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="tinytrain compiles a trained ONNX or TFLite model into a static C program that "
         "trains on a microcontroller (or on this machine), and runs, evaluates and exports it.")
console = Console()
err = Console(stderr=True)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except TinyTrainError as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@contextmanager
def progress(label: str, total: int) -> Iterator:
    cols = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*cols, console=err, transient=True, disable=not err.is_terminal) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.advance(task, n)


@app.command()
def build(
    model: Path = typer.Argument(..., help="Trained model: .onnx (fp32) or .tflite (int8 or "
                                 "fp32)."),
    board: str = typer.Option("host", help="Target board (see `tinytrain boards`)."),
    out: Path = typer.Option(Path("build"), "--out", "-o", help="Directory for the C project; "
                             "replaced atomically, never left half-written."),
    loss: str = typer.Option("ce", help="ce: softmax cross-entropy on integer labels (a trailing "
                             "Softmax is folded in); mse: mean squared error for regressors."),
    lr: float = typer.Option(0.01, help="SGD learning rate."),
    momentum: float = typer.Option(0.0, help="SGD momentum (PyTorch semantics, no dampening)."),
    weight_decay: float = typer.Option(0.0, "--weight-decay", help="L2 weight decay."),
    batch: int = typer.Option(1, help="Samples per optimizer step (gradient accumulation: "
                              "memory does not grow with the batch)."),
    update: str = typer.Option("full", help="Which parameters learn: full, bias (all biases + "
                               "the classifier), last:K (last K layers), none, "
                               "tte:n_bias=N,idx=I-J,ratio=R-S (TTE's sparse update), or a "
                               ".toml plan. Layer indices count conv/dense layers from the "
                               "input; a bad plan lists them."),
    memory_passes: bool = typer.Option(True, "--memory-passes/--no-memory-passes",
                                       help="Fused updates (batch 1), 1-bit ReLU masks, "
                                       "backward reordering and in-place ops. Results are "
                                       "identical either way; only memory differs."),
    qas: bool = typer.Option(True, "--qas/--no-qas", help="int8 models: quantisation-aware "
                             "scaling of weight and bias updates."),
    rounding: str = typer.Option("stochastic", help="int8 models: how updates smaller than one "
                                 "LSB are kept: stochastic (seeded stochastic rounding), shadow "
                                 "(a 1-byte fraction per trained weight) or truncate (TTE's; "
                                 "drops them)."),
    seed: int = typer.Option(0, help="Seed of the stochastic rounding stream."),
    quantize: Optional[str] = typer.Option(None, help="int8: quantise an fp32 model after "
                                           "training (per-channel weights) before compiling."),
    calib: Optional[Path] = typer.Option(None, help="Calibration inputs for --quantize: an "
                                         ".npz with x (N, ...) in the model's input layout."),
    max_sram: Optional[float] = typer.Option(None, "--max-sram", help="Fail (with the "
                                             "breakdown and smaller plans) above this many KB "
                                             "of SRAM, before any compiler runs."),
    max_flash: Optional[float] = typer.Option(None, "--max-flash", help="Same for flash, KB."),
    dump_ir: Optional[str] = typer.Option(None, "--dump-ir", help="Print the IR after this pass "
                                          "(import, add_loss, autodiff, optimizer)."),
    kernels: str = typer.Option("optimized", help="optimized: Cortex-M kernels specialised "
                                "per layer shape (DSP extension intrinsics on M4F/M7; the "
                                "same loops in portable C elsewhere); reference: only the "
                                "portable reference kernels. int8 results are identical."),
) -> None:
    """Compile MODEL into a C training program in OUT, build it and report its memory."""
    from tinytrain.build import build as do_build
    from tinytrain.compiler import Options
    from tinytrain.ir import dump
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.report import summary

    def on_pass(name, g):
        if dump_ir == name:
            console.print(dump(g), markup=False, highlight=False)

    with user_errors():
        t0 = time.perf_counter()
        opts = Options(board=board, loss=loss, sgd=SGDConfig(lr, momentum, weight_decay, batch,
                                                              qas, rounding, seed),
                       update=update, memory_passes=memory_passes, quantize=quantize,
                       calib=calib, kernels=kernels)
        with err.status("compiling and building", spinner="dots") if err.is_terminal else _null():
            report = do_build(model, out, opts, on_pass,
                              max_sram=int(max_sram * 1024) if max_sram else None,
                              max_flash=int(max_flash * 1024) if max_flash else None)
        console.print(summary(report), markup=False, highlight=False)
        made = ", ".join(str(out / p) for p in report["programs"])
        console.print(f"built {made} in {time.perf_counter() - t0:.1f} s; "
                      f"report in {out / 'report.json'}", markup=False, highlight=False)


@contextmanager
def _null() -> Iterator[None]:
    yield


@app.command()
def run(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    data: Path = typer.Option(..., "--data", help=".npz with x (N, ...) float32 in the model's "
                              "input layout and y (N,) integer labels (float targets for mse)."),
    epochs: int = typer.Option(1, help="Passes over the data."),
    shuffle: bool = typer.Option(False, help="Shuffle each epoch (default: file order)."),
    seed: int = typer.Option(0, help="Seed for --shuffle."),
    metrics: Optional[Path] = typer.Option(None, help="Write one JSON object per training step."),
    eval_data: Optional[Path] = typer.Option(None, "--eval", help="Held-out .npz to report "
                                             "accuracy on before and after training."),
    save: Optional[Path] = typer.Option(None, help="Save the trained parameters (.npz)."),
    state: Optional[Path] = typer.Option(None, help="Start from parameters saved by --save."),
    qemu: bool = typer.Option(False, "--qemu", help="Run a firmware build on its board's QEMU "
                              "twin, over the serial link on a local socket."),
    port: Optional[str] = typer.Option(None, "--port", help="Run on a board over this serial "
                                       "port (/dev/ttyACM0, COM3, socket://HOST:PORT)."),
    checkpoint: bool = typer.Option(False, "--checkpoint", help="Save the trained parameters "
                                    "to the device's flash at the end (kept across power "
                                    "loss; loaded at boot)."),
) -> None:
    """Train the built program on DATA, sample by sample, and report loss and accuracy."""
    from tinytrain.data import load_npz
    from tinytrain.runner import open_program
    from tinytrain.train import accuracy, train

    with user_errors():
        with open_program(build_dir, port=port, qemu=qemu) as prog:
            x, y = load_npz(data, prog.info)
            if state:
                prog.set_params(_load_state(state))
            if eval_data:
                with progress("eval", 0) as adv:
                    console.print(f"eval accuracy before: {accuracy(prog, eval_data, adv):.4f}")
            fh = open(metrics, "w") if metrics else None
            try:
                with progress("train", epochs * len(x)) as adv:
                    stats = train(prog, x, y, epochs, shuffle, seed, fh, adv)
            finally:
                if fh:
                    fh.close()
            for s in stats:
                acc = f"  accuracy {s.accuracy:.4f}" if s.accuracy is not None else ""
                console.print(f"epoch {s.epoch + 1}: mean loss {s.mean_loss:.6f}{acc}")
            if eval_data:
                with progress("eval", 0) as adv:
                    console.print(f"eval accuracy after: {accuracy(prog, eval_data, adv):.4f}")
            if save:
                np.savez(save, **prog.get_params())
                console.print(f"saved trained parameters to {save}")
            if checkpoint:
                console.print(f"checkpoint {prog.checkpoint()} written to flash")
            _print_link_health(prog)


def _print_link_health(prog) -> None:
    """Say so when the link had to recover from faults: a flaky cable should not go unseen."""
    st = prog.stats
    if st.resends:
        err.print(f"link: {st.resends} resends ({st.naks} NAKs, {st.timeouts} timeouts, "
                  f"{st.crc_errors} corrupted replies) over {st.requests} requests",
                  markup=False, highlight=False)


def _load_state(path: Path) -> dict[str, np.ndarray]:
    from tinytrain.errors import DataError

    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise DataError(f"{path} is not an .npz of parameters; pass the file written by "
                            "`tinytrain run --save`")
        with f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read state file {path}: {e}") from None


@app.command()
def infer(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    data: Path = typer.Option(..., "--data", help=".npz with x (N, ...) in the model's layout."),
    out_path: Path = typer.Option(..., "--out", help="Where to save the outputs (.npy)."),
    state: Optional[Path] = typer.Option(None, help="Parameters saved by `run --save`."),
    qemu: bool = typer.Option(False, "--qemu", help="Run on the board's QEMU twin."),
    port: Optional[str] = typer.Option(None, "--port", help="Run on a board over this port."),
) -> None:
    """Run inference only and save the raw model outputs (N, ...) to OUT."""
    from tinytrain.data import load_npz
    from tinytrain.runner import open_program
    from tinytrain.train import infer_all

    with user_errors():
        with open_program(build_dir, port=port, qemu=qemu) as prog:
            x, _ = load_npz(data, prog.info, need_y=False)
            if state:
                prog.set_params(_load_state(state))
            with progress("infer", len(x)) as adv:
                y = infer_all(prog, x, adv)
        np.save(out_path, y)
        console.print(f"wrote {y.shape} outputs to {out_path}")


@app.command()
def export(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    state: Path = typer.Option(..., help="Parameters saved by `tinytrain run --save`."),
    out_path: Path = typer.Option(..., "--out", help="The file to write: .onnx for an ONNX "
                                  "build, .tflite for a TFLite build."),
) -> None:
    """Write the trained parameters into a copy of the source ONNX or TFLite model."""
    from tinytrain.export_onnx import export_onnx
    from tinytrain.export_tflite import export_tflite
    from tinytrain.runner import load_program_info

    with user_errors():
        tflite = load_program_info(build_dir).get("source_format") == "tflite"
        (export_tflite if tflite else export_onnx)(build_dir, _load_state(state), out_path)
        console.print(f"wrote {out_path}")


@app.command()
def report(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
    plot: Optional[Path] = typer.Option(None, help="Draw the arena over time to this PNG."),
) -> None:
    """Where the SRAM goes: every buffer (kind, bytes, offset, first/last step), totals by
    kind, and the peak with the op where it happens."""
    from tinytrain.build import MEMORY_JSON
    from tinytrain.errors import BuildError
    from tinytrain.memory_report import format_table
    from tinytrain.memory_report import plot as draw

    with user_errors():
        path = build_dir / MEMORY_JSON
        if not path.exists():
            raise BuildError(f"{build_dir} has no {MEMORY_JSON}; run `tinytrain build` first")
        m = json.loads(path.read_text())
        if as_json:
            console.print_json(data=m)
        else:
            console.print(format_table(m), markup=False, highlight=False, soft_wrap=True)
        if plot:
            draw(m, str(plot))
            console.print(f"wrote {plot}")


@app.command()
def ops() -> None:
    """List the supported ops with their forward/backward status."""
    from tinytrain.ops import public_ops

    t = Table("IR op", "source ops", "forward", "backward")
    for op in sorted(public_ops(), key=lambda o: o.name):
        t.add_row(op.name, ", ".join(s for s in op.source_ops if not s.isupper()), "yes",
                  "yes" if op.has_gradient else "no (inference head; folded into the loss)")
    console.print(t)


@app.command()
def boards() -> None:
    """List the boards tinytrain can build for, with their memory limits."""
    from tinytrain.boards import available, load_board

    t = Table("board", "cpu", "clock", "SRAM", "flash (program, 10 KB trained)", "QEMU twin",
              "flashing")
    notes = []
    for name in available():
        b = load_board(name)
        fl = (f"{b.flash_bytes // 1024} KB ({b.flash_layout(10 << 10).program_bytes // 1024} KB)"
              if b.is_mcu and b.flash_bytes else "unlimited")
        t.add_row(b.name, b.cpu, f"{b.clock_hz // 10**6} MHz" if b.clock_hz else "-",
                  f"{b.sram_bytes // 1024} KB" if b.sram_bytes else "unlimited",
                  fl, b.qemu.machine if b.qemu else "-", str(b.flash.get("protocol", "-")))
        notes.append(f"{b.name}: {b.description}")
    console.print(t)
    console.print("\n".join(notes), markup=False, highlight=False)


@app.command()
def flash(
    build_dir: Path = typer.Argument(..., help="A firmware build (`tinytrain build --board "
                                     "stm32f746|nrf52840`)."),
    port: Optional[str] = typer.Option(None, "--port", help="Serial port of the board's "
                                       "bootloader (STM32: ROM bootloader, BOOT0 high; nRF52840: "
                                       "Nordic serial DFU bootloader)."),
    probe: bool = typer.Option(False, "--probe", help="Flash over SWD with pyocd or openocd "
                               "instead (whichever is installed)."),
    baud: Optional[int] = typer.Option(None, help="Bootloader baud rate (default: the "
                                       "board's)."),
) -> None:
    """Write DIR/firmware.elf to the board's flash over serial (or a debug probe). Trained
    weights in the checkpoint slots are not erased."""
    from tinytrain.boards import load_board
    from tinytrain.errors import BuildError
    from tinytrain.flashing import flash_image, flash_probe, load_elf
    from tinytrain.runner import load_program_info

    with user_errors():
        b = load_board(load_program_info(build_dir).get("board", "host"))
        elf = build_dir / "firmware.elf"
        if not b.is_mcu or not elf.exists():
            raise BuildError(f"{build_dir} is not a firmware build; build it with "
                             "`tinytrain build MODEL --board stm32f746|nrf52840`")
        if probe:
            flash_probe(elf, b.name)
            console.print(f"flashed {elf} over SWD")
            return
        if not port:
            raise BuildError("give --port PORT (the bootloader's serial port) or --probe")
        segments = load_elf(elf)
        total = sum(len(d) for _, d in segments)
        with progress("flash", total) as adv:
            done = [0]

            def step(n: int, of: int) -> None:
                adv(max(0, n * total // max(of, 1) - done[0]))
                done[0] = n * total // max(of, 1)

            flash_image(str(b.flash["protocol"]), port, segments,
                        baud=baud or int(b.flash.get("baud", 115200)), progress=step)
        console.print(f"flashed {total} bytes to {b.name} over {port} "
                      f"({b.flash['protocol']}), verified")


@app.command()
def bench(
    build_dir: Path = typer.Argument(..., help="A firmware build."),
    qemu: bool = typer.Option(False, "--qemu", help="Count instructions on the board's QEMU "
                              "twin (-icount shift=0: 1 SysTick tick = 40 instructions)."),
    steps: int = typer.Option(10, help="Training steps to measure."),
    data: Optional[Path] = typer.Option(None, "--data", help="Samples to use (.npz); "
                                        "default: seeded random inputs."),
    as_json: Optional[Path] = typer.Option(None, "--json", help="Also write the figures here."),
) -> None:
    """Instructions per training step, per inference and per op, measured on the QEMU twin."""
    from tinytrain.errors import BuildError

    with user_errors():
        if not qemu:
            raise BuildError("only --qemu is supported: emulated instruction counts are "
                             "deterministic; on a board, DWT cycle counts arrive with the "
                             "train replies")
        from tinytrain.bench_qemu import format_table, measure, to_json

        res = measure(build_dir, steps=steps, data=data)
        console.print(format_table(res), markup=False, highlight=False, soft_wrap=True)
        if as_json:
            as_json.write_text(to_json(res))
            console.print(f"wrote {as_json}")


@app.command()
def version() -> None:
    """Print the tinytrain version."""
    console.print(__version__)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"tinytrain {__version__}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """tinytrain compiles a trained ONNX or TFLite model into a static C program that trains
    on a microcontroller (or on this machine), and runs, evaluates and exports it."""


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
