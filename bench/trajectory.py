"""Where an int8 build's training leaves its fp32 twin: the same plan, the same samples in the
same order, and per trained parameter how far each build has moved it, in the int8 build's LSBs.

    python bench/trajectory.py FP32_BUILD INT8_BUILD --data ADAPT.npz [--eval TEST.npz]
        [--epochs 3] [--shuffle --seed 0] [--at 1,8,64]

Both builds come from `tinytrain build` of the same fp32 model with the same --update, --lr and
--batch, the second with --quantize int8. Both run as host programs, fed sample by sample
(`tinytrain run`'s order: --shuffle/--seed, each epoch's partial batch applied at its end);
after the updates listed in --at and at the end, each trained parameter's move since the start
(the int8 one dequantised with its per-channel scales) is compared:

  - fp32 / int8 moved: mean |move| per element, in LSBs of the int8 parameter's channel;
  - int8/fp32: the size of int8's move relative to fp32's (L2), 1 when they agree;
  - cos: the cosine between the two moves, 1 when they point the same way;
  - offset: mean (int8 move - fp32 move) in LSB, the rounding's bias (the 1-byte shadow's
    forward reads its 16-bit master floored: an element moved down by a fraction of an LSB
    reads a whole LSB lower, one moved up reads unchanged, about -0.5 on average);
  - error: |int8 move - fp32 move| / |fp32 move|.

A parameter whose fp32 move is a fraction of an LSB is where int8 cannot follow: stochastic
rounding turns it into noise larger than itself, the shadow into its floor. The last table is
sorted by error, so the layer that drifts most is its top row.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinytrain.device.online import OnlineModel, connect  # noqa: E402
from tinytrain.device.runner import load_program_info  # noqa: E402
from tinytrain.device.train import sample_order  # noqa: E402
from tinytrain.errors import TinyTrainError  # noqa: E402
from tinytrain.quant.params import real_values, with_masters  # noqa: E402

TINY = 1e-30  # keeps a ratio defined where fp32 has not moved a parameter at all


@dataclass
class Row:
    step: int  # updates applied so far
    name: str
    fp32_lsb: float
    int8_lsb: float
    size: float
    cos: float
    offset: float
    error: float


def _check(f32: dict, q8: dict) -> None:
    if f32.get("quantized") or not q8.get("quantized"):
        raise SystemExit("pass the fp32 build first and the int8 build (--quantize int8) second")
    names = lambda p: sorted(t["name"] for t in p["trainable"])  # noqa: E731
    if names(f32) != names(q8):
        raise SystemExit("the builds train different parameters: build both with the same "
                         "--update")
    for k in ("batch", "lr"):
        if f32["sgd"][k] != q8["sgd"][k]:
            raise SystemExit(f"the builds differ in --{k}: {f32['sgd'][k]} vs {q8['sgd'][k]}")


def _read(m: OnlineModel, info: dict) -> dict[str, np.ndarray]:
    """The weights the int8 build's forward reads: w, or with --rounding master w + s/256."""
    return with_masters(info, m.params(), m.device.get_state(), exact=True)


def _rows(step: int, a0: dict, b0: dict, a: OnlineModel, b: OnlineModel,
          trained: dict[str, dict], info: dict) -> list[Row]:
    pa, pb = a.params(), _read(b, info)
    rows = []
    for name in sorted(trained):
        rec = trained[name]
        lsb = real_values(rec, np.ones(np.shape(pb[name]), np.int8))  # one LSB, per element
        da = pa[name].astype(np.float64) - a0[name]
        db = real_values(rec, pb[name]).astype(np.float64) - b0[name]
        na, nb = float(np.linalg.norm(da)), float(np.linalg.norm(db))
        rows.append(Row(step, name, float(np.mean(np.abs(da / lsb))),
                        float(np.mean(np.abs(db / lsb))), nb / (na + TINY),
                        float(np.sum(da * db)) / (na * nb + TINY),
                        float(np.mean((db - da) / lsb)),
                        float(np.linalg.norm(db - da)) / (na + TINY)))
    return rows


def _accuracy(m: OnlineModel, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean([m.classify(xi) == yi for xi, yi in zip(x, y, strict=True)]))


def compare(fp32_build: Path, int8_build: Path, x: np.ndarray, y: np.ndarray, *,
            epochs: int = 1, shuffle: bool = False, seed: int = 0,
            at: tuple[int, ...] = (1,), eval_set: tuple[np.ndarray, np.ndarray] | None = None,
            ) -> tuple[list[Row], dict[str, float]]:
    """Train both builds on the same samples; the rows after each update in `at` and at the
    end, and the accuracies on `eval_set` (fp32 / int8, after training)."""
    f32, q8 = load_program_info(fp32_build), load_program_info(int8_build)
    _check(f32, q8)
    # the int8 build's quantised trained parameters, by name (their scales give the LSBs)
    trained = {t["name"]: t for t in q8["trainable"] if t.get("scale")}
    rows: list[Row] = []
    acc: dict[str, float] = {}
    with connect(fp32_build) as a, connect(int8_build) as b:
        a0 = {k: v.astype(np.float64) for k, v in a.params().items()}
        b0 = {k: real_values(trained.get(k, {}), v).astype(np.float64)
              for k, v in _read(b, q8).items()}
        step = 0
        for epoch in range(epochs):
            for i in sample_order(len(y), epoch, shuffle, seed):
                ra = a.learn(x[i], y[i])
                b.learn(x[i], y[i])
                if ra.updated:
                    step += 1
                    if step in at:
                        rows += _rows(step, a0, b0, a, b, trained, q8)
            a.flush()
            b.flush()
            if len(y) % f32["sgd"]["batch"]:
                step += 1
        rows += _rows(step, a0, b0, a, b, trained, q8)
        if eval_set is not None:
            acc = {"fp32": _accuracy(a, *eval_set), "int8": _accuracy(b, *eval_set)}
    return rows, acc


def table(rows: list[Row], sort: bool = False) -> str:
    rows = sorted(rows, key=lambda r: -r.error) if sort else rows
    out = ["| update | parameter | fp32 moved (LSB) | int8 moved (LSB) | int8/fp32 | cos | "
           "offset (LSB) | error |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {r.step} | `{r.name}` | {r.fp32_lsb:.3f} | {r.int8_lsb:.3f} | {r.size:.2f} | "
            f"{r.cos:.2f} | {r.offset:+.3f} | {r.error:.2f} |" for r in rows]
    return "\n".join(out)


def _load(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return np.asarray(f["x"], np.float32), np.asarray(f["y"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fp32_build", type=Path)
    ap.add_argument("int8_build", type=Path)
    ap.add_argument("--data", required=True, help=".npz with x and y, as `tinytrain run` takes")
    ap.add_argument("--eval", help="held-out .npz: both builds' accuracy after training")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", default="1,8,64", help="updates after which to compare (and the end)")
    args = ap.parse_args()
    x, y = _load(args.data)
    at = tuple(int(v) for v in args.at.split(",") if v)
    try:
        rows, acc = compare(args.fp32_build, args.int8_build, x, y, epochs=args.epochs,
                            shuffle=args.shuffle, seed=args.seed, at=at,
                            eval_set=_load(args.eval) if args.eval else None)
    except TinyTrainError as e:  # not a build, a sample the model cannot take, ...
        raise SystemExit(str(e)) from None
    last = max(r.step for r in rows)
    print(table([r for r in rows if r.step != last]))
    print(f"\nafter all {last} updates, by error:\n")
    print(table([r for r in rows if r.step == last], sort=True))
    if acc:
        print(f"\nheld-out accuracy: fp32 {100 * acc['fp32']:.1f} %, int8 "
              f"{100 * acc['int8']:.1f} %")


if __name__ == "__main__":
    main()
