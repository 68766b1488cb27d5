/*
 * Channel streaming (tinytrain/passes/channel_stream.py): one channel c's share of a backward
 * sub-op, on planes of H x W floats (a per-channel tensor's channel c) or on the whole HWC
 * tensors the region reads and writes. The generated code loops over c and calls these in
 * the sub-ops' order.
 *
 * Each kernel adds its floats exactly as the whole-tensor kernel it replaces does for that
 * channel (tt_conv2d_backward_input_*, tt_conv2d_weight_sgd_s8 /
 * tt_conv2d_backward_weight_sgd_f32, tt_bias_sgd_s32 / tt_bias_backward_sgd_f32, the masks),
 * and a 1x1 input gradient receives channel c's share in increasing c, the order in which
 * the whole kernel adds it to each element: a streamed region is bit-identical.
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the source: channel c of a 1x1 conv's input gradient ---- */

void tt_cs_pw_input_s8(float *plane, const float *dy, const int8_t *w, const float *w_scale,
                       int32_t n, int32_t cout, int32_t cin, int32_t c)
{
    int32_t p, o;

    for (p = 0; p < n; ++p) {
        float acc = 0.0f;
        for (o = 0; o < cout; ++o) {
            const float d = dy[p * cout + o] * w_scale[o];
            acc = tt_cs_fmac(acc, d, (float)w[o * cin + c]);
        }
        plane[p] = acc;
    }
}

/* channels c0 .. c0 + cnt - 1, channel c0 + i into the plane planes + i * ps: each exactly as
 * tt_cs_pw_input_s8 computes it (a region's source run once per group of channels) */
void tt_cs_pw_input_s8_g(float *planes, int32_t ps, const float *dy, const int8_t *w,
                         const float *w_scale, int32_t n, int32_t cout, int32_t cin, int32_t c0,
                         int32_t cnt)
{
    int32_t i;

    for (i = 0; i < cnt; ++i) {
        tt_cs_pw_input_s8(planes + i * ps, dy, w, w_scale, n, cout, cin, c0 + i);
    }
}

void tt_cs_pw_input_f32(float *plane, const float *dy, const float *w, int32_t n, int32_t cout,
                        int32_t cin, int32_t c)
{
    int32_t p, o;

    for (p = 0; p < n; ++p) {
        float acc = 0.0f;
        for (o = 0; o < cout; ++o) {
            acc += dy[p * cout + o] * w[o * cin + c];
        }
        plane[p] = acc;
    }
}

/* ---- elementwise gradient masks of channel c (i = p * ch + c in the HWC mask/tensor) ---- */

void tt_cs_mask(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                int32_t c)
{
    int32_t p;

    for (p = 0; p < n; ++p) {
        const int32_t i = p * ch + c;
        out[p] = ((mask[i >> 3] >> (i & 7)) & 1u) ? in[p] : 0.0f;
    }
}

void tt_cs_q8_clamp(float *out, const float *in, const int8_t *y, int32_t n, int32_t ch,
                    int32_t c, int32_t lo, int32_t hi)
{
    int32_t p;

    for (p = 0; p < n; ++p) {
        const int32_t v = (int32_t)y[p * ch + c];
        out[p] = (v > lo && v < hi) ? in[p] : 0.0f;
    }
}

void tt_cs_clip_f32(float *out, const float *in, const float *x, int32_t n, int32_t ch,
                    int32_t c, float lo, float hi)
{
    int32_t p;

    for (p = 0; p < n; ++p) {
        const float v = x[p * ch + c];
        out[p] = (v > lo && v < hi) ? in[p] : 0.0f;
    }
}

/* ---- depthwise conv (channel multiplier 1): channel c's input gradient and weight ---- */

/* Each output pixel's taps inside the input found once (no bounds test per tap) and the
 * geometry in locals; every dx element still sums its contributions in (oy, ox, ky, kx) order,
 * so the same bits as the plain loop nest. */
void tt_cs_dw_input_s8(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                       const tt_conv_geom *g, int32_t c)
{
    const int32_t h = g->h, width = g->w, kh = g->kh, kw = g->kw, dh = g->dh, dw = g->dw;
    const int32_t sh = g->sh, sw = g->sw, pt = g->pt, pl = g->pl, oh = g->oh, ow = g->ow;
    const float scale = w_scale[c];
    const int8_t *wc = &w[c * kh * kw];
    int32_t i, oy, ox, ky, kx;

    for (i = 0; i < h * width; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < oh; ++oy) {
        const int32_t iy0 = oy * sh - pt;
        int32_t ky_lo = 0, ky_hi = kh; /* rows ky in [ky_lo, ky_hi) land inside the input */
        while (ky_lo < ky_hi && iy0 + ky_lo * dh < 0) ++ky_lo;
        while (ky_hi > ky_lo && iy0 + (ky_hi - 1) * dh >= h) --ky_hi;
        for (ox = 0; ox < ow; ++ox) {
            const float d = dy[oy * ow + ox] * scale;
            const int32_t ix0 = ox * sw - pl;
            int32_t kx_lo = 0, kx_hi = kw;
            while (kx_lo < kx_hi && ix0 + kx_lo * dw < 0) ++kx_lo;
            while (kx_hi > kx_lo && ix0 + (kx_hi - 1) * dw >= width) --kx_hi;
            for (ky = ky_lo; ky < ky_hi; ++ky) {
                float *row = &dx[(iy0 + ky * dh) * width];
                const int8_t *wr = &wc[ky * kw];
                for (kx = kx_lo; kx < kx_hi; ++kx) {
                    row[ix0 + kx * dw] += d * (float)wr[kx];
                }
            }
        }
    }
}

void tt_cs_dw_input_f32(float *dx, const float *dy, const float *w, const tt_conv_geom *g,
                        int32_t c)
{
    int32_t i, oy, ox, ky, kx;

    for (i = 0; i < g->h * g->w; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            const float d = dy[oy * g->ow + ox];
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
                    dx[iy * g->w + ix] += d * w[(c * g->kh + ky) * g->kw + kx];
                }
            }
        }
    }
}

/* dL/dW[c, ky, kx] (before the input scale for int8) from the dy plane and x's channel c */
static float dw_weight_elem_s8(const float *dy, const int8_t *x, int32_t x_zp,
                               const tt_conv_geom *g, int32_t c, int32_t ky, int32_t kx)
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
            acc += dy[oy * g->ow + ox] *
                   (float)((int32_t)x[(iy * g->w + ix) * g->cin + c] - x_zp);
        }
    }
    return acc;
}

void tt_cs_dw_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, const tt_conv_geom *g, int32_t c,
                            const float *step, const tt_q8_update *u)
{
    const float s = tt_q8_lr_step(step, c, u);
    int32_t ky, kx;

    for (ky = 0; ky < g->kh; ++ky) {
        for (kx = 0; kx < g->kw; ++kx) {
            const int32_t i = (c * g->kh + ky) * g->kw + kx;
            const float gr = dw_weight_elem_s8(dy, x, x_zp, g, c, ky, kx) * x_scale;
            w[i] = tt_q8_step_s8(w[i], shadow != NULL ? &shadow[i] : NULL, gr * s, u,
                                 (uint32_t)i);
        }
    }
}

void tt_cs_dw_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                             const tt_conv_geom *g, int32_t c, float lr, float momentum,
                             float wd)
{
    int32_t ky, kx, oy, ox;

    for (ky = 0; ky < g->kh; ++ky) {
        for (kx = 0; kx < g->kw; ++kx) {
            const int32_t i = (c * g->kh + ky) * g->kw + kx;
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
                    acc += dy[oy * g->ow + ox] * x[(iy * g->w + ix) * g->cin + c];
                }
            }
            w[i] = tt_sgd_elem(w[i], acc, m != NULL ? &m[i] : NULL, lr, momentum, wd);
        }
    }
}

/* ---- bias of channel c ---- */

void tt_cs_bias_sgd_s32(int32_t *b, const float *dy, int32_t n, int32_t c, const float *step,
                        const tt_q8_update *u)
{
    float acc = 0.0f;
    int32_t p;

    for (p = 0; p < n; ++p) {
        acc += dy[p];
    }
    b[c] = tt_q8_step_s32(b[c], acc * tt_q8_lr_step(step, c, u), u, (uint32_t)c);
}

void tt_cs_bias_sgd_f32(float *b, float *m, const float *dy, int32_t n, int32_t c, float lr,
                        float momentum, float wd)
{
    float acc = 0.0f;
    int32_t p;

    for (p = 0; p < n; ++p) {
        acc += dy[p];
    }
    b[c] = tt_sgd_elem(b[c], 0.0f + acc, m != NULL ? &m[c] : NULL, lr, momentum, wd);
}

/* ---- the sinks: a 1x1 conv whose output channel c is the plane ---- */

void tt_cs_pw_input_add_s8(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                           int32_t n, int32_t dx_c, const int32_t *idx, int32_t k, int32_t c)
{
    const int8_t *row = &w[c * k];
    int32_t p, j;

    for (p = 0; p < n; ++p) {
        const float d = dy[p] * w_scale[c];
        float *out = &dx[p * dx_c];
        for (j = 0; j < k; ++j) {
            float *const o = &out[tt_channel(idx, j)];
            *o = tt_cs_fmac(*o, d, (float)row[j]);
        }
    }
}

void tt_cs_pw_input_add_f32(float *dx, const float *dy, const float *w, int32_t n,
                            int32_t dx_c, const int32_t *idx, int32_t k, int32_t c)
{
    const float *row = &w[c * k];
    int32_t p, j;

    for (p = 0; p < n; ++p) {
        const float d = dy[p];
        float *out = &dx[p * dx_c];
        for (j = 0; j < k; ++j) {
            out[tt_channel(idx, j)] += d * row[j];
        }
    }
}

/* channels c0 .. c0 + cnt - 1 in increasing c, channel c0 + i from the plane dy + i * ds:
 * each exactly as tt_cs_pw_input_add_s8 adds it */
void tt_cs_pw_input_add_s8_g(float *dx, const float *dy, int32_t ds, const int8_t *w,
                             const float *w_scale, int32_t n, int32_t dx_c, const int32_t *idx,
                             int32_t k, int32_t c0, int32_t cnt)
{
    int32_t i;

    for (i = 0; i < cnt; ++i) {
        tt_cs_pw_input_add_s8(dx, dy + i * ds, w, w_scale, n, dx_c, idx, k, c0 + i);
    }
}

/* element j of weight row c from its gradient acc (x's real scale not yet applied) */
static void pw_step_s8(int8_t *w, uint8_t *shadow, float acc, float x_scale, int32_t k,
                       int32_t w_cin, const int32_t *idx, int32_t c, int32_t j,
                       const float *step, const tt_q8_update *u)
{
    const int32_t si = c * k + j;
    const int32_t wi = c * w_cin + tt_channel(idx, j);
    const int32_t at = u->packed ? si : wi;
    w[at] = tt_q8_step_s8(w[at], shadow != NULL ? &shadow[si] : NULL,
                          acc * x_scale * tt_q8_lr_step(step, c, u), u, (uint32_t)wi);
}

void tt_cs_pw_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, int32_t n, int32_t k, int32_t w_cin,
                            const int32_t *idx, int32_t c, const float *step,
                            const tt_q8_update *u)
{
    int32_t j, p;

    for (j = 0; j < k; ++j) {
        float acc = 0.0f;
        for (p = 0; p < n; ++p) {
            acc = tt_cs_fmac(acc, dy[p], (float)((int32_t)x[p * k + j] - x_zp));
        }
        pw_step_s8(w, shadow, acc, x_scale, k, w_cin, idx, c, j, step, u);
    }
}

/* rows c0 .. c0 + cnt - 1, row c0 + i from the plane dy + i * ds: each exactly as
 * tt_cs_pw_weight_sgd_s8 updates it (a group of channels whose planes were kept) */
void tt_cs_pw_weight_sgd_s8_g(int8_t *w, uint8_t *shadow, const float *dy, int32_t ds,
                              const int8_t *x, float x_scale, int32_t x_zp, int32_t n,
                              int32_t k, int32_t w_cin, const int32_t *idx, int32_t c0,
                              int32_t cnt, const float *step, const tt_q8_update *u)
{
    int32_t i;

    for (i = 0; i < cnt; ++i) {
        tt_cs_pw_weight_sgd_s8(w, shadow, dy + i * ds, x, x_scale, x_zp, n, k, w_cin, idx,
                               c0 + i, step, u);
    }
}

void tt_cs_x_float_s8(float *xf, const int8_t *x, int32_t n, int32_t x_zp)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        xf[i] = (float)((int32_t)x[i] - x_zp);
    }
}

void tt_cs_pw_weight_sgd_s8f(int8_t *w, uint8_t *shadow, const float *dy, const float *xf,
                             float x_scale, int32_t n, int32_t k, int32_t w_cin,
                             const int32_t *idx, int32_t c, const float *step,
                             const tt_q8_update *u)
{
    int32_t j, p;

    for (j = 0; j < k; ++j) {
        float acc = 0.0f;
        for (p = 0; p < n; ++p) {
            acc = tt_cs_fmac(acc, dy[p], xf[p * k + j]);
        }
        pw_step_s8(w, shadow, acc, x_scale, k, w_cin, idx, c, j, step, u);
    }
}

void tt_cs_pw_weight_sgd_f32(float *w, float *m, const float *dy, const float *x, int32_t n,
                             int32_t k, int32_t w_cin, const int32_t *idx, int32_t c, float lr,
                             float momentum, float wd)
{
    int32_t j, p;

    for (j = 0; j < k; ++j) {
        float *wp = &w[c * w_cin + tt_channel(idx, j)];
        float acc = 0.0f;
        for (p = 0; p < n; ++p) {
            acc = tt_cs_fmac(acc, dy[p], x[p * k + j]);
        }
        *wp = tt_sgd_elem(*wp, acc, m != NULL ? &m[c * k + j] : NULL, lr, momentum, wd);
    }
}
