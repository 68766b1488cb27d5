/* Optimised kernels (see tt_kernels.h, tt_kernels_opt.h): declarations. */
#ifndef TT_F32_OPT_H
#define TT_F32_OPT_H

#include <stdint.h>

/* fp32 conv / dense / fused-update / max-pool kernels (tt_f32_opt.c). Same signatures, same
 * preconditions (every geometry) and the same results as the reference kernels named without
 * "_opt": each output element is computed with the reference's operations in the reference's
 * order, so results are bit-identical (NaN payloads aside); only the loop nesting, blocking
 * and, on Cortex-M4F/M7, the instructions (VLDM, non-fused VMLA) differ. Stack < 1 KB. */
extern __typeof__(tt_conv2d_f32) tt_conv2d_f32_opt;
extern __typeof__(tt_conv2d_backward_input_f32) tt_conv2d_backward_input_f32_opt;
extern __typeof__(tt_conv2d_backward_weight_f32) tt_conv2d_backward_weight_f32_opt;
extern __typeof__(tt_conv2d_backward_weight_sgd_f32) tt_conv2d_backward_weight_sgd_f32_opt;
extern __typeof__(tt_dense_f32) tt_dense_f32_opt;
extern __typeof__(tt_dense_backward_input_f32) tt_dense_backward_input_f32_opt;
extern __typeof__(tt_dense_backward_weight_f32) tt_dense_backward_weight_f32_opt;
extern __typeof__(tt_dense_backward_weight_sgd_f32) tt_dense_backward_weight_sgd_f32_opt;
extern __typeof__(tt_bias_backward_sgd_f32) tt_bias_backward_sgd_f32_opt;
extern __typeof__(tt_bias_sgd_s32) tt_bias_sgd_s32_opt; /* int8 bias: fp32 sums */
extern __typeof__(tt_bias_grad_row_f32) tt_bias_grad_row_f32_opt;
extern __typeof__(tt_max_pool2d_f32) tt_max_pool2d_f32_opt;
extern __typeof__(tt_max_pool2d_backward_f32) tt_max_pool2d_backward_f32_opt;

/* dx += what tt_conv2d_backward_input_f32 would store, each element's products added in its
 * order (dx is not zeroed first): called on consecutive bands of output rows (oh, pt of the
 * band) it gives the whole gradient's bits, so dy need only exist one band at a time. */
void tt_conv2d_backward_input_acc_f32_opt(float *dx, const float *dy, const float *w,
                                          const tt_conv_geom *g);

#endif /* TT_F32_OPT_H */
