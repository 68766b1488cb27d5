"""TFLite/gemmlowp fixed-point arithmetic in numpy, bit-exact with runtime_c/reference/tt_q8.h.

Multipliers are computed here at compile time (double precision, as TFLite's Prepare does);
the C only ever sees the resulting (int32 multiplier, shift) pairs.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def tflite_round(v: float) -> int:
    """std::round: half away from zero (Python's round() is half-to-even)."""
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """Real multiplier -> (q31 multiplier, shift) with m ~= q * 2^(shift - 31) (TFLite)."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = tflite_round(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return int(q_fixed), int(shift)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def srdhm(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul of int32 values (as int64 arrays)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    v = ab + nudge
    d = np.int64(1) << 31
    q = np.where(v >= 0, v // d, -((-v) // d))  # C division truncates toward zero
    overflow = (a == b) & (a == INT32_MIN)
    return np.where(overflow, INT32_MAX, q).astype(np.int64)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    x = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def mbqm(x: np.ndarray, mult: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier, elementwise with broadcasting.

    One rounding of the 64-bit product, round(x * mult / 2^(31 - shift)), ties up: what
    LiteRT's reference FULLY_CONNECTED does (its wheels define TFLITE_SINGLE_ROUNDING; found on
    hello_world_int8.tflite, where double rounding is one LSB off near ties). CONV_2D,
    DEPTHWISE_CONV_2D, MUL, int8 requantise and MEAN still round twice in that build
    (gemmlowp's SRDHM then a rounding shift): they use `mbqm_double_rounding`. Each choice was
    measured against LiteRT on one-op models (tests/test_q8_ops.py, tests/test_tflite_import.py).
    """
    total = 31 - np.asarray(shift, np.int64)
    prod = np.asarray(x, np.int64) * np.asarray(mult, np.int64)
    return (prod + (np.int64(1) << (total - 1))) >> total


def mbqm_double_rounding(x: np.ndarray, mult: np.ndarray | int,
                         shift: np.ndarray | int) -> np.ndarray:
    """gemmlowp's MultiplyByQuantizedMultiplier (SRDHM then rounding shift); not LiteRT's."""
    shift = np.asarray(shift, np.int64)
    left = np.where(shift > 0, shift, 0)
    right = np.where(shift > 0, 0, -shift)
    return rounding_divide_by_pot(srdhm(_wrap32(np.asarray(x, np.int64) << left), mult), right)


def quantize(x: np.ndarray, scale: float, zp: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    """TFLite AffineQuantize: round(x / scale) + zp in float32, half away from zero."""
    v = (np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64)  # exact widening
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(r.astype(np.int64) + zp, lo, hi).astype(np.int8)


def dequantize(q: np.ndarray, scale, zp) -> np.ndarray:
    """real = scale * (q - zp) in float32 (TFLite Dequantize)."""
    return (np.float32(scale) * (np.asarray(q, np.int32) - np.asarray(zp, np.int32))
            .astype(np.float32)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# gemmlowp fixed-point transcendental helpers and the Prepare-time helpers of the int8 softmax,
# logistic, hard-swish, add and mean kernels (bit-exact with the same-named C in tt_q8.h).
# Values are int32 raw fixed-point numbers held in int64 arrays; "Qn" below means n integer bits.


def cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """C integer division (truncates toward zero) of int64 arrays."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def wrap32(x: np.ndarray | int) -> np.ndarray:
    """Two's-complement int32 wrap-around (gemmlowp adds raw values without saturation)."""
    return _wrap32(np.asarray(x, np.int64))


def mul_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT: saturating left shift or rounding right."""
    x = np.asarray(x, np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX,
                    np.where(x < -threshold, INT32_MIN, x << exponent)).astype(np.int64)


def rounding_half_sum(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    s = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    return cdiv(s + np.where(s >= 0, 1, -1), 2)


def count_leading_zeros32(x: np.ndarray) -> np.ndarray:
    flat = np.asarray(x, np.int64).reshape(-1) & 0xFFFFFFFF
    return np.array([32 - int(v).bit_length() for v in flat], np.int64).reshape(np.shape(x))


def _exp_quarter_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for Q0 a in [-1/4, 0): Taylor series around -1/8 (gemmlowp)."""
    exp_minus_one_eighth, one_third = 1895147668, 715827883
    x = wrap32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = rounding_divide_by_pot(
        wrap32(srdhm(wrap32(rounding_divide_by_pot(x4, 2) + x3), one_third) + x2), 1)
    return wrap32(exp_minus_one_eighth + srdhm(exp_minus_one_eighth, wrap32(x + poly)))


# exp(-2^k) in Q0 for the barrel shifter of exp_on_negative_values, k = -2 .. 4
_EXP_POT = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
            (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values: Q`integer_bits` a <= 0 -> Q0 exp(a)."""
    a = np.asarray(a, np.int64)
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_quarter_interval(mul_by_pot(a_mod, integer_bits))
    remainder = wrap32(a_mod - a)
    for k, mult in _EXP_POT:
        if integer_bits > k:
            bit = (remainder & (1 << (frac + k))) != 0
            result = np.where(bit, srdhm(result, mult), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result).astype(np.int64)


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """gemmlowp: Q0 a in [0, 1) -> Q0 1/(1+a), by three Newton-Raphson steps in Q2."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = wrap32(1515870810 + srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 * d
    for _ in range(3):
        one_minus = wrap32((1 << 29) - srdhm(half_denominator, x))
        x = wrap32(x + mul_by_pot(srdhm(x, one_minus), 2))
    return mul_by_pot(x, 1)


def get_reciprocal(x: np.ndarray, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetReciprocal: (Q0 raw of 1/x scaled into [0.5, 1), num_bits_over_unit)."""
    x = np.asarray(x, np.int64)
    headroom_plus_one = count_leading_zeros32(x)
    shifted = ((x << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    return (one_over_one_plus_x_for_x_in_0_1(wrap32(shifted)),
            x_integer_digits - headroom_plus_one)


def mbqm_greater_than_one(x: np.ndarray, mult: int, left_shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplierGreaterThanOne: SRDHM(x << left_shift, mult)."""
    return srdhm(wrap32(np.asarray(x, np.int64) << left_shift), mult)


def quantize_multiplier_greater_than_one(m: float) -> tuple[int, int]:
    """QuantizeMultiplierGreaterThanOne: frexp-based, shift >= 0 and not capped at 30."""
    q, shift = math.frexp(m)
    q_fixed = tflite_round(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < 0:
        raise ValueError(f"multiplier {m} is not greater than one")
    return int(q_fixed), int(shift)


def quantize_multiplier_smaller_than_one_exp(m: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: (multiplier, left_shift <= 0). Applied with
    mbqm_double_rounding (RDBPOT(SRDHM(x, m), -left_shift)) in LiteRT."""
    q, shift = quantize_multiplier(m)
    if shift > 0:
        raise ValueError(f"multiplier {m} is not smaller than one")
    return q, shift


def calculate_input_radius(integer_bits: int, left_shift: int, total_bits: int = 31) -> int:
    """Largest input magnitude that does not saturate after the rescale (TFLite)."""
    v = ((1 << integer_bits) - 1) * (1 << (total_bits - integer_bits)) / (1 << left_shift)
    return int(math.floor(v))


def f32(v: float) -> float:
    """A scale or option as LiteRT holds it: a float32 value (as a Python float)."""
    return float(np.float32(v))


def round_half_away_f32(v: np.ndarray) -> np.ndarray:
    """roundf() on float32 values, exactly (floor(|v| + 0.5) in float32 is not: 0.49999997)."""
    v = np.asarray(v, np.float32)
    t = np.trunc(v)
    frac = np.abs(v - t)  # exact in float32
    return (t + np.where(frac >= np.float32(0.5), np.sign(v), np.float32(0))).astype(np.float32)


def activation_range(act: str, scale: float, zero_point: int, lo: int = -128,
                     hi: int = 127) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: a fused activation ("NONE", "RELU", "RELU6",
    "RELU_N1_TO_1") as an int8 clamp range on the output; f/scale and roundf in float32."""
    def q(real: float) -> int:
        return zero_point + int(round_half_away_f32(np.float32(real) / np.float32(scale)))

    if act == "RELU":
        return max(lo, q(0.0)), hi
    if act == "RELU6":
        return max(lo, q(0.0)), min(hi, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(lo, q(-1.0)), min(hi, q(1.0))
    if act == "NONE":
        return lo, hi
    raise ValueError(f"unsupported fused activation {act}")


def scale_zp(q) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor QuantParams, the scale as the float32 LiteRT holds."""
    if len(q.scale) != 1:
        raise ValueError("expected per-tensor quantisation")
    return f32(q.scale[0]), int(q.zero_point[0])
