"""`tinytrain build`: compile a model into a C project, build it, write report.json atomically."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from tinytrain.boards import Board, load_board
from tinytrain.codegen.context import check_prefix
from tinytrain.codegen.outdir import check_replaceable, staged
from tinytrain.codegen.program import MEMORY_JSON, PROGRAM_JSON, REPORT_JSON, program_info
from tinytrain.codegen.render import flash_layout, render, write_files
from tinytrain.device.firmware_size import (
    address_taken,
    section_sizes,
    stack_depth,
    unplanned_sram,
)
from tinytrain.device.flashing.uf2 import write_uf2
from tinytrain.device.isa_check import is_armv6m, violations
from tinytrain.device.kernel_choice import Family, fit_kernels, kernel_report
from tinytrain.device.toolchain import compile_project
from tinytrain.errors import BuildError, FlashOverflow, OptionError, TinyTrainError
from tinytrain.ir import Graph
from tinytrain.passes.pipeline import FP32_MACS, KERNELS, Options, compile_model, fp32_fma
from tinytrain.reports.layers import LayerCapture
from tinytrain.reports.memory import PEAK_KEYS, memory_details
from tinytrain.reports.report import memory_report


def check_budget(model: Path, opts: Options, report: dict[str, Any], board: Board,
                 max_sram: int | None, max_flash: int | None) -> None:
    """Fail before any compiler runs if the plan does not fit, with what would fit."""
    # A board's own limits are judged by its linker (code, newlib and alignment included; see
    # toolchain.compile_project); the plan alone decides only the user's --max-sram/--max-flash.
    limits = {"SRAM": min((v for v in (None if board.is_mcu else board.sram_bytes, max_sram)
                           if v), default=None),
              "flash": min((v for v in (None if board.is_mcu else board.flash_bytes, max_flash)
                            if v), default=None)}
    need = {"SRAM": report["sram_bytes"]["total"], "flash": report["flash_bytes"]["total"]}
    over = [k for k in need if limits[k] is not None and need[k] > limits[k]]
    if not over:
        return
    s, f = report["sram_bytes"], report["flash_bytes"]
    lines = [f"{model} with --update {opts.update} does not fit {board.name}: " + "; ".join(
        f"{k} needs {need[k] / 1024:.1f} KB of {limits[k] / 1024:.1f} KB" for k in over) + ".",
        f"  SRAM: arena {s['arena'] / 1024:.1f} KB (peak at {report['memory']['peak_op']}: "
        + ", ".join(f"{k} {v / 1024:.1f} KB" for k, v in report["memory"]["peak_by_kind"].items())
        + f"); trainable params {s['trainable_params'] / 1024:.1f} KB; gradients "
        f"{s['param_grads'] / 1024:.1f} KB; optimizer state "
        f"{s['optimizer_state'] / 1024:.1f} KB"
        + (f"; fleet correction {s['fleet_correction'] / 1024:.1f} KB"
           if "fleet_correction" in s else "")
        + (f"; received pointers {s['received'] / 1024:.1f} KB" if "received" in s else "")
        + (f"; link buffers {s['link_buffers'] / 1024:.1f} KB; stack {s['stack'] / 1024:.1f} KB"
           if "stack" in s else ""),
        f"  flash: frozen params {f['frozen_params'] / 1024:.1f} KB, trainable initial values "
        f"{f['trainable_init'] / 1024:.1f} KB (code comes on top)"
]
    tried = []
    for alt in ("bias", "last:1", "none"):
        if alt == opts.update:
            continue
        try:
            g2, p2 = compile_model(model, replace(opts, update=alt))
        except TinyTrainError:
            continue
        r2 = memory_report(g2, p2, board)
        ok = all(limits[k] is None or v <= limits[k] for k, v in
                 (("SRAM", r2["sram_bytes"]["total"]), ("flash", r2["flash_bytes"]["total"])))
        tried.append(f"--update {alt}: SRAM {r2['sram_bytes']['total'] / 1024:.1f} KB, flash "
                     f"{r2['flash_bytes']['total'] / 1024:.1f} KB" + (" (fits)" if ok else ""))
    if opts.sgd.momentum:
        tried.append("momentum 0 drops the optimizer state")
    if opts.sgd.batch > 1:
        tried.append("--batch 1 fuses updates and drops the gradient buffers")
    lines.append("  smaller plans: " + "; ".join(tried))
    raise BuildError("\n".join(lines))


def firmware_figures(project: Path, board: Board, report: dict[str, Any]) -> dict[str, Any]:
    """Linked sizes of the board's ELF against the plan and the board; fail with the
    breakdown when the stack estimate exceeds its reserve."""
    size_tool = board.cc.replace("-gcc", "-size")
    fw = section_sizes(project / "firmware.elf", size_tool)
    objs = project / "su" / "board"
    stack = stack_depth(objs, indirect_targets=address_taken(
        objs, board.cc.replace("-gcc", "-readelf")))
    fw["stack_estimate"] = stack["bytes"]
    fw["stack_chain"] = stack["chain"]
    fw["planned_sram"] = report["sram_bytes"]["total"]
    fw["planned_arena"] = report["sram_bytes"]["arena"]
    fw["unplanned_sram"] = unplanned_sram(project / "firmware.map", fw["sram_used"],
                                          fw["planned_sram"])
    if stack["bytes"] > fw["stack_reserved"]:
        raise BuildError(
            f"the deepest call chain needs about {stack['bytes']} bytes of stack, more than "
            f"the {fw['stack_reserved']} bytes {board.name} reserves (layout.stack_kb in "
            f"boards/{board.name}.toml): {' -> '.join(stack['chain'])}")
    return fw


def check_isa(project: Path, board: Board) -> None:
    """An ARMv6-M board's ELFs hold only ARMv6-M instructions: its twin is a Cortex-M3, which
    would run the ARMv7-M ones the board faults on (device/isa_check.py)."""
    if not is_armv6m(board.cpu):
        return
    objdump = board.cc.replace("-gcc", "-objdump")
    for elf in ("firmware.elf", "firmware_qemu.elf"):
        bad = violations(project / elf, objdump)
        if bad:
            raise BuildError(f"{elf} for {board.name} ({board.cpu}, ARMv6-M) holds "
                             f"{len(bad)} instruction(s) the core lacks, e.g. "
                             f"{'; '.join(bad[:3])}")


def check_build(opts: Options, out: Path) -> None:
    """The options and output directory a build needs, checked before any work."""
    opts.sgd.check()
    check_prefix(opts.prefix)
    if opts.kernels not in KERNELS:
        raise OptionError(f"--kernels must be one of {', '.join(KERNELS)}, got {opts.kernels!r}")
    if opts.fp32_mac not in FP32_MACS:
        raise OptionError(f"--fp32-mac must be one of {', '.join(FP32_MACS)}, "
                          f"got {opts.fp32_mac!r}")
    check_out_dir(Path(out))


def build(model: Path, out: Path, opts: Options, on_pass=None, max_sram: int | None = None,
          max_flash: int | None = None, chosen: Any = None) -> dict[str, Any]:
    """Build `model` into `out` with opts.update's plan. `chosen` is the plan `--update auto`
    chose (tinytrain.autoplan.AutoPlan, via autoplan.build_auto): its summary goes into the
    report, its TOML and measurements into the directory, and opts.update names its TOML."""
    if opts.update == "auto":
        raise OptionError("--update auto chooses the plan before the build: call "
                          "tinytrain.autoplan.build_auto (as `tinytrain build` does)")
    board = load_board(opts.board)
    check_build(opts, Path(out))
    if fp32_fma(opts, board) and board.soft_float_per_mac:  # newlib's fmaf rounds twice
        raise OptionError(f"--fp32-mac fused needs an FPU with a fused multiply-add; "
                          f"{board.name}'s {board.cpu} has no FPU: use --fp32-mac separate")
    if max_sram is not None:  # the budget --remat auto recomputes to meet
        opts = replace(opts, max_sram=max_sram)
    layers = LayerCapture(on_pass)  # the layers as --update numbers them, for the report
    g, plan = compile_model(model, opts, layers)
    if opts.profile_members:
        g = g.replace(meta={**g.meta, "count_members": True})
    report = memory_report(g, plan, board)
    memory = memory_details(g, plan, report, layers)
    report["memory"] = {k: memory[k] for k in PEAK_KEYS}
    check_budget(Path(model), opts, report, board, max_sram, max_flash)
    if chosen is not None:
        report["auto_plan"] = chosen.summary()
    try:
        return _write_build(g, plan, board, model, out, opts, report, memory, chosen)
    except FlashOverflow:
        # checkpoint slots that hold the training state may leave the program too little
        # flash: slots for the parameters alone, if that is smaller, before giving up
        if not board.is_mcu or flash_layout(g, board) == \
                flash_layout(_without_state(g), board):
            raise
    g = _without_state(g)
    report.update({k: v for k, v in memory_report(g, plan, board).items()
                   if k in ("flash_bytes", "checkpoint")})
    return _write_build(g, plan, board, model, out, opts, report, memory, chosen)


def _without_state(g: Graph) -> Graph:
    """`g` whose checkpoints keep the parameters alone (codegen/render.flash_layout)."""
    return g.replace(meta={**g.meta, "checkpoint_state": False})


def _write_build(g: Graph, plan: Any, board: Board, model: Path, out: Path, opts: Options,
                 report: dict[str, Any], memory: dict[str, Any], chosen: Any) -> dict[str, Any]:
    """Render, compile and link into `out` (atomically); the report completed. A firmware
    whose optimised kernels overflow the board's flash keeps some families generic
    (device/kernel_choice.py) and links again."""
    generic: list[Family] = []
    with staged(Path(out), PROGRAM_JSON, NOT_A_BUILD.format(out=out)) as tmp:
        fused = fp32_fma(opts, board)
        report["fp32_mac"] = "fused" if fused else "separate"
        files = render(g, plan, board, kernels=opts.kernels, prefix=opts.prefix, fp32_fma=fused)
        write_files(files, tmp)
        if chosen is not None:  # the chosen plan's TOML and the measurements, for next time
            write_files(chosen.files(), tmp)
        shutil.copyfile(model, tmp / ("source_model" + Path(model).suffix.lower()))
        info = json.dumps(program_info(g, board, opts.prefix, fused), indent=1,
                          sort_keys=True)
        (tmp / PROGRAM_JSON).write_text(info + "\n")
        while True:
            try:
                report["programs"] = [p.name for p in compile_project(tmp, board)]
                break
            except FlashOverflow as e:
                generic = fit_kernels(tmp, board, generic, e)
            files = render(g, plan, board, kernels=opts.kernels, prefix=opts.prefix,
                           generic=frozenset(f.name for f in generic), fp32_fma=fused)
            write_files({k: v for k, v in files.items()  # make recompiles what changed
                         if not (tmp / k).exists() or (tmp / k).read_text() != v}, tmp)
        if board.is_mcu:
            report["kernels"] = kernel_report(tmp, generic)
            check_isa(tmp, board)
            report["firmware"] = firmware_figures(tmp, board, report)
            if board.flash.get("protocol") == "uf2":  # what a Pico user drags onto its drive
                write_uf2(tmp / "firmware.elf", int(board.flash["uf2_family"]))
                report["programs"].append("firmware.uf2")
            memory["firmware_sram"] = {k: report["firmware"][k] for k in
                                       ("sram_used", "planned_sram", "unplanned_sram")}
        (tmp / REPORT_JSON).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        (tmp / MEMORY_JSON).write_text(json.dumps(memory, indent=1) + "\n")
    return report


NOT_A_BUILD = "output directory {out} exists and is not a tinytrain build"


def check_out_dir(out: Path) -> None:
    """Refuse to replace something that is not ours, before any work is done."""
    check_replaceable(out, PROGRAM_JSON, NOT_A_BUILD.format(out=out))
