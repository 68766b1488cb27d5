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

--local adam runs Adam on each device (its moments reset every round; the correction is added
to the gradient before Adam's scaling), as builds with `--optimizer adam --fleet-correction`
do (the bench then measured them within a point or two of this model).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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
B1, B2, EPS = 0.9, 0.999, 1e-8  # the devices' Adam: torch.optim.Adam's defaults, as --full-batch


class Digits:
    """The pretrained digits CNN (examples/digits) with its `bias` plan's tensors apart."""

    def __init__(self, onnx_path: Path) -> None:
        init = onnx.load(str(onnx_path)).graph.initializer
        # tinytrain export names a trained tensor tt_trained_<layer>_<weight|bias>
        self.w = {self._name(t.name): torch.tensor(numpy_helper.to_array(t).copy())
                  for t in init}

    @staticmethod
    def _name(name: str) -> str:
        name = name.removeprefix("tt_trained_")
        for kind in ("weight", "bias"):
            if name.endswith("_" + kind):
                return name[: -len(kind) - 1] + "." + kind
        return name

    def start(self) -> Params:
        return {k: self.w[k].clone() for k in TRAINED}

    def logits(self, p: Params, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        h = F.relu(F.conv2d(x, w["stem.weight"], p["stem.bias"], padding=1))
        h = F.conv2d(h, w["dw.weight"], p["dw.bias"], padding=1, groups=8)
        h = F.relu(F.conv2d(h.clamp(float(w["lo"]), float(w["hi"])), w["pw.weight"],
                            p["pw.bias"]))
        h = F.relu(F.conv2d(F.max_pool2d(h, 2), w["conv2.weight"], p["conv2.bias"], padding=1))
        return h.mean((2, 3)) @ p["fc.weight"].T + p["fc.bias"]

    def accuracy(self, p: Params, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            return float((self.logits(p, x).argmax(1) == y).float().mean())


def local(net: Digits, p0: Params, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace,
          lr: float, corr: Params | None, seed: int) -> tuple[Params, Params]:
    """A device's round: its tensors after it, and its mean gradient over the round."""
    p = {k: v.clone().requires_grad_(True) for k, v in p0.items()}
    m = {k: torch.zeros_like(v) for k, v in p0.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p0.items()}
    mean = {k: torch.zeros_like(v) for k, v in p0.items()}
    gen, t = torch.Generator().manual_seed(seed), 0
    for _ in range(args.local_epochs):
        for i in torch.randperm(len(x), generator=gen):
            loss = F.cross_entropy(net.logits(p, x[i:i + 1]), y[i:i + 1])
            grads = torch.autograd.grad(loss, list(p.values()))
            t += 1
            with torch.no_grad():
                for (k, w), g in zip(p.items(), grads, strict=True):
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


def fleet(net: Digits, x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor,
          args: argparse.Namespace) -> list[float]:
    """Held-out accuracy at the start and after every round."""
    parts = [torch.as_tensor(i) for i in split(y.numpy(), args.nodes, args.partition, args.seed)
             if len(i)]  # a dirichlet split can leave a device without samples: it sits out
    p = net.start()
    zero = {k: torch.zeros_like(v) for k, v in p.items()}
    c, c_i = dict(zero), [dict(zero) for _ in parts]
    server = ServerStep(args.server_optimizer, args.server_lr, 0.0, args.server_beta1,
                        args.server_beta2, args.server_tau, args.server_lr_decay)
    state = {k: ServerState(tuple(v.shape)) for k, v in p.items()}
    accs = [net.accuracy(p, xt, yt)]
    for r in range(args.rounds):
        lr = args.lr * args.lr_decay ** r
        change, dc = dict(zero), dict(zero)
        for j, idx in enumerate(parts):
            corr = {k: c[k] - c_i[j][k] for k in p} if args.correction == "scaffold" else None
            w, mean = local(net, p, x[idx], y[idx], args, lr, corr, seed=1000 * r + j)
            for k in p:
                change[k] = change[k] + (w[k] - p[k]) * len(idx) / len(y)
                if corr is not None:
                    dc[k] = dc[k] + (mean[k] - c_i[j][k]) / len(parts)
                    c_i[j][k] = mean[k]
        if server.optimizer == "adam":  # the server's own FedAdam step (fleet/server_step.py)
            for k in p:
                v = p[k].double().numpy().copy()
                state[k].step(server, v, change[k].double().numpy(), np.ones(v.shape, bool),
                              r + 1)
                p[k] = torch.tensor(v, dtype=torch.float32)
        else:
            p = {k: p[k] + args.server_lr * change[k] for k in p}
        c = {k: c[k] + dc[k] for k in p}
        accs.append(net.accuracy(p, xt, yt))
        print(f"round {r + 1}: {100 * accs[-1]:.1f} %", flush=True)
    return accs


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
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.scales = {k: float(v) for k, _, v in (s.partition("=") for s in args.lr_scale)}
    torch.set_num_threads(1)  # single-sample steps: threads only add overhead
    _, labels, turned = turned_digits()
    x, y = torch.tensor(turned[POOL]), torch.tensor(labels[POOL])
    xt, yt = torch.tensor(turned[TEST]), torch.tensor(labels[TEST])
    with tempfile.TemporaryDirectory() as t:
        net = Digits(pretrained(Path(t)))
    accs = full_batch(net, x, y, xt, yt, args, args.full_batch) if args.full_batch else \
        fleet(net, x, y, xt, yt, args)
    best = int(np.argmax(accs))
    print(f"start {100 * accs[0]:.1f} %, after {args.rounds} rounds {100 * accs[-1]:.1f} % "
          f"(best {100 * accs[best]:.1f} % at round {best})")


if __name__ == "__main__":
    main()
