"""The pipeline driver: the list of passes from model file to memory plan, in one place."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tinytrain.boards import Board, load_board, sram_limits
from tinytrain.errors import ModelError
from tinytrain.ir import Graph
from tinytrain.ops import get_op
from tinytrain.passes.activation_masks import use_activation_masks
from tinytrain.passes.add_loss import add_loss
from tinytrain.passes.autodiff import autodiff
from tinytrain.passes.channel_group import group_update_rows
from tinytrain.passes.channel_stream import stream_channels
from tinytrain.passes.fleet_correction import add_fleet_correction
from tinytrain.passes.fuse import fuse_updates
from tinytrain.passes.inplace import run_in_place
from tinytrain.passes.memory_layout import constant_sram
from tinytrain.passes.memory_plan import Plan, peak_live, plan_memory
from tinytrain.passes.optimizer import SGDConfig, add_optimizer
from tinytrain.passes.pool_grad import keep_pool_gradient_per_channel
from tinytrain.passes.prune import apply_update_plan
from tinytrain.passes.receive import mark_received, union
from tinytrain.passes.remat import Target, choose, parse_remat
from tinytrain.passes.schedule import schedule_backward
from tinytrain.passes.split_weights import split_partial_weights
from tinytrain.passes.stream import stream_rows
from tinytrain.passes.stream_backward import stream_gradients
from tinytrain.passes.update_plan import UpdatePlan, parse_plan
from tinytrain.passes.verify import verify
from tinytrain.passes.weight_headroom import TRAINED_WEIGHT_HEADROOM, widen_trained_weights
from tinytrain.passes.x_float import convert_update_inputs

KERNELS = ("optimized", "reference")
FP32_MACS = ("auto", "fused", "separate")


@dataclass(frozen=True)
class Options:
    """How to compile a model: what `tinytrain build`'s options set (same names and defaults).

    Attributes:
        board: A board name (`tinytrain boards`) or a board file; "host" builds for this machine.
        loss: "ce" (softmax cross-entropy over class ids) or "mse".
        sgd: Learning rate, momentum, weight decay and batch of the on-device SGD.
        update: Which parameters learn: "full", "bias", "last:K", a TTE scheme, a plan file,
            or "auto" (see `tinytrain.passes.update_plan`).
        quantize: "int8" quantises an fp32 model (ONNX or float TFLite) from `calib`'s samples.
        calib: An .npz whose `x` holds the calibration samples for `quantize`.
        kernels: "optimized" (Cortex-M kernels where a geometry qualifies) or "reference".
        prefix: The generated C names' prefix (`prefix_init`, `PREFIX_INPUT_SIZE`, ...).
        remat: Rematerialisation: "auto", "off", or "N%" (at most N % more MACs).
        max_sram: The SRAM figure in bytes the build must stay within (`--max-sram`).
    """

    board: str = "host"
    loss: str = "ce"
    sgd: SGDConfig = field(default_factory=SGDConfig)
    update: str = "full"  # update plan (see tinytrain.passes.update_plan)
    memory_passes: bool = True  # fuse, activation masks, reorder, in-place
    quantize: str | None = None  # "int8": post-training quantisation of an fp32 model
    calib: Path | None = None  # .npz with x: calibration samples for --quantize
    check_ir: bool = True  # run ir.verify after every pass
    # "optimized": the Cortex-M kernels of runtime_c/optimized/tt_kernels_opt.h where a geometry
    # qualifies; "reference": only the portable reference kernels (the specification).
    kernels: str = "optimized"
    prefix: str = "tt"  # the generated model's C names: prefix_init, PREFIX_INPUT_SIZE, ...
    new_head: bool = False  # int8: widen the classifier's ranges for a fresh head (new_head.py)
    # rematerialisation (passes/remat.py): "auto" recomputes only when the plan would not fit
    # the board's SRAM or max_sram, as little as it takes; "off"; "N%": the smallest arena
    # with at most N % more MACs per training step
    remat: str = "auto"
    # int8 models tinytrain quantises: the trained weights' scales widened this much, room for
    # training to grow them (passes/weight_headroom.py); 1 keeps the calibrated scales
    weight_headroom: float = TRAINED_WEIGHT_HEADROOM
    max_sram: int | None = None  # bytes: --max-sram, the SRAM figure the build must stay within
    # count the ops inside row and channel streams one by one too (`tinytrain bench` lists
    # them); costs a few instructions per member call, so off by default
    profile_members: bool = False
    # the channel-streamed 1x1 backward's fp32 multiply-adds: "fused" (one rounding, TT_F32_FMA),
    # "separate" (product and sum rounded), "auto": the board's `fp32_fma` (Helium cores fuse)
    fp32_mac: str = "auto"
    # a fleet's drift correction (SCAFFOLD / FedProx) in every step: passes/fleet_correction.py
    fleet_correction: bool = False
    # a plan whose tensors this build freezes but can be sent over the link (passes/receive.py)
    receive: str | None = None


def fp32_fma(opts: Options, board: Board) -> bool:
    """Whether the build fuses the channel-streamed 1x1 backward's multiply-adds."""
    return opts.fp32_mac == "fused" or (opts.fp32_mac == "auto" and board.fp32_fma)


def load_model(path: Path) -> Graph:
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file {path} does not exist; pass the path of an .onnx or "
                         ".tflite file")
    if not path.is_file():
        raise ModelError(f"{path} is not a file; pass the path of an .onnx or .tflite file")
    head = path.read_bytes()[:8]
    if path.suffix.lower() == ".tflite" or head[4:8] == b"TFL3":
        from tinytrain.frontend.tflite_import import load_tflite

        return load_tflite(path)
    from tinytrain.frontend.onnx_import import load_onnx

    return load_onnx(path)


def pipeline(opts: Options) -> list[tuple[str, Callable[[Graph], Graph]]]:
    """The passes after import, in order. `--dump-ir NAME` prints the graph after NAME."""
    passes: list[tuple[str, Callable[[Graph], Graph]]] = [
        ("headroom", lambda g: widen_trained_weights(g, headroom_plan(g, opts),
                                                     opts.weight_headroom)
         if opts.quantize else g),
        ("add_loss", lambda g: add_loss(g, opts.loss)),
        ("autodiff", autodiff),
        ("receive", lambda g: mark_received(g, parse_plan(g, opts.update),
                                            parse_plan(g, opts.receive))
         if opts.receive else g),
        ("prune", lambda g: apply_update_plan(g, parse_plan(g, opts.update))),
        ("optimizer", lambda g: add_optimizer(g, opts.sgd)),
    ]
    if opts.memory_passes:
        later: list[tuple[str, Callable[[Graph], Graph]]] = [
            ("channels", stream_channels),
            ("stream", stream_rows),
            ("schedule", schedule_backward),
            ("inplace", run_in_place),
            ("x_float", convert_update_inputs),
            ("channel_group", group_update_rows),
        ]

        def finish(g: Graph) -> Graph:  # what grad_rows' and remat's candidates are judged after
            for _, fn in later:
                g = fn(g)
            return g

        passes += [
            ("fuse", fuse_updates),
            ("masks", use_activation_masks),
            ("split", split_partial_weights),
            ("pool_grad", lambda g: keep_pool_gradient_per_channel(g, later=stream_channels)),
            ("grad_rows", lambda g: stream_gradients(
                g, finish, rank=lambda c: peak_live(run_in_place(stream_channels(c)),
                                                    "backward"))),
            ("remat", lambda g: remat_pass(g, opts, finish)),
            *later,
        ]
    if opts.fleet_correction:  # last: on the parameters as the memory passes store them
        passes.append(("fleet", add_fleet_correction))
    return passes


def headroom_plan(g: Graph, opts: Options) -> UpdatePlan:
    """The weights whose int8 scales get room to grow: those this build trains, and those it
    receives (another class trains them, with that room: both must hold the same codes)."""
    plan = parse_plan(g, opts.update)
    return union(plan, parse_plan(g, opts.receive)) if opts.receive else plan


def remat_pass(g: Graph, opts: Options, finish: Callable[[Graph], Graph]) -> Graph:
    """--remat: off; auto (only when the plan exceeds the SRAM limit: the least recompute that
    meets it, else the smallest arena); or a MACs allowance (the smallest arena within it)."""
    mode = parse_remat(opts.remat)
    if mode == "off":
        return g
    board = load_board(opts.board)
    if mode == "auto":
        limits = sram_limits(board, opts.max_sram)
        if not limits:
            return g
        done = finish(g)
        arena = min(limits)[0] - sum(constant_sram(done, board).values())
        if plan_memory(done).arena_size <= arena:
            return g
        return choose(g, finish, Target(arena=max(arena, 0)), done)
    done = finish(g)
    step = macs(done)
    return choose(g, finish, Target(max_macs=int(mode * (step["forward"] + step["backward"]))),
                  done)


def quantize_model(g: Graph, opts: Options) -> Graph:
    """`--quantize int8 --calib FILE`: calibrate on FILE's x, then quantise (passes/quantize)."""
    import numpy as np

    from tinytrain.errors import DataError, OptionError
    from tinytrain.passes.quantize import calibrate, quantize_graph

    if opts.quantize != "int8":
        raise OptionError(f"--quantize supports 'int8', got '{opts.quantize}'")
    if any(t.dtype == "s8" for t in g.tensors.values()):
        raise OptionError("the model is already int8; drop --quantize")
    if opts.calib is None:
        raise OptionError("--quantize int8 needs --calib FILE.npz with representative inputs x")
    try:
        with np.load(opts.calib, allow_pickle=False) as f:
            x = np.asarray(f["x"], np.float32)
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"cannot read calibration inputs 'x' from {opts.calib}: {e}") from None
    want = tuple(g.meta.get("input_logical_shape", ()))
    if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want or len(x) == 0:
        raise DataError(f"{opts.calib}: x has shape {tuple(x.shape)}, the model expects "
                        f"(N, {', '.join(map(str, want))})")
    perm = g.meta.get("input_perm") or list(range(len(want)))
    x = np.transpose(x, (0,) + tuple(p + 1 for p in perm))
    return quantize_graph(g, calibrate(g, x))


def import_model(path: Path, opts: Options) -> Graph:
    """The graph the passes start from: imported, quantised as `opts` says (an ONNX QDQ model
    with its own scales), its head widened with --new-head."""
    g = load_model(path)
    if g.meta.get("qdq") is not None:  # an ONNX QDQ model: its own scales, no calibration
        from tinytrain.errors import OptionError
        from tinytrain.passes.quantize import quantize_graph

        if opts.quantize:
            raise OptionError(f"{path} is already quantised (ONNX QDQ); drop --quantize")
        g = quantize_graph(g, {}, fixed=g.meta["qdq"])
    elif opts.quantize:
        g = quantize_model(g, opts)
    if opts.new_head:
        from tinytrain.passes.new_head import widen_new_head

        g = widen_new_head(g)
    return g


def compile_model(path: Path, opts: Options,
                  on_pass: Callable[[str, Graph], None] | None = None) -> tuple[Graph, Plan]:
    g = import_model(path, opts)
    if on_pass:
        on_pass("import", g)
    for name, fn in pipeline(opts):
        g = fn(g)
        if opts.check_ir:
            verify(g)
        if on_pass:
            on_pass(name, g)
    return g, plan_memory(g)


def macs(g: Graph) -> dict[str, int]:
    """MACs per training sample: the forward pass, the backward pass, and the forward layers
    the backward recomputes (passes/remat), counted apart from both."""
    out = {"forward": 0, "backward": 0, "recompute": 0}
    for n in g.nodes:
        if n.phase in ("forward", "backward"):
            shapes = [g.t(i).shape for i in n.inputs]
            out_shapes = [g.t(o).shape for o in n.outputs]
            phase = "recompute" if n.attrs.get("remat_of") else n.phase
            out[phase] += get_op(n.op).macs(n, shapes, out_shapes)
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
