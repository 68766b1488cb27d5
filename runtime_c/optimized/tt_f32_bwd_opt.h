/* Optimised kernels (see tt_kernels_opt.h): declarations. */
#ifndef TT_F32_BWD_OPT_H
#define TT_F32_BWD_OPT_H

#include <stdint.h>

/* ---- channel streaming (tt_f32_bwd_opt.c): the tt_cs_* kernels of tt_channel_stream.c,
 * same signatures and preconditions. Bit-identical to them except tt_cs_pw_input_s8_opt
 * (dy * (w_scale[o] * w[o, c]): rounding differs, the summation order does not). */
extern __typeof__(tt_cs_pw_input_s8) tt_cs_pw_input_s8_opt;
extern __typeof__(tt_cs_pw_input_s8_g) tt_cs_pw_input_s8_g_opt;
extern __typeof__(tt_cs_pw_input_f32) tt_cs_pw_input_f32_opt;
extern __typeof__(tt_cs_mask) tt_cs_mask_opt;
extern __typeof__(tt_cs_q8_clamp) tt_cs_q8_clamp_opt;
extern __typeof__(tt_cs_clip_f32) tt_cs_clip_f32_opt;
extern __typeof__(tt_cs_dw_input_s8) tt_cs_dw_input_s8_opt;
extern __typeof__(tt_cs_dw_input_f32) tt_cs_dw_input_f32_opt;
extern __typeof__(tt_cs_dw_weight_sgd_s8) tt_cs_dw_weight_sgd_s8_opt;
extern __typeof__(tt_cs_dw_weight_sgd_f32) tt_cs_dw_weight_sgd_f32_opt;
extern __typeof__(tt_cs_bias_sgd_s32) tt_cs_bias_sgd_s32_opt;
extern __typeof__(tt_cs_bias_sgd_f32) tt_cs_bias_sgd_f32_opt;
extern __typeof__(tt_cs_pw_input_add_s8) tt_cs_pw_input_add_s8_opt;
extern __typeof__(tt_cs_pw_input_add_s8_g) tt_cs_pw_input_add_s8_g_opt;
extern __typeof__(tt_cs_pw_input_add_f32) tt_cs_pw_input_add_f32_opt;
extern __typeof__(tt_cs_pw_weight_sgd_s8) tt_cs_pw_weight_sgd_s8_opt;
extern __typeof__(tt_cs_pw_weight_sgd_s8_g) tt_cs_pw_weight_sgd_s8_g_opt;
extern __typeof__(tt_cs_x_float_s8) tt_cs_x_float_s8_opt;
extern __typeof__(tt_cs_pw_weight_sgd_s8f) tt_cs_pw_weight_sgd_s8f_opt;
extern __typeof__(tt_cs_pw_weight_sgd_f32) tt_cs_pw_weight_sgd_f32_opt;

/* a fully connected int8 layer's weight update: the 1x1 update's row rounding (stochastic,
 * no index; other modes run the reference) */
extern __typeof__(tt_dense_weight_sgd_s8) tt_dense_weight_sgd_s8_opt;

#endif /* TT_F32_BWD_OPT_H */
