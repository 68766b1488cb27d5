"""The fleet's core without Flower: what a build trains element by element, the server's
per-element average against a NumPy reference, the dataset splits, and one device's round
over the link on real host builds (training state kept across rounds)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import ROOT

from tinytrain.device.build import build
from tinytrain.device.runner import open_program
from tinytrain.device.train import train
from tinytrain.errors import DataError, OptionError
from tinytrain.fleet.aggregate import Master, Reply, quantise
from tinytrain.fleet.local import Node, describe, train_round
from tinytrain.fleet.partition import split
from tinytrain.fleet.schedule import Schedule, device_lr
from tinytrain.fleet.server_step import ServerStep
from tinytrain.fleet.shares import Shares
from tinytrain.fleet.tensors import Trained, trained_tensors
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
AVG_TOL = 1e-12  # float64 sums of a few int8-sized products: exact up to rounding of the divide
AVG_TOL_F32 = 1e-6  # an fp32 master copy against a float64 average of fp32 parameters


def _weight(name="w", shape=(4, 3, 3, 6), channels=None, axis=-1, dtype="s8"):
    return Trained(name, shape, dtype, (0.02,) * shape[0], channels, axis)


def test_take_put_and_mask_agree() -> None:
    t = _weight(channels=(1, 4))
    whole = np.arange(np.prod(t.shape)).reshape(t.shape) % 100 - 50
    part = t.take(whole)
    assert part.shape == t.part_shape() == (4, 3, 3, 2)
    assert np.array_equal(part, whole[..., [1, 4]])
    m = t.mask()
    assert m.sum() == part.size and m[..., [1, 4]].all() and not m[..., [0, 2, 3, 5]].any()
    back = t.put(np.zeros(t.shape), part)
    assert np.array_equal(back[m], whole[m]) and not back[~m].any()
    rows = _weight(channels=(0, 2), axis=0)  # a depthwise weight's partial rows
    assert rows.take(whole).shape == (2, 3, 3, 6) and rows.mask()[[0, 2]].all()
    # what a matched copy sends (the trained elements) widens back around the device's own
    current = np.full(t.shape, 7, np.int8)
    wide = t.widen(part.astype(np.int8), current)
    assert wide.dtype == np.int8 and np.array_equal(wide[m], whole[m]) and (wide[~m] == 7).all()
    assert t.widen(whole, current) is whole  # a whole tensor is taken as it is
    c = np.linspace(-1, 1, whole.size).reshape(t.shape)  # a float control variate
    assert t.part(c).dtype == np.float64 and np.array_equal(t.part(c), c[..., [1, 4]])


def test_average_is_per_element_over_the_devices_that_trained_it() -> None:
    rng = np.random.default_rng(0)
    w, b = _weight(), Trained("b", (4,), "s32", (1e-4,) * 4)
    start = {"w": rng.integers(-100, 100, w.shape).astype(np.int8),
             "b": rng.integers(-1000, 1000, 4).astype(np.int32)}
    plans = [[_weight(channels=(0, 1, 2)), b], [_weight(channels=(0, 5))], [b],
             [_weight(channels=(5,))]]  # no device trains w's channels 3 and 4
    samples = [30, 10, 7, 3]
    replies, full = [], []
    for plan, n in zip(plans, samples, strict=True):
        parts, view = {}, {}
        for t in plan:
            moved = start[t.name].astype(np.int64) + rng.integers(-9, 10, t.shape)
            lo, hi = (-128, 127) if t.dtype == "s8" else (-(2**31), 2**31 - 1)
            moved = np.clip(moved, lo, hi)
            parts[t.name] = t.take(moved)
            view[t.name] = (moved, t.mask())
        replies.append(Reply(parts, plan, n))
        full.append(view)
    master = Master(start, {"w": w, "b": b})
    sent = master.update(replies)
    for name in ("w", "b"):  # the reference: sum n_i * x_i / sum n_i where device i trains
        num = np.zeros(start[name].shape)
        den = np.zeros(start[name].shape)
        for view, n in zip(full, samples, strict=True):
            if name in view:
                moved, m = view[name]
                num[m] += n * moved[m]
                den[m] += n
        ref = np.where(den > 0, num / np.maximum(den, 1), start[name])
        assert np.allclose(master.values[name], ref, rtol=0, atol=AVG_TOL)
        assert np.array_equal(sent[name], quantise(ref, {"w": "s8", "b": "s32"}[name]))
        untouched = den == 0
        assert untouched.any() == (name == "w")
        assert np.array_equal(sent[name][untouched], start[name][untouched])
        assert sent[name].dtype == start[name].dtype


def test_sub_code_averages_are_kept_until_they_add_up() -> None:
    t = Trained("w", (1,), "s8", (0.1,))
    master = Master({"w": np.array([5], np.int8)}, {"w": t})
    seen = []
    for _ in range(3):  # three equal devices move the weight by 0, 0 and +1 each round
        sent = master.sent()["w"]
        replies = [Reply({"w": sent + d}, [t], 1) for d in (0, 0, 1)]
        seen.append(int(master.update(replies)["w"][0]))
    assert seen == [5, 6, 6]  # 5.33, 5.67 (sent as 6), 6.0: rounding every round would stay 5
    assert master.values["w"][0] == pytest.approx(6.0)


def test_server_momentum_steps_like_fedavgm() -> None:
    """FedAvgM's server step on sparse replies against its textbook form: v = beta v + d,
    x += lr v, where d is the round's per-element average change (0 where nobody trained);
    an element trained in round 1 only moves on with its velocity, one never trained stays
    bit-identical."""
    w = Trained("w", (3,), "f32")
    two, one = Trained("w", (3,), "f32", None, (0, 1), 0), Trained("w", (3,), "f32", None,
                                                                    (0,), 0)
    start = np.array([0.5, -0.25, 2.0], np.float32)
    lr, beta = 1.5, 0.8
    master = Master({"w": start}, {"w": w}, ServerStep(lr=lr, momentum=beta))
    x, v, after = start.astype(np.float64), np.zeros(3), []
    for plan, move in ((two, [0.1, -0.2]), (one, [0.05]), (one, [0.3])):
        sent = master.sent()["w"]
        part = plan.take(sent) + np.array(move, np.float32)
        got = master.update([Reply({"w": part}, [plan], 4)])["w"]
        d = np.zeros(3)  # the reference: the reply's change where its plan trains
        d[list(plan.channels)] = part.astype(np.float64) - sent[list(plan.channels)]
        v = beta * v + d
        x = x + lr * v
        assert np.allclose(master.values["w"], x, rtol=0, atol=AVG_TOL)
        assert np.array_equal(got, x.astype(np.float32))
        after.append(got.copy())
    assert after[2][1] != after[0][1]  # trained in round 1 only, moved on in rounds 2 and 3
    assert after[2][2] == start[2]  # never trained: bit-identical
    with pytest.raises(DataError, match="server-momentum in"):
        ServerStep(momentum=1.0)


def test_fedadam_steps_like_torch_adam_on_the_turned_change() -> None:
    """FedAdam's server step against torch.optim.Adam (float64) fed the negated average
    change as its gradient, its lr decayed by the server's schedule each round: per element,
    only over the rounds some device trained it (its own bias-correction count); an element
    nobody trained in a round keeps value and moments, one never trained stays
    bit-identical."""
    w = Trained("w", (3,), "f32")
    two, one = Trained("w", (3,), "f32", None, (0, 1), 0), Trained("w", (3,), "f32", None,
                                                                    (0,), 0)
    start = np.array([0.5, -0.25, 2.0], np.float32)
    step = ServerStep("adam", lr=0.3, beta1=0.5, beta2=0.9, tau=1e-3, lr_decay=0.5)
    master = Master({"w": start}, {"w": w}, step)
    # element 0 is trained every round, element 1 in rounds 1 and 3: one torch parameter each
    ref = [torch.tensor([float(v)], dtype=torch.float64, requires_grad=True) for v in start]
    opts = [torch.optim.Adam([p], lr=step.lr, betas=(step.beta1, step.beta2), eps=step.tau)
            for p in ref]
    for r, (plan, move) in enumerate(((two, [0.1, -0.2]), (one, [0.05]), (two, [-0.3, 0.02]))):
        sent = master.sent()["w"]
        part = plan.take(sent) + np.array(move, np.float32)
        got = master.update([Reply({"w": part}, [plan], 4)])["w"]
        for k, e in enumerate(plan.channels):
            opts[e].param_groups[0]["lr"] = step.lr * step.lr_decay ** r  # the round's lr
            ref[e].grad = -torch.tensor([float(part[k]) - float(sent[e])], dtype=torch.float64)
            opts[e].step()
        want = np.array([float(p.detach()) for p in ref])
        assert np.allclose(master.values["w"], want, rtol=0, atol=AVG_TOL)
        assert np.array_equal(got, want.astype(np.float32))
    assert got[2] == start[2]  # never trained: bit-identical
    assert abs(got[1] - start[1]) > 0.1  # Adam's pace: about lr a round, whatever the change
    with pytest.raises(DataError, match="server-optimizer must be one of avgm, adam"):
        ServerStep("yogi")
    with pytest.raises(DataError, match="server-momentum is FedAvgM's"):
        ServerStep("adam", momentum=0.9)
    with pytest.raises(DataError, match="server-tau > 0"):
        ServerStep("adam", tau=0.0)
    with pytest.raises(DataError, match="server-lr-decay must be in"):
        ServerStep("adam", lr_decay=0.0)


def test_fedadam_steps_int8_codes_in_real_values() -> None:
    """FedAdam's first step moves an element by about lr in real value, whatever its code's
    worth: an int8 weight of scales 0.5 and 0.25 per output channel moves by lr / scale codes
    (2 and 4 codes at lr 1), where stepping its codes would move both by 1 code."""
    t = Trained("w", (2, 1), "s8", (0.5, 0.25))
    master = Master({"w": np.array([[10], [10]], np.int8)}, {"w": t},
                    ServerStep("adam", lr=1.0, tau=1e-6))
    sent = master.update([Reply({"w": np.array([[11], [9]], np.int8)}, [t], 3)])
    assert sent["w"].ravel().tolist() == [12, 6]
    assert master.values["w"].ravel() == pytest.approx([12.0, 6.0], abs=1e-4)


def test_codes_from_another_scale_are_rescaled_and_dtypes_must_agree() -> None:
    server = Trained("b", (2,), "s32", (0.5, 0.25))
    device = Trained("b", (2,), "s32", (1.0, 1.0))
    master = Master({"b": np.array([10, 10], np.int32)}, {"b": server})
    sent = master.update([Reply({"b": np.array([6, 7], np.int32)}, [device], 5)])
    assert sent["b"].tolist() == [12, 28]  # real 6.0 and 7.0 in the server's scales
    with pytest.raises(DataError, match="one --quantize"):
        master.update([Reply({"b": np.zeros(2, np.float32)},
                             [Trained("b", (2,), "f32")], 1)])


def test_splits_cover_every_sample_once_and_skew_labels() -> None:
    y = np.repeat(np.arange(10), 30)
    for scheme in ("iid", "labels:2", "dirichlet:0.3"):
        parts = split(y, 12, scheme, seed=1)
        assert len(parts) == 12
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(y)))
    for p in split(y, 12, "labels:2", seed=1):
        assert len(np.unique(y[p])) <= 2
    assert split(y, 12, "labels:2", seed=1)[3].tolist() == \
        split(y, 12, "labels:2", seed=1)[3].tolist()
    for bad in ("labels:0", "dirichlet:-1", "labels:x", "zipf"):
        with pytest.raises(OptionError):
            split(y, 12, bad)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    np.savez(d / "train.npz", x=x[:240], y=digits.target[:240])
    np.savez(d / "test.npz", x=x[1500:], y=digits.target[1500:])
    out = {}
    # the biases plan shares conv2's bias with the head plan (nothing trained feeds it in
    # either) and trains fc's bias without fc's weight (another function than the head's)
    (d / "biases.toml").write_text('[[layer]]\nname = "conv2"\nbias = true\n'
                                   '[[layer]]\nname = "fc"\nbias = true\n')
    for name, upd in (("bias", "bias"), ("last2", "last:2"), ("head", "tte:n_bias=2"),
                      ("biases", str(d / "biases.toml"))):
        out[name] = d / name
        build(DIGITS, out[name], Options(update=upd, sgd=SGDConfig(lr=0.05, momentum=0.9)))
    out["receiving"] = d / "receiving"  # the head, running the last2 class's conv2 weight
    build(DIGITS, out["receiving"], Options(update="tte:n_bias=2", receive="last:2",
                                            sgd=SGDConfig(lr=0.05, momentum=0.9)))
    out["data"] = d / "train.npz"
    out["test"] = d / "test.npz"
    return out


def test_describe_reads_the_plan_from_program_json(builds) -> None:
    plan, params = describe(Node(builds["bias"], builds["data"]))
    info = json.loads((builds["bias"] / "program.json").read_text())
    assert [t.name for t in plan] == [p["name"] for p in info["trainable"]]
    assert plan == trained_tensors(info)
    assert all(params[t.name].shape == t.shape for t in plan)


def test_a_round_sends_the_device_what_it_receives_when_it_changed(builds) -> None:
    """fleet.local: a device built with --receive runs the fleet's values of what it
    receives from its round on (a train_round loads them before training); values it already
    runs are not written to its flash again; what it trains is loaded as before."""
    from tinytrain.fleet.local import receive_tensors

    with np.load(builds["test"]) as f:
        x = f["x"][:1]
    with open_program(builds["receiving"]) as dev:
        assert [e["name"] for e in dev.info["received"]] == ["conv2_weight"]
        w = dev.get_received()["conv2_weight"]
        new = {"conv2_weight": (w * 1.5).astype(np.float32), "stem_bias": np.zeros(8)}
        assert not receive_tensors(dev, {"stem_bias": np.zeros(8)})  # nothing it receives
        before = dev.infer(x[0])
        assert receive_tensors(dev, new)
        assert np.array_equal(dev.get_received()["conv2_weight"], new["conv2_weight"])
        assert not np.array_equal(dev.infer(x[0]), before)
        assert not receive_tensors(dev, new)  # the same values: no second flash write
        assert dev.checkpoint() == 2  # the receive wrote checkpoint 1, nothing since
    node = Node(builds["receiving"], builds["data"])
    _, params = describe(node)
    r = train_round(node, {**params, **new}, None, 1)
    assert r.samples > 0 and {t.name for t in r.plan} == {"conv2_bias", "fc_weight",
                                                          "fc_bias"}


def test_rounds_carry_the_training_state(builds) -> None:
    """One device, two federated rounds (params and momentum handed back in between) trains
    exactly as the same device training the two rounds' sample orders without a break."""
    node = Node(builds["last2"], builds["data"], part=1, parts=4, seed=3)
    plan, start = describe(node)
    r1 = train_round(node, start, None, 1)
    assert r1.state and any(np.any(v != 0) for v in r1.state.values())  # momentum is live
    mid = {t.name: t.put(start[t.name], r1.parts[t.name]) for t in plan}
    r2 = train_round(node, mid, r1.state, 2)
    x, y = node.samples()
    with open_program(node.build) as dev:
        for server_round in (1, 2):
            train(dev, x, y, epochs=1, shuffle=True, seed=node.round_seed(server_round))
        direct = dev.get_params()
    for t in plan:
        assert np.array_equal(r2.parts[t.name], t.take(direct[t.name])), t.name
    r2_fresh = train_round(node, mid, None, 2)  # without the momentum: another run
    assert any(not np.array_equal(r2_fresh.parts[t.name], r2.parts[t.name]) for t in plan)


def test_mixed_plans_aggregate_and_leave_the_rest_alone(builds) -> None:
    nodes = [Node(builds["bias" if k % 2 else "last2"], builds["data"], part=k, parts=4,
                  partition="labels:3") for k in range(4)]
    kinds, start = {}, {}
    for n in nodes:
        plan, params = describe(n)
        for t in plan:
            kinds[t.name] = Trained(t.name, t.shape, t.dtype, t.scale)
            start.setdefault(t.name, params[t.name])
    master = Master(start, kinds)
    results = [train_round(n, master.sent(), None, 1) for n in nodes]
    sent = master.update(Reply(r.parts, r.plan, r.samples) for r in results)
    bias_only = {t.name for t in results[1].plan} - {t.name for t in results[0].plan}
    last2_only = {t.name for t in results[0].plan} - {t.name for t in results[1].plan}
    assert bias_only and last2_only
    for name in kinds:
        trainers = [r for r in results if any(t.name == name for t in r.plan)]
        ref = sum(r.samples * r.parts[name].astype(np.float64) for r in trainers) / \
            sum(r.samples for r in trainers)
        assert np.allclose(sent[name], ref.astype(np.float32), rtol=0, atol=1e-6), name


def test_program_json_names_the_trained_tensors_feeding_each_layer(builds) -> None:
    """The digits CNN is stem -> dw -> pw -> pool -> conv2 -> gap -> fc: a trained tensor's
    `upstream` is every trained tensor before its layer and its layer's other trained one."""
    def upstream(name: str) -> dict[str, list[str]]:
        info = json.loads((builds[name] / "program.json").read_text())
        return {p["name"]: p["upstream"] for p in info["trainable"]}

    assert upstream("head") == {"conv2_bias": [], "fc_bias": ["conv2_bias", "fc_weight"],
                                "fc_weight": ["conv2_bias", "fc_bias"]}
    assert upstream("last2") == {"conv2_bias": ["conv2_weight"],
                                 "conv2_weight": ["conv2_bias"],
                                 "fc_bias": ["conv2_bias", "conv2_weight", "fc_weight"],
                                 "fc_weight": ["conv2_bias", "conv2_weight", "fc_bias"]}
    assert upstream("biases") == {"conv2_bias": [], "fc_bias": ["conv2_bias"]}
    assert upstream("bias")["pw_bias"] == ["dw_bias", "stem_bias"]


def test_a_tensor_is_averaged_over_the_devices_whose_layers_feeding_it_match(builds) -> None:
    """Three device classes, two real rounds: each copy of a tensor is the sample-weighted
    average of exactly the devices that train it in the same context (written out here by
    hand from the plans), and `all` averages every tensor over every device again."""
    names = ("head", "biases", "last2")
    nodes = {k: Node(builds[names[k % 3]], builds["data"], part=k, parts=6,
                     partition="labels:3") for k in range(6)}
    plans = {k: describe(n)[0] for k, n in nodes.items()}
    shares = Shares(plans)
    # class -> tensor -> its copy's peers: conv2's bias is shared by head and biases (nothing
    # trained feeds it there), the rest is each class's own
    peers = {"head": {"conv2_bias": {"head", "biases"}, "fc_weight": {"head"},
                      "fc_bias": {"head"}},
             "biases": {"conv2_bias": {"head", "biases"}, "fc_bias": {"biases"}},
             "last2": {"conv2_weight": {"last2"}, "conv2_bias": {"last2"},
                       "fc_weight": {"last2"}, "fc_bias": {"last2"}}}
    for k, plan in plans.items():
        copies = shares.copies(plan)
        assert copies.keys() == peers[names[k % 3]].keys()
        for j, other in plans.items():
            for t in other:
                same = names[j % 3] in peers[names[k % 3]].get(t.name, set())
                assert (shares.key(other, t.name) == copies.get(t.name)) == same, (k, j, t)
    biases = shares.copies(plans[1])  # a tensor of several copies: name@k
    assert all(k.startswith(f"{n}@") for n, k in biases.items()) and len(biases) == 2
    assert shares.copies(plans[5])["conv2_weight"] == "conv2_weight"  # one copy: its name
    assert set(Shares(plans, "all").copies(plans[5]).values()) == \
        {"conv2_weight", "conv2_bias", "fc_weight", "fc_bias"}

    start, kinds = {}, {}
    for k, n in nodes.items():
        params = describe(n)[1]
        for t in plans[k]:
            key = shares.key(plans[k], t.name)
            start.setdefault(key, params[t.name])
            kinds[key] = Trained(key, t.shape, t.dtype, t.scale)
    master = Master(start, kinds)
    for rnd in (1, 2):
        sent = master.sent()
        mine = {k: {t.name: sent[shares.key(plans[k], t.name)] for t in plans[k]}
                for k in nodes}
        results = {k: train_round(n, mine[k], None, rnd) for k, n in nodes.items()}
        got = master.update(shares.reply(Reply(r.parts, r.plan, r.samples))
                            for r in results.values())
        for k in nodes:
            for name, peer in peers[names[k % 3]].items():
                who = [j for j in nodes if names[j % 3] in peer]
                ref = sum(results[j].samples * results[j].parts[name].astype(np.float64)
                          for j in who) / sum(results[j].samples for j in who)
                assert np.allclose(got[shares.key(plans[k], name)], ref, rtol=0,
                                   atol=AVG_TOL_F32), (k, name)
    with pytest.raises(OptionError, match="share must be one of matching, all"):
        Shares(plans, "some")


def test_the_servers_schedule_sets_each_rounds_lr_and_local_epochs(builds) -> None:
    """A round with the schedule's lr and epochs trains as the device does with that lr set
    over the link and that many epochs; without them, as built."""
    node = Node(builds["last2"], builds["data"], part=0, parts=4, seed=2)
    plan, start = describe(node)
    r = train_round(node, start, None, 3, lr=0.01, epochs=2)
    x, y = node.samples()
    with open_program(node.build) as dev:
        dev.sgd(lr=0.01)
        train(dev, x, y, epochs=2, shuffle=True, seed=node.round_seed(3))
        direct = dev.get_params()
    for t in plan:
        assert np.array_equal(r.parts[t.name], t.take(direct[t.name])), t.name
    assert r.samples == 2 * len(y)
    plain = train_round(node, start, None, 3)  # the build's lr 0.05, node.epochs 1
    assert plain.samples == len(y)
    assert any(not np.array_equal(plain.parts[t.name], r.parts[t.name]) for t in plan)
    assert Schedule(0.1, 0.5, 3).at(1) == {"lr": 0.1, "local-epochs": 3}
    assert Schedule(0.1, 0.5).at(3) == {"lr": 0.025} and Schedule().at(7) == {}
    # a decay alone scales each device's own build lr (a mixed fleet's classes keep theirs)
    assert Schedule(lr_decay=0.5).at(1) == {"lr-scale": 1.0}
    assert Schedule(lr_decay=0.5).at(3) == {"lr-scale": 0.25}
    info = {"sgd": {"lr": 0.2}}  # what a device sets: the fleet's lr, or its own scaled
    assert device_lr(Schedule(0.1, 0.5).at(2), info) == 0.05
    assert device_lr(Schedule(lr_decay=0.5).at(3), info) == 0.05
    assert device_lr(Schedule().at(3), info) is None
    for bad in ({"lr": 0.0}, {"lr": 0.1, "lr_decay": 1.5}, {"epochs": 0}, {"lr_decay": 0.0}):
        with pytest.raises(OptionError):
            Schedule(**bad)
    with pytest.raises(DataError, match="local epochs >= 1"):
        train_round(node, start, None, 1, epochs=0)


def test_received_tensors_need_one_average_and_the_trainers_layout() -> None:
    """A device built with --receive is sent another class's tensor only as that tensor's one
    average (share all) and in the same layout and scale; a tensor nobody trains is fine."""
    from tinytrain.fleet import records as rec
    from tinytrain.fleet.shares import check_received

    w = Trained("pw_weight", (16, 1, 1, 8), "s8", (0.01,) * 16)
    kinds = {"pw_weight": w}
    check_received(kinds, {"node 1": [w]}, "all")
    check_received(kinds, {"node 1": [Trained("stem_bias", (8,), "f32")]}, "matching")
    with pytest.raises(DataError, match="node 1 receives 'pw_weight'.*share='all'"):
        check_received(kinds, {"node 1": [w]}, "matching")
    with pytest.raises(DataError, match="same --calib and --weight-headroom"):
        check_received(kinds, {"node 1": [Trained("pw_weight", w.shape, "s8", (0.02,) * 16)]},
                       "all")
    # what a device can be sent travels beside its plan in the query's answer
    content = rec.plan_content({}, [], [w])
    assert rec.read_received(content) == [w]
    assert rec.read_received(rec.plan_content({}, [])) == []
