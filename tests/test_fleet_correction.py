"""--fleet-correction: the devices' drift-correction term (SCAFFOLD / FedProx) on real host
builds. Each step of a build with the term equals the same step of a build without it followed
by p -= lr * (mu * p + b) computed here in NumPy (fp32, and int8 / int32 with the build's
rounding); with b = mu = 0 the two builds train bit for bit alike. Then the host side:
SCAFFOLD's control variates over rounds in which a device is missing, and the errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.device.build import build
from tinytrain.device.runner import open_program
from tinytrain.errors import DataError, OptionError
from tinytrain.fleet.aggregate import Controls, Master, Reply
from tinytrain.fleet.correction import Correction, effective_lr
from tinytrain.fleet.local import Node, describe, train_round
from tinytrain.fleet.tensors import trained_tensors
from tinytrain.ops import get_op
from tinytrain.passes.fleet_correction import salt
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model
from tinytrain.quant.update import ROUNDINGS, update_s8, update_s32

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
PARTIAL = "tte:n_bias=3,idx=1-2,ratio=0.5-0.5"  # half the depthwise rows, half pw inputs
LR = 0.05
STEPS = 4  # steps compared after the terms are set (and as many before, with zero terms)
CONTROL_TOL = 1e-9  # float64 sums of a few hundred float32-sized terms
WIRE_RTOL = 1e-6  # a control variate's change crosses the network as float32


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32)[:, None], d.target


def _pair(tmp_path, opts: Options):
    """Host builds of the digits CNN without and with the term."""
    build(DIGITS, tmp_path / "plain", opts)
    build(DIGITS, tmp_path / "fleet", replace(opts, fleet_correction=True))
    return tmp_path / "plain", tmp_path / "fleet"


def _terms(plan, rng, scale: float, mu: float) -> dict[str, np.ndarray]:
    out = {f"{t.name}_fleet_b": rng.normal(0, scale, t.part_shape()).astype(np.float32)
           for t in plan}
    out["fleet_mu"] = np.array([mu], np.float32)
    return out


def _expected(t, after_plain, b, mu, info, step, shadow):
    """The trained part after the correction, from the plain build's step (the reference)."""
    part = t.take(after_plain)
    if t.dtype == "f32":  # momentum's effective rate, in float32 as the C computes it
        lr = np.float32(np.float32(LR) / (np.float32(1) - np.float32(info["sgd"]["momentum"])))
        tt = (np.float32(mu) * part).astype(np.float32) + b
        return (part - lr * tt).astype(np.float32)
    tt = (np.float32(mu) * part.astype(np.float32)).astype(np.float32) + b
    d = (np.float32(LR) * tt).astype(np.float32).reshape(-1)
    mode = ROUNDINGS[info["sgd"]["rounding"]]
    idx = np.arange(d.size)
    if t.dtype == "s32":
        return update_s32(part.reshape(-1), d, mode, salt(0, t.name), step, idx).reshape(
            part.shape)
    return update_s8(part.reshape(-1), d, mode, salt(0, t.name), step, idx,
                     shadow).reshape(part.shape)


def _check_steps(tmp_path, opts: Options, scale: float, mu: float) -> None:
    x, y = _digits()
    plain, fleet = _pair(tmp_path, opts)
    g, _ = compile_model(DIGITS, replace(opts, fleet_correction=True))
    nodes = {n.outputs[0]: n for n in g.nodes if n.op == "fleet_correction"}
    rng = np.random.default_rng(1)
    with open_program(plain) as a, open_program(fleet) as b:
        plan = trained_tensors(b.info)
        assert set(nodes) == {t.name for t in plan}
        for i in range(STEPS):  # zero terms: the same bits
            a.train(x[i], y[i])
            b.train(x[i], y[i])
        pa, pb = a.get_params(), b.get_params()
        assert all(np.array_equal(pa[k], pb[k]) for k in pa)
        terms = _terms(plan, rng, scale, mu)
        st = b.get_state()
        st.update(terms)
        b.set_state(st)
        for i in range(STEPS, 2 * STEPS):  # from b's parameters and state, one step each
            sb = b.get_state()
            a.set_state({k: v for k, v in sb.items() if k in a.get_state()})
            a.set_params(b.get_params())
            a.train(x[i], y[i])
            b.train(x[i], y[i])
            pa, pb, sa = a.get_params(), b.get_params(), a.get_state()
            for t in plan:
                bt = terms[f"{t.name}_fleet_b"]
                sh = sa.get(f"{t.name}_shadow")
                sh = None if sh is None else sh.reshape(-1).copy()
                step = int(sb["rng_step"][0]) if "rng_step" in sb else 0
                want = _expected(t, pa[t.name], bt, mu, b.info, step, sh)
                assert np.array_equal(t.take(pb[t.name]), want), (t.name, i)
                if sh is not None:  # the shadow bytes took the correction's fraction too
                    assert np.array_equal(b.get_state()[f"{t.name}_shadow"].reshape(-1), sh)
                # the op's own NumPy reference (what the IR interpreter runs) agrees
                packed = "packed" in next(p for p in b.info["trainable"]
                                          if p["name"] == t.name)
                xs = [t.take(pa[t.name]) if packed else pa[t.name].copy(), bt,
                      terms["fleet_mu"]]  # a packed weight is stored as its trained part
                if t.dtype != "f32":
                    xs.append(np.array([step], np.int32))
                    if sh is not None:
                        xs.append(sa[f"{t.name}_shadow"].copy())
                got = get_op("fleet_correction").forward(nodes[t.name], xs)[0]
                got = got if packed else t.take(got)
                assert np.array_equal(got.reshape(want.shape), want), (t.name, "numpy op")


@pytest.mark.parametrize("update,momentum", [("bias", 0.9), ("full", 0.0), (PARTIAL, 0.9)])
def test_fp32_step_is_the_plain_step_then_the_correction(tmp_path, update, momentum) -> None:
    _check_steps(tmp_path, Options(update=update, sgd=SGDConfig(lr=LR, momentum=momentum)),
                 scale=0.1, mu=0.01)


@pytest.mark.parametrize("update,rounding", [("bias", "stochastic"), ("full", "shadow"),
                                             (PARTIAL, "stochastic")])
def test_int8_step_is_the_plain_step_then_the_rounded_correction(tmp_path, update,
                                                                 rounding) -> None:
    x, _ = _digits()
    np.savez(tmp_path / "calib.npz", x=x[:64])
    opts = Options(update=update, sgd=SGDConfig(lr=LR, rounding=rounding), quantize="int8",
                   calib=tmp_path / "calib.npz")
    _check_steps(tmp_path, opts, scale=20.0, mu=0.5)  # b in codes: steps of a code or so


def test_report_prices_the_term_and_the_cli_builds_it(tmp_path, cli) -> None:
    out = tmp_path / "b"
    p = cli("build", DIGITS, "--update", "bias", "--fleet-correction", "--out", out)
    report = json.loads((out / "report.json").read_text())
    plan = trained_tensors(json.loads((out / "program.json").read_text()))
    elements = sum(int(np.prod(t.part_shape())) for t in plan)
    # b, mu and a damping per class (the digits' 10)
    assert report["sram_bytes"]["fleet_correction"] == 4 * elements + 4 + 4 * 10
    assert "fleet correction" in p.stdout
    info = json.loads((out / "program.json").read_text())
    names = {e["name"] for e in info["state"]}
    assert {"fleet_mu", "fleet_damp", *(f"{t.name}_fleet_b" for t in plan)} <= names


def test_scaffold_control_variates_survive_a_missing_device(tmp_path) -> None:
    """Three devices, each on its own labels; device 1 misses round 2. Each device's c_i
    follows option II of SCAFFOLD (recomputed here from its parts), the server's c stays
    the mean of all three c_i, and device 1's c_i is what it was after round 1."""
    x, y = _digits()
    order = np.argsort(y[:300], kind="stable")
    np.savez(tmp_path / "pool.npz", x=x[:300][order], y=y[:300][order])
    opts = Options(update="bias", sgd=SGDConfig(lr=LR, momentum=0.9), fleet_correction=True)
    build(DIGITS, tmp_path / "dev", opts)
    nodes = [Node(tmp_path / "dev", tmp_path / "pool.npz", part=k, parts=3,
                  partition="labels:2") for k in range(3)]
    corr = Correction("scaffold+prox", mu=0.01)
    with open_program(tmp_path / "dev") as dev:
        plan, start, info = trained_tensors(dev.info), dev.get_params(), dev.info
    kinds = {t.name: t for t in plan}
    master = Master({t.name: start[t.name] for t in plan}, kinds)
    controls = Controls(kinds, dict(enumerate([plan] * 3)))
    own: dict[int, dict[str, np.ndarray] | None] = {0: None, 1: None, 2: None}
    states: dict[int, dict | None] = {0: None, 1: None, 2: None}
    lr = effective_lr(info["sgd"])
    for rnd, present in ((1, (0, 1, 2)), (2, (0, 2)), (3, (0, 1, 2))):
        sent, c = master.sent(), controls.sent(kinds)
        replies = []
        for k in present:
            r = train_round(nodes[k], sent, states[k], rnd, corr, c, own[k])
            k_steps = len(nodes[k].samples()[1])
            for t in plan:  # c_i+ = c_i - c + (x - y) / (K lr)
                old = 0 if own[k] is None else own[k][t.name]
                want = old - c[t.name].astype(np.float64) + (
                    sent[t.name].astype(np.float64) - r.parts[t.name]) / (k_steps * lr)
                assert np.allclose(r.control[t.name], want, rtol=WIRE_RTOL, atol=CONTROL_TOL)
                assert np.array_equal(r.control[t.name], old + r.control_delta[t.name])
            states[k], own[k] = r.state, r.control
            replies.append(Reply(r.parts, r.plan, r.samples, r.control_delta))
        kept = None if own[1] is None else {n: a.copy() for n, a in own[1].items()}
        master.update(replies)
        controls.update(replies)
        for t in plan:
            mean = np.mean([own[k][t.name] for k in range(3)], axis=0)
            assert np.allclose(controls.values[t.name], mean, rtol=0, atol=CONTROL_TOL)
        if rnd == 2:
            assert all(np.array_equal(kept[n], own[1][n]) for n in kept)
    assert any(np.abs(controls.values[t.name]).max() > 0 for t in plan)


def test_correction_errors_are_clear(tmp_path) -> None:
    for bad, msg in ((("fedavg", 0.0), "correction must be none or"),
                     (("prox", 0.0), "needs mu > 0"), (("scaffold", 0.1), "mu is FedProx's"),
                     (("scaffold", -1.0), "mu must be"),
                     (("restricted", 0.0), "needs alpha < 1"),
                     (("scaffold", 0.0, 0.5), "alpha is the restricted"),
                     (("restricted", 0.0, 2.0), "alpha must be")):
        with pytest.raises(OptionError, match=msg):
            Correction(*bad)
    x, y = _digits()
    np.savez(tmp_path / "d.npz", x=x[:20], y=y[:20])
    build(DIGITS, tmp_path / "plain", Options(update="bias"))
    node = Node(tmp_path / "plain", tmp_path / "d.npz")
    _, params = describe(node)
    with pytest.raises(DataError, match="build it with --fleet-correction"):
        train_round(node, params, None, 1, Correction("prox", 0.1))


def test_restricted_softmax_damps_the_classes_a_device_lacks(tmp_path) -> None:
    """correction=restricted: before the round the device's damping is 1 - alpha for every
    class it has no sample of and 0 for its own; the round then trains differently from a
    plain one, and the next round without it writes zeros again."""
    x, y = _digits()
    np.savez(tmp_path / "pool.npz", x=x[:200], y=y[:200])
    build(DIGITS, tmp_path / "dev", Options(update="bias", sgd=SGDConfig(lr=LR),
                                            fleet_correction=True))
    node = Node(tmp_path / "dev", tmp_path / "pool.npz", part=3, parts=10,
                partition="labels:2")
    have = set(np.unique(node.samples()[1]).tolist())
    assert len(have) == 2
    _, start = describe(node)
    plain = train_round(node, start, None, 1)
    damped = train_round(node, start, None, 1, Correction("restricted", alpha=0.3))
    d = damped.state["fleet_damp"]
    assert d.shape == (10,)
    assert all(d[c] == (0.0 if c in have else np.float32(0.7)) for c in range(10))
    assert any(not np.array_equal(plain.parts[n], damped.parts[n]) for n in plain.parts)
    again = train_round(node, start, damped.state, 1)
    assert not again.state["fleet_damp"].any() and not again.state["fleet_mu"].any()
    assert all(np.array_equal(plain.parts[n], again.parts[n]) for n in plain.parts)


def test_fleet_simulate_refuses_a_correction_the_builds_lack(tmp_path, cli) -> None:
    x, y = _digits()
    np.savez(tmp_path / "pool.npz", x=x[:40], y=y[:40])
    build(DIGITS, tmp_path / "plain", Options(update="bias"))
    for args, msg in ((("--correction", "scaffold"), "build it with --fleet-correction"),
                      (("--correction", "prox"), "needs mu > 0"),
                      (("--correction", "median"), "correction must be none or")):
        p = cli("fleet", "simulate", "--build", tmp_path / "plain", "--data",
                tmp_path / "pool.npz", "--out", tmp_path / "run", *args, check=False)
        assert p.returncode != 0 and msg in p.stdout + p.stderr, p.stdout + p.stderr
        assert "Traceback" not in p.stdout + p.stderr


ADAM_LR = 0.01


@pytest.mark.parametrize("update", ["bias", PARTIAL])
def test_adam_step_takes_the_correction_into_its_gradient(tmp_path, update) -> None:
    """--optimizer adam: b and mu enter the gradient ahead of the moments, and the gradient
    sum takes the device's own gradient. Batch 2, one sample a step and the link's apply:
    the accumulator then holds the sample's gradient (read from the state table), and the
    step equals ops/adam.py's NumPy reference on it, bit for bit, with random terms."""
    x, y = _digits()
    opts = Options(update=update, sgd=SGDConfig(lr=ADAM_LR, batch=2, weight_decay=1e-3,
                                                optimizer="adam"), fleet_correction=True)
    build(DIGITS, tmp_path / "dev", opts)
    g, _ = compile_model(DIGITS, opts)
    nodes = {n.outputs[0]: n for n in g.nodes if n.op == "adam"}
    assert not any(n.op == "fleet_correction" for n in g.nodes)  # all in Adam's gradient
    rng = np.random.default_rng(2)
    with open_program(tmp_path / "dev") as dev:
        plan = trained_tensors(dev.info)
        assert set(nodes) == {t.name for t in plan}
        for i in range(STEPS):
            st = dev.get_state()
            st.update(_terms(plan, rng, 0.1, 0.01))
            dev.set_state(st)
            dev.train(x[i], y[i])
            before, p0 = dev.get_state(), dev.get_params()
            dev.apply_update()  # a step of one sample (scaled as one, not as a batch of 2)
            after, p1 = dev.get_state(), dev.get_params()
            assert int(after["adam_step"][0]) == i + 1
            for t in plan:
                n = nodes[t.name]
                xs = [p0[t.name].copy(), 2 * before[n.inputs[1]],  # scale 1/2, sum of 1
                      *(before[k].copy() for k in n.inputs[2:4]),
                      after["adam_step"].copy(),
                      *(before[k].copy() for k in n.inputs[5:])]
                want = get_op("adam").forward(n, xs)[0]
                assert np.array_equal(p1[t.name], want), (t.name, i)
                for k, ref in zip(n.inputs[2:4], xs[2:4]):  # the moments
                    assert np.array_equal(after[k], ref), (k, i)
                gsum = n.inputs[7]
                assert np.array_equal(after[gsum], xs[7]), (gsum, i)
                assert not after[n.inputs[1]].any()  # the accumulator is cleared


def test_adam_rounds_restart_the_moments_and_send_the_mean_gradient(tmp_path) -> None:
    """A fleet round of an Adam build starts from zero moments and step counter, and its
    SCAFFOLD variate is the round's mean gradient (the gradient sum over the K steps); a
    plain Adam build (no correction) restarts its moments too."""
    x, y = _digits()
    np.savez(tmp_path / "pool.npz", x=x[:120], y=y[:120])
    for fleet in (True, False):
        out = tmp_path / f"dev{fleet}"
        build(DIGITS, out, Options(update="bias", fleet_correction=fleet,
                                   sgd=SGDConfig(lr=ADAM_LR, optimizer="adam")))
        node = Node(out, tmp_path / "pool.npz", part=1, parts=4, partition="labels:2")
        k = len(node.samples()[1])
        _, start = describe(node)
        corr = Correction("scaffold") if fleet else None
        first = train_round(node, start, None, 1, corr, None, None)
        second = train_round(node, first.parts, first.state, 2, corr, None, first.control)
        for r in (first, second):
            assert int(r.state["adam_step"][0]) == k  # counted from zero in each round
        if not fleet:
            assert first.control is None
            continue
        for t in first.plan:
            gsum = second.state[f"{t.name}_fleet_gsum"].astype(np.float64)
            want = gsum.reshape(t.part_shape()) / k
            old = first.control[t.name]  # c_i moves by the reply's change, sent as float32
            assert np.allclose(second.control_delta[t.name], want - old, rtol=WIRE_RTOL,
                               atol=0)
            assert np.array_equal(second.control[t.name], old + second.control_delta[t.name])
            assert np.abs(want).max() > 0
