"""docs/memory.png: the SRAM of the digits demo over one training step, as the README shows it.

    python bench/plot_memory.py              # or: make memory-plot
    python bench/plot_memory.py --out FILE.png --board nrf52840

Builds examples/digits/digits_cnn.onnx as `make demo` does (--lr 0.05 --momentum 0.9
--batch 16, for the STM32F746 by default: needs arm-none-eabi-gcc) and draws its memory.json
with `tinytrain report --plot`'s code. Prints the SRAM lines `build` and `report` print.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinytrain.device.build import MEMORY_JSON, build  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402
from tinytrain.reports.memory import sram_lines  # noqa: E402
from tinytrain.reports.plot import plot  # noqa: E402

MODEL = ROOT / "examples" / "digits" / "digits_cnn.onnx"
DEMO_SGD = SGDConfig(lr=0.05, momentum=0.9, batch=16)  # the Makefile's demo target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "memory.png")
    ap.add_argument("--board", default="stm32f746")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build(MODEL, Path(tmp) / "digits", Options(board=args.board, sgd=DEMO_SGD))
        m = json.loads((Path(tmp) / "digits" / MEMORY_JSON).read_text())
    plot(m, args.out)
    print("\n".join(sram_lines(m["sram"], m.get("sram_capacity"), m.get("firmware_sram"))))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
