"""Optimised builds (the default, `--kernels optimized`) against `--kernels reference` builds of
the same models on the STM32F746 twin, over every layer geometry the benchmark networks use.

int8 forward is integer arithmetic, so predictions are bit-identical and so is the first
step's loss (nothing trained yet). The int8 networks' channel-streamed fp32 backward rounds one
product differently (tt_cs_pw_input_s8_opt), so their later losses differ by rounding only,
carried through the updates. The fp32 kernels (tt_f32_opt.c, tt_pooled_opt.c) keep the
reference's order per element, so fp32 models train bit for bit alike, except the plain SGD
update of a dense layer (no momentum, no weight decay), which rounds lr*dy before multiplying
by x: with weight decay they train bit for bit, without it within a rounding per update. The
kernels one by one, over random shapes too, are tested in tests/test_kernels_opt_*.py."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from tests.torch_models import MLP, AifesCNN, DigitsCNN, export
from tests.tte_schemes import MAIN_SCHEME, NETWORKS, SCHEMES
from tinytrain.device.runner import open_program

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")

STEPS = 4
# int8 models: after a step, an fp32 gradient one rounding apart can move a stochastically
# rounded int8 weight by one LSB, which moves the next losses by far less than this.
INT8_LOSS_RTOL = 2e-2
FP32_STEPS = 20
# plain SGD: a rounding per weight update apart, carried through 20 steps of training
# (measured: losses 2e-7 relative, parameters at most 9e-8 apart), far below a wrong kernel.
FP32_PLAIN_RTOL = 1e-4
FP32_PLAIN_ATOL = 1e-6  # parameters near zero, where the relative difference means nothing


def _train_and_infer(build, x, y, params: bool = False):
    with open_program(build, qemu=True) as dev:
        outs = [dev.infer(xi) for xi in x[:2]]
        losses = [dev.train(xi, y[i:i + 1])[0] for i, xi in enumerate(x)]
        if params:
            return losses, outs, dev.get_params()
    return losses, outs


def _builds(cli, model, tmp_path, *extra):
    for k in ("reference", "optimized"):
        cli("build", model, "--out", tmp_path / k, "--board", "stm32f746", "--kernels", k,
            *extra)
    code = (tmp_path / "optimized" / "model.c").read_text()
    assert "_opt(" in code  # the optimised build really calls optimised kernels
    assert "_opt(" not in (tmp_path / "reference" / "model.c").read_text()
    return tmp_path / "reference", tmp_path / "optimized"


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_int8_tte_network_optimized_matches_reference(name, tmp_path, cli, tte_onnx):
    model = tte_onnx[name]
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (2, 3, 128, 128)).astype(np.float32))
    x = rng.uniform(0, 1, (STEPS, 128, 128, 3)).astype(np.float32)
    y = rng.integers(0, 10, STEPS).astype(np.int32)
    ref, opt = _builds(cli, model, tmp_path, "--update", SCHEMES[name, MAIN_SCHEME[name]],
                       "--quantize", "int8", "--calib", tmp_path / "calib.npz")
    # frozen depthwise convs read their constants from a flash pack (tinytrain/quant/dw_pack.py)
    assert "tt_conv2d_s8_dw_pk" in (opt / "model.c").read_text()
    if name.startswith("MobileNetV2"):  # blocks 13, 14: int8 1x1 updates 4 rows per pass
        assert "tt_cs_pw_weight_sgd_s8_g_opt(" in (opt / "model.c").read_text()
    info = json.loads((opt / "program.json").read_text())
    x = x.reshape(STEPS, *info["input_shape_ir"])
    ref_losses, ref_out = _train_and_infer(ref, x, y)
    opt_losses, opt_out = _train_and_infer(opt, x, y)
    for a, b in zip(opt_out, ref_out, strict=True):
        np.testing.assert_array_equal(a, b)  # int8 forward: bit for bit
    assert opt_losses[0] == ref_losses[0]
    np.testing.assert_allclose(opt_losses, ref_losses, rtol=INT8_LOSS_RTOL)


def _fp32_runs(cls, tmp_path, cli, *sgd):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(cls(), tmp_path / "m.onnx")
    rng = np.random.default_rng(3)
    ref, opt = _builds(cli, model, tmp_path, "--lr", "0.05", *sgd)
    if cls is DigitsCNN:
        assert "_pooled_f32_opt(" in (opt / "model.c").read_text()
    info = json.loads((opt / "program.json").read_text())
    x = rng.uniform(0, 1, (FP32_STEPS, *info["input_shape_ir"])).astype(np.float32)
    y = rng.integers(0, 10, FP32_STEPS).astype(np.int32)
    return _train_and_infer(ref, x, y, params=True), _train_and_infer(opt, x, y, params=True)


@pytest.mark.parametrize("cls", [AifesCNN, DigitsCNN, MLP], ids=lambda c: c.__name__)
def test_fp32_model_optimized_matches_reference(cls, tmp_path, cli):
    """20 steps bit for bit with weight decay: predictions, losses and every trained parameter
    (DigitsCNN's pooled conv takes tt_pooled_opt.c, AifesCNN's max pools tt_f32_opt.c's)."""
    (ref_losses, ref_out, ref_params), (opt_losses, opt_out, opt_params) = _fp32_runs(
        cls, tmp_path, cli, "--weight-decay", "1e-4")
    for a, b in zip(opt_out, ref_out, strict=True):
        np.testing.assert_array_equal(a, b)
    assert opt_losses == ref_losses
    assert ref_params.keys() == opt_params.keys()
    for k in ref_params:
        np.testing.assert_array_equal(opt_params[k], ref_params[k], err_msg=k)
    assert opt_losses[-1] != opt_losses[0]


@pytest.mark.parametrize("cls", [AifesCNN, MLP], ids=lambda c: c.__name__)
def test_fp32_plain_sgd_optimized_follows_reference(cls, tmp_path, cli):
    """Plain SGD: the dense layers' update rounds lr*dy first (one multiply per weight), so
    20 steps end a few roundings apart, and the first step's loss is the same."""
    (ref_losses, ref_out, ref_params), (opt_losses, opt_out, opt_params) = _fp32_runs(
        cls, tmp_path, cli)
    for a, b in zip(opt_out, ref_out, strict=True):
        np.testing.assert_array_equal(a, b)  # nothing trained yet
    assert opt_losses[0] == ref_losses[0]
    np.testing.assert_allclose(opt_losses, ref_losses, rtol=FP32_PLAIN_RTOL)
    differ = 0
    for k in ref_params:
        np.testing.assert_allclose(opt_params[k], ref_params[k], rtol=FP32_PLAIN_RTOL,
                                   atol=FP32_PLAIN_ATOL, err_msg=k)
        differ += not np.array_equal(opt_params[k], ref_params[k])
    assert differ > 0  # the optimised update really ran its own rounding
