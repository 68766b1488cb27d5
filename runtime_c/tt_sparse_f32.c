/*
 * Sparse and fused updates: partial-channel gathers and SGD, weight/bias gradients fused
 * with their update (batch 1), and 1-bit ReLU masks. The fused kernels sum every gradient
 * element in exactly the order of the accumulating kernels (tt_conv2d_backward_weight_f32,
 * tt_dense_backward_weight_f32, tt_bias_backward_f32), so fusion changes no result bit.
 */
#include "tt_kernels.h"

#include <stddef.h>
#include <stdint.h>

static int32_t channel(const int32_t *idx, int32_t j)
{
    return idx != NULL ? idx[j] : j;
}

void tt_gather_channels_f32(float *y, const float *x, int32_t rows, int32_t c,
                            const int32_t *idx, int32_t k)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            y[r * k + j] = x[r * c + channel(idx, j)];
        }
    }
}

void tt_scatter_channels_f32(float *y, const float *x, int32_t rows, int32_t c,
                             const int32_t *idx, int32_t k)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            y[r * c + channel(idx, j)] = x[r * k + j];
        }
    }
}

void tt_sgd_channels_f32(float *p, float *g, float *m, int32_t rows, int32_t c,
                         const int32_t *idx, int32_t k, float lr, float momentum, float wd,
                         float grad_scale)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            const int32_t gi = r * k + j;
            float *pp = &p[r * c + channel(idx, j)];
            *pp = tt_sgd_elem(*pp, g[gi] * grad_scale, m != NULL ? &m[gi] : NULL, lr,
                              momentum, wd);
            g[gi] = 0.0f;
        }
    }
}

void tt_conv2d_backward_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                                       const tt_conv_geom *g, int32_t w_cin,
                                       const int32_t *idx, float lr, float momentum,
                                       float wd)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oc, ky, kx, ic, oy, ox;

    for (oc = 0; oc < g->cout; ++oc) {
        const int32_t grp = oc / cout_g;
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                for (ic = 0; ic < cin_g; ++ic) {
                    const int32_t gi = ((oc * g->kh + ky) * g->kw + kx) * cin_g + ic;
                    float *wp = &w[((oc * g->kh + ky) * g->kw + kx) * w_cin + channel(idx, ic)];
                    float acc = 0.0f;
                    for (oy = 0; oy < g->oh; ++oy) {
                        const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                        if (iy < 0 || iy >= g->h) {
                            continue;
                        }
                        for (ox = 0; ox < g->ow; ++ox) {
                            const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                            if (ix < 0 || ix >= g->w) {
                                continue;
                            }
                            acc += dy[(oy * g->ow + ox) * g->cout + oc] *
                                   x[(iy * g->w + ix) * g->cin + grp * cin_g + ic];
                        }
                    }
                    *wp = tt_sgd_elem(*wp, acc, m != NULL ? &m[gi] : NULL, lr, momentum, wd);
                }
            }
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
            float *wp = &w[o * w_in + channel(idx, j)];
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
