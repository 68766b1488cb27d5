"""A PyTorch model of bench/fleet.py's `bias` fleet, to try a fleet optimizer in minutes
before it is built into the generated C.

    python bench/fleet_model.py                                  # SCAFFOLD, lr 0.3 x 0.95
    python bench/fleet_model.py --local adam --lr 0.01 --server-lr 1
    python bench/fleet_model.py --correction none --lr 0.02 --momentum 0.9 --local-epochs 2
    python bench/fleet_model.py --full-batch 1.6 --lr-decay 1    # the drift-free ceiling
    python bench/fleet_model.py --full-batch 0.1 --local adam     # full-batch Adam
    python bench/fleet_model.py --lr 0.2 --lr-decay 1 --server-optimizer adam --server-lr 0.4 \
        --server-beta1 0.5 --server-lr-decay 0.97                 # FedAdam on the server

Same task, split, plan (every bias and the classifier) and round structure as the bench:
100 devices of 9 turned digits, single-sample local steps, FedAvg of the changes times the
server's lr, SCAFFOLD's control variates (option II: a device's c_i is its mean gradient over
the round). It is not tinytrain: the devices are PyTorch, so its figures guide what to build
and the bench measures what was built. Checked against the bench (bias plan, `labels:2`,
5 local epochs): SCAFFOLD at lr 0.3 x 0.95 and server lr 2 ends at 72.4 % here and 71.4 % on
the host builds; the drift-free ceiling at 0.6 x 0.95 ends at 70.0 % in both, and at 1.6 at
77.8 % here and 78.1 % there (best round 78.1 % in both).

--server-optimizer adam steps the server with FedAdam, tinytrain's own (fleet/server_step.py),
on the round's average change; this model is where its setting (lr 0.4, beta1 0.5) was found.

Other plans and mixed fleets: --trained lists a plan's tensors; --class-of K/N models one class
of a mixed fleet whose classes keep their own copies (`--share matching` when no context
matches: the class's devices alone train them); --mix models classes aligned into one model
(every device runs the fleet's current values of all tensors, each trains its plan's part);
--central trains the plan centrally on the class's samples instead (the bench's reference).

    python bench/fleet_model.py --trained conv2.bias,fc.weight,fc.bias --class-of 0/3 ...
    python bench/fleet_model.py --trained conv2.bias,fc.weight,fc.bias,pw.bias,pw.weight \
        --mix "conv2.bias,fc.weight,fc.bias;conv2.bias,fc.weight,fc.bias,pw.bias;..."

--local adam runs Adam on each device (its moments reset every round; the correction is added
to the gradient before Adam's scaling), as builds with `--optimizer adam --fleet-correction`
do (the bench then measured them within a point or two of this model).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fleet_task import pretrained, turned_digits  # noqa: E402
from tinytrain.fleet.partition import split  # noqa: E402
from tinytrain.fleet.server_step import OPTIMIZERS, ServerState, ServerStep  # noqa: E402

POOL, TEST = slice(600, 1500), slice(1500, None)  # as bench/fleet.py
TRAINED = ("stem.bias", "dw.bias", "pw.bias", "conv2.bias", "fc.weight", "fc.bias")
Params = dict[str, torch.Tensor]
CENTRAL_LR, CENTRAL_MOMENTUM = 0.02, 0.9  # the bench's reference setting
B1, B2, EPS = 0.9, 0.999, 1e-8  # the devices' Adam: torch.optim.Adam's defaults, as --full-batch


class Digits:
    """The pretrained digits CNN (examples/digits) with a plan's trained tensors apart (the
    `bias` plan's by default)."""

    def __init__(self, onnx_path: Path, trained: tuple[str, ...] = TRAINED) -> None:
        init = onnx.load(str(onnx_path)).graph.initializer
        # tinytrain export names a trained tensor tt_trained_<layer>_<weight|bias>
        self.w = {self._name(t.name): torch.tensor(numpy_helper.to_array(t).copy())
                  for t in init}
        self.trained = trained

    @staticmethod
    def _name(name: str) -> str:
        name = name.removeprefix("tt_trained_")
        for kind in ("weight", "bias"):
            if name.endswith("_" + kind):
                return name[: -len(kind) - 1] + "." + kind
        return name

    def start(self) -> Params:
        return {k: self.w[k].clone() for k in self.trained}

    def logits(self, p: Params, x: torch.Tensor) -> torch.Tensor:
        w = {**self.w, **p}  # the pretrained tensors, the trained ones from p
        h = F.relu(F.conv2d(x, w["stem.weight"], w["stem.bias"], padding=1))
        h = F.conv2d(h, w["dw.weight"], w["dw.bias"], padding=1, groups=8)
        h = F.relu(F.conv2d(h.clamp(float(w["lo"]), float(w["hi"])), w["pw.weight"],
                            w["pw.bias"]))
        h = F.relu(F.conv2d(F.max_pool2d(h, 2), w["conv2.weight"], w["conv2.bias"], padding=1))
        return h.mean((2, 3)) @ w["fc.weight"].T + w["fc.bias"]

    def accuracy(self, p: Params, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            return float((self.logits(p, x).argmax(1) == y).float().mean())


def local(net: Digits, p0: Params, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace,
          lr: float, corr: Params | None, seed: int,
          mask: Params | None = None) -> tuple[Params, Params]:
    """A device's round: its tensors after it, and its mean gradient over the round. With
    `mask`, only the elements where it is 1 train (a class of --mix)."""
    p = {k: v.clone().requires_grad_(True) for k, v in p0.items()}
    m = {k: torch.zeros_like(v) for k, v in p0.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p0.items()}
    mean = {k: torch.zeros_like(v) for k, v in p0.items()}
    gen, t = torch.Generator().manual_seed(seed), 0
    for _ in range(args.local_epochs):
        for i in torch.randperm(len(x), generator=gen):
            z = net.logits(p, x[i:i + 1])
            if args.alpha < 1:  # FedRS: the logits of classes the device lacks, scaled
                z = z * torch.where(torch.isin(torch.arange(z.shape[1]), y), 1.0, args.alpha)
            loss = F.cross_entropy(z, y[i:i + 1])
            grads = torch.autograd.grad(loss, list(p.values()))
            t += 1
            with torch.no_grad():
                for (k, w), g in zip(p.items(), grads, strict=True):
                    g = g if mask is None else g * mask[k]
                    mean[k] += g
                    g = g + corr[k] if corr is not None else g
                    if args.local == "adam":
                        m[k] = B1 * m[k] + (1 - B1) * g
                        v2[k] = B2 * v2[k] + (1 - B2) * g * g
                        w -= lr * m[k] / (1 - B1 ** t) / ((v2[k] / (1 - B2 ** t)).sqrt() + EPS)
                    else:
                        m[k] = args.momentum * m[k] + g
                        w -= lr * args.scales.get(k, 1.0) * m[k]
    return {k: w.detach() for k, w in p.items()}, {k: g / t for k, g in mean.items()}


def class_nodes(y: torch.Tensor, args: argparse.Namespace) -> list[tuple[int, np.ndarray]]:
    """--class-of's nodes (all of them by default): node j and its samples."""
    mine, of = args.class_of
    return [(j, i) for j, i in enumerate(split(y.numpy(), args.nodes, args.partition, args.seed))
            if j % of == mine]


def fleet(net: Digits, x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor,
          args: argparse.Namespace) -> list[float]:
    """Held-out accuracy at the start and after every round. With --mix, node j trains plan
    j mod N of it: every device runs the fleet's current values of every tensor (those its
    plan freezes too), each element is averaged over the devices that trained it (FedAdam on
    that average), and SCAFFOLD's c is the mean of their c_i. Every class then holds the same
    model: one accuracy."""
    plans = [plan_masks(net, plan) for plan in args.mix.split(";")] if args.mix else None
    # a dirichlet split can leave a device without samples: it sits out
    nodes = [(torch.as_tensor(i), plans[j % len(plans)] if plans else None)
             for j, i in class_nodes(y, args) if len(i)]
    p = net.start()
    zero = {k: torch.zeros_like(v) for k, v in p.items()}
    c, c_i = dict(zero), [dict(zero) for _ in nodes]
    # per element: the samples (FedAvg's weights) and the devices that train it. A plain fleet
    # weighs each change as it comes, --mix sums them and divides once (the order each was
    # measured with: float32 sums in another order end a 20-round run a few tenths apart)
    if plans:
        den = {k: sum(len(i) * m[k] for i, m in nodes) for k in p}
        count = {k: sum(m[k] for _, m in nodes).clamp(min=1) for k in p}
        hit = {k: (den[k] > 0).numpy() for k in p}
        den = {k: d.clamp(min=1) for k, d in den.items()}
        per_change = dict.fromkeys(p, 1)
    else:
        per_change = dict.fromkeys(p, sum(len(i) for i, _ in nodes))
        count = dict.fromkeys(p, len(nodes))
        hit = {k: np.ones(v.shape, bool) for k, v in p.items()}
    server = ServerStep(args.server_optimizer, args.server_lr, 0.0, args.server_beta1,
                        args.server_beta2, args.server_tau, args.server_lr_decay)
    state = {k: ServerState(tuple(v.shape)) for k, v in p.items()}
    accs = [net.accuracy(p, xt, yt)]
    for r in range(args.rounds):
        lr = args.lr * args.lr_decay ** r
        change, dc = dict(zero), dict(zero)
        for j, (idx, mask) in enumerate(nodes):
            trains = dict.fromkeys(p, 1) if mask is None else mask
            corr = ({k: (c[k] - c_i[j][k]) * trains[k] for k in p}
                    if args.correction == "scaffold" else None)
            w, mean = local(net, p, x[idx], y[idx], args, lr, corr, 1000 * r + j, mask)
            for k in p:
                change[k] = change[k] + (w[k] - p[k]) * len(idx) * trains[k] / per_change[k]
                if corr is not None:
                    dc[k] = dc[k] + (mean[k] - c_i[j][k]) * trains[k] / count[k]
                    c_i[j][k] = mean[k]
        if plans:
            change = {k: change[k] / den[k] for k in p}
        if server.optimizer == "adam":  # the server's own FedAdam step (fleet/server_step.py)
            for k in p:
                v = p[k].double().numpy().copy()
                state[k].step(replace(server, lr=server.lr * args.server_scales.get(k, 1.0)),
                              v, change[k].double().numpy(), hit[k], r + 1)
                p[k] = torch.tensor(v, dtype=torch.float32)
        else:
            p = {k: p[k] + args.server_lr * change[k] for k in p}
        c = {k: c[k] + dc[k] for k in p}
        accs.append(net.accuracy(p, xt, yt))
        print(f"round {r + 1}: {100 * accs[-1]:.1f} %", flush=True)
    return accs


def plan_masks(net: Digits, plan: str) -> Params:
    """A --mix plan (tensor names, `name:N` for a weight's first N input channels) as a
    0/1 mask over every tensor of the mix."""
    mask = {k: torch.zeros_like(net.w[k]) for k in net.trained}
    for item in plan.split(","):
        name, _, n = item.partition(":")
        if n:
            mask[name][:, :int(n)] = 1.0
        else:
            mask[name][...] = 1.0
    return mask


def full_batch(net: Digits, x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor,
               yt: torch.Tensor, args: argparse.Namespace, rate: float) -> list[float]:
    """The drift-free ceiling: K full-batch steps a round at `rate` (bench/fleet.py's
    --drift-free), K the devices' local steps weighted by their samples, as FedAvg weighs
    their changes (and as the bench counts them)."""
    n = np.array([len(i) for i in split(y.numpy(), args.nodes, args.partition, args.seed)])
    steps = round(args.local_epochs * (n * n).sum() / n.sum())
    p = {k: v.clone().requires_grad_(True) for k, v in net.start().items()}
    adam = torch.optim.Adam(list(p.values()), lr=rate) if args.local == "adam" else None
    accs = [net.accuracy(p, xt, yt)]
    for r in range(args.rounds):
        for _ in range(steps):
            grads = torch.autograd.grad(F.cross_entropy(net.logits(p, x), y), list(p.values()))
            with torch.no_grad():
                for (k, w), g in zip(p.items(), grads, strict=True):
                    if adam is None:
                        w -= rate * args.lr_decay ** r * args.scales.get(k, 1.0) * g
                    else:
                        w.grad = g
            if adam is not None:  # full-batch Adam at a constant rate
                adam.step()
        accs.append(net.accuracy({k: w.detach() for k, w in p.items()}, xt, yt))
        print(f"round {r + 1}: {100 * accs[-1]:.1f} %", flush=True)
    return accs


def central(net: Digits, x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor,
            yt: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """Centralised training of the plan on the samples of --class-of's devices (all of them
    by default), as the bench's reference: single-sample SGD at lr 0.02, momentum 0.9, for
    rounds x local epochs shuffled passes, held out after each."""
    idx = torch.as_tensor(np.concatenate([i for _, i in class_nodes(y, args)]))
    p = {k: v.clone().requires_grad_(True) for k, v in net.start().items()}
    mask = plan_masks(net, args.mix) if args.mix else {k: torch.ones_like(v) for k, v in p.items()}
    opt = torch.optim.SGD(list(p.values()), lr=CENTRAL_LR, momentum=CENTRAL_MOMENTUM)
    gen = torch.Generator().manual_seed(args.seed)
    accs = [net.accuracy(p, xt, yt)]
    for e in range(args.rounds * args.local_epochs):
        for group in opt.param_groups:
            group["lr"] = CENTRAL_LR * args.central_decay ** e
        for i in idx[torch.randperm(len(idx), generator=gen)]:
            opt.zero_grad()
            F.cross_entropy(net.logits(p, x[i:i + 1]), y[i:i + 1]).backward()
            for k, w in p.items():  # a --mix plan's untrained elements stay
                w.grad *= mask[k]
            opt.step()
        accs.append(net.accuracy({k: w.detach() for k, w in p.items()}, xt, yt))
    print(f"centralised on {len(idx)} samples: {100 * accs[-1]:.1f} % "
          f"(best {100 * max(accs):.1f} %); by epoch: "
          + " ".join(f"{100 * a:.1f}" for a in accs[1:]), flush=True)
    return accs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument("--partition", default="labels:2")
    ap.add_argument("--local", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--lr-decay", type=float, default=0.95)
    ap.add_argument("--momentum", type=float, default=0.0, help="the devices' SGD momentum")
    ap.add_argument("--server-lr", type=float, default=2.0)
    ap.add_argument("--server-optimizer", choices=OPTIMIZERS, default="avgm",
                    help="adam: FedAdam on the server (--server-lr is its step)")
    ap.add_argument("--server-beta1", type=float, default=ServerStep.beta1)
    ap.add_argument("--server-beta2", type=float, default=ServerStep.beta2)
    ap.add_argument("--server-tau", type=float, default=ServerStep.tau)
    ap.add_argument("--server-lr-decay", type=float, default=1.0, help="FedAdam: the "
                    "server's lr times this every round")
    ap.add_argument("--correction", choices=("none", "scaffold"), default="scaffold")
    ap.add_argument("--full-batch", type=float, metavar="RATE",
                    help="run the drift-free ceiling at this rate instead of the fleet "
                    "(with --local adam: full-batch Adam at this rate)")
    ap.add_argument("--lr-scale", action="append", default=[], metavar="TENSOR=X",
                    help="SGD: this tensor's rate is X times the others' (repeatable)")
    ap.add_argument("--alpha", type=float, default=1.0, help="FedRS: the logits of the "
                    "classes a device lacks times this (1: off)")
    ap.add_argument("--trained", default=",".join(TRAINED),
                    help="the plan: its trained tensors (default: the bias plan's)")
    ap.add_argument("--class-of", default="0/1", metavar="K/N",
                    help="one class of a mixed fleet: only nodes k, k+N, ... (each class "
                    "its own copy of every tensor, as when no context matches)")
    ap.add_argument("--mix", metavar="PLAN;PLAN;...", help="an aligned mixed fleet: each "
                    "class's trained tensors (`name:N`: a weight's first N input channels); "
                    "--trained must list them all")
    ap.add_argument("--central", action="store_true", help="train the plan centrally on the "
                    "class's samples instead of the fleet (the reference)")
    ap.add_argument("--central-decay", type=float, default=1.0,
                    help="--central: the lr times this every epoch")
    ap.add_argument("--server-lr-scale", action="append", default=[], metavar="TENSOR=X",
                    help="FedAdam: this tensor's server lr is X times the others' (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.class_of = tuple(int(v) for v in args.class_of.split("/"))
    if args.central and args.mix and ";" in args.mix:
        ap.error("--central trains one plan: give --mix a single plan")
    args.scales = {k: float(v) for k, _, v in (s.partition("=") for s in args.lr_scale)}
    args.server_scales = {k: float(v) for k, _, v in
                          (s.partition("=") for s in args.server_lr_scale)}
    torch.set_num_threads(1)  # single-sample steps: threads only add overhead
    _, labels, turned = turned_digits()
    x, y = torch.tensor(turned[POOL]), torch.tensor(labels[POOL])
    xt, yt = torch.tensor(turned[TEST]), torch.tensor(labels[TEST])
    with tempfile.TemporaryDirectory() as t:
        net = Digits(pretrained(Path(t)), tuple(args.trained.split(",")))
    run = central if args.central else fleet
    accs = full_batch(net, x, y, xt, yt, args, args.full_batch) if args.full_batch else \
        run(net, x, y, xt, yt, args)
    best = int(np.argmax(accs))
    print(f"start {100 * accs[0]:.1f} %, after {args.rounds} rounds {100 * accs[-1]:.1f} % "
          f"(best {100 * accs[best]:.1f} % at round {best})")


if __name__ == "__main__":
    main()
