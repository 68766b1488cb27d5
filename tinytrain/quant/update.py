"""numpy references of the int8/int32 parameter updates in runtime_c/reference/tt_q8_core.c.

A real-valued step `delta` (in LSBs of the parameter) is applied in one of these ways:
- stochastic: q -= floor(delta + u), u uniform in [0, 1) from a counter-based hash, so small
  steps survive in expectation and runs are reproducible from the seed;
- shadow: an extra byte per trained element holds 1/256-LSB fractions (a 16-bit master weight
  for just the trained slice, whose floor the forward reads);
- master: the shadow's update, but the forward and the input gradient read the whole 16-bit
  master 256 w + s (see `master_values`) where the weight is trained whole, not its floor;
- truncate: TTE's `int8 -= float`, which silently drops every step below one LSB.
"""

from __future__ import annotations

import numpy as np

MODES = {"stochastic": 0, "shadow": 1, "truncate": 2}  # the C kernels' update modes
# --rounding choices -> update mode: master updates as shadow does and differs in the reads
ROUNDINGS = {"stochastic": "stochastic", "shadow": "shadow", "master": "shadow",
             "truncate": "truncate"}
DELTA_LIMIT = np.float32(16777216.0)  # |delta| clamp that keeps int conversions in range
M32 = 0xFFFFFFFF
# shadow steps beyond this many LSB saturate the master anyway; C clamps them so that
# step * 256 stays an int32
SHADOW_STEP_LIMIT = np.float32(512.0)


def uniform(salt: int, step: int, idx: np.ndarray) -> np.ndarray:
    """murmur3 finaliser over (salt, step, element index) -> float32 in [0, 1)."""
    idx = np.asarray(idx, np.uint64)
    h = np.uint64(salt ^ ((step * 0x9E3779B9) & M32))
    h = h ^ ((idx * np.uint64(0x85EBCA6B)) & np.uint64(M32))
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & np.uint64(M32)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & np.uint64(M32)
    h ^= h >> np.uint64(16)
    return (h >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C roundf (half away from zero), exact for float32 inputs."""
    v = np.asarray(v, np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _clamp_delta(d: np.ndarray) -> np.ndarray:
    d = np.asarray(d, np.float32)
    d = np.where(np.isnan(d), np.float32(0), d)
    return np.clip(d, -DELTA_LIMIT, DELTA_LIMIT).astype(np.float32)


def update_s8(w: np.ndarray, delta: np.ndarray, mode: str, salt: int, step: int,
              idx: np.ndarray, shadow: np.ndarray | None = None) -> np.ndarray:
    """New int8 values; `shadow` (uint8, same shape) is updated in place in shadow mode."""
    w32 = np.asarray(w, np.int64)
    d = _clamp_delta(delta)
    if mode == "stochastic":
        v = w32 - np.floor((d + uniform(salt, step, idx)).astype(np.float32)).astype(np.int64)
    elif mode == "shadow":
        assert shadow is not None
        d = np.clip(d, -SHADOW_STEP_LIMIT, SHADOW_STEP_LIMIT)
        f = w32 * 256 + shadow.astype(np.int64) - _roundf(d * np.float32(256)).astype(np.int64)
        f = np.clip(f, -127 * 256, 127 * 256)
        shadow[...] = (f & 255).astype(np.uint8)
        return ((f - (f & 255)) // 256).astype(np.int8)
    else:
        t = (w32.astype(np.float32) - d).astype(np.float32)
        v = np.trunc(np.clip(t, -127, 127)).astype(np.int64)
    return np.clip(v, -127, 127).astype(np.int8)


def master_values(w: np.ndarray, shadow: np.ndarray) -> np.ndarray:
    """The 16-bit master weights 256 w + s (int64) that --rounding master reads."""
    return np.asarray(w, np.int64) * 256 + np.asarray(shadow, np.int64)


def master_real(w: np.ndarray, shadow: np.ndarray) -> np.ndarray:
    """The master in LSBs of w, w + s / 256, as float32 (exact: 16 significant bits)."""
    return master_values(w, shadow).astype(np.float32) * np.float32(1.0 / 256.0)


def update_s32(b: np.ndarray, delta: np.ndarray, mode: str, salt: int, step: int,
               idx: np.ndarray) -> np.ndarray:
    b64 = np.asarray(b, np.int64)
    d = _clamp_delta(delta)
    if mode == "stochastic":
        v = b64 - np.floor((d + uniform(salt, step, idx)).astype(np.float32)).astype(np.int64)
    elif mode == "shadow":
        v = b64 - _roundf(d).astype(np.int64)
    else:
        v = b64 - np.trunc(d).astype(np.int64)
    return np.clip(v, -(2**31), 2**31 - 1).astype(np.int32)
