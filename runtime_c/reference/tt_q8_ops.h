/*
 * int8 forward kernels other than conv / dense, bit-exact with the LiteRT reference kernels
 * (BUILTIN_REF): softmax, logistic, hard-swish, add, mul, average / max pool, mean over H and
 * W, pad, concatenation, requantise; plus the int8 max-pool backward. Included from
 * tt_kernels.h (after tt_conv_geom). Conventions as tt_kernels.h: outputs first, per-sample
 * HWC tensors; every multiplier, shift and table is computed at compile time by the op's
 * prepare() in tinytrain/ops/<op>_q8.py, exactly as TFLite's Prepare does.
 */
#ifndef TT_Q8_OPS_H
#define TT_Q8_OPS_H

#include <stdint.h>

#include "tt_q8.h"

/* ---- activations (tt_q8_activations.c) ---- */

/* Softmax over the last axis (rows x depth), output scale 1/256, zero point -128. Inputs
 * more than -diff_min below the row maximum contribute nothing. */
void tt_softmax_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t depth, int32_t in_mult,
                   int32_t in_left_shift, int32_t diff_min);
/* y[i] = lut[(uint8_t)x[i]]: LOGISTIC (the 256-entry table comes from prepare) */
void tt_lut_s8(int8_t *y, const int8_t *x, int32_t n, const int8_t *lut);

typedef struct {
    int32_t in_zp, out_zp;
    int32_t reluish_mult;  /* int16 fixed-point multiplier */
    int32_t reluish_exp;   /* its power-of-two exponent (either sign) */
    int32_t out_mult;      /* int16 fixed-point multiplier */
    int32_t out_exp;       /* <= 0 */
} tt_q8_hard_swish;

void tt_hard_swish_s8(int8_t *y, const int8_t *x, int32_t n, const tt_q8_hard_swish *p);
/* int8 -> int8 QUANTIZE: y = clamp(MultiplyByQuantizedMultiplier(x - in_zp) + out_zp) */
void tt_requantize_s8(int8_t *y, const int8_t *x, int32_t n, int32_t in_zp, int32_t out_zp,
                      int32_t mult, int32_t shift);

/* ---- fp32 backward of int8 ops (gradients w.r.t. real values) ---- */
/* dx = dy * dlut[(uint8_t)x]: tabulated derivative of an elementwise int8 function */
void tt_lut_backward_s8(float *dx, const float *dy, const int8_t *x, int32_t n,
                        const float *dlut);
/* dx (contiguous, `shape`) = dy * scale * (other - zp), other read through strides ostr */
void tt_mul_backward_s8(float *dx, const float *dy, const int8_t *other,
                        const int32_t shape[4], const int32_t ostr[4], float scale,
                        int32_t zp);

/* ---- broadcasting add / mul over rank-4 shapes (tt_q8_binary.c) ----
 * y is contiguous with shape `shape`; a and b are read through element strides. */
typedef struct {
    int32_t a_offset, b_offset;   /* -zero points of the inputs */
    int32_t out_offset;           /* output zero point */
    int32_t left_shift;           /* 20 */
    int32_t a_mult, a_shift;      /* input rescales (shift <= 0) */
    int32_t b_mult, b_shift;
    int32_t out_mult, out_shift;  /* output rescale (shift <= 0) */
    int32_t act_min, act_max;     /* fused activation range */
} tt_q8_add;

typedef struct {
    int32_t a_offset, b_offset, out_offset;
    int32_t out_mult, out_shift;
    int32_t act_min, act_max;
} tt_q8_mul;

void tt_add_s8(int8_t *y, const int8_t *a, const int8_t *b, const int32_t shape[4],
               const int32_t astr[4], const int32_t bstr[4], const tt_q8_add *p);
/* row r of a same-shape ADD, operands and result in rings (row streaming) */
void tt_add_s8_row(const tt_rows *y, const tt_rows *a, const tt_rows *b, int32_t r,
                   const tt_q8_add *p);
void tt_mul_s8(int8_t *y, const int8_t *a, const int8_t *b, const int32_t shape[4],
               const int32_t astr[4], const int32_t bstr[4], const tt_q8_mul *p);

/* ---- pooling (tt_q8_pool.c); input and output share scale and zero point ---- */
/* average of the in-bounds taps (padding excluded), rounded half away from zero */
void tt_avg_pool2d_s8(int8_t *y, const int8_t *x, const tt_conv_geom *g, int32_t act_min,
                      int32_t act_max);
void tt_max_pool2d_s8(int8_t *y, const int8_t *x, const tt_conv_geom *g, int32_t act_min,
                      int32_t act_max);
/* dx (float) = dy routed to the first maximal in-bounds tap of each window (recomputed) */
void tt_max_pool2d_backward_s8(float *dx, const float *dy, const int8_t *x,
                               const tt_conv_geom *g);

/* MEAN over rows (H*W) of x (rows x c): sum(x - in_zp) rescaled by (mult, shift), which
 * include 1/rows (LiteRT's QuantizedMeanOrSum), plus out_zp */
void tt_mean_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t c, int32_t in_zp,
                int32_t out_zp, int32_t mult, int32_t shift);

/* ---- layout (tt_q8_layout.c) ---- */
/* y (out_shape) = x (in_shape) padded with `value` (the output zero point) */
void tt_pad_s8(int8_t *y, const int8_t *x, const int32_t in_shape[4],
               const int32_t out_shape[4], const int32_t before[4], int32_t value);
/* copy x (outer x inner_x) into y (outer x inner_y) at column offset `offset` */
void tt_concat_part_s8(int8_t *y, const int8_t *x, int32_t outer, int32_t inner_x,
                       int32_t inner_y, int32_t offset);

#endif /* TT_Q8_OPS_H */
