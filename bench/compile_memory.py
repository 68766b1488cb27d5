"""Compile time, MACs and peak SRAM of a full fp32 update for the reference models.

    python bench/compile_memory.py            # prints a Markdown table

Peak SRAM = planned arena + trainable parameters (+ their gradient accumulators, listed
separately; batch 1, plain SGD). Times are wall-clock on this machine: compare rows of one
run, not runs on different machines.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.torch_models import MLP, DigitsCNN, MobileNetV2, TinyMobileNet, export  # noqa: E402
from tinytrain.boards import load_board  # noqa: E402
from tinytrain.codegen.render import render, write_files  # noqa: E402
from tinytrain.device.toolchain import compile_project  # noqa: E402
from tinytrain.passes.pipeline import Options, compile_model  # noqa: E402
from tinytrain.reports.report import memory_report  # noqa: E402

MODELS = {
    "MLP (digits)": MLP,
    "CNN (digits)": DigitsCNN,
    "MobileNetV2-style + SE/HardSwish (digits)": TinyMobileNet,
    "MobileNetV2-w0.35 @128x128": lambda: MobileNetV2(0.35, 128, 10),
}


def kb(n: int) -> str:
    return f"{n / 1024:,.1f}"


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in MODELS.items():
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = export(make(), Path(tmp) / "m.onnx")
            t0 = time.perf_counter()
            g, plan = compile_model(path, Options())
            t1 = time.perf_counter()
            project = Path(tmp) / "p"
            write_files(render(g, plan, "host"), project)
            t2 = time.perf_counter()
            compile_project(project, load_board("host"))
            t3 = time.perf_counter()
            r = memory_report(g, plan, load_board("host"))
            s = r["sram_bytes"]
            rows.append((name, f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", f"{t3 - t2:.1f}",
                         f"{r['macs']['forward'] / 1e6:.3f}", f"{r['macs']['backward'] / 1e6:.3f}",
                         kb(s["arena"]), kb(s["trainable_params"]),
                         kb(s["arena"] + s["trainable_params"]), kb(s["param_grads"])))
            import shutil
            shutil.rmtree(project)
    head = ("model", "compile s", "codegen s", "gcc s", "fwd MMACs", "bwd MMACs", "arena KB",
            "params KB", "peak SRAM KB (arena+params)", "grad accumulators KB")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
