/* Optimised kernels (see tt_kernels.h, tt_kernels_opt.h): declarations. */
#ifndef TT_F32_OPT_H
#define TT_F32_OPT_H

#include <stdint.h>

/* fp32 conv / dense / fused-update / max-pool kernels (tt_f32_opt.c). Same signatures, same
 * preconditions (every geometry) and the same results as the reference kernels named without
 * "_opt": each output element is computed with the reference's operations in the reference's
 * order, so results are bit-identical (NaN payloads aside); only the loop nesting, blocking
 * and, on Cortex-M4F/M7, the instructions (VLDM, non-fused VMLA) differ. Stack < 1 KB. */
void tt_conv2d_f32_opt(float *y, const float *x, const float *w, const float *b,
                       const tt_conv_geom *g);
void tt_conv2d_backward_input_f32_opt(float *dx, const float *dy, const float *w,
                                      const tt_conv_geom *g);
void tt_conv2d_backward_weight_f32_opt(float *dw, const float *dy, const float *x,
                                       const tt_conv_geom *g);
void tt_conv2d_backward_weight_sgd_f32_opt(float *w, float *m, const float *dy,
                                           const float *x, const tt_conv_geom *g,
                                           int32_t w_cin, const int32_t *idx, float lr,
                                           float momentum, float wd);
void tt_dense_f32_opt(float *y, const float *x, const float *w, const float *b, int32_t in,
                      int32_t out);
void tt_dense_backward_input_f32_opt(float *dx, const float *dy, const float *w, int32_t in,
                                     int32_t out);
void tt_dense_backward_weight_f32_opt(float *dw, const float *dy, const float *x, int32_t in,
                                      int32_t out);
void tt_dense_backward_weight_sgd_f32_opt(float *w, float *m, const float *dy,
                                          const float *x, int32_t k, int32_t out,
                                          int32_t w_in, const int32_t *idx, float lr,
                                          float momentum, float wd);
void tt_bias_backward_sgd_f32_opt(float *b, float *m, const float *dy, int32_t rows,
                                  int32_t c, float lr, float momentum, float wd);
void tt_max_pool2d_f32_opt(float *y, const float *x, const tt_conv_geom *g);
void tt_max_pool2d_backward_f32_opt(float *dx, const float *dy, const float *x,
                                    const tt_conv_geom *g);

#endif /* TT_F32_OPT_H */
