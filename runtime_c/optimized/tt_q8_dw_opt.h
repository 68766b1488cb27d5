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
 * arithmetic. Square 3x3, 5x5 and 7x7 kernels at stride 1 or 2 may run through a zero-point
 * padded copy of their input rows instead (all pixels in pairs, see dw_strip_ok), and 3x3,
 * 5x5 and 7x7 at stride 1 through rows of 16-bit lanes, one channel at a time with two taps
 * per SMLAD (see dw_plane_ok). Stack: under 2.5 KB. */
void tt_conv2d_s8_dw(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     const tt_conv_geom *g, const tt_q8_requant *q);
/* one output row oy, input rows read from a ring (as tt_conv2d_s8_row) */
void tt_conv2d_s8_dw_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);

/* Frozen weights and bias: the per-channel constants the kernels above derive on every call
 * (repacked weights, requantisation constants, start values), made once into a pack of
 * tt_conv2d_s8_dw_pack_words(g) words, per 4-channel group: the group's constants (23 words:
 * per channel SMMLAR multiplier and rounding constant, shifts, start values without and with
 * the input offset folded in, the byte-broadcast activation range, the fast-path flag), then
 * per tap the doubled weights of channels (0, 2) and (1, 3) as 16-bit lanes. The code
 * generator writes it into flash (tinytrain/quant/dw_pack.py computes the same words); the
 * _pk kernels copy a group's words instead of deriving them, which row streaming would do on
 * every output row. A pack must come from the same w, b, g and q (NULL: derive per call). */
int32_t tt_conv2d_s8_dw_pack_words(const tt_conv_geom *g);
void tt_conv2d_s8_dw_pack(int32_t *pack, const int8_t *w, const int32_t *b,
                          const tt_conv_geom *g, const tt_q8_requant *q);
void tt_conv2d_s8_dw_pk(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                        const tt_conv_geom *g, const tt_q8_requant *q, const int32_t *pack);
void tt_conv2d_s8_dw_pk_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                            const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q,
                            const int32_t *pack);

/* Elementwise add of two same-shape contiguous tensors of n elements (no broadcast, so not
 * tt_add_s8's signature: the code generator picks it by geometry, not by name). Fast
 * path for LiteRT's constants (left_shift 20, out_shift in [-22, -1], int8 offsets and
 * activation range; on Helium cores tt_q8_add_mve.h's, out_shift down to -31); anything else
 * runs the reference arithmetic. */
void tt_add_s8_opt(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                   const tt_q8_add *p);
/* row r of a same-shape add, operands and result in rings (as tt_add_s8_row) */
void tt_add_s8_row_opt(const tt_rows *y, const tt_rows *a, const tt_rows *b, int32_t r,
                       const tt_q8_add *p);

#endif /* TT_Q8_DW_OPT_H */
