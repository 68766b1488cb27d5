"""The long link-fuzzer run: malformed frames to the MLP's host firmware compiled with
ASan/UBSan (tests/fuzz/frames.py), between the valid samples of a clean run.

    python bench/fuzz_frames.py                    # 15,000 frames (1,000 per family)
    python bench/fuzz_frames.py --frames 50000 --seed 3

Prints frames per family, the device's link statistics and the verdict: no sanitizer report,
the program alive, and the parameters equal to the clean run's. Exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.frames import fuzz_against_clean  # noqa: E402
from tests.torch_models import MLP, export  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

SAMPLES = 50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=15000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = export(MLP(), t / "mlp.onnx")
        out = t / "b"
        build(model, out, Options(board="host", sgd=SGDConfig(lr=0.05, momentum=0.9)))
        rng = np.random.default_rng(a.seed)
        x = rng.uniform(0, 1, (SAMPLES, 64)).astype(np.float32)
        y = rng.integers(0, 10, (SAMPLES, 1)).astype(np.int32)
        r = fuzz_against_clean(out, a.frames, a.seed, x, y, t / "sanitizer")
        if r is None:
            sys.exit("this gcc has no sanitizer runtime")
    print("| family | frames |\n|---|---:|")
    for fam, n in r["sent"].items():
        print(f"| {fam} | {n:,} |")
    print(f"\ndevice: {r['stats']}\nhost link: {r['link']}")
    print(f"sanitizer reports: {r['reports'][:2000] or 'none'}")
    print(f"valid samples trained: {r['stats']['steps']} of {SAMPLES}; parameters equal to the "
          f"clean run's: {r['same']}")
    sys.exit(0 if r["same"] and not r["reports"] and r["stats"]["steps"] == SAMPLES else 1)


if __name__ == "__main__":
    main()
