/* Helium (MVE) kernels for the fp32 backward of int8 layers: declarations. Compiled only where
 * the core has MVE's float lanes (TT_MVE_F32, tt_mve.h); the channel-stream kernels of
 * tt_f32_bwd_opt.c call them there, and run their own loops (the same arithmetic) elsewhere. */
#ifndef TT_F32_MVE_H
#define TT_F32_MVE_H

#include <stdint.h>

#include "tt_mve.h"

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
#endif

#endif /* TT_F32_MVE_H */
