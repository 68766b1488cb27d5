/*
 * Partial weight updates of a depthwise conv (channel multiplier 1): only the weight rows of
 * channels idx[0..k-1] (idx NULL: 0..k-1) learn. Row c of the (C, kh, kw, 1) weight is the
 * contiguous block w[c * kh * kw ...]; it sees only input channel c and feeds only output
 * channel c.
 *
 * g describes the depthwise conv over the k trained channels (cin = cout = groups = k): x
 * holds just those channels (gathered at forward time), while dy is the layer's whole output
 * gradient with dy_c channels, of which channel idx[j] is read. Gradients and optimizer state
 * are shaped (k, kh, kw): row j belongs to weight row idx[j]. Each gradient element is summed
 * over (oy, ox) in the same order by the accumulating and the fused kernels, so fusing the
 * update changes no result bit. The int8 updates seed stochastic rounding with the element's
 * index in the whole weight, as an unpartitioned update would.
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

static int32_t row_of(const int32_t *idx, int32_t j)
{
    return idx != NULL ? idx[j] : j;
}

/* dL/dw of trained channel j (weight row c) at tap (ky, kx), x in fp32 */
static float dw_elem_f32(const float *dy, const float *x, const tt_conv_geom *g, int32_t dy_c,
                         int32_t c, int32_t j, int32_t ky, int32_t kx)
{
    float acc = 0.0f;
    int32_t oy, ox;

    for (oy = 0; oy < g->oh; ++oy) {
        const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
        if (iy < 0 || iy >= g->h) {
            continue; /* padding tap: x is zero, no contribution */
        }
        for (ox = 0; ox < g->ow; ++ox) {
            const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
            if (ix < 0 || ix >= g->w) {
                continue;
            }
            acc += dy[(oy * g->ow + ox) * dy_c + c] * x[(iy * g->w + ix) * g->cin + j];
        }
    }
    return acc;
}

/* the same from the int8 input: real value x_scale * (x - x_zp) */
static float dw_elem_s8(const float *dy, const int8_t *x, float x_scale, int32_t x_zp,
                        const tt_conv_geom *g, int32_t dy_c, int32_t c, int32_t j, int32_t ky,
                        int32_t kx)
{
    float acc = 0.0f;
    int32_t oy, ox;

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
            acc += dy[(oy * g->ow + ox) * dy_c + c] *
                   (float)((int32_t)x[(iy * g->w + ix) * g->cin + j] - x_zp);
        }
    }
    return acc * x_scale;
}

void tt_dw_backward_weight_partial_f32(float *dw, const float *dy, const float *x,
                                       const tt_conv_geom *g, int32_t dy_c,
                                       const int32_t *idx)
{
    int32_t j, ky, kx;

    for (j = 0; j < g->cin; ++j) {
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                dw[(j * g->kh + ky) * g->kw + kx] +=
                    dw_elem_f32(dy, x, g, dy_c, row_of(idx, j), j, ky, kx);
            }
        }
    }
}

void tt_dw_weight_sgd_partial_f32(float *w, float *m, const float *dy, const float *x,
                                  const tt_conv_geom *g, int32_t dy_c, const int32_t *idx,
                                  float lr, float momentum, float wd)
{
    int32_t j, ky, kx;

    for (j = 0; j < g->cin; ++j) {
        const int32_t c = row_of(idx, j);
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                const int32_t gi = (j * g->kh + ky) * g->kw + kx;
                float *wp = &w[(c * g->kh + ky) * g->kw + kx];
                *wp = tt_sgd_elem(*wp, dw_elem_f32(dy, x, g, dy_c, c, j, ky, kx),
                                  m != NULL ? &m[gi] : NULL, lr, momentum, wd);
            }
        }
    }
}

void tt_sgd_rows_f32(float *p, float *g, float *m, int32_t n, const int32_t *idx, int32_t k,
                     float lr, float momentum, float wd, float grad_scale)
{
    int32_t j, i;

    for (j = 0; j < k; ++j) {
        float *row = &p[row_of(idx, j) * n];
        for (i = 0; i < n; ++i) {
            const int32_t gi = j * n + i;
            row[i] = tt_sgd_elem(row[i], g[gi] * grad_scale, m != NULL ? &m[gi] : NULL, lr,
                                 momentum, wd);
            g[gi] = 0.0f;
        }
    }
}

void tt_dw_backward_weight_partial_s8(float *dw, const float *dy, const int8_t *x,
                                      float x_scale, int32_t x_zp, const tt_conv_geom *g,
                                      int32_t dy_c, const int32_t *idx)
{
    int32_t j, ky, kx;

    for (j = 0; j < g->cin; ++j) {
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                dw[(j * g->kh + ky) * g->kw + kx] +=
                    dw_elem_s8(dy, x, x_scale, x_zp, g, dy_c, row_of(idx, j), j, ky, kx);
            }
        }
    }
}

void tt_dw_weight_sgd_partial_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                 float x_scale, int32_t x_zp, const tt_conv_geom *g,
                                 int32_t dy_c, const int32_t *idx, const float *step,
                                 const tt_q8_update *u)
{
    int32_t j, ky, kx;

    for (j = 0; j < g->cin; ++j) {
        const int32_t c = row_of(idx, j);
        const float s = tt_q8_lr_step(step, c, u);
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                const int32_t si = (j * g->kh + ky) * g->kw + kx;
                const int32_t wi = (c * g->kh + ky) * g->kw + kx;
                const float gr = dw_elem_s8(dy, x, x_scale, x_zp, g, dy_c, c, j, ky, kx);
                w[wi] = tt_q8_step_s8(w[wi], shadow != NULL ? &shadow[si] : NULL, gr * s, u,
                                      (uint32_t)wi);
            }
        }
    }
}

void tt_sgd_rows_s8(int8_t *p, float *g, uint8_t *shadow, int32_t n, const int32_t *idx,
                    int32_t k, const float *step, float grad_scale, const tt_q8_update *u)
{
    int32_t j, i;

    for (j = 0; j < k; ++j) {
        const int32_t c = row_of(idx, j);
        const float s = tt_q8_lr_step(step, c, u);
        for (i = 0; i < n; ++i) {
            const int32_t gi = j * n + i;
            const int32_t pi = c * n + i;
            p[pi] = tt_q8_step_s8(p[pi], shadow != NULL ? &shadow[gi] : NULL,
                                  g[gi] * grad_scale * s, u, (uint32_t)pi);
            g[gi] = 0.0f;
        }
    }
}
