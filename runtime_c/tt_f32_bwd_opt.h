/* Optimised kernels (see tt_kernels_opt.h): declarations. */
#ifndef TT_F32_BWD_OPT_H
#define TT_F32_BWD_OPT_H

#include <stdint.h>

/* ---- channel streaming (tt_f32_bwd_opt.c): the tt_cs_* kernels of tt_channel_stream.c,
 * same signatures and preconditions. Bit-identical to them except tt_cs_pw_input_s8_opt
 * (dy * (w_scale[o] * w[o, c]): rounding differs, the summation order does not). */
void tt_cs_pw_input_s8_opt(float *plane, const float *dy, const int8_t *w, const float *w_scale,
                           int32_t n, int32_t cout, int32_t cin, int32_t c);
void tt_cs_pw_input_f32_opt(float *plane, const float *dy, const float *w, int32_t n,
                            int32_t cout, int32_t cin, int32_t c);
void tt_cs_mask_opt(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                    int32_t c);
void tt_cs_q8_clamp_opt(float *out, const float *in, const int8_t *y, int32_t n, int32_t ch,
                        int32_t c, int32_t lo, int32_t hi);
void tt_cs_clip_f32_opt(float *out, const float *in, const float *x, int32_t n, int32_t ch,
                        int32_t c, float lo, float hi);
void tt_cs_dw_input_s8_opt(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                           const tt_conv_geom *g, int32_t c);
void tt_cs_dw_input_f32_opt(float *dx, const float *dy, const float *w, const tt_conv_geom *g,
                            int32_t c);
void tt_cs_dw_weight_sgd_s8_opt(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                float x_scale, int32_t x_zp, const tt_conv_geom *g, int32_t c,
                                const float *step, const tt_q8_update *u);
void tt_cs_dw_weight_sgd_f32_opt(float *w, float *m, const float *dy, const float *x,
                                 const tt_conv_geom *g, int32_t c, float lr, float momentum,
                                 float wd);
void tt_cs_bias_sgd_s32_opt(int32_t *b, const float *dy, int32_t n, int32_t c, const float *step,
                            const tt_q8_update *u);
void tt_cs_bias_sgd_f32_opt(float *b, float *m, const float *dy, int32_t n, int32_t c, float lr,
                            float momentum, float wd);
void tt_cs_pw_input_add_s8_opt(float *dx, const float *dy, const int8_t *w,
                               const float *w_scale, int32_t n, int32_t dx_c,
                               const int32_t *idx, int32_t k, int32_t c);
void tt_cs_pw_input_add_f32_opt(float *dx, const float *dy, const float *w, int32_t n,
                                int32_t dx_c, const int32_t *idx, int32_t k, int32_t c);
void tt_cs_pw_weight_sgd_s8_opt(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                float x_scale, int32_t x_zp, int32_t n, int32_t k, int32_t w_cin,
                                const int32_t *idx, int32_t c, const float *step,
                                const tt_q8_update *u);
void tt_cs_x_float_s8_opt(float *xf, const int8_t *x, int32_t n, int32_t x_zp);
void tt_cs_pw_weight_sgd_s8f_opt(int8_t *w, uint8_t *shadow, const float *dy, const float *xf,
                                 float x_scale, int32_t n, int32_t k, int32_t w_cin,
                                 const int32_t *idx, int32_t c, const float *step,
                                 const tt_q8_update *u);
void tt_cs_pw_weight_sgd_f32_opt(float *w, float *m, const float *dy, const float *x, int32_t n,
                                 int32_t k, int32_t w_cin, const int32_t *idx, int32_t c,
                                 float lr, float momentum, float wd);

#endif /* TT_F32_BWD_OPT_H */
