"""A simulated fleet against centralised training and devices alone (the fleet issue's
benchmark): digits CNN trained on upright digits, adapted by many devices to digits turned
by 90 degrees, each device holding a few samples of a few classes (non-IID).

    python bench/fleet.py                                   # 100 devices, 20 rounds, bias
    python bench/fleet.py --nodes 20 --rounds 5 --plan bias,last:2 --json out.json
    python bench/fleet.py --max-sram 9,12.9,40       # 3 classes chosen by --update auto
    python bench/fleet.py --quantize int8 --lr 0.2 --momentum 0
    python bench/fleet.py --correction scaffold --local-epochs 5   # SCAFFOLD on the devices
    python bench/fleet.py --correction prox --mu 0.1                # FedProx
    python bench/fleet.py --correction scaffold+restricted --alpha 0.5   # and FedRS
    python bench/fleet.py --max-sram 9,12.9,40 --plot docs/fleet-rounds.png   # make fleet-plot
    python bench/fleet.py --correction scaffold --local-epochs 5 --drift-free  # the ceiling
    python bench/fleet.py --correction scaffold --local-epochs 5 --optimizer adam --momentum 0 \
        --lr 0.05 --lr-decay 0.9 --central-lr 0.02 --central-momentum 0.9  # Adam devices

Every device is a host build driven over the link by Flower's simulation engine (`flwr run`,
tinytrain.fleet.simulate); "centralised" trains the same plan on the pooled samples for as
many passes as a device makes (rounds x local epochs); "alone" trains each device's own
samples that long. With several classes each is also trained centrally on its own devices'
samples only (node k is class k mod n): the most a class can learn when its copies learn from
its devices alone. Accuracy is on 297 held-out turned digits. With --max-sram each device
class is what `tinytrain build --update auto --max-sram KB` chooses, analysed on the first
AUTO_SAMPLES of the fleet's samples (what a fleet's owner would hold back to plan with).
--plot draws each class's held-out accuracy after every round (the server keeps each round's
tensors: simulate(keep_rounds=True)) against its start and its centralised training; it needs
matplotlib (the `plot` extra).

--drift-free adds the fleet's ceiling: what a fleet without any drift would do in the same
rounds. Averaging devices that each take K local steps of rate lr, scaled by the server's lr,
moves a drift-free fleet as K full-batch gradient steps of rate lr x server lr (lr over 1 -
momentum for heavy-ball devices) on the pooled samples do; so each class's plan is trained
that way (a build whose batch is the whole pool), the rate following the server's schedule,
and held out after every K steps, as the fleet is after every round. The gap from the fleet
to it is drift; the gap from it to centralised training is the round budget itself.
--drift-free-lr sets its rate instead (to ask what the best-tuned drift-free fleet does).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fleet_task import pretrained, turned_digits  # noqa: E402
from tinytrain.autoplan.choose import PLAN_FILE, AutoOptions, build_auto  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import load_program_info, open_program  # noqa: E402
from tinytrain.device.train import evaluate, train  # noqa: E402
from tinytrain.fleet.correction import METHODS, effective_lr  # noqa: E402
from tinytrain.fleet.local import accuracy  # noqa: E402
from tinytrain.fleet.partition import split  # noqa: E402
from tinytrain.fleet.server_step import OPTIMIZERS, ServerStep  # noqa: E402
from tinytrain.fleet.shares import SHARES  # noqa: E402
from tinytrain.fleet.simulate import simulate  # noqa: E402
from tinytrain.fleet.tensors import trained_tensors  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

POOL = slice(600, 1500)  # the fleet's samples (turned)
TEST = slice(1500, None)  # held out (turned)
AUTO_SAMPLES = 150  # the --update auto analysis set (the auto tests' scale: ~20 s a class)
# issue "fleet drift"'s figure: the rounds a fleet takes to come within this much held-out
# accuracy of centralised training's best epoch on the same plan
TARGET_GAP = 0.02


def rounds_to(by_round: list[float], target: float) -> int | None:
    """The first round (1-based; by_round[0] is the start) whose accuracy reaches target."""
    return next((r for r, a in enumerate(by_round) if r and a >= target), None)


def model_bytes(path: Path, int8: bool) -> int:
    """The model's parameter bytes: fp32, or int8 weights with int32 biases once quantised."""
    arrays = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]
    if not int8:
        return sum(a.nbytes for a in arrays if a.ndim)
    return sum(a.size * (1 if a.ndim > 1 else 4) for a in arrays if a.ndim)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--local-epochs", type=int, default=2)
    ap.add_argument("--partition", default="labels:2")
    ap.add_argument("--plan", default="bias", help="update plans of the device classes, "
                    "comma-separated (node k builds class k mod n)")
    ap.add_argument("--max-sram", help="device classes by SRAM budget in KB, comma-separated: "
                    "each builds --update auto (replaces --plan)")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", default="sgd", help="the devices' optimizer, sgd or adam, "
                    "or one per class, comma-separated (sgd,sgd,adam); Adam classes train at "
                    "--adam-lr without momentum, and each class's lr decays by --lr-decay")
    ap.add_argument("--adam-lr", type=float, help="the Adam classes' lr (default: --lr)")
    ap.add_argument("--central-lr", type=float, help="centralised training's lr (default: "
                    "--lr): the reference a fleet tuned otherwise is measured against")
    ap.add_argument("--central-momentum", type=float, help="centralised training's momentum "
                    "(default: --momentum)")
    ap.add_argument("--central-lr-decay", type=float, default=1.0, help="centralised "
                    "training's lr times this after every epoch (1: the constant-rate reference)")
    ap.add_argument("--central-optimizer", choices=["sgd", "adam"], default="sgd",
                    help="centralised training's optimizer (adam: --central-momentum 0)")
    ap.add_argument("--lr-decay", type=float, default=1.0, help="the server's schedule: the "
                    "devices' lr in round r is --lr times this to the power r - 1")
    ap.add_argument("--server-lr", type=float, default=1.0, help="FedAvgM's server step")
    ap.add_argument("--server-momentum", type=float, default=0.0)
    ap.add_argument("--server-optimizer", choices=OPTIMIZERS, default="avgm",
                    help="adam: FedAdam on the server (--server-lr is its step)")
    ap.add_argument("--server-beta1", type=float, default=ServerStep.beta1)
    ap.add_argument("--server-beta2", type=float, default=ServerStep.beta2)
    ap.add_argument("--server-tau", type=float, default=ServerStep.tau)
    ap.add_argument("--server-lr-decay", type=float, default=1.0,
                    help="the server's lr in round r is --server-lr times this to the r - 1")
    ap.add_argument("--correction", default="none", help="the devices' drift correction: "
                    f"none, or {', '.join(METHODS)} joined by '+' (builds with "
                    "--fleet-correction)")
    ap.add_argument("--mu", type=float, default=0.0, help="FedProx's proximal weight")
    ap.add_argument("--alpha", type=float, default=1.0,
                    help="restricted softmax: the scale of absent classes' logits")
    ap.add_argument("--share", choices=SHARES, default="matching", help="which devices share "
                    "a tensor's average: those training it in the same context (matching), "
                    "or all that train it")
    ap.add_argument("--receive", metavar="PLAN", help="build every class with --receive PLAN "
                    "(e.g. the largest class's plan): with --share all the classes then run "
                    "one model, each sent the fleet's values of what it does not train")
    ap.add_argument("--quantize", choices=["int8"], help="int8 builds (plain SGD: --momentum 0)")
    ap.add_argument("--drift-free", action="store_true", help="add the drift-free ceiling "
                    "(full-batch gradient steps at the fleet's rate; minutes more)")
    ap.add_argument("--drift-free-lr", type=float, help="the drift-free ceiling's rate "
                    "(default: the devices' effective lr x the server's lr)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="draw accuracy by round to this PNG")
    args = ap.parse_args()
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before minutes of work
        ap.error("--plot needs matplotlib: pip install -e '.[plot]'")
    server = ServerStep(args.server_optimizer, args.server_lr, args.server_momentum,
                        args.server_beta1, args.server_beta2, args.server_tau,
                        args.server_lr_decay)
    _, y, turned = turned_digits()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        pre = pretrained(tmp)
        np.savez(tmp / "pool.npz", x=turned[POOL], y=y[POOL])
        np.savez(tmp / "test.npz", x=turned[TEST], y=y[TEST])
        np.savez(tmp / "auto.npz", x=turned[POOL][:AUTO_SAMPLES], y=y[POOL][:AUTO_SAMPLES])
        opts = Options(sgd=SGDConfig(lr=args.lr, momentum=args.momentum),
                       quantize=args.quantize, calib=tmp / "auto.npz",
                       fleet_correction=args.correction != "none", receive=args.receive)
        classes = args.max_sram.split(",") if args.max_sram else split_plans(args.plan)
        optimizers = args.optimizer.split(",")
        if len(optimizers) == 1:
            optimizers *= len(classes)
        if len(optimizers) != len(classes) or set(optimizers) - {"sgd", "adam"}:
            ap.error("--optimizer: sgd or adam, once or once per class")
        adam = SGDConfig(lr=args.adam_lr or args.lr, optimizer="adam")
        builds, plans, extra_sram, sram = [], [], [], []  # the correction's; the plan's total
        for k, c in enumerate(classes):
            builds.append(tmp / f"class{k}")
            opts = replace(opts, sgd=adam if optimizers[k] == "adam" else
                           SGDConfig(lr=args.lr, momentum=args.momentum))
            if args.max_sram:
                report = build_auto(pre, builds[-1], replace(opts, update="auto"),
                                    AutoOptions(data=tmp / "auto.npz"),
                                    max_sram=int(float(c) * 1024))
                plans.append(f"{c} KB: {report['auto_plan']['plan']}")
            else:
                report = build(pre, builds[-1], replace(opts, update=c))
                plans.append(c)
            extra_sram.append(report["sram_bytes"].get("fleet_correction", 0)
                              + report["sram_bytes"].get("received", 0))
            sram.append(report["sram_bytes"]["total"])
        c_lr = args.lr if args.central_lr is None else args.central_lr
        c_mom = args.momentum if args.central_momentum is None else args.central_momentum
        central_builds = builds
        c_opt = args.central_optimizer
        if {(c_lr, c_mom, c_opt)} != {(b.lr, b.momentum, b.optimizer)  # the same plans at
                                      for b in (load_sgd(d) for d in builds)}:  # the reference's
            central_builds = [tmp / f"central{k}" for k in range(len(builds))]
            for fleet_build, b in zip(builds, central_builds, strict=True):
                rebuild(pre, fleet_build, b, opts,
                        SGDConfig(lr=c_lr, momentum=c_mom, optimizer=c_opt))
        start = [accuracy(b, {}, tmp / "test.npz") for b in builds]
        run = simulate(builds, tmp / "pool.npz", tmp / "run", args.nodes, args.rounds,
                       local_epochs=args.local_epochs, partition=args.partition,
                       seed=args.seed, server=server, keep_rounds=True,
                       correction=args.correction, mu=args.mu, alpha=args.alpha,
                       share=args.share, lr=None,  # each class's own, decayed by the server
                       lr_decay=args.lr_decay)
        mine = [trained_tensors(load_program_info(b)) for b in builds]  # each class's copies
        fleet = [accuracy(b, run.tensors(p), tmp / "test.npz")
                 for b, p in zip(builds, mine, strict=True)]
        # round 0 is the start; each class's model with the tensors the server sent after round r
        by_round = [[start[k], *(accuracy(b, run.tensors(mine[k], r), tmp / "test.npz")
                                 for r in sorted(run.per_round))]
                    for k, b in enumerate(builds)]
        passes = args.rounds * args.local_epochs
        parts = split(y[POOL], args.nodes, args.partition, args.seed)
        central, central_best, alone = [], [], []
        # per class (node k is class k mod n): its own devices' samples, and centralised
        # training on them alone
        own_idx = [np.concatenate(parts[k::len(builds)]) for k in range(len(builds))]
        own: list[list[float]] = []
        for k, b in enumerate(central_builds):
            central_k = centralised(b, turned[POOL], y[POOL], turned[TEST], y[TEST], passes,
                                    args.seed, args.central_lr_decay)
            central.append(central_k[-1])
            central_best.append(max(central_k))
            if len(builds) > 1:
                own.append(centralised(b, turned[POOL][own_idx[k]], y[POOL][own_idx[k]],
                                       turned[TEST], y[TEST], passes, args.seed,
                                       args.central_lr_decay))
        # K a round, per class (node k is class k mod n): FedAvg weighs each device's change
        # by its samples, and a device of m samples takes epochs x m steps, so the class's
        # fleet moves by the sample-weighted mean of its devices' steps
        steps = []
        for k in range(len(builds)):
            m = np.array([len(i) for i in parts[k::len(builds)]], float)
            steps.append(args.local_epochs * float((m * m).sum() / m.sum()))
        free: list[list[float]] = []
        rates: list[float] = []  # per class: its effective lr x the server's
        if args.drift_free or args.drift_free_lr:
            for k, fleet_build in enumerate(builds):
                rates.append(args.drift_free_lr or
                             effective_lr(load_program_info(fleet_build)["sgd"]) * args.server_lr)
                b = tmp / f"free{k}"
                rebuild(pre, fleet_build, b, opts, SGDConfig(lr=rates[k], batch=len(y[POOL]),
                                                             optimizer=optimizers[k]))
                free.append([start[k], *drift_free(b, turned[POOL], y[POOL], turned[TEST],
                                                   y[TEST], round(steps[k]), args.rounds,
                                                   rates[k], args.lr_decay)])
        t0 = time.monotonic()
        alone: list[list[float]] = [[] for _ in builds]  # per class: node k is class k mod n
        for k, idx in enumerate(parts):
            with open_program(builds[k % len(builds)]) as dev:
                train(dev, turned[POOL][idx], y[POOL][idx], epochs=passes, shuffle=True,
                      seed=args.seed)
                alone[k % len(builds)].append(evaluate(dev, turned[TEST], y[TEST]))
        alone_s = time.monotonic() - t0
        whole = model_bytes(pre, args.quantize == "int8")
        # bytes by the plan each node reported in the survey (two budgets may choose one plan)
        key = [json.dumps([t.to_json() for t in p]) for p in mine]
    plan_of = {int(n): json.dumps(p) for n, p in run.plans.items()}
    up_by: dict[str, list[int]] = {}
    down_by: dict[str, list[int]] = {}
    for r in run.rounds:
        for n, b in r["uplink"].items():
            up_by.setdefault(plan_of[int(n)], []).append(b)
        for n, b in r["downlink"].items():
            down_by.setdefault(plan_of[int(n)], []).append(b)
    up = [up_by.get(k, []) for k in key]
    down = [down_by.get(k, []) for k in key]
    row = {"nodes": args.nodes, "rounds": args.rounds, "local_epochs": args.local_epochs,
           "partition": args.partition, "lr": args.lr, "momentum": args.momentum,
           "optimizer": optimizers, "adam_lr": adam.lr,
           "quantize": args.quantize, "server_lr": args.server_lr,
           "server_momentum": args.server_momentum, "server_optimizer": server.optimizer,
           "server_betas": [server.beta1, server.beta2], "server_tau": server.tau,
           "server_lr_decay": server.lr_decay,
           "central_lr": c_lr,
           "central_momentum": c_mom, "central_optimizer": c_opt,
           "central_lr_decay": args.central_lr_decay,
           "correction": args.correction,
           "mu": args.mu, "alpha": args.alpha, "share": args.share,
           "receive": args.receive, "lr_decay": args.lr_decay,
           "extra_sram": extra_sram, "sram": sram, "plans": plans,
           "start": start, "fleet": fleet,
           "centralised": central, "centralised_best": central_best,
           "centralised_own": [a[-1] for a in own],
           "centralised_own_best": [max(a) for a in own],
           "rounds_to_target": [rounds_to(by_round[k], central_best[k] - TARGET_GAP)
                                for k in range(len(builds))],
           "alone_mean": [float(np.mean(a)) for a in alone],
           "alone_std": [float(np.std(a)) for a in alone],
           "uplink_per_device": [float(np.mean(u)) if u else 0.0 for u in up],
           "downlink_per_device": [float(np.mean(d)) if d else 0.0 for d in down],
           "whole_model_bytes": whole, "fleet_seconds": run.seconds, "alone_seconds": alone_s,
           "failed": sum(len(r["failed"]) for r in run.rounds),
           "loss": [r["loss"] for r in run.rounds], "fleet_by_round": by_round,
           "test_samples": len(y[TEST]), "steps_per_round": steps}
    if free:
        row.update(drift_free_rate=rates, drift_free_by_round=free,
                   drift_free_rounds_to_target=[rounds_to(f, central_best[k] - TARGET_GAP)
                                                for k, f in enumerate(free)])
    print("| plan | correction | start | fleet | centralised (best epoch) | fleet − centralised "
          f"| rounds to within {100 * TARGET_GAP:.0f} points of the best | each device alone | "
          "uplink / downlink B per device and round | extra SRAM B |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    method = args.correction + (f" μ={args.mu:g}" if args.mu else "") + \
        (f" α={args.alpha:g}" if args.alpha < 1 else "")
    for k, plan in enumerate(plans):
        hit = row["rounds_to_target"][k]
        print(f"| `{plan}` | {method} | {100 * start[k]:.1f} % | {100 * fleet[k]:.1f} % | "
              f"{100 * central[k]:.1f} % ({100 * central_best[k]:.1f} %) | "
              f"{100 * (fleet[k] - central[k]):+.1f} | {hit if hit else f'> {args.rounds}'} | "
              f"{100 * row['alone_mean'][k]:.1f} ± {100 * row['alone_std'][k]:.1f} % | "
              f"{row['uplink_per_device'][k]:,.0f} / {row['downlink_per_device'][k]:,.0f} | "
              f"{extra_sram[k]:,} |")
    print(f"\n{args.nodes} devices, {args.rounds} rounds x {args.local_epochs} local epochs, "
          f"split {args.partition}, {args.optimizer} lr {args.lr} (Adam {adam.lr}; x "
          f"{args.lr_decay} a "
          f"round), momentum "
          f"{args.momentum}, server lr "
          f"{args.server_lr} (x {server.lr_decay:g} a round) and "
          + (f"momentum {args.server_momentum}" if server.optimizer == "avgm" else
             f"FedAdam betas {server.beta1:g}, {server.beta2:g}, tau {server.tau:g}")
          + f", share {args.share}"
          + (f", receiving {args.receive}" if args.receive else "") + "; "
          f"centralised {c_opt} lr {c_lr} (x {args.central_lr_decay:g} an epoch), "
          f"momentum {c_mom}"
          f"{', ' + args.quantize if args.quantize else ''}; device SRAM planned "
          f"{' / '.join(f'{b:,}' for b in sram)} B; whole model {whole:,} B; failed "
          f"replies {row['failed']}; wall time {run.seconds:.0f} s (the fleet), "
          f"{alone_s:.0f} s (devices alone)")
    for k, a in enumerate(own):
        print(f"centralised on its own devices' {len(own_idx[k])} "
              f"samples, `{plans[k]}`: {100 * a[-1]:.1f} % ({100 * max(a):.1f} % at best): "
              "what a class learning only from its own devices can reach")
    for k, f in enumerate(free):
        hit = row["drift_free_rounds_to_target"][k]
        print(f"drift-free ceiling, `{plans[k]}`: {100 * f[-1]:.1f} % ({100 * max(f):.1f} % "
              f"at best) after {args.rounds} rounds of {round(steps[k])} full-batch steps at lr "
              f"{rates[k]:g}; within {100 * TARGET_GAP:.0f} points of centralised's best in "
              f"{hit if hit else f'> {args.rounds}'} rounds")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")
    if args.plot:
        plot_rounds(row, args.plot)
        print(f"wrote {args.plot}")


def split_plans(spec: str) -> list[str]:
    """--plan's classes: comma-separated, where a `key=value` item (a tte plan's `idx=2`,
    `ratio=0.5`) continues the plan before it."""
    plans: list[str] = []
    for item in spec.split(","):
        if plans and "=" in item and ":" not in item:
            plans[-1] += "," + item
        else:
            plans.append(item)
    return plans


def load_sgd(build_dir: Path) -> SGDConfig:
    """The optimizer a build trains with (its program.json)."""
    sgd = load_program_info(build_dir)["sgd"]
    return SGDConfig(lr=sgd["lr"], momentum=sgd["momentum"],
                     optimizer=sgd.get("optimizer", "sgd"))


def rebuild(model: Path, fleet_build: Path, out: Path, opts: Options, sgd: SGDConfig) -> None:
    """fleet_build's plan (its --update auto TOML, or its --update) built again at another
    SGD setting and without the fleet's correction: centralised training and the ceiling."""
    auto = fleet_build / PLAN_FILE
    plan = str(auto) if auto.exists() else load_program_info(fleet_build)["update"]
    build(model, out, replace(opts, update=plan, fleet_correction=False, sgd=sgd))


def centralised(build_dir: Path, x: np.ndarray, y: np.ndarray, x_test: np.ndarray,
                y_test: np.ndarray, epochs: int, seed: int, decay: float = 1.0) -> list[float]:
    """Held-out accuracy after each of `epochs` shuffled passes over (x, y), the build's lr
    times `decay` after every pass."""
    accs: list[float] = []
    with open_program(build_dir) as dev:
        lr = dev.sgd()["lr"]

        def epoch_done(_stats: object) -> None:
            accs.append(evaluate(dev, x_test, y_test))
            if decay != 1.0:
                dev.sgd(lr=lr * decay ** len(accs))

        train(dev, x, y, epochs=epochs, shuffle=True, seed=seed, on_epoch=epoch_done)
    return accs


def drift_free(build_dir: Path, x: np.ndarray, y: np.ndarray, x_test: np.ndarray,
               y_test: np.ndarray, steps: int, rounds: int, lr: float, decay: float) -> list[float]:
    """Held-out accuracy after each of `rounds` blocks of `steps` full-batch gradient steps
    (build_dir's batch is all of x: an epoch is one step), the rate lr x decay^(round - 1)."""
    accs = []
    with open_program(build_dir) as dev:
        for r in range(rounds):
            dev.sgd(lr=lr * decay ** r)
            train(dev, x, y, epochs=steps)
            accs.append(evaluate(dev, x_test, y_test))
    return accs


def plot_rounds(row: dict, path: Path) -> None:
    """Each class's held-out accuracy by round (solid), its centralised training (dashed, same
    colour) and the start (dotted grey), with the run's configuration as the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    fleet, central = [], []
    # aligned classes (--receive, --share all) run one model: one line stands for every class
    one = all(r == row["fleet_by_round"][0] for r in row["fleet_by_round"])
    if one and len(row["plans"]) > 1:
        accs = row["fleet_by_round"][0]
        fleet += ax.plot(range(len(accs)), [100 * a for a in accs], "o-", ms=3, color="k",
                         label=f"fleet, every class (one model): {100 * accs[-1]:.1f} %")
    for k, (plan, accs) in enumerate(zip(row["plans"], row["fleet_by_round"], strict=True)):
        c = f"C{k}"
        if not one or len(row["plans"]) == 1:
            fleet += ax.plot(range(len(accs)), [100 * a for a in accs], "o-", ms=3, color=c,
                             label=f"fleet, {plan}: {100 * accs[-1]:.1f} %")
        central.append(ax.axhline(100 * row["centralised"][k], color=c, ls="--", lw=1,
                                  label=f"centralised, {plan}: "
                                  f"{100 * row['centralised'][k]:.1f} %"))
    # the classes share the pretrained start, so one line usually stands for all of them
    start = [ax.axhline(a, color="grey", ls=":", label=f"start: {a:.1f} %")
             for a in sorted({round(100 * a, 1) for a in row["start"]})]
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"held-out accuracy (%, {row['test_samples']} turned digits)")
    ax.set_xlim(0, len(row["fleet_by_round"][0]) - 1)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    # below the axes, in two columns filled top-down: each class's fleet beside its centralised
    handles = [*fleet, *start, *central]
    ax.legend(handles=handles, fontsize=8, ncol=2, loc="upper center",
              bbox_to_anchor=(0.5, -0.12))
    server = ("FedAvg" if row["server_optimizer"] == "avgm" and row["server_lr"] == 1
              and not row["server_momentum"] else
              f"{'FedAdam' if row['server_optimizer'] == 'adam' else 'FedAvgM'} lr "
              f"{row['server_lr']:g}" + (f" × {row['server_lr_decay']:g} a round"
                                         if row["server_lr_decay"] < 1 else ""))
    ax.set_title(f"{row['nodes']} simulated devices, {row['rounds']} rounds × "
                 f"{row['local_epochs']} local epochs, split {row['partition']}\n"
                 f"devices lr {row['lr']:g}"
                 + (f" × {row['lr_decay']:g} a round" if row["lr_decay"] < 1 else "")
                 + f", momentum {row['momentum']:g}, correction {row['correction']}\nserver "
                 f"{server}" + (f"; classes aligned (--receive {row['receive']})"
                                if row.get("receive") else ""), fontsize=10)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
