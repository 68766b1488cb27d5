/* The channel-streamed 1x1 backward's sums with fused multiply-adds (TT_F32_FMA, see
 * tt_reference.h), in portable C: what a core without Helium's float lanes runs in a fused
 * build (a host build mirroring an M55's, `--fp32-mac fused`). Each is the reference's loop
 * with its tt_cs_fmac, bit for bit, where the optimised kernels group or split the work
 * otherwise (the source's dy * (scale * w), the weight sums apart from their update); the
 * sinks need no copy: the reference kernels themselves serve fused builds. */
#ifndef TT_F32_FMA_H
#define TT_F32_FMA_H

#include <stdint.h>

#include "tt_reference.h"

#if TT_F32_FMA
/* 1x1 input gradient, planes c0 .. c0 + cnt - 1 (ps floats apart): plane_j[p] = sum over o
 * ascending of dy[p, o] * (w_scale[o] * w[o, c0 + j]), from 0 (tt_cs_pw_input_s8_opt's
 * grouping, within PW_SRC_TOL of the reference's) */
void tt_cs_pw_input_s8_fma(float *planes, int32_t ps, const float *dy, const int8_t *w,
                           const float *w_scale, int32_t n, int32_t cout, int32_t cin,
                           int32_t c0, int32_t cnt);
/* `rows` weight rows' sums from int8 x: acc[i * as + j] = sum over p of dy_i[p] *
 * (x[p * k + j] - x_zp), dy_i = dy + i * ds, j < nb */
void tt_cs_pw_wgrad_s8_fma(float *acc, int32_t as, const float *dy, int32_t ds,
                           const int8_t *x, int32_t x_zp, int32_t n, int32_t k, int32_t nb,
                           int32_t rows);
/* the sums from float x: acc[j] = sum over p of dy[p] * x[p * k + j], j < nb */
void tt_cs_pw_wgrad_f32_fma(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                            int32_t nb);
#endif

#endif /* TT_F32_FMA_H */
