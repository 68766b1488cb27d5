/* Helium (MVE) kernels for the fp32 backward of int8 layers: declarations. Compiled only where
 * the core has MVE's float lanes (TT_MVE_F32, tt_mve.h); the channel-stream kernels of
 * tt_f32_bwd_opt.c call them there, and run their own loops (the same arithmetic) elsewhere. */
#ifndef TT_F32_MVE_H
#define TT_F32_MVE_H

#include <stdint.h>

#include "tt_mve.h"
#include "tt_reference.h"

#if TT_MVE_F32
/* 1x1 input gradient, planes c0 .. c0 + cnt - 1 (cnt <= 4) as tt_cs_pw_input_s8_g_opt */
void tt_cs_pw_input_s8_mve(float *planes, int32_t ps, const float *dy, const int8_t *w,
                           const float *w_scale, int32_t n, int32_t cout, int32_t cin,
                           int32_t c0, int32_t cnt);
/* the 1x1 sinks of channels c0 .. c0 + cnt - 1 (cnt <= 4) into contiguous outputs, as
 * tt_cs_pw_input_add_s8_g_opt with idx == NULL */
void tt_cs_pw_input_add_s8_mve(float *dx, const float *dy, int32_t ds, const int8_t *w,
                               const float *w_scale, int32_t n, int32_t dx_c, int32_t k,
                               int32_t c0, int32_t cnt);
/* the 1x1 weight gradient's sums from float x, as pw_wgrad_f32: acc[j] = sum over p < n of
 * dy[p] * x[p * k + j], j < nb */
void tt_cs_pw_wgrad_f32_mve(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                            int32_t nb);
/* four rows' sums from int8 x, as pw_wgrad4_s8: acc[i * as + j], row i from dy + i * ds */
void tt_cs_pw_wgrad4_s8_mve(float *acc, int32_t as, const float *dy, int32_t ds,
                            const int8_t *x, int32_t x_zp, int32_t n, int32_t k, int32_t nb);
/* one row's sums from int8 x, as pw_wgrad_s8: acc[j], j < nb */
void tt_cs_pw_wgrad_s8_mve(float *acc, const float *dy, const int8_t *x, int32_t x_zp,
                           int32_t n, int32_t k, int32_t nb);
/* a weight row's stochastic rounding, as cs_sr_row (the same bytes) */
void tt_cs_sr_row_s8_mve(int8_t *row, const float *acc, float x_scale, float s, uint32_t key,
                         uint32_t idx0, int32_t n);
/* one channel's depthwise input gradient on a small plane at stride 1, 3x3 (int8 weights wq
 * with scale sc, or fp32 wfl), as dw_input_small: 1 if done, 0 if not its geometry or the
 * weights are not finite */
int tt_cs_dw_input_mve(float *dx, const float *dy, const int8_t *wq, const float *wfl, float sc,
                       const tt_conv_geom *g);
#endif

#endif /* TT_F32_MVE_H */
