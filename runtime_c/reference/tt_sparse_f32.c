/*
 * Sparse and fused updates: partial-channel gathers and SGD, weight/bias gradients fused
 * with their update (batch 1), and 1-bit ReLU masks. The fused kernels sum every gradient
 * element in exactly the order of the accumulating kernels (tt_dense_backward_weight_f32,
 * tt_bias_backward_f32), so fusion changes no result bit. The conv's fused kernel,
 * tt_conv2d_backward_weight_sgd_f32, is written with its gradients (tt_conv2d_f32.c).
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

#define TT_CH_T float
#define TT_CHANNELS(base) base##_f32
#include "tt_channels_body.h" /* tt_gather_channels_f32, tt_scatter_channels_f32 */

void tt_sgd_channels_f32(float *p, float *g, float *m, int32_t rows, int32_t c,
                         const int32_t *idx, int32_t k, float lr, float momentum, float wd,
                         float grad_scale)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            const int32_t gi = r * k + j;
            float *pp = &p[r * c + tt_channel(idx, j)];
            *pp = tt_sgd_elem(*pp, g[gi] * grad_scale, m != NULL ? &m[gi] : NULL, lr,
                              momentum, wd);
            g[gi] = 0.0f;
        }
    }
}

void tt_dense_backward_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                                      int32_t k, int32_t out, int32_t w_in,
                                      const int32_t *idx, float lr, float momentum, float wd)
{
    int32_t o, j;

    for (o = 0; o < out; ++o) {
        for (j = 0; j < k; ++j) {
            float *wp = &w[o * w_in + tt_channel(idx, j)];
            *wp = tt_sgd_elem(*wp, 0.0f + dy[o] * x[j], m != NULL ? &m[o * k + j] : NULL, lr,
                              momentum, wd);
        }
    }
}

void tt_bias_backward_sgd_f32(float *b, float *m, const float *dy, int32_t rows, int32_t c,
                              float lr, float momentum, float wd)
{
    int32_t r, ch;

    for (ch = 0; ch < c; ++ch) {
        float acc = 0.0f;
        for (r = 0; r < rows; ++r) {
            acc += dy[r * c + ch];
        }
        b[ch] = tt_sgd_elem(b[ch], 0.0f + acc, m != NULL ? &m[ch] : NULL, lr, momentum, wd);
    }
}

void tt_clip_mask_f32(uint8_t *mask, const float *x, int32_t n, float lo, float hi)
{
    int32_t i;

    for (i = 0; i < (n + 7) / 8; ++i) {
        mask[i] = 0;
    }
    for (i = 0; i < n; ++i) {
        if (x[i] > lo && x[i] < hi) {
            mask[i >> 3] = (uint8_t)(mask[i >> 3] | (1u << (i & 7)));
        }
    }
}

void tt_mask_backward_f32(float *dx, const float *dy, const uint8_t *mask, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dx[i] = ((mask[i >> 3] >> (i & 7)) & 1u) ? dy[i] : 0.0f;
    }
}
