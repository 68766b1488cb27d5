/*
 * int8 fixed-point helpers: TFLite / gemmlowp reference arithmetic, bit-exact with
 * tinytrain/quant/fixedpoint.py. Multipliers and shifts are computed at compile time.
 */
#ifndef TT_Q8_H
#define TT_Q8_H

#include <stdint.h>

static inline int32_t tt_srdhm(int32_t a, int32_t b) {
    if (a == b && a == INT32_MIN) return INT32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

static inline int32_t tt_rdbpot(int32_t x, int32_t exponent) {
    const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* MultiplyByQuantizedMultiplier: x * mult * 2^(shift - 31) with one rounding (ties up), as
 * LiteRT's reference kernels do (built with TFLITE_SINGLE_ROUNDING). shift is in [-31, 30]. */
static inline int32_t tt_mbqm(int32_t x, int32_t mult, int32_t shift) {
    const int32_t total = 31 - shift;
    const int64_t prod = (int64_t)x * (int64_t)mult + ((int64_t)1 << (total - 1));
    return (int32_t)(prod >> total);
}

/* gemmlowp's double-rounding variant (SRDHM then a rounding shift), for kernels that use it */
static inline int32_t tt_mbqm_double_rounding(int32_t x, int32_t mult, int32_t shift) {
    const int32_t left = shift > 0 ? shift : 0;
    const int32_t right = shift > 0 ? 0 : -shift;
    return tt_rdbpot(tt_srdhm((int32_t)((uint32_t)x << left), mult), right);
}

static inline int8_t tt_sat8(int32_t v, int32_t lo, int32_t hi) {
    return (int8_t)(v < lo ? lo : (v > hi ? hi : v));
}

/* --rounding master (tt_q8_master.c): an accumulator over 16-bit master weights 256 w + s (bias
 * included, times 256) back to the int8 layer's units, rounding half up, saturated to int32;
 * >> of a negative int64 is arithmetic on every compiler tinytrain supports */
static inline int32_t tt_q8_master_round(int64_t acc) {
    const int64_t v = (acc + 128) >> 8;
    return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : (int32_t)v);
}

/* ---- gemmlowp fixed-point helpers for the int8 softmax / hard-swish kernels
 * (tt_q8_ops.h); same names without tt_ in tinytrain/quant/fixedpoint.py. Raw int32 values;
 * gemmlowp adds fixed-point numbers without saturation, hence the wrapping adds. ---- */

static inline int32_t tt_wrap_add(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}

static inline int32_t tt_wrap_sub(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a - (uint32_t)b);
}

/* SaturatingRoundingMultiplyByPOT: saturating left shift, or rounding right shift */
static inline int32_t tt_mul_by_pot(int32_t x, int32_t exponent) {
    if (exponent > 0) {
        const int32_t threshold = (int32_t)(((int64_t)1 << (31 - exponent)) - 1);
        if (x > threshold) return INT32_MAX;
        if (x < -threshold) return INT32_MIN;
        return (int32_t)((uint32_t)x << exponent);
    }
    return exponent < 0 ? tt_rdbpot(x, -exponent) : x;
}

static inline int32_t tt_rounding_half_sum(int32_t a, int32_t b) {
    const int64_t s = (int64_t)a + (int64_t)b;
    return (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
}

static inline int32_t tt_clz32(uint32_t x) {
    int32_t n = 0;
    if (x == 0u) return 32;
    while ((x & 0x80000000u) == 0u) {
        x <<= 1;
        ++n;
    }
    return n;
}

/* exp(a) for Q0 a in [-1/4, 0): Taylor series around -1/8 */
static inline int32_t tt_exp_quarter_interval(int32_t a) {
    const int32_t exp_minus_one_eighth = 1895147668, one_third = 715827883;
    const int32_t x = tt_wrap_add(a, 1 << 28);
    const int32_t x2 = tt_srdhm(x, x);
    const int32_t x3 = tt_srdhm(x2, x);
    const int32_t x4 = tt_srdhm(x2, x2);
    const int32_t poly = tt_rdbpot(
        tt_wrap_add(tt_srdhm(tt_wrap_add(tt_rdbpot(x4, 2), x3), one_third), x2), 1);
    return tt_wrap_add(exp_minus_one_eighth,
                       tt_srdhm(exp_minus_one_eighth, tt_wrap_add(x, poly)));
}

/* exp(a) for a <= 0 with `integer_bits` integer bits -> Q0 (gemmlowp exp_on_negative_values) */
static inline int32_t tt_exp_on_negative_values(int32_t a, int32_t integer_bits) {
    static const int32_t exp_pot[7] = {1672461947, 1302514674, 790015084, 290630308,
                                       39332535, 720401, 242}; /* exp(-2^k), k = -2..4 */
    const int32_t frac = 31 - integer_bits;
    const int32_t quarter = (int32_t)1 << (frac - 2);
    const int32_t a_mod = (a & (quarter - 1)) - quarter;
    const int32_t remainder = tt_wrap_sub(a_mod, a);
    int32_t result = tt_exp_quarter_interval(tt_mul_by_pot(a_mod, integer_bits));
    int32_t k;
    for (k = -2; k <= 4; ++k) {
        if (integer_bits > k && (remainder & ((int32_t)1 << (frac + k))) != 0) {
            result = tt_srdhm(result, exp_pot[k + 2]);
        }
    }
    if (integer_bits > 5 && a < -((int32_t)1 << (36 - integer_bits))) result = 0;
    return a == 0 ? INT32_MAX : result;
}

/* Q0 a in [0, 1) -> Q0 1/(1+a): Newton-Raphson in Q2 (gemmlowp) */
static inline int32_t tt_one_over_one_plus_x(int32_t a) {
    const int32_t half_denominator = tt_rounding_half_sum(a, INT32_MAX);
    int32_t x = tt_wrap_add(1515870810, tt_srdhm(half_denominator, -1010580540));
    int32_t i;
    for (i = 0; i < 3; ++i) {
        const int32_t one_minus = tt_wrap_sub((int32_t)1 << 29, tt_srdhm(half_denominator, x));
        x = tt_wrap_add(x, tt_mul_by_pot(tt_srdhm(x, one_minus), 2));
    }
    return tt_mul_by_pot(x, 1);
}

/* TFLite GetReciprocal: Q0 1/x rescaled into [0.5, 1), and its exponent */
static inline int32_t tt_get_reciprocal(int32_t x, int32_t x_integer_digits,
                                        int32_t *num_bits_over_unit) {
    const int32_t headroom_plus_one = tt_clz32((uint32_t)x);
    *num_bits_over_unit = x_integer_digits - headroom_plus_one;
    return tt_one_over_one_plus_x(
        (int32_t)(((uint32_t)x << headroom_plus_one) - ((uint32_t)1 << 31)));
}

/* MultiplyByQuantizedMultiplierGreaterThanOne: SRDHM(x << left_shift, mult) */
static inline int32_t tt_mbqm_gt1(int32_t x, int32_t mult, int32_t left_shift) {
    return tt_srdhm((int32_t)((uint32_t)x << left_shift), mult);
}

/* int16 gemmlowp SaturatingRoundingDoublingHighMul */
static inline int16_t tt_srdhm16(int16_t a, int16_t b) {
    const int32_t ab = (int32_t)a * (int32_t)b;
    if (a == b && a == INT16_MIN) return INT16_MAX;
    return (int16_t)((ab + (ab >= 0 ? (1 << 14) : (1 - (1 << 14)))) / (1 << 15));
}

/* int16 SaturatingDoublingHighMul: as above but rounding toward zero (ARM SQDMULH) */
static inline int16_t tt_sdhm16(int16_t a, int16_t b) {
    if (a == b && a == INT16_MIN) return INT16_MAX;
    return (int16_t)(((int32_t)a * (int32_t)b) / (1 << 15));
}

static inline int16_t tt_sat_shift_left16(int16_t v, int32_t amount) {
    const int64_t r = (int64_t)v * ((int64_t)1 << amount);
    return (int16_t)(r > INT16_MAX ? INT16_MAX : (r < INT16_MIN ? INT16_MIN : r));
}

#endif
