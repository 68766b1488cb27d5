/* Optimised kernels (see tt_kernels_opt.h): declarations. */
#ifndef TT_Q8_CONV_OPT_H
#define TT_Q8_CONV_OPT_H

#include <stdint.h>

/* int8 convolution / fully connected forward (tt_q8_conv_opt.c), bit-identical with
 * tt_conv2d_s8, tt_conv2d_s8_row and tt_dense_s8 for every input. Stack use < 1 KB. */

/* Pointwise: kh == kw == 1, groups == 1, stride 1, no padding, dilation 1; y is (h*w) x cout,
 * x is (h*w) x cin, w is cout x cin; b may be NULL. */
void tt_conv2d_s8_pw(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     const tt_conv_geom *g, const tt_q8_requant *q);
/* one output row oy of tt_conv2d_s8_pw (input row oy read from the ring x) */
void tt_conv2d_s8_pw_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);
/* Regular: groups == 1, any kh (<= TT_MAX_KH), kw, stride, padding, dilation. */
void tt_conv2d_s8_reg(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                      const tt_conv_geom *g, const tt_q8_requant *q);
void tt_conv2d_s8_reg_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                          const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);
/* Fully connected, as tt_dense_s8. */
extern __typeof__(tt_dense_s8) tt_dense_s8_opt;

#endif /* TT_Q8_CONV_OPT_H */
