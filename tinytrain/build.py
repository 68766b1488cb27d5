"""`tinytrain build`: compile a model into a C project, build it, write report.json atomically."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tinytrain.boards import load_board
from tinytrain.codegen.render import render, write_files
from tinytrain.compiler import Options, compile_model
from tinytrain.errors import BuildError
from tinytrain.ir import Graph
from tinytrain.report import memory_report
from tinytrain.toolchain import compile_project

PROGRAM_JSON = "program.json"
REPORT_JSON = "report.json"


def program_info(g: Graph) -> dict[str, Any]:
    """What the runner and exporter need to know about the built program."""
    label = next(t for t in g.tensors.values() if t.kind == "label")
    return {
        **{k: v for k, v in g.meta.items() if k != "sgd"},
        "sgd": g.meta.get("sgd"),
        "input_shape_ir": list(g.t(g.inputs[0]).shape),
        "output_shape_ir": list(g.t(g.outputs[0]).shape),
        "target_shape": list(label.shape),
        "target_dtype": label.dtype,
        "trainable": [{"name": t.name, "shape": list(t.shape),
                       "source": None if t.source is None else
                       {"node": t.source.node, "slot": t.source.slot,
                        "transform": t.source.transform}}
                      for t in g.params(trainable=True)],
    }


def build(model: Path, out: Path, opts: Options, on_pass=None) -> dict[str, Any]:
    board = load_board(opts.board)
    opts.sgd.check()
    check_out_dir(Path(out))
    g, plan = compile_model(model, opts, on_pass)
    report = memory_report(g, plan, board)
    files = render(g, plan, board.name)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tt-tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir(parents=True)
        write_files(files, tmp)
        shutil.copyfile(model, tmp / ("source_model" + Path(model).suffix.lower()))
        info = json.dumps(program_info(g), indent=1, sort_keys=True)
        (tmp / PROGRAM_JSON).write_text(info + "\n")
        compile_project(tmp, board)
        (tmp / REPORT_JSON).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def check_out_dir(out: Path) -> None:
    """Refuse to replace something that is not ours, before any work is done."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file, not a directory; choose another --out")
    if out.exists() and not (out / PROGRAM_JSON).exists() and any(out.iterdir()):
        raise BuildError(f"output directory {out} exists and is not a tinytrain build; "
                         "choose another --out or remove it")


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Replace `out` by `tmp` so a reader never sees a half-written project."""
    check_out_dir(out)  # again: it may have changed while we compiled
    old = out.with_name(f".{out.name}.tt-old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
