"""Compile-time quantisation constants shared by the TFLite importer and the quantiser, and the
real values of a build's trained int8/int32 parameters."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.quant.fixedpoint import quantize_multiplier

BOUNDED_BELOW = ("RELU", "RELU6", "RELU_N1_TO_1")
BOUNDED_ABOVE = ("RELU6", "RELU_N1_TO_1")


def grad_range(act: str, lo: int, hi: int) -> dict[str, int]:
    """Where the backward masks the gradient: at the fused activation's own bounds (ReLU's 0,
    ReLU6's 6), but not where int8 merely saturates. Masking plain saturation (the usual
    fake-quant STE) kills the gradient of a saturated logit for good and training stalls."""
    return {"grad_lo": lo if act in BOUNDED_BELOW else -129,
            "grad_hi": hi if act in BOUNDED_ABOVE else 128}


def channel_multiplier(real: float) -> tuple[int, int]:
    """A conv/dense output channel's (multiplier, shift) for the real multiplier `real`, as
    quantize_multiplier gives it, except that a zero multiplier (a dead channel: BN-folded
    weights ~1e-20 underflow it) gets shift -1 instead of 0. Every int8 kernel gives such a
    channel out_offset whatever its shift (SRDHM(a, 0) = 0), and the optimised conv kernels'
    fast requantisation wants a right shift of at least 1 (runtime_c/optimized)."""
    m, s = quantize_multiplier(real)
    return (0, -1) if m == 0 else (m, s)


def requant(x_scale: float, x_zp: int, w_scales: tuple[float, ...], y_scale: float, y_zp: int,
            act: str, act_range: tuple[int, int]) -> dict:
    """conv2d_q8 / dense_q8 attrs: per-channel multipliers computed in double from the
    float32 scales, as TFLite's PopulateConvolutionQuantizationParams does."""
    mult, shift = [], []
    for ws in w_scales:
        m, s = channel_multiplier(float(x_scale) * float(ws) / float(y_scale))
        mult.append(m)
        shift.append(s)
    lo, hi = act_range
    return {"in_offset": -int(x_zp), "out_offset": int(y_zp), "act_min": int(lo),
            "act_max": int(hi), **grad_range(act, lo, hi), "mult": tuple(mult),
            "shift": tuple(shift), "x_scale": float(x_scale), "x_zp": int(x_zp),
            "w_scale": tuple(float(s) for s in w_scales), "y_scale": float(y_scale),
            "y_zp": int(y_zp)}


def symmetric_per_channel(w: np.ndarray) -> tuple[np.ndarray, tuple[float, ...]]:
    """int8 weights in [-127, 127] with one float32 scale per output channel (axis 0)."""
    flat = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    scales = np.where(flat > 0, flat / 127.0, 1.0).astype(np.float32)
    s = scales.reshape((-1,) + (1,) * (w.ndim - 1)).astype(np.float64)
    q = np.clip(np.round(w.astype(np.float64) / s), -127, 127).astype(np.int8)
    return q, tuple(float(v) for v in scales)


def affine_from_range(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) covering [lo, hi] and exactly representing 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zp


def real_values(p: dict[str, Any], v: np.ndarray) -> np.ndarray:
    """A parameter as the fp32 source model holds it: a `--quantize int8` build's int8
    weights and int32 biases times their (per output channel) scales, zero points being 0.
    `p` is the parameter's record in program.json's `trainable`."""
    if p.get("dtype", "f32") == "f32" or not p.get("scale"):
        return v.astype(np.float32)
    scale = np.asarray(p["scale"], np.float64)
    if scale.size > 1:
        scale = scale.reshape((-1,) + (1,) * (v.ndim - 1))
    return (v.astype(np.float64) * scale).astype(np.float32)


def with_masters(info: dict[str, Any], params: dict[str, np.ndarray],
                 state: dict[str, np.ndarray] | None, exact: bool) -> dict[str, np.ndarray]:
    """The weights a `--rounding master` build's forward reads, for export: each int8 weight
    with its shadow byte s from the saved training state, as w + s/256 (float, `exact`: an
    fp32 export holds it whole) or rounded to the nearest int8 (an int8 export). Weights
    without a saved shadow, and every other build, are returned as they are."""
    masters = info.get("master_read") or {}
    if not masters or not state:
        return params
    out = dict(params)
    for w, sh in masters.items():
        if w not in params or sh not in state or np.shape(state[sh]) != np.shape(params[w]):
            continue
        m = np.asarray(params[w], np.int64) * 256 + np.asarray(state[sh], np.int64)
        out[w] = (m.astype(np.float32) / np.float32(256) if exact
                  else np.clip((m + 128) >> 8, -127, 127).astype(np.int8))
    return out
