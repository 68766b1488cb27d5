"""docs/frontier.png: the auto planner's accuracy/memory frontier for the digits demo.

    python bench/plot_frontier.py            # or: make frontier-plot
    python bench/plot_frontier.py --out FILE.png --board nrf52840 --max-sram 40

Writes the demo's data (examples/digits/make_data.py: scikit-learn's bundled digits, no
download) and runs `tinytrain plan examples/digits/digits_cnn.onnx --board stm32f746 --data
digits_train.npz --lr 0.05 --max-sram 48 --budgets 16 --plot docs/frontier.png`: the demo's
learning rate with `plan`'s plain SGD, one sample a step (the demo's batch of 16 leaves the
analysis' two short epochs ~60 steps, too few to tell plans apart). The model is untrained, as
bundled. 48 KB holds every plan of this network (the largest, `last:5`, is 42.4 KB); the
board's own budget, 318 KB, would leave most of the picture flat. Prints `plan`'s frontier and
chosen plan; needs the `plot` extra, not the ARM toolchain (nothing is linked). ~2 minutes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "digits" / "digits_cnn.onnx"
MAKE_DATA = ROOT / "examples" / "digits" / "make_data.py"
DEMO_LR = 0.05  # the Makefile's demo target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "frontier.png")
    ap.add_argument("--board", default="stm32f746")
    ap.add_argument("--max-sram", type=float, default=48.0, help="the budget in KB")
    ap.add_argument("--budgets", type=int, default=16, help="frontier rows")
    args = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(MAKE_DATA), tmp], check=True)
        # the command line itself, so the picture is exactly what the documented command draws
        subprocess.run([sys.executable, "-m", "tinytrain", "plan", str(MODEL),
                        "--board", args.board, "--data", str(Path(tmp) / "digits_train.npz"),
                        "--lr", str(DEMO_LR), "--max-sram", str(args.max_sram),
                        "--budgets", str(args.budgets), "--plot", str(args.out.resolve())],
                       check=True, cwd=ROOT)
    print(f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
