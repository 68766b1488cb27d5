"""Real int8 TFLite models end to end: bit-exact forward against LiteRT's reference kernels,
training through the CLI with the loss going down, and the C build against the numpy
simulation of its own arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, tinytrain

from tinytrain.device.runner import HostProgram
from tinytrain.ops import interp
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model

litert = pytest.importorskip("ai_edge_litert.interpreter")

FIXTURES = ROOT / "tests" / "fixtures"
HELLO = FIXTURES / "hello_world_int8.tflite"
SPEECH = FIXTURES / "micro_speech_quantized.tflite"
# gradients are float sums in a different order in C and numpy: per-step losses of the two
# agree to float rounding, amplified a little by the int8 forward they feed
SIM_LOSS_RTOL = 1e-4
# a confident sample's loss is ~1 - p: C's float32 log-softmax vs numpy's float64 differ there
# by about one float32 ulp of 1
SIM_LOSS_ATOL = 2e-7
# a float-rounding difference can move a stochastic-rounding decision by one LSB
SIM_MAX_LSB, SIM_MAX_FLIPPED = 1, 0.01
SIM_MIN_FLIPS = 2  # ...but a small tensor (a bias) may see a flip or two in one step


def reference(model: Path) -> litert.Interpreter:
    it = litert.Interpreter(model_path=str(model),
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    return it


def run_ref(it, q: np.ndarray) -> np.ndarray:
    di, do = it.get_input_details()[0], it.get_output_details()[0]
    it.set_tensor(di["index"], q.reshape(di["shape"]))
    it.invoke()
    return it.get_tensor(do["index"]).reshape(-1)


def as_real(it, q: np.ndarray) -> np.ndarray:
    s, zp = it.get_input_details()[0]["quantization"]
    return (np.float32(s) * (q.astype(np.int32) - zp)).astype(np.float32)


def as_int8(it, y: np.ndarray) -> np.ndarray:
    """The C API returns real values scale * (q - zp); recover q exactly."""
    s, zp = it.get_output_details()[0]["quantization"]
    return (np.round(y.astype(np.float64) / s) + zp).astype(np.int64)


def speech_like(rng: np.random.Generator, n: int) -> np.ndarray:
    """Smooth 49x40 spectrogram-like int8 frames: a few bands with temporal envelopes."""
    t, f = np.arange(49)[:, None], np.arange(40)[None, :]
    out = []
    for _ in range(n):
        img = np.zeros((49, 40))
        for _ in range(rng.integers(1, 4)):
            c, w = rng.uniform(0, 40), rng.uniform(2, 8)
            t0, tw = rng.uniform(0, 49), rng.uniform(5, 25)
            img += rng.uniform(40, 200) * np.exp(-((f - c) / w) ** 2 - ((t - t0) / tw) ** 2)
        out.append(np.clip(img + rng.normal(0, 6, img.shape) - 128, -128, 127))
    return np.asarray(out).astype(np.int8)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("int8")
    out = {}
    for name, model, args in [("hello", HELLO, ["--loss", "mse", "--update", "none"]),
                              ("speech", SPEECH, ["--update", "none"])]:
        out[name] = root / name
        tinytrain("build", model, "--out", out[name], *args)
    return out


@pytest.mark.parametrize("name,model", [("hello", HELLO), ("speech", SPEECH)])
def test_forward_bit_exact_with_litert_reference(builds, name, model):
    it = reference(model)
    rng = np.random.default_rng(7)
    shape = it.get_input_details()[0]["shape"]
    qs = [rng.integers(-128, 128, size=shape).astype(np.int8) for _ in range(100)]
    if name == "hello":  # the model's real domain: x in [0, 2 pi]
        s, zp = it.get_input_details()[0]["quantization"]
        xs = np.linspace(0, 2 * np.pi, 100)
        qs += [np.clip(np.round(x / s) + zp, -128, 127).astype(np.int8).reshape(shape)
               for x in xs]
    else:
        qs += list(speech_like(rng, 60).reshape(60, *shape))
    with HostProgram(builds[name]) as p:
        for q in qs:
            ours = as_int8(it, p.infer(as_real(it, q).reshape(-1)))
            assert np.array_equal(ours, run_ref(it, q).astype(np.int64))


def test_numpy_simulation_is_bit_exact_forward():
    """The ops' numpy references are the C's oracle; they match LiteRT too."""
    g, _ = compile_model(SPEECH, Options(update="none"))
    it = reference(SPEECH)
    rng = np.random.default_rng(3)
    for q in speech_like(rng, 10):
        env = interp.initial_state(g)
        interp.run(g, env, {"input": q.reshape(-1)}, phases=("forward",))
        assert np.array_equal(env[g.meta["infer_output"]].reshape(-1).astype(np.int64),
                              run_ref(it, q).astype(np.int64))


def _sine(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 2 * np.pi, (n, 1)).astype(np.float32)
    np.savez(path, x=x, y=(0.6 * np.sin(x) + 0.3).astype(np.float32))  # a shifted task
    return path


def _speech(path: Path, n: int, seed: int) -> Path:
    """4 classes, each a fixed random band pattern plus noise (real values)."""
    rng = np.random.default_rng(seed)
    it = reference(SPEECH)
    protos = speech_like(np.random.default_rng(99), 4).astype(np.float32)
    y = rng.integers(0, 4, n)
    q = np.clip(protos[y] + rng.normal(0, 10, (n, 49, 40)), -128, 127).astype(np.int8)
    np.savez(path, x=as_real(it, q).reshape(n, 1960), y=y.astype(np.int64))
    return path


def _epoch_losses(metrics: Path) -> list[float]:
    rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    epochs = sorted({r["epoch"] for r in rows})
    return [float(np.mean([r["loss"] for r in rows if r["epoch"] == e])) for e in epochs]


@pytest.mark.parametrize("name,model,data,args", [
    ("hello_mse", HELLO, _sine, ["--loss", "mse", "--lr", "0.002"]),
    ("speech_bias", SPEECH, _speech, ["--update", "bias", "--lr", "0.05"]),
    ("speech_fc", SPEECH, _speech, ["--update", "last:1", "--lr", "0.01"]),
    ("speech_fc_shadow", SPEECH, _speech, ["--update", "last:1", "--lr", "0.01",
                                           "--rounding", "shadow"]),
])
def test_int8_training_lowers_the_loss(tmp_path, name, model, data, args):
    out = tmp_path / "b"
    tinytrain("build", model, "--out", out, *args)
    d = data(tmp_path / "d.npz", 200, 1)
    tinytrain("run", out, "--data", d, "--epochs", "4", "--shuffle", "--metrics",
              tmp_path / "m.jsonl")
    losses = _epoch_losses(tmp_path / "m.jsonl")
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("update,rounding,batch", [
    ("last:1", "stochastic", 1), ("last:1", "shadow", 1), ("bias", "truncate", 1),
    ("full", "stochastic", 2), ("full", "master", 1), ("last:1", "master", 2),
])
def test_c_training_matches_numpy_simulation(tmp_path, update, rounding, batch):
    _check_against_simulation(tmp_path, update, rounding, batch)


def test_partial_dense_on_an_hwc_input_gathers_flat_features(tmp_path):
    """micro_speech's FULLY_CONNECTED reads its (25, 20, 8) input flattened: a quarter of its
    4000 input features is 1000 features of that flat vector, not 1000 "channels" of the last
    axis (which once planned a (25, 20, 1000) buffer of 500,000 bytes)."""
    plan = tmp_path / "plan.toml"
    plan.write_text("[[layer]]\nindex = 1\nweight = 0.25\nbias = false\n")
    g, p = compile_model(SPEECH, Options(update=str(plan)))
    gathered = [t for n in g.nodes if n.op == "gather_channels" for t in n.outputs]
    assert [g.t(t).shape for t in gathered] == [(1000,)]
    assert p.arena_size < 40_000, p.arena_size
    _check_against_simulation(tmp_path, str(plan), "stochastic", 1)


def _check_against_simulation(tmp_path, update: str, rounding: str, batch: int) -> None:
    args = ["--update", update, "--rounding", rounding, "--batch", str(batch), "--lr", "0.005"]
    out = tmp_path / "b"
    tinytrain("build", SPEECH, "--out", out, *args)
    d = np.load(_speech(tmp_path / "d.npz", 24, 2))
    g, _ = compile_model(SPEECH, Options(update=update, sgd=SGDConfig(
        lr=0.005, batch=batch, rounding=rounding)))
    env, pending = interp.initial_state(g), 0
    changed = 0
    with HostProgram(out) as p:
        for x, y in zip(d["x"], d["y"]):
            loss_c, _, _ = p.train(x, np.array([y], np.int32))
            loss_np, pending = interp.train(g, env, x, np.array([y]), pending)
            assert loss_c == pytest.approx(loss_np, rel=SIM_LOSS_RTOL, abs=SIM_LOSS_ATOL)
            # compare each step's update, then continue both from the C state so a single
            # rounding flip cannot snowball through later steps
            for name, v in p.get_params().items():
                diff = np.abs(v.astype(np.int64) - env[name].astype(np.int64))
                assert diff.max() <= SIM_MAX_LSB, name
                assert (diff > 0).sum() <= max(SIM_MIN_FLIPS, SIM_MAX_FLIPPED * diff.size), name
                changed += int((v != env[name]).sum() == 0 and (v != g.t(name).data).any())
                env[name] = v.copy()
    assert changed > 0  # the run did train
