"""A simulated fleet against centralised training and devices alone (the fleet issue's
benchmark): digits CNN trained on upright digits, adapted by many devices to digits turned
by 90 degrees, each device holding a few samples of a few classes (non-IID).

    python bench/fleet.py                                   # 100 devices, 20 rounds, bias
    python bench/fleet.py --nodes 20 --rounds 5 --plan bias,last:2 --json out.json

Every device is a host build driven over the link by Flower's simulation engine (`flwr run`,
tinytrain.fleet.simulate); "centralised" trains the same plan on the pooled samples for as
many passes as a device makes (rounds x local epochs); "alone" trains each device's own
samples that long. Accuracy is on 297 held-out turned digits.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fleet_task import pretrained, turned_digits  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import open_program  # noqa: E402
from tinytrain.device.train import evaluate, train  # noqa: E402
from tinytrain.fleet.local import accuracy  # noqa: E402
from tinytrain.fleet.partition import split  # noqa: E402
from tinytrain.fleet.simulate import simulate  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

POOL = slice(600, 1500)  # the fleet's samples (turned)
TEST = slice(1500, None)  # held out (turned)
LR, MOMENTUM = 0.02, 0.9


def model_bytes(path: Path) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(path)).graph.initializer
               if len(t.dims))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--local-epochs", type=int, default=2)
    ap.add_argument("--partition", default="labels:2")
    ap.add_argument("--plan", default="bias", help="update plans of the device classes, "
                    "comma-separated (node k builds class k mod n)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    _, y, turned = turned_digits()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        pre = pretrained(tmp)
        np.savez(tmp / "pool.npz", x=turned[POOL], y=y[POOL])
        np.savez(tmp / "test.npz", x=turned[TEST], y=y[TEST])
        plans = args.plan.split(",")
        builds = []
        for k, plan in enumerate(plans):
            builds.append(tmp / f"class{k}")
            build(pre, builds[-1], Options(update=plan, sgd=SGDConfig(lr=LR, momentum=MOMENTUM)))
        start = [accuracy(b, {}, tmp / "test.npz") for b in builds]
        run = simulate(builds, tmp / "pool.npz", tmp / "run", args.nodes, args.rounds,
                       local_epochs=args.local_epochs, partition=args.partition,
                       seed=args.seed)
        fleet = [accuracy(b, run.final, tmp / "test.npz") for b in builds]
        passes = args.rounds * args.local_epochs
        central, alone = [], []
        for b in builds:
            with open_program(b) as dev:
                train(dev, turned[POOL], y[POOL], epochs=passes, shuffle=True, seed=args.seed)
                central.append(evaluate(dev, turned[TEST], y[TEST]))
        parts = split(y[POOL], args.nodes, args.partition, args.seed)
        t0 = time.monotonic()
        for k, idx in enumerate(parts):
            with open_program(builds[k % len(builds)]) as dev:
                train(dev, turned[POOL][idx], y[POOL][idx], epochs=passes, shuffle=True,
                      seed=args.seed)
                alone.append(evaluate(dev, turned[TEST], y[TEST]))
        alone_s = time.monotonic() - t0
        whole = model_bytes(pre)
    up = [sum(r["uplink"].values()) / max(len(r["uplink"]), 1) for r in run.rounds]
    down = [sum(r["downlink"].values()) / max(len(r["downlink"]), 1) for r in run.rounds]
    row = {"nodes": args.nodes, "rounds": args.rounds, "local_epochs": args.local_epochs,
           "partition": args.partition, "plans": plans, "start": start, "fleet": fleet,
           "centralised": central, "alone_mean": float(np.mean(alone)),
           "alone_std": float(np.std(alone)), "uplink_per_device": float(np.mean(up)),
           "downlink_per_device": float(np.mean(down)), "whole_model_bytes": whole,
           "fleet_seconds": run.seconds, "alone_seconds": alone_s,
           "failed": sum(len(r["failed"]) for r in run.rounds),
           "loss": [r["loss"] for r in run.rounds]}
    print("| plan | start | fleet | centralised | fleet − centralised | each device alone |")
    print("|---|---:|---:|---:|---:|---:|")
    for k, plan in enumerate(plans):
        print(f"| `{plan}` | {100 * start[k]:.1f} % | {100 * fleet[k]:.1f} % | "
              f"{100 * central[k]:.1f} % | {100 * (fleet[k] - central[k]):+.1f} | "
              f"{100 * row['alone_mean']:.1f} ± {100 * row['alone_std']:.1f} % |")
    print(f"\n{args.nodes} devices, {args.rounds} rounds x {args.local_epochs} local epochs, "
          f"split {args.partition}; per device and round: uplink "
          f"{row['uplink_per_device']:,.0f} B, downlink {row['downlink_per_device']:,.0f} B "
          f"(whole model {whole:,} B); failed replies {row['failed']}; wall time "
          f"{run.seconds:.0f} s (the fleet), {alone_s:.0f} s (devices alone)")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
