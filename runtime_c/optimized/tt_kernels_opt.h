/*
 * Optimised kernels. The portable kernels declared in tt_reference.h are the specification;
 * each kernel here computes the same thing faster for a geometry the code generator picks it
 * for at compile time (`--kernels reference` keeps the portable ones). int8 outputs are
 * bit-identical to the reference; fp32 ones differ only by summation order.
 *
 * On cores with the DSP extension (__ARM_FEATURE_DSP: Cortex-M4F, M7) they use GCC's
 * arm_acle.h intrinsics (dual 16-bit multiply-accumulate); elsewhere (host builds) a portable
 * path with the same blocking, so host tests run the same loop structure.
 *
 * A kernel <name>_opt that stands in for the reference <name> is declared
 * `extern __typeof__(<name>) <name>_opt;`: the code generator swaps one name for the other,
 * so its signature is the reference's by construction and a definition that drifts from it
 * does not compile.
 */
#ifndef TT_KERNELS_OPT_H
#define TT_KERNELS_OPT_H

#include "tt_reference.h"

#include "tt_q8_conv_opt.h" /* int8 pointwise / regular conv, dense */
#include "tt_q8_dw_opt.h"   /* int8 depthwise conv, residual add */
#include "tt_f32_bwd_opt.h" /* channel-streamed backward of inverted-residual blocks */
#include "tt_f32_opt.h"     /* fp32 models: conv and dense forward, backward, fused updates */

/* gradients read from a global average pool's per-channel gradient (tt_pooled_opt.c) */
extern __typeof__(tt_conv2d_backward_input_pooled_f32) tt_conv2d_backward_input_pooled_f32_opt;
extern __typeof__(tt_conv2d_backward_weight_pooled_f32) tt_conv2d_backward_weight_pooled_f32_opt;
/* (one line: tests/test_runtime_layers.py reads the declarations as text) */
extern __typeof__(tt_conv2d_backward_weight_sgd_pooled_f32) tt_conv2d_backward_weight_sgd_pooled_f32_opt;

/* --rounding master's forward, pointwise and fully connected (tt_q8_conv_opt.c), and the
 * channel-streamed 1x1 input gradient (tt_f32_bwd_opt.c) */
extern __typeof__(tt_conv2d_s8_master) tt_conv2d_s8_master_opt;
extern __typeof__(tt_dense_s8_master) tt_dense_s8_master_opt;
/* (one line: tests/test_runtime_layers.py reads the declarations as text) */
extern __typeof__(tt_cs_pw_input_add_s8_master) tt_cs_pw_input_add_s8_master_opt;

/* 1-bit masks: tt_q8_clamp_mask's bits, and applying a mask (tt_q8_mask_opt.c) */
extern __typeof__(tt_q8_clamp_mask) tt_q8_clamp_mask_opt;
extern __typeof__(tt_mask_backward_f32) tt_mask_backward_f32_opt; /* dx is dy or disjoint */

/* partial-channel copies of a run of channels, a memcpy per row (tt_channels_opt.c) */
extern __typeof__(tt_gather_channels_s8) tt_gather_channels_s8_opt;
extern __typeof__(tt_scatter_channels_s8) tt_scatter_channels_s8_opt;
extern __typeof__(tt_gather_channels_f32) tt_gather_channels_f32_opt;
extern __typeof__(tt_scatter_channels_f32) tt_scatter_channels_f32_opt;

#endif /* TT_KERNELS_OPT_H */
