"""`tinytrain fleet`: federated training of many devices with Flower (tinytrain.fleet)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from tinytrain.cli.console import console, user_errors

fleet_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Federated training of many devices with Flower "
                             "(pip install 'tinytrain-mcu[fleet]').")
SIMULATE_EXAMPLES = """\
Examples:
  tinytrain build pretrained.onnx --update bias --out out/fleet/bias --lr 0.02
  tinytrain build pretrained.onnx --update last:2 --out out/fleet/last2 --lr 0.02
  tinytrain fleet simulate --build out/fleet/bias --build out/fleet/last2 \\
      --data pool.npz --nodes 100 --rounds 20 --partition labels:2 --eval test.npz \\
      --out out/fleet/run
  tinytrain build pretrained.onnx --update bias --fleet-correction --out out/fleet/fc --lr 0.02
  tinytrain fleet simulate --build out/fleet/fc --data pool.npz --nodes 100 --rounds 20 \
      --partition labels:2 --local-epochs 5 --correction scaffold+restricted --alpha 0.5 \
      --out out/fleet/run
"""


@fleet_app.command("app")
def write_app_cmd(
    out: Path = typer.Argument(..., help="The directory to write the Flower app into."),
) -> None:
    """Write the Flower app (a pyproject.toml naming tinytrain's ClientApp and ServerApp), for
    `flwr run DIR` against your own SuperLink and SuperNodes (each SuperNode's node config
    names its device: build='DIR' data='FILE.npz' and port='/dev/ttyACM0' or qemu=true)."""
    from tinytrain.fleet.simulate import write_app

    with user_errors():
        console.print(f"wrote {write_app(out) / 'pyproject.toml'}")


@fleet_app.command(epilog=SIMULATE_EXAMPLES)
def simulate(
    builds: list[Path] = typer.Option(..., "--build", help="A host build directory (a device "
                                      "class); repeat for several: node k uses class k mod n."),
    data: Path = typer.Option(..., help="The pooled samples (.npz with x and y), split over "
                              "the devices by --partition."),
    out: Path = typer.Option(..., help="Where the fleet's tensors (fleet_final.npz) and the "
                             "per-round log (fleet_rounds.json) go."),
    nodes: int = typer.Option(10, min=1, help="Simulated devices."),
    rounds: int = typer.Option(3, min=1, help="Federated rounds."),
    local_epochs: int = typer.Option(1, min=1, help="Epochs each device trains per round."),
    partition: str = typer.Option("iid", help="iid, labels:K (each device holds K classes) "
                                  "or dirichlet:ALPHA."),
    seed: int = typer.Option(0, help="Seed of the split and of the devices' sample orders."),
    server_lr: float = typer.Option(1.0, help="The server's step on the round's average "
                                    "change (FedAvgM; 1: FedAvg)."),
    server_momentum: float = typer.Option(0.0, help="The server's momentum over rounds "
                                          "(FedAvgM; 0: FedAvg), in [0, 1)."),
    server_optimizer: str = typer.Option("avgm", help="The server's step: avgm (FedAvgM, "
                                         "with --server-lr and --server-momentum) or adam "
                                         "(FedAdam: each element at Adam's pace, for SGD "
                                         "devices that cannot hold Adam's moments)."),
    server_beta1: float = typer.Option(0.9, help="FedAdam's beta1 over rounds."),
    server_beta2: float = typer.Option(0.99, help="FedAdam's beta2 over rounds."),
    server_tau: float = typer.Option(1e-3, help="FedAdam's epsilon (in real values, as its "
                                     "steps are, for int8 tensors too)."),
    server_lr_decay: float = typer.Option(1.0, help="Multiply --server-lr by this every "
                                          "round after the first: FedAdam's steps do not "
                                          "shrink as the devices' changes do, so a fleet "
                                          "settles only with this below 1."),
    correction: str = typer.Option("none", help="The devices' drift correction: none, or "
                                   "scaffold (control variates), prox (FedProx, with --mu), "
                                   "restricted (FedRS, with --alpha), several joined by '+'. "
                                   "The builds need --fleet-correction."),
    mu: float = typer.Option(0.0, help="FedProx's proximal weight (correction prox)."),
    alpha: float = typer.Option(1.0, help="The restricted softmax's scale of the logits of "
                                "classes a device has no samples of (correction restricted)."),
    lr: float | None = typer.Option(None, help="The devices' learning rate in round 1, set "
                                    "over the link each round (default: each build's own)."),
    lr_decay: float = typer.Option(1.0, help="Multiply --lr by this every round after the "
                                   "first (a decaying schedule); without --lr, each build's "
                                   "own lr (a mixed fleet's classes keep their rates)."),
    share: str = typer.Option("matching", help="Which devices share a tensor's average: "
                              "matching (those that train it in the same context: the same "
                              "trained layers feed it, so device classes do not interfere) "
                              "or all (every device that trains it; devices built with "
                              "--receive are sent the fleet's values of what the others "
                              "train, so every class runs one model)."),
    eval_data: Path | None = typer.Option(None, "--eval", help="Held-out samples: print each "
                                          "class's accuracy before and after."),
) -> None:
    """Federate NODES simulated devices (host builds driven over the link) with Flower's
    simulation engine: `flwr run` on tinytrain's Flower app, isolated in its own FLWR_HOME."""
    from tinytrain.device.data import load_npz
    from tinytrain.device.runner import load_program_info
    from tinytrain.errors import DataError, OptionError
    from tinytrain.fleet.correction import Correction, corrects
    from tinytrain.fleet.local import accuracy
    from tinytrain.fleet.partition import split
    from tinytrain.fleet.schedule import Schedule
    from tinytrain.fleet.server_step import ServerStep
    from tinytrain.fleet.shares import Shares
    from tinytrain.fleet.simulate import simulate as run_fleet
    from tinytrain.fleet.tensors import trained_tensors

    with user_errors():
        try:
            server = ServerStep(server_optimizer, server_lr, server_momentum, server_beta1,
                                server_beta2, server_tau, server_lr_decay)
        except DataError as e:
            raise OptionError(f"{e} (the --server-* options)") from None
        corr = Correction(correction, mu, alpha)
        Shares({}, share)
        Schedule(lr, lr_decay, local_epochs)
        infos = [load_program_info(b) for b in builds]
        for b, info in zip(builds, infos, strict=True):
            if info.get("board", "host") != "host":
                raise OptionError(f"{b} is firmware; a simulated fleet runs host builds "
                                  "(tinytrain build ... without --board)")
            if corr.on and not corrects(info):
                raise OptionError(f"--correction {correction}: {b} has no correction term; "
                                  "build it with --fleet-correction")
        before = [accuracy(b, {}, eval_data) for b in builds] if eval_data else []
        _, y = load_npz(data, infos[0])
        split(y, nodes, partition, seed)  # a bad split is an error before Flower starts
        run = run_fleet(builds, data, out, nodes, rounds, local_epochs=local_epochs,
                        partition=partition, seed=seed, server=server,
                        correction=correction, mu=mu,
                        alpha=alpha, share=share, lr=lr, lr_decay=lr_decay)
        t = Table("round", "devices", "failed", "samples", "loss", "uplink B", "downlink B")
        for r in run.rounds:
            t.add_row(str(r["round"]), str(r["devices"]), str(len(r["failed"])),
                      str(r["samples"]), f"{r['loss']:.4f}", f"{sum(r['uplink'].values()):,}",
                      f"{sum(r['downlink'].values()):,}")
        console.print(t)
        for k, b in enumerate(builds if eval_data else []):
            after = accuracy(b, run.tensors(trained_tensors(infos[k])), eval_data)
            console.print(f"{b}: held-out accuracy {100 * before[k]:.1f} % -> "
                          f"{100 * after:.1f} %", markup=False, highlight=False, soft_wrap=True)
        console.print(f"wrote {out / 'fleet_final.npz'} and {out / 'fleet_rounds.json'} "
                      f"({run.seconds:.0f} s)", markup=False, highlight=False, soft_wrap=True)
