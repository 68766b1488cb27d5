/* Optimised kernels (see tt_kernels_opt.h): declarations. */
#ifndef TT_Q8_DW_OPT_H
#define TT_Q8_DW_OPT_H

#include <stdint.h>

/* ---- int8 depthwise conv and residual add (tt_q8_dw_opt.c) ----
 * Bit-identical with tt_conv2d_s8 / tt_conv2d_s8_row and tt_add_s8 / tt_add_s8_row.
 *
 * Depthwise: precondition groups == cin == cout (depth multiplier 1), dh == dw == 1. Weights
 * (c, kh, kw, 1), HWC activations, b may be NULL. Any stride and padding; kernels up to 7
 * taps wide, kh <= 8 and kh * kw <= 49 run the optimised path (interior pixels of 3x3 stride
 * 1, 2 and 5x5 stride 1 two at a time), other kernel sizes (and in_offset outside
 * [-255, 255]) the reference kernel. Channels beyond a multiple of 4 use the reference
 * arithmetic. Stack: under 1 KB. */
void tt_conv2d_s8_dw(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     const tt_conv_geom *g, const tt_q8_requant *q);
/* one output row oy, input rows read from a ring (as tt_conv2d_s8_row) */
void tt_conv2d_s8_dw_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);

/* Elementwise add of two same-shape contiguous tensors of n elements (no broadcast, so not
 * tt_add_s8's signature: the code generator picks it by geometry, not by name). Fast
 * path for LiteRT's constants (left_shift 20, out_shift in [-22, -1], int8 offsets and
 * activation range); anything else runs the reference arithmetic. */
void tt_add_s8_opt(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                   const tt_q8_add *p);
/* row r of a same-shape add, operands and result in rings (as tt_add_s8_row) */
void tt_add_s8_row_opt(const tt_rows *y, const tt_rows *a, const tt_rows *b, int32_t r,
                       const tt_q8_add *p);

#endif /* TT_Q8_DW_OPT_H */
