"""The run-time SGD scalars of the generated model (prefix_set_lr, _set_momentum,
_set_weight_decay): a changed rate trains as PyTorch does with that rate, the build's rate
set back is bit-identical to never calling the setter, an int8 model at twice its build's
rate is bit-identical to a build at twice the rate, and bad values are refused unchanged."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import onnx
import pytest

from tests.library_helpers import (
    DIGITS_ONNX,
    LIB_C,
    STEPS,
    build,
    compile_host,
    digits,
    f32_bits,
    host_losses,
    model_defines,
    run,
    write_samples,
)

torch = pytest.importorskip("torch")
from tests.test_torch_parity import LOSS_RTOL, WEIGHT_ATOL, torch_param_for, torch_train  # noqa: E402
from tests.torch_models import MLP, export  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
ERR_RANGE, ERR_UNSUPPORTED = 3, 4  # PREFIX_ERR_RANGE / PREFIX_ERR_UNSUPPORTED in model.h
# A changed rate must move the losses far beyond the PyTorch tolerance, or the comparison
# would not tell the two rates apart.
DISTINCT = 100 * LOSS_RTOL


def _program(build_dir, work, prefix: str, x, y):
    """tests/c/library/train.c against this build's model.c, with these samples."""
    work.mkdir(parents=True, exist_ok=True)
    write_samples(work / "samples.h", "samples", build_dir, x, y)
    sources = [LIB_C / "train.c", build_dir / "model.c",
               *sorted((build_dir / "runtime").glob("*.c"))]
    return compile_host(work / "train", sources, [work, build_dir, build_dir / "runtime"],
                        model_defines(prefix, "model.h"))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """An MLP built with momentum 0.9 (so it has momentum buffers), its program and data."""
    d = tmp_path_factory.mktemp("lr_mlp")
    torch.manual_seed(3)
    model = MLP()
    path = export(copy.deepcopy(model), d / "mlp.onnx")
    b = build(path, d / "build", "--prefix", "mlp", "--lr", "0.05", "--momentum", "0.9")
    x, y = digits(STEPS, MLP.input_shape)
    return {"model": model, "onnx": path, "build": b, "x": x, "y": y,
            "exe": _program(b, d / "prog", "mlp", x, y)}


def _torch_reference(m, lr, momentum, wd, batch=1):
    model = copy.deepcopy(m["model"])
    model.train()
    losses = torch_train(model, m["x"], m["y"].astype(np.int64), batch, lr, momentum, wd)
    return losses, dict(model.named_parameters())


def _check_weights(m, run_params, torch_params):
    info = json.loads((m["build"] / "program.json").read_text())
    graph = onnx.load(str(m["onnx"]))
    for p in info["trainable"]:
        dtype, raw = run_params[p["name"]]
        assert dtype == 0  # MLP_DTYPE_F32
        mine = np.frombuffer(raw, np.float32).reshape(p["shape"])
        theirs = torch_params[torch_param_for(graph, p)].detach().numpy()
        np.testing.assert_allclose(mine, theirs, atol=WEIGHT_ATOL, rtol=0, err_msg=p["name"])


def test_build_rate_set_back_is_bit_identical(mlp):
    plain = run(mlp["exe"])
    assert plain.losses == host_losses(mlp["build"], mlp["x"], mlp["y"])
    again = run(mlp["exe"], "0.05", "0.9", "0")
    assert again.sets == {"lr": (0, f32_bits([0.05])[0]), "momentum": (0, f32_bits([0.9])[0]),
                          "wd": (0, 0)}
    assert again.losses == plain.losses and again.params == plain.params


@pytest.mark.parametrize("lr,momentum,wd", [(0.02, 0.9, 0.0), (0.12, 0.5, 1e-3)])
def test_changed_scalars_train_as_pytorch_with_them(lr, momentum, wd, mlp):
    got = run(mlp["exe"], str(lr), str(momentum), str(wd))
    assert [v[0] for v in got.sets.values()] == [0, 0, 0]
    ref, params = _torch_reference(mlp, lr, momentum, wd)
    np.testing.assert_allclose(got.loss_values(), ref, rtol=LOSS_RTOL, atol=0)
    _check_weights(mlp, got.params, params)
    build_rate = run(mlp["exe"]).loss_values()  # the build's scalars: clearly another curve
    assert np.max(np.abs(build_rate - ref) / np.abs(ref)) > DISTINCT


def test_fp32_setters_refuse_bad_values_unchanged(mlp):
    s = run(mlp["exe"], "check").sets
    lr0 = f32_bits([0.05])[0]
    for what in ("lr_negative", "lr_nan", "lr_inf"):
        assert s[what] == (ERR_RANGE, lr0), what
    assert s["lr_zero"] == (0, 0) and s["lr_back"] == (0, lr0)
    assert s["momentum_one"] == (ERR_RANGE, f32_bits([0.9])[0])
    assert s["momentum_nan"] == (ERR_RANGE, f32_bits([0.9])[0])
    assert s["momentum_half"] == (0, f32_bits([0.5])[0])
    assert s["wd_negative"] == (ERR_RANGE, 0) and s["wd_inf"] == (ERR_RANGE, 0)
    assert s["wd_small"] == (0, f32_bits([1e-3])[0]) and s["wd_zero"] == (0, 0)


def test_batch_update_without_momentum_buffers(tmp_path):
    """Batch 4 (tt_sgd_f32 once per batch), built without momentum: a new lr and weight
    decay train as PyTorch does; a momentum needs the buffers this build does not have."""
    torch.manual_seed(4)
    model = MLP()
    path = export(copy.deepcopy(model), tmp_path / "mlp.onnx")
    b = build(path, tmp_path / "build", "--prefix", "mlp", "--lr", "0.05", "--batch", "4")
    x, y = digits(STEPS, MLP.input_shape)
    exe = _program(b, tmp_path / "prog", "mlp", x, y)
    checks = run(exe, "check").sets
    assert checks["momentum_half"] == (ERR_UNSUPPORTED, 0)
    assert checks["momentum_zero"] == (0, 0) and checks["wd_small"][0] == 0
    m = {"model": model, "onnx": path, "build": b, "x": x, "y": y}
    got = run(exe, "0.1", "-", "0.002")
    ref, params = _torch_reference(m, 0.1, 0.0, 0.002, batch=4)
    np.testing.assert_allclose(got.loss_values(), ref, rtol=LOSS_RTOL, atol=0)
    _check_weights(m, got.params, params)


INT8_CONFIGS = {  # the int8 update kernels, each reading its per-channel steps
    "fused": [],  # tt_conv2d/dense_weight_sgd_s8, tt_bias_sgd_s32 (batch 1)
    "batch_shadow": ["--batch", "4", "--rounding", "shadow"],  # tt_sgd_s8 / tt_sgd_s32
    "partial_fused": ["--update", "tte:n_bias=3,idx=1-3,ratio=0.5-1", "--rounding",
                      "shadow"],  # + tt_dw_weight_sgd_partial_s8
    "partial_batch": ["--update", "tte:n_bias=3,idx=1-3,ratio=0.5-1", "--batch", "2"],
    # + tt_sgd_rows_s8
}


@pytest.mark.parametrize("config", sorted(INT8_CONFIGS))
def test_int8_twice_the_rate_is_a_build_at_twice_the_rate(config, tmp_path):
    """lr_scale = 2.0f exactly, and 2 * float32(lr / scale) is float32(2 lr / scale): the
    same update constants, so the same int8 weights bit for bit."""
    x, y = digits(STEPS, (1, 8, 8))
    calib, _ = digits(64, (1, 8, 8), start=600)
    np.savez(tmp_path / "calib.npz", x=calib)
    common = ["--prefix", "dq", "--quantize", "int8", "--calib", str(tmp_path / "calib.npz"),
              *INT8_CONFIGS[config]]
    one = build(DIGITS_ONNX, tmp_path / "lr1", "--lr", "0.05", *common)
    two = build(DIGITS_ONNX, tmp_path / "lr2", "--lr", "0.1", *common)
    exe_one = _program(one, tmp_path / "p1", "dq", x, y)
    exe_two = _program(two, tmp_path / "p2", "dq", x, y)
    want = run(exe_two)
    got = run(exe_one, "0.1")
    assert got.sets["lr"] == (0, f32_bits([0.1])[0])
    assert got.losses == want.losses and got.params == want.params
    assert {d for d, _ in got.params.values()} <= {1, 2}  # DQ_DTYPE_S8 / DQ_DTYPE_S32
    plain = run(exe_one)
    assert plain.params != want.params, "the doubled rate changed nothing"
    assert run(exe_one, "0.05").params == plain.params
    assert plain.losses == host_losses(one, x, y)
    s = run(exe_one, "check").sets
    lr0 = f32_bits([0.05])[0]
    assert all(s[k] == (ERR_RANGE, lr0) for k in ("lr_negative", "lr_nan", "lr_inf"))
    assert s["momentum_half"] == (ERR_UNSUPPORTED, 0) and s["momentum_zero"] == (0, 0)
    assert s["wd_small"] == (ERR_UNSUPPORTED, 0) and s["wd_zero"] == (0, 0)
