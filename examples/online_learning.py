"""Online learning on a device, TinyOL-style, through tinytrain's Python API: each digit of a
stream is first classified, then learned from, one sample at a time.

The data are the 8x8 UCI digits bundled with scikit-learn (no download), split as in
examples/digits/make_data.py. Build the bundled digits CNN for online learning (batch 1):

    tinytrain build examples/digits/digits_cnn.onnx --out out/online --lr 0.05 --momentum 0.5
    python examples/online_learning.py out/online             # learns from scratch (host build)

A deployed model meets new classes: train it on the digits 0-4 only, then let it learn all ten
online on the STM32F746's QEMU twin (or on the board: --port /dev/ttyACM0 instead of --qemu):

    python examples/online_learning.py out/online --digits 0-4 --passes 6 --save out/known.npz
    tinytrain build examples/digits/digits_cnn.onnx --board stm32f746 --out out/online-m7 \\
        --lr 0.05 --momentum 0.5
    python examples/online_learning.py out/online-m7 --qemu --state out/known.npz --limit 400
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tinytrain
from tinytrain.errors import TinyTrainError


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): x (N, 1, 8, 8) float32 in [0, 1], NCHW."""
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target.astype(np.int64), test_size=0.2,
                                          random_state=0, stratify=d.target)
    return xtr, ytr, xte, yte


def parse_digits(text: str) -> list[int]:
    """"0-4" or "1,3,5" -> the digits."""
    try:
        out: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give digits as 0-4 or 1,3,5") from None
    if not out or min(out) < 0 or max(out) > 9:
        raise argparse.ArgumentTypeError(f"{text!r}: digits are 0..9")
    return sorted(out)


def held_out(model: tinytrain.OnlineModel, x: np.ndarray, y: np.ndarray, when: str) -> None:
    pred = model.classify(x)
    per = " ".join(f"{d}:{100 * np.mean(pred[y == d] == d):.0f}" for d in range(10)
                   if np.any(y == d))
    print(f"held-out accuracy {when}: {100 * np.mean(pred == y):.1f} % of {len(y)} "
          f"(per digit, %: {per})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir", type=Path, help="a `tinytrain build` of the digits CNN")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--qemu", action="store_true", help="run on the board's QEMU twin")
    where.add_argument("--port", help="run on the board at this serial port")
    ap.add_argument("--state", type=Path, help="start from parameters saved by --save")
    ap.add_argument("--save", type=Path, help="save the parameters at the end (.npz)")
    ap.add_argument("--digits", type=parse_digits, default=list(range(10)),
                    help="stream only these digits, e.g. 0-4 (default: all)")
    ap.add_argument("--passes", type=int, default=1, help="passes over the stream, each "
                    "in a new order (default 1)")
    ap.add_argument("--limit", type=int, help="stop after this many streamed samples")
    ap.add_argument("--window", type=int, default=100, help="samples per running-accuracy "
                    "line (default 100)")
    ap.add_argument("--eval", type=int, default=360, help="held-out samples scored before "
                    "and after (default: all 360; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the stream order")
    args = ap.parse_args(argv)

    xtr, ytr, xte, yte = digits_split()
    xte, yte = xte[:args.eval], yte[:args.eval]
    pool = np.flatnonzero(np.isin(ytr, args.digits))
    order = np.concatenate([np.random.default_rng([args.seed, p]).permutation(pool)
                            for p in range(args.passes)])[:args.limit]
    try:
        with tinytrain.connect(args.build_dir, qemu=args.qemu, port=args.port) as model:
            print(model)
            if args.state:
                model.load(args.state)
            if len(yte):
                held_out(model, xte, yte, "before")
            hits, losses, t0 = [], [], time.perf_counter()
            for k, i in enumerate(order, 1):
                guess = model.classify(xtr[i])  # predict first ...
                step = model.learn(xtr[i], ytr[i])  # ... then learn from the true label
                hits.append(guess == ytr[i])
                losses.append(step.loss)
                if k % args.window == 0 or k == len(order):
                    w = slice(-(k % args.window or args.window), None)
                    print(f"streamed {k:5d}: running accuracy {100 * np.mean(hits[w]):5.1f} % "
                          f"(last {len(hits[w])}), mean loss {np.mean(losses[w]):.3f}",
                          flush=True)
            seconds = time.perf_counter() - t0
            model.flush()  # a partial batch (builds with --batch > 1)
            if len(order):
                print(f"{len(order)} samples predicted and learned in {seconds:.1f} s "
                      f"({len(order) / seconds:.0f} samples/s); running accuracy over the "
                      f"whole stream {100 * np.mean(hits):.1f} %")
            if len(yte):
                held_out(model, xte, yte, "after")
            if args.save:
                print(f"saved parameters to {model.save(args.save)}")
            st = model.link_stats
            print(f"link: {st.requests} requests, {st.resends} resends")
    except TinyTrainError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
