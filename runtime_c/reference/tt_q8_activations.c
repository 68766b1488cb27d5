/*
 * int8 activations bit-exact with LiteRT's reference kernels: softmax (gemmlowp fixed-point
 * exp and reciprocal), table lookup (logistic), hard-swish (int16 fixed point), requantise.
 */
#include "tt_reference.h"

#include <stdint.h>

/* Q5.26 scaled input differences, Q12.19 sum of exps (as TFLite's reference softmax) */
#define TT_SOFTMAX_DIFF_BITS 5
#define TT_SOFTMAX_ACCUM_BITS 12

static int32_t softmax_exp(int32_t diff, int32_t in_mult, int32_t in_left_shift)
{
    return tt_exp_on_negative_values(tt_mbqm_gt1(diff, in_mult, in_left_shift),
                                     TT_SOFTMAX_DIFF_BITS);
}

void tt_softmax_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t depth, int32_t in_mult,
                   int32_t in_left_shift, int32_t diff_min)
{
    int32_t r, c;

    for (r = 0; r < rows; ++r) {
        const int8_t *xr = x + r * depth;
        int8_t *yr = y + r * depth;
        int32_t max_in_row = -128, sum = 0, num_bits_over_unit, recip, exponent;

        for (c = 0; c < depth; ++c) {
            if (xr[c] > max_in_row) max_in_row = xr[c];
        }
        for (c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)xr[c] - max_in_row;
            if (diff >= diff_min) {
                sum = tt_wrap_add(sum, tt_rdbpot(softmax_exp(diff, in_mult, in_left_shift),
                                                 TT_SOFTMAX_ACCUM_BITS));
            }
        }
        recip = tt_get_reciprocal(sum, TT_SOFTMAX_ACCUM_BITS, &num_bits_over_unit);
        exponent = num_bits_over_unit + 31 - 8;
        /* the exps are recomputed rather than stored: no int32 scratch row */
        for (c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)xr[c] - max_in_row;
            if (diff >= diff_min) {
                const int32_t e = softmax_exp(diff, in_mult, in_left_shift);
                yr[c] = tt_sat8(tt_rdbpot(tt_srdhm(recip, e), exponent) - 128, -128, 127);
            } else {
                yr[c] = -128;
            }
        }
    }
}

void tt_lut_s8(int8_t *y, const int8_t *x, int32_t n, const int8_t *lut)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] = lut[(uint8_t)x[i]];
    }
}

void tt_hard_swish_s8(int8_t *y, const int8_t *x, int32_t n, const tt_q8_hard_swish *p)
{
    const int16_t reluish_mult = (int16_t)p->reluish_mult;
    const int16_t out_mult = (int16_t)p->out_mult;
    int32_t i;

    for (i = 0; i < n; ++i) {
        /* input on a 2^7 finer scale, in int16 */
        const int16_t hires = (int16_t)(((int32_t)x[i] - p->in_zp) * 128);
        const int16_t preshift_out = tt_srdhm16(hires, out_mult);
        int16_t reluish = hires;
        int32_t out;

        /* relu6(x + 3) / 6 as an int16 fraction: rescale so that 3.0 maps to 32768,
         * saturating; the last bit of a left shift is applied after the multiply */
        if (p->reluish_exp > 0) reluish = tt_sat_shift_left16(reluish, p->reluish_exp - 1);
        reluish = tt_srdhm16(reluish, reluish_mult);
        if (p->reluish_exp > 0) reluish = tt_sat_shift_left16(reluish, 1);
        if (p->reluish_exp < 0) reluish = (int16_t)tt_rdbpot(reluish, -p->reluish_exp);
        reluish = (int16_t)(((int32_t)reluish + (1 << 15)) >> 1);
        out = tt_rdbpot(tt_sdhm16(reluish, preshift_out), -p->out_exp);
        /* TFLite adds the zero point in int16 (wraps) before clamping */
        out = (int16_t)(out + p->out_zp);
        y[i] = tt_sat8(out, -128, 127);
    }
}

void tt_requantize_s8(int8_t *y, const int8_t *x, int32_t n, int32_t in_zp, int32_t out_zp,
                      int32_t mult, int32_t shift)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        const int32_t v = tt_mbqm_double_rounding((int32_t)x[i] - in_zp, mult, shift);
        y[i] = tt_sat8(v + out_zp, -128, 127);
    }
}

void tt_lut_backward_s8(float *dx, const float *dy, const int8_t *x, int32_t n,
                        const float *dlut)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dx[i] = dy[i] * dlut[(uint8_t)x[i]];
    }
}
