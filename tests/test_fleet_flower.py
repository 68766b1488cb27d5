"""A fleet through Flower itself: `tinytrain fleet simulate` runs `flwr run` on tinytrain's
Flower app, Flower's simulation engine starts a local SuperLink and simulated SuperNodes that
run our ClientApp on host builds, and our ServerApp + SparseFedAvg aggregate. The run is
judged from what the ServerApp wrote (`flwr run --stream` exits 0 even when the run fails),
in its own FLWR_HOME and ports, and the SuperLink it started is stopped by PID."""

from __future__ import annotations

import json
import logging
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flwr.app import Error  # noqa: E402

from tests.fleet_task import pretrained, turned_digits  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import open_program  # noqa: E402
from tinytrain.fleet import records as rec  # noqa: E402
from tinytrain.fleet.aggregate import Master, Reply  # noqa: E402
from tinytrain.fleet.local import Node, accuracy, describe  # noqa: E402
from tinytrain.fleet.server_step import ServerStep  # noqa: E402
from tinytrain.fleet.simulate import simulate, write_app  # noqa: E402
from tinytrain.fleet.strategy import SparseFedAvg  # noqa: E402
from tinytrain.fleet.tensors import Trained, trained_tensors  # noqa: E402
from tinytrain.passes.optimizer import SGDConfig  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

LEARNED = 0.1  # held-out accuracy gained on the turned digits (measured: 0.11 -> 0.35, 0.40)
BUDGETS_KB = ("9", "12.9", "40")  # auto's plans for the pretrained digits CNN (measured):
# the classifier alone (8.6 KB), + the pw conv's weight on 2 of 8 input channels (12.9 KB),
# + 4 of 8 and two more biases (13.7 KB): three plans, and pw channels no device trains
PARTIAL = "tte:n_bias=3,idx=1-2,ratio=0.5-0.5"  # half the depthwise rows, half pw inputs
AUTO_SAMPLES = 150  # what `--update auto` analyses (the auto tests' scale: ~20 s a class)
RECEIVE_ALL = "tte:n_bias=3,idx=2,ratio=0.5"  # the largest class's plan, which others receive
ONE_MODEL_ATOL = 1e-5  # probabilities of one model through kernels that sum in other orders


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    pre = pretrained(d)
    _, y, turned = turned_digits()
    np.savez(d / "train.npz", x=turned[600:1000], y=y[600:1000])
    np.savez(d / "test.npz", x=turned[1500:], y=y[1500:])
    for name, upd in (("bias", "bias"), ("last2", "last:2")):
        build(pre, d / name, Options(update=upd, sgd=SGDConfig(lr=0.02, momentum=0.9)))
    build(pre, d / "corrected", Options(update="bias", sgd=SGDConfig(lr=0.02, momentum=0.9),
                                        fleet_correction=True))
    # depthwise rows and pw input channels: a copy's elements, not its whole tensors, go down
    build(pre, d / "corrected-partial", Options(update=PARTIAL, fleet_correction=True,
                                                sgd=SGDConfig(lr=0.02, momentum=0.9)))
    build(pre, d / "corrected-adam", Options(update="bias", fleet_correction=True,
                                             sgd=SGDConfig(lr=0.02, optimizer="adam")))
    (d / "broken").mkdir()  # a device class whose build is missing: its nodes fail
    shutil.copy(d / "bias" / "program.json", d / "broken" / "program.json")
    return d


class _Reply:
    """What the strategy reads of a reply: Flower's public Message API (metadata.src_node_id,
    has_error(), error, content). Flower builds a real Message only inside a run."""

    def __init__(self, node: int, content=None, reason: str | None = None) -> None:
        self.metadata, self.content = SimpleNamespace(src_node_id=node), content
        self.error = Error(code=0, reason=reason) if reason else None

    def has_error(self) -> bool:
        return self.error is not None


def test_strategy_counts_logs_and_skips_failed_replies() -> None:
    """aggregate_train without a run: failed replies are counted, logged with their node and
    reason as FedAvg logs them, and left out of the average; the others are averaged as
    Master.update averages them, each with its own keys."""
    w, b = Trained("w", (2, 3), "f32"), Trained("b", (3,), "f32")
    start = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    plans = {3: [w, b], 9: [b]}
    parts = {3: {"w": np.full((2, 3), 1.0, np.float32), "b": np.full(3, 2.0, np.float32)},
             9: {"b": np.full(3, 5.0, np.float32)}}
    samples = {3: 30, 9: 10}
    strategy = SparseFedAvg(Master(start, {"w": w, "b": b}), {})
    replies = [_Reply(n, rec.reply_content(parts[n], plans[n], samples[n], 0.5 * n))
               for n in (3, 9)]
    replies.insert(1, _Reply(5, reason="the twin died"))
    logger, seen = logging.getLogger("flwr"), []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        arrays, metrics = strategy.aggregate_train(1, iter(replies))
    finally:
        logger.removeHandler(handler)
    assert seen[:2] == ["aggregate_train: Received 2 results and 1 failures",
                        "\t> Received error in reply from node 5: the twin died"]
    assert seen[2] == ("tinytrain round 1: 2 devices (1 failed), 40 samples, loss 2.2500, "
                       "uplink 48 B, downlink 0 B")  # no configure_train: nothing sent
    assert (metrics["devices"], metrics["failed"], metrics[rec.SAMPLES]) == (2, 1, 40)
    assert metrics["train-loss"] == (30 * 1.5 + 10 * 4.5) / 40
    assert strategy.plans == plans
    ref = Master(start, {"w": w, "b": b}).update(
        [Reply(parts[n], plans[n], samples[n]) for n in (3, 9)])
    got = rec.from_arrays(arrays)
    assert got.keys() == ref.keys()
    for name, v in ref.items():
        assert np.array_equal(got[name], v), name
    assert np.allclose(got["b"], 2.75) and np.allclose(got["w"], 1.0)


def class_copies(res: dict, build) -> dict[str, str]:
    """Which copy of each tensor the devices of `build` train (fleet_rounds.json)."""
    plan = [t.to_json() for t in trained_tensors(json.loads((build / "program.json").read_text()))]
    return res["copies"][next(n for n, p in res["plans"].items() if p == plan)]


def class_tensors(res: dict, final: dict, build) -> dict[str, np.ndarray]:
    """The fleet's tensors for the devices of `build`, by name."""
    return {n: final[k] for n, k in class_copies(res, build).items()}


def test_fleet_simulate_federates_mixed_plans(fleet, cli) -> None:
    out = fleet / "run"
    shown = cli("fleet", "simulate", "--build", fleet / "bias", "--build", fleet / "last2",
                "--data", fleet / "train.npz", "--out", out, "--nodes", "4", "--rounds", "3",
                "--local-epochs", "2", "--eval", fleet / "test.npz").stdout
    res = json.loads((out / "fleet_rounds.json").read_text())
    final = dict(np.load(out / "fleet_final.npz"))
    assert [r["round"] for r in res["rounds"]] == [1, 2, 3]
    for r in res["rounds"]:
        assert r["devices"] == 4 and not r["failed"] and r["samples"] == 800
        sizes = sorted(r["uplink"].values())
        assert sizes[0] == sizes[1] < sizes[2] == sizes[3]  # bias-only devices send less
        assert r["downlink"] == r["uplink"]  # each device gets exactly what it trains
    assert len({json.dumps(p) for p in res["plans"].values()}) == 2
    for node, plan in res["plans"].items():  # each tensor a device trains, in its shape
        for t in plan:
            assert final[res["copies"][node][t["name"]]].shape == tuple(t["shape"])
    # fc and conv2's bias are trained after other trained layers in each class: a copy each
    assert {k for k in final if k.startswith("fc_weight")} == {"fc_weight@0", "fc_weight@1"}
    for cls in ("bias", "last2"):  # each class's model with the fleet's tensors learned
        start = accuracy(fleet / cls, {}, fleet / "test.npz")
        after = accuracy(fleet / cls, class_tensors(res, final, fleet / cls), fleet / "test.npz")
        assert after > start + LEARNED
        assert f"{100 * start:.1f} % -> {100 * after:.1f} %" in shown


def test_fleet_simulate_with_scaffold_and_restricted_softmax(fleet, cli) -> None:
    """The corrections through Flower's simulation, with a decaying lr from the server:
    every round's replies carry control variate changes, each device gets its tensors and c
    (float32 an element) and sends its tensors and c_i's change, and the fleet learns."""
    out = fleet / "run-corrected"
    cli("fleet", "simulate", "--build", fleet / "corrected", "--build",
        fleet / "corrected-partial", "--data", fleet / "train.npz", "--out", out, "--nodes", "4",
        "--rounds", "3", "--local-epochs", "2", "--partition", "labels:2", "--correction",
        "scaffold+restricted", "--alpha", "0.5", "--lr", "0.04", "--lr-decay", "0.5")
    res = json.loads((out / "fleet_rounds.json").read_text())
    assert [r["lr"] for r in res["rounds"]] == [0.04, 0.02, 0.01]  # the server's schedule
    # f32 elements each way, then c down and c_i's change up: the trained elements only
    wire = {n: sum(int(np.prod(Trained.from_json(t).part_shape())) * 8 for t in p)
            for n, p in res["plans"].items()}
    partial = trained_tensors(json.loads((fleet / "corrected-partial" / "program.json")
                                         .read_text()))
    assert any(t.part_shape() != t.shape for t in partial)
    assert len(set(wire.values())) == 2
    for r in res["rounds"]:
        assert r["devices"] == r["controls"] == 4 and not r["failed"]
        assert r["uplink"] == r["downlink"] == wire
    final = dict(np.load(out / "fleet_final.npz"))
    for b in (fleet / "corrected", fleet / "corrected-partial"):  # each class learned
        start = accuracy(b, {}, fleet / "test.npz")
        assert accuracy(b, class_tensors(res, final, b), fleet / "test.npz") > start + LEARNED


def test_a_fleet_of_sgd_and_adam_devices_decays_each_ones_own_lr(fleet, cli) -> None:
    """SCAFFOLD over an SGD class and an Adam class, the server decaying each build's own lr
    (--lr-decay without --lr): both classes learn, and every reply carries its control
    variate's change (the Adam class's from its gradient sum)."""
    out = fleet / "run-mixed-optimizers"
    cli("fleet", "simulate", "--build", fleet / "corrected", "--build", fleet / "corrected-adam",
        "--data", fleet / "train.npz", "--out", out, "--nodes", "4", "--rounds", "3",
        "--local-epochs", "2", "--partition", "labels:2", "--correction", "scaffold",
        "--lr-decay", "0.5")
    res = json.loads((out / "fleet_rounds.json").read_text())
    assert [r["lr_scale"] for r in res["rounds"]] == [1.0, 0.5, 0.25]
    assert all(r["lr"] is None for r in res["rounds"])
    assert all(r["devices"] == r["controls"] == 4 and not r["failed"] for r in res["rounds"])
    final = dict(np.load(out / "fleet_final.npz"))
    for b in (fleet / "corrected", fleet / "corrected-adam"):
        start = accuracy(b, {}, fleet / "test.npz")
        assert accuracy(b, class_tensors(res, final, b), fleet / "test.npz") > start + LEARNED


FEDADAM_LR = 0.05  # the server's step: FedAdam's first step moves an element by about this
SENT_ROUNDING = 1e-6  # relative: the moves are read from float32 tensors the server sent


def test_fedadam_on_the_server_moves_every_element_at_its_own_pace(fleet) -> None:
    """SGD devices with SCAFFOLD, FedAdam on the server (the run config's server-optimizer):
    the first round moves every trained element by at most the server's lr, most by nearly
    that (Adam's first step is lr * d / (|d| + tau): the sign, not the size, of the average
    change), where FedAvg would move each by its average change. (Whether that learns faster
    is bench/fleet.py's question: on this 4-device fleet it does not.)"""
    run = simulate([fleet / "corrected"], fleet / "train.npz", fleet / "run-fedadam", nodes=4,
                   rounds=3, local_epochs=2, partition="labels:2", correction="scaffold",
                   server=ServerStep("adam", lr=FEDADAM_LR, beta1=0.5), keep_rounds=True)
    assert all(r["devices"] == r["controls"] == 4 and not r["failed"] for r in run.rounds)
    _, start = describe(Node(fleet / "corrected", fleet / "train.npz"))
    moves = np.concatenate([np.abs(run.per_round[1][n] - start[n]).ravel().astype(np.float64)
                            for n in run.per_round[1]])
    assert moves.max() <= FEDADAM_LR * (1 + SENT_ROUNDING)
    assert np.median(moves[moves > 0]) > 0.9 * FEDADAM_LR


def test_three_budgets_chosen_by_update_auto_converge_and_leave_the_rest_alone(fleet, cli):
    """Three device classes, each `build --update auto --max-sram KB`, federated: every class
    learns, and the elements of the fleet's tensors that no class trains end bit-identical."""
    with np.load(fleet / "train.npz") as f:
        np.savez(fleet / "auto.npz", x=f["x"][:AUTO_SAMPLES], y=f["y"][:AUTO_SAMPLES])
    builds = []
    for kb in BUDGETS_KB:
        builds.append(fleet / f"auto{kb}")
        cli("build", fleet / "pretrained.onnx", "--update", "auto", "--max-sram", kb,
            "--data", fleet / "auto.npz", "--lr", "0.02", "--momentum", "0.9",
            "--out", builds[-1])
        rep = json.loads((builds[-1] / "report.json").read_text())
        assert rep["sram_bytes"]["total"] <= float(kb) * 1024
    plans = [trained_tensors(json.loads((b / "program.json").read_text())) for b in builds]
    assert len({tuple(p) for p in plans}) == 3
    out = fleet / "run-auto"
    args = [a for b in builds for a in ("--build", b)]
    cli("fleet", "simulate", *args, "--data", fleet / "train.npz", "--out", out, "--nodes", "6",
        "--rounds", "3", "--local-epochs", "2", "--partition", "labels:3")
    res = json.loads((out / "fleet_rounds.json").read_text())
    rounds = res["rounds"]
    assert all(r["devices"] == 6 and not r["failed"] for r in rounds)
    # a copy's devices train the same elements of it: each gets exactly what it sends
    # back, the trained pw channels too (a plan trains 2 or 4 of their 8)
    assert all(r["downlink"] == r["uplink"] for r in rounds)
    assert rounds[-1]["loss"] < rounds[0]["loss"]
    final = dict(np.load(out / "fleet_final.npz"))
    for b in builds:  # each class's model with the fleet's tensors learned
        assert accuracy(b, class_tensors(res, final, b), fleet / "test.npz") > \
            accuracy(b, {}, fleet / "test.npz") + LEARNED, b.name
    untouched = 0
    for key, got in final.items():  # each copy: the elements its classes train moved
        name = key.split("@")[0]
        mine = [(b, t) for b, p in zip(builds, plans, strict=True) for t in p
                if t.name == name and class_copies(res, b)[name] == key]
        trained = np.logical_or.reduce([t.mask() for _, t in mine])
        with open_program(mine[0][0]) as dev:  # the start: every class built from one model
            start = dev.get_params()[name]
        assert np.array_equal(got[~trained], start[~trained]), key
        assert not np.array_equal(got[trained], start[trained]), key
        untouched += int((~trained).sum())
    assert untouched > 0  # the budgets above leave pw channels that no class trains


def test_aligned_classes_receive_what_they_do_not_train_and_run_one_model(fleet, cli):
    """Three classes built with `--receive` the largest class's plan and federated with
    `--share all`: each device is sent the fleet's values of what the others train, so after
    the run every class computes the same function (its outputs on held-out samples equal
    the others'), and every class learns. With copies per context (`matching`) such builds
    are refused before Flower starts."""
    pre = fleet / "pretrained.onnx"
    plans = ("tte:n_bias=1", "tte:n_bias=2", RECEIVE_ALL)
    builds = [fleet / f"aligned{k}" for k in range(3)]
    for b, plan in zip(builds, plans, strict=True):
        cli("build", pre, "--update", plan, "--receive", RECEIVE_ALL, "--lr", "0.02",
            "--momentum", "0.9", "--out", b)
    infos = [json.loads((b / "program.json").read_text()) for b in builds]
    assert [[e["name"] for e in i["received"]] for i in infos] == [
        ["pw_weight", "pw_bias", "conv2_bias"], ["pw_weight", "pw_bias"], []]
    args = [a for b in builds for a in ("--build", b)]
    r = cli("fleet", "simulate", *args, "--data", fleet / "train.npz", "--out",
            fleet / "x", check=False)
    assert r.returncode == 2 and "share='all'" in r.stderr and "Traceback" not in r.stderr
    assert not (fleet / "x").exists()
    out = fleet / "run-aligned"
    cli("fleet", "simulate", *args, "--data", fleet / "train.npz", "--out", out, "--nodes", "6",
        "--rounds", "3", "--local-epochs", "2", "--partition", "labels:3", "--share", "all")
    res = json.loads((out / "fleet_rounds.json").read_text())
    rounds = res["rounds"]
    assert all(r["devices"] == 6 and not r["failed"] for r in rounds)
    # node k is class k mod 3; share all sends whole tensors: what a class trains, and the
    # small classes what they receive besides
    def fp32_bytes(entries) -> int:
        return sum(int(np.prod(e["shape"])) * 4 for e in entries)
    down = [fp32_bytes(i["trainable"]) + fp32_bytes(i["received"]) for i in infos]
    mine = [[t.to_json() for t in trained_tensors(i)] for i in infos]
    class_of = {n: mine.index(p) for n, p in res["plans"].items()}
    assert sorted(class_of.values()) == [0, 0, 1, 1, 2, 2]
    for r in rounds:
        assert r["downlink"] == {n: down[class_of[n]] for n in r["downlink"]}
    final = dict(np.load(out / "fleet_final.npz"))
    _, _, turned = turned_digits()
    outputs = []
    for b in builds:
        with open_program(b) as dev:
            load = {t.name: final[t.name] for t in trained_tensors(dev.info)}
            dev.set_params({**dev.get_params(), **load})
            if dev.info["received"]:
                dev.receive({e["name"]: final[e["name"]] for e in dev.info["received"]})
            outputs.append(np.stack([dev.infer(x) for x in turned[1500:1560]]))
        assert accuracy(b, final, fleet / "test.npz") > \
            accuracy(b, {}, fleet / "test.npz") + LEARNED, b.name
    for o in outputs[1:]:  # one model: float32 sums in other kernels' orders only
        np.testing.assert_allclose(o, outputs[0], atol=ONE_MODEL_ATOL)


def test_a_failing_device_is_its_own_failure(fleet) -> None:
    builds = [fleet / "bias", fleet / "last2", fleet / "broken"]
    run = simulate(builds, fleet / "train.npz", fleet / "run-broken", nodes=3, rounds=2,
                   keep_rounds=True)
    assert [r["round"] for r in run.rounds] == [1, 2]
    for r in run.rounds:  # the broken node fails each round; the others train on
        assert r["devices"] == 2 and len(r["failed"]) == 1
    # keep_rounds: each round's tensors (what bench/fleet.py --plot evaluates); the last
    # round's are the final model, and the first round's differ from them
    assert sorted(run.per_round) == [1, 2]
    assert run.per_round[2].keys() == run.final.keys()
    for name, v in run.final.items():
        assert np.array_equal(run.per_round[2][name], v), name
    assert any(not np.array_equal(run.per_round[1][n], v) for n, v in run.final.items())


def test_bad_fleet_options_are_clean_errors(fleet, cli) -> None:
    r = cli("fleet", "simulate", "--build", fleet / "bias", "--data", fleet / "train.npz",
            "--out", fleet / "x", "--partition", "zipf", check=False)
    assert r.returncode == 2 and "unknown partition 'zipf'" in r.stderr
    assert "Traceback" not in r.stderr and not (fleet / "x").exists()
    r = cli("fleet", "simulate", "--build", fleet / "nothing", "--data", fleet / "train.npz",
            "--out", fleet / "x", check=False)
    assert r.returncode == 2 and "not a tinytrain build directory" in r.stderr
    r = cli("fleet", "simulate", "--build", fleet / "bias", "--data", fleet / "train.npz",
            "--out", fleet / "x", "--server-momentum", "1", check=False)
    assert r.returncode == 2 and "server-momentum in [0, 1)" in r.stderr
    assert "Traceback" not in r.stderr and not (fleet / "x").exists()
    for args, said in ((["--lr", "0.1", "--lr-decay", "2"], "lr-decay must be in (0, 1]"),
                       (["--server-optimizer", "adam", "--server-momentum", "0.9"],
                        "server-momentum is FedAvgM's"),
                       (["--server-optimizer", "yogi"], "server-optimizer must be one of"),
                       (["--share", "some"], "share must be one of matching, all")):
        r = cli("fleet", "simulate", "--build", fleet / "bias", "--data", fleet / "train.npz",
                "--out", fleet / "x", *args, check=False)
        assert r.returncode == 2 and said in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (fleet / "x").exists()


def test_fleet_app_writes_a_flower_app(tmp_path, cli) -> None:
    cli("fleet", "app", tmp_path / "app")
    text = (tmp_path / "app" / "pyproject.toml").read_text()
    assert 'clientapp = "tinytrain.fleet.client_app:app"' in text
    assert 'serverapp = "tinytrain.fleet.server_app:app"' in text
    assert write_app(tmp_path / "again").joinpath("pyproject.toml").read_text() == text
    from flwr.cli.config_utils import load_and_validate

    config, _ = load_and_validate(tmp_path / "app" / "pyproject.toml", check_module=True)
    assert config["tool"]["flwr"]["app"]["components"]["clientapp"].startswith("tinytrain.")
