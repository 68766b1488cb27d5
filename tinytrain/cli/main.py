"""The `tinytrain` command line. Every user error exits with code 2 and one paragraph."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TextIO

import numpy as np
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from tinytrain.autoplan.choose import DEFAULT_SEARCH_VISITS
from tinytrain.boards import available as available_boards
from tinytrain.cli.console import console, err, user_errors
from tinytrain.cli.fleet import fleet_app
from tinytrain.cli.help import GroupedCommand
from tinytrain.device import state_file
from tinytrain.device.link.device import state_mismatch
from tinytrain.device.qemu import TWIN_FLASH
from tinytrain.errors import DataError, OptionError
from tinytrain.passes.add_loss import LOSSES
from tinytrain.passes.pipeline import FP32_MACS, KERNELS, Options, pipeline
from tinytrain.quant.update import ROUNDINGS
from tinytrain.version import __version__

if TYPE_CHECKING:
    from tinytrain.device.link.device import Device
    from tinytrain.device.train import EpochStats, StopRequest

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="tinytrain compiles a trained ONNX or TFLite model into a static C program that "
         "trains on a microcontroller (or on this machine), and runs, evaluates and exports it.")
app.add_typer(fleet_app, name="fleet")


class Bars:
    """Progress bars on stderr, drawn only when stderr is a terminal: one display holding a
    bar per task (rich allows one live display at a time, and `run` evaluates while its
    training bar is up), each with an optional live text such as the running loss."""

    def __init__(self, p: Progress) -> None:
        self.p = p

    @contextmanager
    def task(self, label: str, total: int) -> Iterator:
        """Yields advance(n, text=None): n more done; `text` replaces the live text."""
        t = self.p.add_task(label, total=total, text="")
        try:
            yield lambda n, text=None: self.p.update(
                t, advance=n, **({} if text is None else {"text": text}))
        finally:
            self.p.remove_task(t)


@contextmanager
def bars() -> Iterator[Bars]:
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[text]}"), TimeRemainingColumn()]
    # stdout is routed through the display only when it shares the terminal; redirected to a
    # file it stays stdout.
    with Progress(*cols, console=err, transient=True, disable=not err.is_terminal,
                  redirect_stdout=console.is_terminal) as p:
        yield Bars(p)


@contextmanager
def progress(label: str, total: int) -> Iterator:
    """One bar: yields advance(n)."""
    with bars() as b, b.task(label, total) as adv:
        yield adv


# Option groups of `--help` (tinytrain.cli.help.GroupedCommand).
TARGET, TRAINING, INT8, MEMORY, DEBUG = ("Target", "Training (SGD)", "int8", "Memory", "Debugging")
DEVICE, DATA, STATE = ("Where it runs", "Data", "Parameters and checkpoints")
# What `--dump-ir` accepts: the model as imported, then every pass of the pipeline.
DUMP_IR_PASSES = ("import", *(name for name, _ in pipeline(Options())))

BUILD_EXAMPLES = """\
Examples:
  tinytrain build model.onnx --out build/host
  tinytrain build examples/digits/digits_cnn.onnx --board stm32f746 --out build/digits \\
      --lr 0.05 --momentum 0.9 --batch 16
  tinytrain build model.tflite --board nrf52840 --update bias --out build/int8
"""


def _choices(values: Iterable[str]) -> str:
    return "One of: " + ", ".join(values) + "."


NEW_HEAD_HELP = ("int8 models whose classifier was re-initialised for new classes: widen its "
                 "weight (8x) and logit (at least +-16) ranges so training can grow them; "
                 "without it a fresh int8 head saturates.")
HEADROOM_HELP = ("With --quantize int8: widen the scales of the weights the plan trains this "
                 "much (default 2: one bit), room for training to grow them past "
                 "calibration's largest value; 1 keeps the calibrated scales. A model file "
                 "that is already int8 keeps its own scales.")


def _headroom(headroom: float | None, quantize: str | None) -> dict:
    """Options' weight_headroom: given only with --quantize (an int8 file keeps its scales)."""
    if headroom is None:
        return {}
    if not quantize:
        raise OptionError("--weight-headroom applies to a model tinytrain quantises "
                          "(--quantize int8); an int8 model file keeps its own scales")
    from tinytrain.passes.weight_headroom import check_headroom

    check_headroom(headroom)
    return {"weight_headroom": headroom}


@app.command(cls=GroupedCommand, epilog=BUILD_EXAMPLES)
def build(
    model: Path = typer.Argument(..., help="Trained model: .onnx (fp32) or .tflite (int8 or "
                                 "fp32)."),
    board: str = typer.Option("host", help=f"Target board. {_choices(available_boards())} "
                              "Or the path of your own board file, NAME.toml (docs: Adding a "
                              "board). Details: `tinytrain boards`.", rich_help_panel=TARGET),
    out: Path = typer.Option(Path("build"), "--out", "-o", help="Directory for the C project; "
                             "replaced atomically, never left half-written.",
                             rich_help_panel=TARGET),
    loss: str = typer.Option("ce", help=f"{_choices(LOSSES)} ce: softmax cross-entropy on "
                             "integer labels (a trailing Softmax is folded in); mse: mean "
                             "squared error for regressors.", rich_help_panel=TRAINING),
    lr: float = typer.Option(0.01, help="Learning rate.", rich_help_panel=TRAINING),
    momentum: float = typer.Option(0.0, help="SGD momentum (PyTorch semantics, no dampening).",
                                   rich_help_panel=TRAINING),
    weight_decay: float = typer.Option(0.0, "--weight-decay", help="L2 weight decay.",
                                       rich_help_panel=TRAINING),
    optimizer: str = typer.Option("sgd", help="sgd, or adam (PyTorch's Adam; fp32 parameters "
                                  "only): two more floats of state per trained element, "
                                  "for a fleet's devices, whose gradients differ in scale.",
                                  rich_help_panel=TRAINING),
    beta1: float = typer.Option(0.9, help="Adam's first-moment decay.",
                                rich_help_panel=TRAINING),
    beta2: float = typer.Option(0.999, help="Adam's second-moment decay.",
                                rich_help_panel=TRAINING),
    eps: float = typer.Option(1e-8, help="Adam's denominator term.", rich_help_panel=TRAINING),
    batch: int = typer.Option(1, help="Samples per optimizer step (gradient accumulation: "
                              "memory does not grow with the batch).", rich_help_panel=TRAINING),
    update: str = typer.Option("full", rich_help_panel=TRAINING,
                               help="Which parameters learn: full, bias (all biases + "
                               "the classifier), last:K (last K layers), none, "
                               "tte:n_bias=N,idx=I-J,ratio=R-S (TTE's sparse update), or a "
                               ".toml plan. Layer indices count conv/dense layers from the "
                               "input (a recurrent layer is two: its input projection, then "
                               "its recurrence); a bad plan lists them. auto: chosen for you "
                               "within the SRAM budget (the board's, or --max-sram) from "
                               "--data (see `tinytrain plan`); written to "
                               "OUT/update_plan.toml."),
    data: Optional[Path] = typer.Option(None, "--data", rich_help_panel=TRAINING,
                                        help="With --update auto: labelled samples of the task "
                                        "(.npz with x and y, as for `run`) on which candidate "
                                        "plans are fine-tuned and scored."),
    search_visits: int = typer.Option(DEFAULT_SEARCH_VISITS, "--search-visits",
                                      rich_help_panel=TRAINING,
                                      help="With --update auto: plans and partial plans the "
                                      "search may visit (a count, not seconds: the same data "
                                      "give the same plan on any machine)."),
    fleet_correction: bool = typer.Option(False, "--fleet-correction",
                                          rich_help_panel=TRAINING,
                                          help="For a federated fleet: a drift-correction "
                                          "term in every step, p -= lr * (mu * p + b), "
                                          "with one float of b per trained element. The "
                                          "fleet's run fills b and mu each round and so "
                                          "chooses the method: correction=scaffold (control "
                                          "variates) or prox (FedProx's mu). Zero until "
                                          "then, which changes nothing. Docs: Fleets."),
    receive: Optional[str] = typer.Option(None, "--receive", metavar="PLAN",
                                          rich_help_panel=TRAINING,
                                          help="For a fleet of mixed plans: the tensors PLAN "
                                          "(any --update plan, e.g. the largest class's) "
                                          "trains and this build freezes stay in flash but "
                                          "can be replaced over the link, so every class "
                                          "runs the fleet's current values of them. Costs "
                                          "their bytes in each checkpoint slot and a pointer "
                                          "each in SRAM. Docs: Fleets."),
    memory_passes: bool = typer.Option(True, "--memory-passes/--no-memory-passes",
                                       rich_help_panel=MEMORY,
                                       help="Fused updates (batch 1), 1-bit ReLU masks, "
                                       "backward reordering and in-place ops. Results are "
                                       "identical either way (to a rounding per update for "
                                       "plain SGD of dense layers, optimised kernels); only "
                                       "memory differs."),
    remat: str = typer.Option("auto", "--remat", rich_help_panel=MEMORY,
                              help="Recompute saved activations in the backward instead of "
                              "keeping them. auto: only when the plan would not fit the "
                              "board's SRAM (or --max-sram), with the least recompute that "
                              "fits; off; N% (e.g. 10%): the smallest arena with at most N % "
                              "more MACs per training step. Results are identical either "
                              "way. With --update auto, plans that fit only by recomputing "
                              "are candidates (auto: up to 15 % more MACs; N%: up to N %)."),
    qas: bool = typer.Option(True, "--qas/--no-qas", help="int8 models: quantisation-aware "
                             "scaling of weight and bias updates.", rich_help_panel=INT8),
    rounding: str = typer.Option("stochastic", rich_help_panel=INT8,
                                 help=f"int8 models: how updates smaller than one LSB are kept. "
                                 f"{_choices(ROUNDINGS)} stochastic: seeded stochastic "
                                 "rounding; shadow: a 1-byte fraction per trained weight, "
                                 "the forward reads the floor; master: the same byte, the "
                                 "forward reads the whole 16-bit weight (trained whole); "
                                 "truncate: TTE's, drops them."),
    seed: int = typer.Option(0, help="Seed of the stochastic rounding stream.",
                             rich_help_panel=INT8),
    quantize: Optional[str] = typer.Option(None, rich_help_panel=INT8,
                                           help="One of: int8. Quantise an fp32 model after "
                                           "training (per-channel weights) before compiling."),
    calib: Optional[Path] = typer.Option(None, help="Calibration inputs for --quantize: an "
                                         ".npz with x (N, ...) in the model's input layout.",
                                         rich_help_panel=INT8),
    new_head: bool = typer.Option(False, "--new-head", rich_help_panel=INT8,
                                  help=NEW_HEAD_HELP),
    weight_headroom: Optional[float] = typer.Option(None, "--weight-headroom",
                                                    rich_help_panel=INT8, help=HEADROOM_HELP),
    max_sram: Optional[float] = typer.Option(None, "--max-sram", help="Fail (with the "
                                             "breakdown and smaller plans) above this many KB "
                                             "of SRAM, before any compiler runs (with --update "
                                             "auto: the budget the plan is chosen for).",
                                             rich_help_panel=MEMORY),
    max_flash: Optional[float] = typer.Option(None, "--max-flash", help="Same for flash, KB.",
                                              rich_help_panel=MEMORY),
    dump_ir: Optional[str] = typer.Option(None, "--dump-ir", rich_help_panel=DEBUG,
                                          help="Print the IR after this pass. "
                                          f"{_choices(DUMP_IR_PASSES)}"),
    profile_members: bool = typer.Option(False, "--profile-members", rich_help_panel=DEBUG,
                                         help="Count the ops inside row and channel streams "
                                         "one by one as well, for `tinytrain bench` (two "
                                         "timer reads per call: 1-3 % of a step)."),
    kernels: str = typer.Option("optimized", rich_help_panel=TARGET,
                                help=f"{_choices(KERNELS)} optimized: Cortex-M kernels "
                                "specialised per layer shape (DSP extension intrinsics on "
                                "M4F/M7; the same loops in portable C elsewhere); reference: "
                                "only the portable reference kernels. int8 results are "
                                "identical."),
    fp32_mac: str = typer.Option("auto", "--fp32-mac", rich_help_panel=TARGET,
                                 help=f"{_choices(FP32_MACS)} How the fp32 backward's "
                                 "channel-streamed 1x1 sums (input and weight gradients) "
                                 "multiply-add. fused: one rounding (Helium's VFMA, half the "
                                 "instructions of a VMUL and a VADD); separate: product and "
                                 "sum rounded; auto: fused on boards with Helium (Cortex-M55), "
                                 "separate elsewhere. A host build with --fp32-mac fused "
                                 "computes what such a board does, bit for bit."),
    prefix: str = typer.Option("tt", rich_help_panel=TARGET,
                               help="Name of the model's C API: PREFIX_init, "
                               "PREFIX_train_step, PREFIX_INPUT_SIZE, ... (lowercase letters, "
                               "digits, single underscores; up to 24 characters). Two models "
                               "with different prefixes link into one firmware."),
) -> None:
    """Compile MODEL into a C training program in OUT, build it and report its memory."""
    from tinytrain.device.build import build as do_build
    from tinytrain.ir import dump
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.passes.remat import parse_remat
    from tinytrain.reports.report import summary

    def on_pass(name, g):
        if dump_ir == name:
            console.print(dump(g), markup=False, highlight=False)

    with user_errors():
        t0 = time.perf_counter()
        opts = Options(board=board, loss=loss, sgd=SGDConfig(lr, momentum, weight_decay, batch,
                                                              qas, rounding, seed, optimizer,
                                                              beta1, beta2, eps),
                       update=update, memory_passes=memory_passes, quantize=quantize,
                       calib=calib, kernels=kernels, prefix=prefix, new_head=new_head,
                       remat=remat, profile_members=profile_members, fp32_mac=fp32_mac,
                       fleet_correction=fleet_correction, receive=receive,
                       **_headroom(weight_headroom, quantize))
        parse_remat(remat)
        if dump_ir is not None:
            _check_dump_ir(dump_ir, opts)
        with err.status("compiling and building", spinner="dots") if err.is_terminal else _null():
            limits = {"max_sram": int(max_sram * 1024) if max_sram else None,
                      "max_flash": int(max_flash * 1024) if max_flash else None}
            auto = _auto_options(update, data, search_visits)
            if update == "auto":  # choose the plan, then build it
                from tinytrain.autoplan import build_auto

                report = build_auto(model, out, opts, auto, on_pass, **limits)
            else:
                report = do_build(model, out, opts, on_pass, **limits)
        if "auto_plan" in report:
            from tinytrain.autoplan.frontier_report import format_choice

            console.print(format_choice(report["auto_plan"], out), markup=False,
                          highlight=False, soft_wrap=True)
        console.print(summary(report), markup=False, highlight=False, soft_wrap=True)
        made = ", ".join(str(out / p) for p in report["programs"])
        console.print(f"built {made} in {time.perf_counter() - t0:.1f} s; "
                      f"report in {out / 'report.json'}", markup=False, highlight=False)


def _auto_options(update: str, data: Path | None, search_visits: int):
    """--data and --search-visits belong to --update auto; alone they would be ignored."""
    from tinytrain.autoplan import AutoOptions

    if update != "auto":
        if data is not None:
            raise OptionError("--data on `build` is for --update auto (choosing the plan); "
                              "train with `tinytrain run DIR --data FILE`")
        return None
    if search_visits < 1:
        raise OptionError(f"--search-visits must be at least 1, got {search_visits}")
    return AutoOptions(data=data, search_visits=search_visits,
                       log=lambda s: err.print(s, markup=False, highlight=False))


def _check_dump_ir(name: str, opts: Options) -> None:
    """Before compiling: a pass name that never runs would print nothing, silently."""
    runs = ["import", *(n for n, _ in pipeline(opts))]
    if name in runs:
        return
    if name in DUMP_IR_PASSES:
        raise OptionError(f"--dump-ir {name}: that pass runs only with the memory passes; drop "
                          f"--no-memory-passes or choose one of: {', '.join(runs)}")
    raise OptionError(f"--dump-ir: unknown pass '{name}'; the passes, in pipeline order, are: "
                      f"{', '.join(runs)}")


@contextmanager
def _null() -> Iterator[None]:
    yield


PLAN_EXAMPLES = """
Examples:
  tinytrain plan model.onnx --data train.npz --max-sram 64 --plot frontier.png
  tinytrain plan model.tflite --board stm32f746 --data train.npz --write plan.toml
  tinytrain build model.tflite --board stm32f746 --update plan.toml
"""


@app.command("plan", cls=GroupedCommand, epilog=PLAN_EXAMPLES)
def plan_cmd(
    model: Path = typer.Argument(..., help="Trained model: .onnx (fp32) or .tflite (int8 or "
                                 "fp32)."),
    data: Path = typer.Option(..., "--data", help="Labelled samples of the task (.npz with x "
                              "and y, as for `run`): candidate plans are fine-tuned on part "
                              "and scored on the rest.", rich_help_panel=DATA),
    board: str = typer.Option("host", help=f"Target board. {_choices(available_boards())}",
                              rich_help_panel=TARGET),
    max_sram: Optional[float] = typer.Option(None, "--max-sram", help="SRAM budget in KB (the "
                                             "figure `build` reports and checks); default: "
                                             "the board's SRAM less 2 KB for the firmware's "
                                             "own statics.", rich_help_panel=MEMORY),
    remat: str = typer.Option("auto", "--remat", rich_help_panel=MEMORY,
                              help="auto: a plan that fits only by recomputing saved "
                              "activations in the backward is a candidate, up to 15 % more "
                              "MACs per step; N% (e.g. 10%): up to N %; off: never."),
    budgets: int = typer.Option(8, help="Budgets (rows) in the frontier table, from the "
                                "smallest plan's SRAM to the budget.", rich_help_panel=MEMORY),
    search_visits: int = typer.Option(DEFAULT_SEARCH_VISITS, "--search-visits",
                                      help="Plans and partial plans the search may visit per "
                                      "budget (a count, not seconds: the same data give the "
                                      "same plan on any machine).", rich_help_panel=MEMORY),
    write: Optional[Path] = typer.Option(None, "--write", help="Write the chosen plan here "
                                         "(TOML for --update).", rich_help_panel=DATA),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Directory keeping the "
                                         "measurements, so a second run is fast (a `build "
                                         "--update auto` directory works).",
                                         rich_help_panel=DATA),
    plot: Optional[Path] = typer.Option(None, help="Draw the frontier to this PNG (needs "
                                        "matplotlib: the `plot` extra).", rich_help_panel=DATA),
    loss: str = typer.Option("ce", help=_choices(LOSSES), rich_help_panel=TRAINING),
    lr: float = typer.Option(0.01, help="SGD learning rate (as you will build with).",
                             rich_help_panel=TRAINING),
    momentum: float = typer.Option(0.0, help="SGD momentum.", rich_help_panel=TRAINING),
    batch: int = typer.Option(1, help="Samples per optimizer step.", rich_help_panel=TRAINING),
    quantize: Optional[str] = typer.Option(None, help="One of: int8 (with --calib), as for "
                                           "`build`.", rich_help_panel=INT8),
    calib: Optional[Path] = typer.Option(None, help="Calibration inputs for --quantize.",
                                         rich_help_panel=INT8),
    new_head: bool = typer.Option(False, "--new-head", rich_help_panel=INT8,
                                  help=NEW_HEAD_HELP),
    weight_headroom: Optional[float] = typer.Option(None, "--weight-headroom",
                                                    rich_help_panel=INT8, help=HEADROOM_HELP),
    rounding: str = typer.Option("stochastic", help=f"int8 models. {_choices(ROUNDINGS)}",
                                 rich_help_panel=INT8),
) -> None:
    """Choose an update plan within an SRAM budget without building: measure what each
    layer's update is worth on DATA (short fine-tuning runs from the pretrained model), search
    plans with the real memory planner, and print the accuracy/memory frontier and the chosen
    plan (what `build --update auto` would build)."""
    from tinytrain.autoplan import AutoOptions, Session, sram_budget
    from tinytrain.autoplan.frontier_report import format_choice, format_frontier, plot_frontier
    from tinytrain.boards import load_board
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.passes.remat import parse_remat

    with user_errors():
        b = load_board(board)
        opts = Options(board=board, loss=loss, sgd=SGDConfig(lr, momentum, 0.0, batch, True,
                                                             rounding, 0),
                       quantize=quantize, calib=calib, new_head=new_head, remat=remat,
                       **_headroom(weight_headroom, quantize))
        opts.sgd.check()
        parse_remat(remat)
        if budgets < 1 or search_visits < 1:
            raise OptionError("--budgets and --search-visits must be at least 1")
        budget, text = sram_budget(b, int(max_sram * 1024) if max_sram else None)
        log = lambda s: err.print(s, markup=False, highlight=False)  # noqa: E731
        session = Session(model, opts, b, AutoOptions(data, search_visits, log=log), cache)
        session.check_smallest(budget, text)
        chosen = session.choose(budget, text)
        low = int(session.oracle(session.space.last(1).spec).sram or 0)  # the smallest plan
        grid = sorted({budget - (budget - low) * k // max(1, budgets - 1)
                       for k in range(budgets)})
        rows = session.frontier(grid)
        c = chosen.contributions
        console.print(format_frontier(rows, chosen.metric, c.before,
                                      {k: m.score for k, m in c.runs.items()}),
                      markup=False, highlight=False, soft_wrap=True)
        console.print("\n" + format_choice(chosen.summary()), markup=False, highlight=False,
                      soft_wrap=True)
        if write:
            write.write_text(chosen.toml)
            console.print(f"wrote {write}")
        if cache:
            from tinytrain.autoplan.choose import CACHE_FILE

            cache.mkdir(parents=True, exist_ok=True)
            (cache / CACHE_FILE).write_text(chosen.files()[CACHE_FILE])
        if plot:
            base = [(k.name, k.sram, k.measured) for k in chosen.candidates
                    if not k.name.startswith("search")]
            plot_frontier(rows, chosen.metric, c.before, plot,
                          (chosen.chosen.sram, chosen.chosen.measured), tuple(base))
            console.print(f"wrote {plot}")


RUN_EXAMPLES = """
Examples:
  tinytrain run build/host --data train.npz --eval test.npz --epochs 15
  tinytrain run build/digits --qemu --data train.npz --save s.npz --checkpoint
  tinytrain run build/digits --port /dev/ttyACM0 --data new.npz --state s.npz

Ctrl-C finishes the current step, saves --save and --checkpoint and exits
with code 130 (a second Ctrl-C aborts at once). --state then starts from the
saved parameters and training state; with --resume it goes on where the run
stopped, mid-batch included, and ends as an uninterrupted run would.
"""


@app.command(cls=GroupedCommand, epilog=RUN_EXAMPLES)
def run(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    data: Path = typer.Option(..., "--data", help=".npz with x (N, ...) float32 in the model's "
                              "input layout and y (N,) integer labels (float targets for mse).",
                              rich_help_panel=DATA),
    epochs: int = typer.Option(1, help="Passes over the data.", rich_help_panel=DATA),
    shuffle: bool = typer.Option(False, help="Shuffle each epoch (default: file order).",
                                 rich_help_panel=DATA),
    seed: int = typer.Option(0, help="Seed for --shuffle.", rich_help_panel=DATA),
    eval_data: Optional[Path] = typer.Option(None, "--eval", help="Held-out .npz: accuracy "
                                             "before training and after each epoch.",
                                             rich_help_panel=DATA),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate, set on the device "
                                       "before training; it keeps it until it restarts "
                                       "(default: unchanged, from a start the build's --lr).",
                                       rich_help_panel=TRAINING),
    momentum: Optional[float] = typer.Option(None, "--momentum", help="Momentum, set as --lr "
                                             "is (only a build with --momentum > 0 has its "
                                             "buffers).", rich_help_panel=TRAINING),
    weight_decay: Optional[float] = typer.Option(None, "--weight-decay", help="Weight decay, "
                                                 "set as --lr is (fp32 parameters only).",
                                                 rich_help_panel=TRAINING),
    metrics: Optional[Path] = typer.Option(None, help="Write one JSON object per training step "
                                           "(a line as each step ends).",
                                           rich_help_panel=DATA),
    qemu: bool = typer.Option(False, "--qemu", help="Run a firmware build on its board's QEMU "
                              "twin, over the serial link on a local socket. The twin's flash "
                              "persists in DIR/twin_flash.bin.", rich_help_panel=DEVICE),
    port: Optional[str] = typer.Option(None, "--port", help="Run on a board over this serial "
                                       "port (/dev/ttyACM0, COM3, socket://HOST:PORT).",
                                       rich_help_panel=DEVICE),
    erase_flash: bool = typer.Option(False, "--erase-flash", help="With --qemu: start the twin "
                                     "with erased flash (forget its checkpoints).",
                                     rich_help_panel=DEVICE),
    state: Optional[Path] = typer.Option(None, help="Start from parameters saved by --save, "
                                         "and from its training state (momentum, "
                                         "accumulators, int8 shadows) when the build matches.",
                                         rich_help_panel=STATE),
    resume: bool = typer.Option(False, "--resume", help="With --state: go on where that run "
                                "stopped, in its sample order (its --epochs, --shuffle and "
                                "--seed), so an interrupted run ends as an uninterrupted one "
                                "would.", rich_help_panel=STATE),
    save: Optional[Path] = typer.Option(None, help="Save the trained parameters, the training "
                                        "state and where the run stopped (.npz), also on "
                                        "Ctrl-C.", rich_help_panel=STATE),
    checkpoint: bool = typer.Option(False, "--checkpoint", help="Save the trained parameters "
                                    "to the device's flash at the end, also on Ctrl-C (kept "
                                    "across power loss; loaded at boot).",
                                    rich_help_panel=STATE),
) -> None:
    """Train the built program on DATA, sample by sample, and report loss and accuracy."""
    from tinytrain.device.data import load_npz
    from tinytrain.device.runner import open_program
    from tinytrain.device.train import StopRequest

    with user_errors():
        _erase_twin_flash(build_dir, erase_flash, qemu)
        if resume and not state:
            raise OptionError("--resume needs --state FILE: the file `run --save` wrote")
        with open_program(build_dir, port=port, qemu=qemu) as prog, StopRequest() as stop:
            x, y = load_npz(data, prog.info)
            ev = load_npz(eval_data, prog.info) if eval_data else None
            start = (0, 0)
            if state:
                saved = state_file.read(state)
                prog.set_params(saved.params)
                _restore_training_state(prog, saved)
                if resume:
                    epochs, shuffle, seed, start = _resume_at(saved, len(x), state)
            _set_sgd(prog, lr=lr, momentum=momentum, weight_decay=weight_decay)
            fh = open(metrics, "a" if resume else "w", buffering=1) if metrics else None
            try:  # (line-buffered: tail -f; a resumed run appends to its metrics)
                # with --save a Ctrl-C mid-batch keeps that batch's accumulators, saved with
                # the training state, so --resume ends as an uninterrupted run would
                stats = _train_and_report(prog, x, y, ev, epochs, shuffle, seed, fh, stop,
                                          start, keep_pending=save is not None)
            finally:
                if fh:
                    fh.close()
            steps = sum(s.steps for s in stats)
            if stop():
                what = " and ".join(o for o, on in (("--save", save), ("--checkpoint", checkpoint))
                                    if on)
                err.print(f"interrupted after {steps} training steps"
                          + (f"; doing {what} (Ctrl-C again aborts)" if what else ""),
                          markup=False, highlight=False, soft_wrap=True)
            if save:
                at = _position(stats, start)
                path = state_file.write(save, prog.get_params(), prog.get_state(),
                                        {"epoch": at[0], "sample": at[1], "epochs": epochs,
                                         "shuffle": shuffle, "seed": seed, "samples": len(x)})
                where = "finished" if at[0] >= epochs else \
                    f"stopped at epoch {at[0] + 1}, sample {at[1]} of {len(x)}"
                console.print(f"saved trained parameters and training state after {steps} "
                              f"steps to {path} (run {where})", markup=False, highlight=False,
                              soft_wrap=True)
            if checkpoint:
                kept = f" (kept in {build_dir / TWIN_FLASH})" if qemu else ""
                console.print(f"checkpoint {prog.checkpoint()} written to flash{kept}",
                              markup=False, highlight=False, soft_wrap=True)
            _print_link_health(prog)
        if stop():
            hint = f"; continue with --state {path} --resume" if save else ""
            err.print(f"interrupted{hint}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(130)


def _restore_training_state(prog: Device, saved: state_file.Saved) -> None:
    """Write the file's training state when it is this build's; say so when it is not (the
    parameters still load: a rebuild with another optimizer keeps them)."""
    if saved.state is None:
        return
    if state_mismatch(prog.info, saved.state) is None:
        prog.set_state(saved.state)
    else:
        err.print("note: the state file's training state (momentum, accumulators, shadows) is "
                  "not this build's; only its parameters were loaded", markup=False,
                  highlight=False, soft_wrap=True)


def _resume_at(saved: state_file.Saved, n: int, path: Path) -> tuple[int, bool, int,
                                                                      tuple[int, int]]:
    """(epochs, shuffle, seed, (epoch, sample)) of the run that saved `path`."""
    p = saved.position
    if p is None:
        raise DataError(f"{path} holds no run position (not written by `tinytrain run "
                        "--save`): --resume cannot tell where to go on")
    if p["samples"] != n:
        raise DataError(f"{path} was saved by a run over {p['samples']} samples; --data has "
                        f"{n}: resume with the same data")
    return p["epochs"], bool(p["shuffle"]), p["seed"], (p["epoch"], p["sample"])


def _position(stats: list[EpochStats], start: tuple[int, int]) -> tuple[int, int]:
    """Where the run stopped: (epoch, next sample in its order)."""
    if not stats:
        return start
    last = stats[-1]
    return (last.epoch, last.start + last.steps) if last.interrupted else (last.epoch + 1, 0)


def _set_sgd(prog: Device, **given: float | None) -> None:
    """Set the SGD scalars given on the command line on the device (it checks them too) and
    say what is in force, beside the build's values."""
    values = {k: v for k, v in given.items() if v is not None}
    if not values:
        return
    now = prog.sgd(**values)
    built = prog.info.get("sgd") or {}
    said = ", ".join(f"{k.replace('_', ' ')} {now[k]:g}"
                     + (f" (build {built[k]:g})" if k in built
                          and np.float32(built[k]) != np.float32(now[k]) else "")
                     for k in values)
    console.print(f"SGD for this run: {said}", markup=False, highlight=False, soft_wrap=True)


def _erase_twin_flash(build_dir: Path, erase: bool, qemu: bool) -> None:
    from tinytrain.device.qemu import erase_flash

    if not erase:
        return
    if not qemu:
        raise OptionError("--erase-flash erases the QEMU twin's flash file; use it with --qemu "
                          "(a board keeps its checkpoints; the next --checkpoint supersedes them)")
    if erase_flash(build_dir):
        err.print(f"erased the twin's flash ({build_dir / TWIN_FLASH})", markup=False,
                  highlight=False)


def _live(adv: Callable[..., None], epochs: int) -> Callable[..., None]:
    """The training bar's live text: the epoch, its mean loss and accuracy so far."""
    def update(n: int, epoch: int, loss: float, accuracy: float | None) -> None:
        acc = f"  acc {accuracy:.3f}" if accuracy is not None else ""
        adv(n, text=f"epoch {epoch + 1}/{epochs}  loss {loss:.4f}{acc}")
    return update


def _train_and_report(prog: Device, x: np.ndarray, y: np.ndarray,
                      ev: tuple[np.ndarray, np.ndarray] | None, epochs: int, shuffle: bool,
                      seed: int, fh: TextIO | None, stop: StopRequest,
                      start: tuple[int, int] = (0, 0),
                      keep_pending: bool = False) -> list[EpochStats]:
    """Evaluate (with --eval), then train with a line per epoch as it ends and an evaluation
    after each epoch; stops early once `stop()` turns true. Returns the epochs' figures."""
    from tinytrain.device.train import evaluate, train

    total, t0 = (epochs - start[0]) * len(x) - start[1], time.monotonic()
    done, last_eval = 0, None
    with bars() as b:
        def run_eval() -> float | None:
            assert ev is not None
            with b.task("eval", len(ev[0])) as adv:
                return evaluate(prog, ev[0], ev[1], adv, stop)

        if ev is not None:
            before = run_eval()
            if before is not None:
                console.print(f"eval accuracy before: {before:.4f}")
        if stop():
            return []

        def on_epoch(s: EpochStats) -> None:
            nonlocal done, last_eval
            done += s.steps
            last_eval = run_eval() if ev is not None and not s.interrupted and not stop() else None
            figures = [f"mean loss {s.mean_loss:.6f}"]
            if s.accuracy is not None:
                figures.append(f"accuracy {s.accuracy:.4f}")
            if last_eval is not None:
                figures.append(f"eval accuracy {last_eval:.4f}")
            cut = f" (interrupted after {s.steps} of {len(x)} samples)" if s.interrupted else ""
            console.print(f"epoch {s.epoch + 1}{cut}: {'  '.join(figures)}", markup=False,
                          highlight=False, soft_wrap=True)
            if not err.is_terminal:  # no bar: a plain progress line for logs
                secs = time.monotonic() - t0
                left = secs / done * (total - done) if not stop() else 0.0
                eta = f", about {left:.0f} s left" if left >= 1 else ""
                err.print(f"train epoch {s.epoch + 1}/{epochs}{' (interrupted)' * s.interrupted}"
                          f": {done}/{total} steps, {', '.join(figures)}, {secs:.1f} s{eta}",
                          markup=False, highlight=False, soft_wrap=True)

        with b.task("train", total) as adv:
            stats = train(prog, x, y, epochs, shuffle, seed, fh, _live(adv, epochs), on_epoch,
                          stop, start, keep_pending)
        if ev is not None and not stop():
            after = last_eval if stats else run_eval()
            if after is not None:
                console.print(f"eval accuracy after: {after:.4f}")
    return stats


def _print_link_health(prog) -> None:
    """Say so when the link had to recover from faults: a flaky cable should not go unseen."""
    st = prog.stats
    if st.resends:
        err.print(f"link: {st.resends} resends ({st.naks} NAKs, {st.timeouts} timeouts, "
                  f"{st.crc_errors} corrupted replies) over {st.requests} requests",
                  markup=False, highlight=False)


@app.command(cls=GroupedCommand)
def infer(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    data: Path = typer.Option(..., "--data", help=".npz with x (N, ...) in the model's layout.",
                              rich_help_panel=DATA),
    out_path: Path = typer.Option(..., "--out", help="Where to save the outputs (.npy).",
                                  rich_help_panel=DATA),
    qemu: bool = typer.Option(False, "--qemu", help="Run on the board's QEMU twin (it boots "
                              "with the checkpoint in DIR/twin_flash.bin, if any).",
                              rich_help_panel=DEVICE),
    port: Optional[str] = typer.Option(None, "--port", help="Run on a board over this port.",
                                       rich_help_panel=DEVICE),
    erase_flash: bool = typer.Option(False, "--erase-flash", help="With --qemu: start the twin "
                                     "with erased flash (forget its checkpoints).",
                                     rich_help_panel=DEVICE),
    state: Optional[Path] = typer.Option(None, help="Parameters saved by `run --save` "
                                         "(default: the device's own: its checkpoint or the "
                                         "build's initial ones).", rich_help_panel=STATE),
) -> None:
    """Run inference only and save the raw model outputs (N, ...) to OUT."""
    from tinytrain.device.data import load_npz
    from tinytrain.device.runner import open_program
    from tinytrain.device.train import infer_all

    with user_errors():
        _erase_twin_flash(build_dir, erase_flash, qemu)
        with open_program(build_dir, port=port, qemu=qemu) as prog:
            x, _ = load_npz(data, prog.info, need_y=False)
            if state:
                saved = state_file.read(state)
                prog.set_params(saved.params)
                if prog.info.get("master_read"):  # its forward reads the shadows too
                    _restore_training_state(prog, saved)
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
    from tinytrain.device.runner import load_program_info
    from tinytrain.export.to_onnx import export_onnx
    from tinytrain.export.to_tflite import export_tflite
    from tinytrain.quant.params import with_masters

    with user_errors():
        info = load_program_info(build_dir)
        tflite = info.get("source_format") == "tflite"
        saved = state_file.read(state)
        int8_file = tflite and not info.get("float_source")
        params = with_masters(info, saved.params, saved.state, exact=not int8_file)
        (export_tflite if tflite else export_onnx)(build_dir, params, out_path)
        console.print(f"wrote {out_path}")


EXPORT_LIB_EXAMPLES = """\
Examples:
  tinytrain build model.onnx --board nrf52840 --prefix kws --out build/kws
  tinytrain export-lib build/kws --format cmake --out libs/kws
  tinytrain export-lib build/kws --format arduino --out libs/kws_arduino
"""


@app.command("export-lib", cls=GroupedCommand, epilog=EXPORT_LIB_EXAMPLES)
def export_lib(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build` (any "
                                     "board: the model's C is the same)."),
    fmt: str = typer.Option(..., "--format", help="One of: cmake, arduino, zephyr, "
                            "platformio. The project's build system."),
    out_path: Path = typer.Option(..., "--out", help="The directory to write; replaced "
                                  "atomically, and only if it is an earlier export."),
) -> None:
    """Write the model's C (named after its --prefix), the runtime kernels and the packaging
    files of FORMAT, with a README holding the API and an example main, for use as a library
    in your own firmware. Several models share one runtime (see the README)."""
    from tinytrain.export.library.export import export_library

    with user_errors():
        done = export_library(build_dir, fmt, out_path)
        console.print(f"wrote the {done['prefix']}_model {fmt} library to {out_path} "
                      f"({len(done['files'])} files; see {out_path / 'README.md'})",
                      markup=False, highlight=False)


@app.command()
def report(
    build_dir: Path = typer.Argument(..., help="A directory made by `tinytrain build`."),
    as_json: bool = typer.Option(False, "--json", help="Print memory.json: every buffer, the "
                                 "SRAM components, the peak and the per-layer table."),
    layers: bool = typer.Option(False, "--layers", help="Print one row per conv/dense layer "
                                "(the indices --update uses) instead of the buffers: bytes "
                                "saved for its backward, its gradient peak, its trainable and "
                                "frozen parameters, MACs, and what trains."),
    plot: Optional[Path] = typer.Option(None, help="Draw every SRAM component over the "
                                        "program's steps to this PNG (needs matplotlib: the "
                                        "`plot` extra)."),
) -> None:
    """Where the SRAM goes: every arena buffer (kind, bytes, offset, first/last step), totals
    by kind, the SRAM figure `build` printed (of the board's capacity; for a firmware, the
    linked ELF's with the difference explained) and the peak with what is live there."""
    from tinytrain.codegen.program import MEMORY_JSON
    from tinytrain.errors import BuildError
    from tinytrain.reports.layers import format_layers
    from tinytrain.reports.memory import format_table, sram_lines
    from tinytrain.reports.plot import plot as draw

    with user_errors():
        path = build_dir / MEMORY_JSON
        if not path.exists():
            raise BuildError(f"{build_dir} has no {MEMORY_JSON}; run `tinytrain build` first")
        m = json.loads(path.read_text())
        if "sram" not in m or "layers" not in m:
            raise BuildError(f"{path} was written by an older tinytrain; run `tinytrain build` "
                             "again")
        if as_json:
            console.print_json(data=m)
        elif layers:
            text = "\n".join([format_layers(m["layers"]), *sram_lines(
                m["sram"], m.get("sram_capacity"), m.get("firmware_sram"))])
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(format_table(m), markup=False, highlight=False, soft_wrap=True)
        if plot:
            draw(m, plot)
            console.print(f"wrote {plot}")


@app.command()
def ops() -> None:
    """List the supported ops: the IR ops with the ONNX and TFLite operators they import from,
    and their forward/backward status."""
    from tinytrain.frontend.tflite_float import FLOAT_HANDLERS, FOLD
    from tinytrain.frontend.tflite_import import OP_NAMES
    from tinytrain.ops import public_ops

    t = Table("IR op", "from ONNX", "from TFLite (int8 *_q8, float the rest)", "forward",
              "backward")
    def tfl(src: str) -> bool:  # TFLite's builtin operators are named in capitals
        return not src.startswith("onnx:") and src.split()[0].isupper()

    def bare(srcs: list[str]) -> str:  # "onnx:LSTM" names ONNX's LSTM, not TFLite's
        return ", ".join(s.removeprefix("onnx:") for s in srcs) or "-"

    for op in sorted(public_ops(), key=lambda o: o.name):
        t.add_row(op.name, bare([s for s in op.source_ops if not tfl(s)]),
                  bare([s for s in op.source_ops if tfl(s)]), "yes",
                  "yes" if op.has_gradient else "no (inference head; folded into the loss)")
    console.print(t)
    folded = sorted(OP_NAMES[c] for c in FOLD if c in FLOAT_HANDLERS)
    console.print(f"Evaluated at import on constants only (a float model's normalisation): "
                  f"{', '.join(folded)}. TRANSPOSE of the model input relabels its layout.",
                  markup=False, highlight=False)


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
    drive: Optional[Path] = typer.Option(None, "--drive", help="Raspberry Pi Pico boards: the "
                                         "USB drive of BOOTSEL mode (RPI-RP2 / RP2350) to copy "
                                         "DIR/firmware.uf2 to (default: the one mounted, else "
                                         "picotool)."),
) -> None:
    """Write DIR/firmware.elf to the board's flash over serial (or a debug probe; Raspberry Pi
    Pico boards: as DIR/firmware.uf2 onto their BOOTSEL drive, or with picotool). Trained
    weights in the checkpoint slots are not erased. Boards whose [flash] protocol is "none"
    (Corstone-300, Alif Ensemble) are programmed with their own tools: the error says how."""
    from tinytrain.boards import load_board
    from tinytrain.device.flashing import (
        FlashError,
        board_chip,
        flash_image,
        flash_probe,
        load_elf,
        manual_programming,
    )
    from tinytrain.device.runner import load_program_info
    from tinytrain.errors import BuildError

    with user_errors():
        b = load_board(load_program_info(build_dir).get("board", "host"))
        elf = build_dir / "firmware.elf"
        if not b.is_mcu or not elf.exists():
            raise BuildError(f"{build_dir} is not a firmware build; build it with "
                             "`tinytrain build MODEL --board stm32f746|nrf52840`")
        if (manual := manual_programming(b, build_dir)) is not None:
            raise FlashError(manual)
        if probe:
            flash_probe(elf, b.name)
            console.print(f"flashed {elf} over SWD")
            return
        if b.flash.get("protocol") == "uf2":
            from tinytrain.device.flashing.uf2 import flash_uf2

            if port:
                raise OptionError(f"{b.name} is flashed over USB from its BOOTSEL drive (or with "
                                  "picotool), not a serial port: drop --port (or give --drive "
                                  "PATH)")
            if "uf2_family" not in b.flash:
                raise OptionError(f"board {b.name} has no [flash] uf2_family in its board file")
            how = flash_uf2(elf, int(b.flash["uf2_family"]), drive=drive)
            console.print(f"flashed {b.name}: {how}", markup=False, highlight=False)
            return
        if drive is not None:
            raise OptionError(f"--drive is for boards flashed with a UF2 file; {b.name} is "
                              "flashed with --port PORT or --probe")
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
                        baud=baud or int(b.flash.get("baud", 115200)), progress=step,
                        chip=board_chip(b))
        console.print(f"flashed {total} bytes to {b.name} over {port} "
                      f"({b.flash['protocol']}), verified")


@app.command()
def bench(
    build_dir: Path = typer.Argument(..., help="A firmware build."),
    qemu: bool = typer.Option(False, "--qemu", help="Count instructions on the board's QEMU "
                              "twin (-icount shift=0: 1 SysTick tick = 40 instructions)."),
    port: Optional[str] = typer.Option(None, "--port", help="Count on the board at this "
                                       "serial port (DWT cycles), with the twin's "
                                       "instructions beside them when the build has a twin."),
    steps: int = typer.Option(10, help="Training steps to measure."),
    data: Optional[Path] = typer.Option(None, "--data", help="Samples to use (.npz); "
                                        "default: seeded random inputs."),
    as_json: Optional[Path] = typer.Option(None, "--json", help="Also write the figures here."),
) -> None:
    """Cost of a training step, an inference and each op: instructions on the QEMU twin
    (--qemu) or cycles on the board (--port)."""
    from tinytrain.errors import BuildError

    with user_errors():
        if qemu == (port is not None):
            raise BuildError("give --qemu (instructions on the emulated twin) or --port PORT "
                             "(cycles on the board), one of them")
        from tinytrain.device.bench import format_table, measure, to_json, with_twin
        from tinytrain.device.qemu import TWIN_ELF

        res = measure(build_dir, steps=steps, data=data, port=port)
        if port and res["unit"] == "cycles" and (Path(build_dir) / TWIN_ELF).exists():
            console.print("measuring the same steps on the QEMU twin for the instruction "
                          "counts", markup=False)
            res = with_twin(res, measure(build_dir, steps=steps, data=data))
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
