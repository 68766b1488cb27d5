/*
 * Gradients read from a global average pool's gradient kept per channel (see
 * tinytrain/passes/pool_grad.py). The pool spreads v[c] = dL/dpool[c] / (H*W) over every pixel
 * of channel c; the activation between the conv and the pool (ReLU/ReLU6: a 1-bit mask, the
 * saved int8 output or a saved float) zeroes some of it. Instead of the H x W x C float tensor
 * these kernels read each dy element through a tt_pooled as they need it.
 *
 * Each kernel is its plain counterpart (tt_conv2d_f32.c, tt_sparse_f32.c, tt_q8_core.c) with
 * `dy[i]` replaced by tt_pooled_at(): the same floats added in the same order, so results are
 * bit-identical to materialising the gradient first.
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

/* dy element i (channel ch = i mod c): v[ch] where the gate lets the gradient through, else 0,
 * exactly the value tt_mask_backward_f32 / tt_q8_clamp_backward / tt_clip_backward_f32 store */
static float tt_pooled_at(const tt_pooled *p, int32_t i, int32_t ch)
{
    int32_t pass = 1;

    if (p->gate == TT_POOLED_MASK) {
        pass = (int32_t)((((const uint8_t *)p->on)[i >> 3] >> (i & 7)) & 1u);
    } else if (p->gate == TT_POOLED_S8) {
        const int32_t y = (int32_t)((const int8_t *)p->on)[i];
        pass = y > p->lo8 && y < p->hi8;
    } else if (p->gate == TT_POOLED_F32) {
        const float y = ((const float *)p->on)[i];
        pass = y > p->lo && y < p->hi;
    }
    return pass ? p->v[ch] : 0.0f;
}

void tt_pooled_slab(float *out, const tt_pooled *dy, int32_t c, int32_t px0, int32_t npx,
                    int32_t oc, int32_t nq)
{
    int32_t px, q;

    for (px = 0; px < npx; ++px) {
        for (q = 0; q < nq; ++q) {
            out[px * nq + q] = tt_pooled_at(dy, (px0 + px) * c + oc + q, oc + q);
        }
    }
}

void tt_global_avg_pool_share_f32(float *v, const float *dy, int32_t rows, int32_t c)
{
    int32_t ch;

    for (ch = 0; ch < c; ++ch) {
        v[ch] = dy[ch] / (float)rows; /* as tt_global_avg_pool_backward_f32's share */
    }
}

/* ---- fp32: the conv kernels are tt_conv2d_f32.c's own code (tt_conv2d_grad_f32_body.h),
 * the bias ones mirror tt_conv2d_f32.c and tt_sparse_f32.c ---- */

#define TT_DY_T tt_pooled
#define TT_DY(dy, i, oc) tt_pooled_at(dy, i, oc)
#define TT_CONV_GRAD(base) base##_pooled_f32
#include "tt_conv2d_grad_f32_body.h" /* tt_conv2d_backward_{input,weight,weight_sgd}_pooled_f32 */

static float pooled_channel_sum(const tt_pooled *dy, int32_t rows, int32_t c, int32_t ch)
{
    float acc = 0.0f;
    int32_t r;

    for (r = 0; r < rows; ++r) {
        acc += tt_pooled_at(dy, r * c + ch, ch);
    }
    return acc;
}

void tt_bias_backward_pooled_f32(float *db, const tt_pooled *dy, int32_t rows, int32_t c)
{
    int32_t ch;

    for (ch = 0; ch < c; ++ch) {
        db[ch] += pooled_channel_sum(dy, rows, c, ch);
    }
}

void tt_bias_backward_sgd_pooled_f32(float *b, float *m, const tt_pooled *dy, int32_t rows,
                                     int32_t c, float lr, float momentum, float wd)
{
    int32_t ch;

    for (ch = 0; ch < c; ++ch) {
        b[ch] = tt_sgd_elem(b[ch], 0.0f + pooled_channel_sum(dy, rows, c, ch),
                            m != NULL ? &m[ch] : NULL, lr, momentum, wd);
    }
}

/* ---- int8 layers, fp32 gradients (mirror tt_q8_core.c) ---- */

void tt_conv2d_backward_input_pooled_s8(float *dx, const tt_pooled *dy, const int8_t *w,
                                        const float *w_scale, const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t i, oy, ox, oc, ky, kx, ic;

    for (i = 0; i < g->h * g->w * g->cin; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                const float d =
                    tt_pooled_at(dy, (oy * g->ow + ox) * g->cout + oc, oc) * w_scale[oc];
                for (ky = 0; ky < g->kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        continue;
                    }
                    for (kx = 0; kx < g->kw; ++kx) {
                        const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                        if (ix < 0 || ix >= g->w) {
                            continue;
                        }
                        for (ic = 0; ic < cin_g; ++ic) {
                            dx[(iy * g->w + ix) * g->cin + grp * cin_g + ic] +=
                                d * (float)w[((oc * g->kh + ky) * g->kw + kx) * cin_g + ic];
                        }
                    }
                }
            }
        }
    }
}

/* Real-valued dL/dW element (oc, ky, kx, x channel xc), as tt_q8_core.c's conv_dw_elem. */
static float pooled_dw_elem_s8(const tt_pooled *dy, const int8_t *x, float x_scale,
                               int32_t x_zp, const tt_conv_geom *g, int32_t oc, int32_t ky,
                               int32_t kx, int32_t xc)
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
            acc += tt_pooled_at(dy, (oy * g->ow + ox) * g->cout + oc, oc) *
                   (float)((int32_t)x[(iy * g->w + ix) * g->cin + xc] - x_zp);
        }
    }
    return acc * x_scale;
}

void tt_conv2d_backward_weight_pooled_s8(float *dw, const tt_pooled *dy, const int8_t *x,
                                         float x_scale, int32_t x_zp, const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oc, ky, kx, ic;

    for (oc = 0; oc < g->cout; ++oc) {
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                for (ic = 0; ic < cin_g; ++ic) {
                    dw[((oc * g->kh + ky) * g->kw + kx) * cin_g + ic] +=
                        pooled_dw_elem_s8(dy, x, x_scale, x_zp, g, oc, ky, kx,
                                          (oc / cout_g) * cin_g + ic);
                }
            }
        }
    }
}

void tt_conv2d_weight_sgd_pooled_s8(int8_t *w, uint8_t *shadow, const tt_pooled *dy,
                                    const int8_t *x, float x_scale, int32_t x_zp,
                                    const tt_conv_geom *g, int32_t w_cin, const int32_t *idx,
                                    const float *step, const tt_q8_update *u)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oc, ky, kx, ic;

    for (oc = 0; oc < g->cout; ++oc) {
        const float s = tt_q8_lr_step(step, oc, u);
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                for (ic = 0; ic < cin_g; ++ic) {
                    const int32_t si = ((oc * g->kh + ky) * g->kw + kx) * cin_g + ic;
                    const int32_t wi =
                        ((oc * g->kh + ky) * g->kw + kx) * w_cin + tt_channel(idx, ic);
                    const int32_t at = u->packed ? si : wi;
                    const float gr = pooled_dw_elem_s8(dy, x, x_scale, x_zp, g, oc, ky, kx,
                                                       (oc / cout_g) * cin_g + ic);
                    w[at] = tt_q8_step_s8(w[at], shadow != NULL ? &shadow[si] : NULL, gr * s, u,
                                          (uint32_t)wi);
                }
            }
        }
    }
}

void tt_bias_sgd_pooled_s32(int32_t *b, const tt_pooled *dy, int32_t rows, int32_t c,
                            const float *step, const tt_q8_update *u)
{
    int32_t ch;

    for (ch = 0; ch < c; ++ch) {
        b[ch] = tt_q8_step_s32(b[ch],
                               pooled_channel_sum(dy, rows, c, ch) * tt_q8_lr_step(step, ch, u),
                               u, (uint32_t)ch);
    }
}
