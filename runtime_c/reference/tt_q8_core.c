/*
 * int8 training core: conv / dense forward bit-exact with TFLite's reference integer
 * kernels, their fp32 backward computed straight from the int8 tensors (dequantised on the
 * fly, no float copies), and int8 / int32 parameter updates that keep sub-LSB steps.
 *
 * Gradients of int8 tensors are float32 values w.r.t. the tensor's real value
 * scale * (q - zero_point). Update constants `step` (per output channel) already contain
 * the build's learning rate and the quantisation-aware scaling; u->lr_scale carries a rate
 * changed at run time (tt_q8_lr_step), so one update is
 *     q -= round_mode(step[oc] * lr_scale * gradient).
 */
#include "tt_reference.h"
#include "tt_q8_round.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

uint32_t tt_q8_saturations = 0;

#define TT_CH_T int8_t
#define TT_CHANNELS(base) base##_s8
#include "tt_channels_body.h" /* tt_gather_channels_s8, tt_scatter_channels_s8 */

void tt_quantize_input_s8(int8_t *y, const float *x, int32_t n, float scale, int32_t zp)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        const float v = x[i] / scale;
        const float r = roundf(v);
        int32_t q;
        if (r >= 255.0f) {
            q = 255;
        } else if (r <= -256.0f) {
            q = -256;
        } else if (r != r) { /* NaN: converting it to an integer is undefined */
            q = 0;
        } else {
            q = (int32_t)r;
        }
        y[i] = tt_sat8(q + zp, -128, 127);
    }
}

void tt_dequantize_s8(float *y, const int8_t *x, int32_t n, float scale, int32_t zp)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] = scale * (float)((int32_t)x[i] - zp);
    }
}

/* Depthwise (one input channel per output channel): the rows inside the input and each output
 * pixel's taps inside the row found once, no division or bounds test per tap, the geometry in
 * locals (a store through int8_t * may alias anything, so fields would be reloaded). The same
 * integer sums as the general loop below (exact in int32), so the same bits; several times
 * fewer instructions per MAC in a few hundred bytes: the kernel a build falls back on when the
 * optimised depthwise family does not fit the flash (tinytrain/device/kernel_choice.py). */
static void conv_row_dw(int8_t *out, const int8_t *const *in, const int8_t *w, const int32_t *b,
                        const tt_conv_geom *g, const tt_q8_requant *q)
{
    const int32_t c = g->cout, kh = g->kh, kw = g->kw, dw = g->dw, width = g->w;
    const int32_t sw = g->sw, pl = g->pl, ow = g->ow, step = g->dw * g->cout;
    const int32_t in_off = q->in_offset, out_off = q->out_offset;
    const int32_t act_min = q->act_min, act_max = q->act_max;
    const int8_t *rows[TT_MAX_KH];
    int32_t wrow[TT_MAX_KH]; /* weight offset of each row inside a channel's kh x kw taps */
    int32_t nrows = 0, ox, oc, r, kx;

    for (r = 0; r < kh; ++r) {
        if (in[r] != NULL) {
            rows[nrows] = in[r];
            wrow[nrows++] = r * kw;
        }
    }
    for (ox = 0; ox < ow; ++ox) {
        const int32_t ix0 = ox * sw - pl;
        int32_t lo = 0, hi = kw; /* taps kx in [lo, hi) land inside the row */
        while (lo < hi && ix0 + lo * dw < 0) ++lo;
        while (hi > lo && ix0 + (hi - 1) * dw >= width) --hi;
        const int32_t x0 = (ix0 + lo * dw) * c;
        for (oc = 0; oc < c; ++oc) {
            const int8_t *wc = &w[oc * kh * kw + lo];
            int32_t acc = 0;
            for (r = 0; r < nrows; ++r) {
                const int8_t *xp = &rows[r][x0 + oc];
                const int8_t *wp = &wc[wrow[r]];
                for (kx = lo; kx < hi; ++kx, xp += step) {
                    acc += ((int32_t)*xp + in_off) * (int32_t)*wp++;
                }
            }
            if (b != NULL) { /* wraps (a dead channel's bias may be saturated) */
                acc = (int32_t)((uint32_t)acc + (uint32_t)b[oc]);
            }
            acc = tt_mbqm_double_rounding(acc, q->mult[oc], q->shift[oc]) + out_off;
            out[ox * c + oc] = tt_sat8(acc, act_min, act_max);
        }
    }
}

void tt_conv2d_s8_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                      const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int8_t *out = tt_row(y, oy);
    const int8_t *in[TT_MAX_KH];
    int32_t ox, oc, ky, kx, ic;

    for (ky = 0; ky < g->kh; ++ky) { /* the input rows under this output row, or padding */
        const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
        in[ky] = (iy < 0 || iy >= g->h) ? NULL : tt_row(x, iy);
    }
    if (cin_g == 1 && cout_g == 1) {
        conv_row_dw(out, in, w, b, g, q);
        return;
    }
    for (ox = 0; ox < g->ow; ++ox) {
        for (oc = 0; oc < g->cout; ++oc) {
            const int32_t grp = oc / cout_g;
            int32_t acc = 0;
            for (ky = 0; ky < g->kh; ++ky) {
                if (in[ky] == NULL) {
                    continue;
                }
                for (kx = 0; kx < g->kw; ++kx) {
                    const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                    const int8_t *xp;
                    const int8_t *wp;
                    if (ix < 0 || ix >= g->w) {
                        continue; /* padding contributes (zp - zp) * w = 0 */
                    }
                    xp = &in[ky][ix * g->cin + grp * cin_g];
                    wp = &w[((oc * g->kh + ky) * g->kw + kx) * cin_g];
                    for (ic = 0; ic < cin_g; ++ic) {
                        acc += ((int32_t)xp[ic] + q->in_offset) * (int32_t)wp[ic];
                    }
                }
            }
            if (b != NULL) { /* wraps (a dead channel's bias may be saturated) */
                acc = (int32_t)((uint32_t)acc + (uint32_t)b[oc]);
            }
            /* LiteRT's reference conv rounds twice (its fully connected once) */
            acc = tt_mbqm_double_rounding(acc, q->mult[oc], q->shift[oc]) + q->out_offset;
            out[ox * g->cout + oc] = tt_sat8(acc, q->act_min, q->act_max);
        }
    }
}

void tt_conv2d_s8(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                  const tt_conv_geom *g, const tt_q8_requant *q)
{
    /* a whole tensor is a ring as tall as the tensor; x is only read */
    const tt_rows yr = {y, g->oh, g->ow * g->cout};
    const tt_rows xr = {(int8_t *)(uintptr_t)x, g->h, g->w * g->cin};
    int32_t oy;

    for (oy = 0; oy < g->oh; ++oy) {
        tt_conv2d_s8_row(&yr, &xr, oy, w, b, g, q);
    }
}

void tt_dense_s8(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b, int32_t in,
                 int32_t out, const tt_q8_requant *q)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        int32_t acc = 0;
        for (i = 0; i < in; ++i) {
            acc += ((int32_t)x[i] + q->in_offset) * (int32_t)w[o * in + i];
        }
        if (b != NULL) { /* wraps (a dead channel's bias may be saturated) */
            acc = (int32_t)((uint32_t)acc + (uint32_t)b[o]);
        }
        acc = tt_mbqm(acc, q->mult[o], q->shift[o]) + q->out_offset;
        y[o] = tt_sat8(acc, q->act_min, q->act_max);
    }
}

void tt_q8_clamp_backward(float *dx, const float *dy, const int8_t *y, int32_t n, int32_t lo,
                          int32_t hi)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dx[i] = ((int32_t)y[i] > lo && (int32_t)y[i] < hi) ? dy[i] : 0.0f;
    }
}

void tt_q8_clamp_mask(uint8_t *mask, const int8_t *y, int32_t n, int32_t lo, int32_t hi)
{
    int32_t i;

    for (i = 0; i < (n + 7) / 8; ++i) {
        mask[i] = 0;
    }
    for (i = 0; i < n; ++i) {
        if ((int32_t)y[i] > lo && (int32_t)y[i] < hi) {
            mask[i >> 3] = (uint8_t)(mask[i >> 3] | (1u << (i & 7)));
        }
    }
}

#define TT_BWDI_NAME tt_conv2d_backward_input_s8
#define TT_BWDI_ARGS const float *w_scale
#define TT_BWDI_W(i) (float)w[i]
#include "tt_conv_bwd_input_s8_body.h"

void tt_dw_backward_input_inplace_s8(float *g, const int8_t *w, const float *w_scale,
                                     const tt_conv_geom *geo)
{
    /* Depthwise, stride 1, dx the shape of dy: g holds dy on entry and dx on return. Each
     * channel is done row by row; the dy rows a later dx row still reads are kept in a ring
     * of pb + 1 rows. Taps are summed in the order tt_conv2d_backward_input_s8 adds them
     * (descending ky, kx), so both give the same floats. */
    const int32_t pb = (geo->kh - 1) * geo->dh - geo->pt;
    const int32_t keep = pb + 1;
    float line[TT_DW_LINE];
    int32_t c, iy, ix, ky, kx, oy, ox;

    for (c = 0; c < geo->cin; ++c) {
        for (iy = 0; iy < geo->h; ++iy) {
            float *saved = &line[(iy % keep) * geo->w];
            for (ix = 0; ix < geo->w; ++ix) {
                saved[ix] = g[(iy * geo->w + ix) * geo->cin + c];
            }
            for (ix = 0; ix < geo->w; ++ix) {
                float acc = 0.0f;
                for (ky = geo->kh - 1; ky >= 0; --ky) {
                    const float *row;
                    int32_t step;
                    oy = iy + geo->pt - ky * geo->dh;
                    if (oy < 0 || oy >= geo->oh) {
                        continue;
                    }
                    if (oy <= iy) { /* already overwritten in g: the saved copy */
                        row = &line[(oy % keep) * geo->w];
                        step = 1;
                    } else {
                        row = &g[oy * geo->w * geo->cin + c];
                        step = geo->cin;
                    }
                    for (kx = geo->kw - 1; kx >= 0; --kx) {
                        ox = ix + geo->pl - kx * geo->dw;
                        if (ox < 0 || ox >= geo->ow) {
                            continue;
                        }
                        acc += (row[ox * step] * w_scale[c]) *
                               (float)w[(c * geo->kh + ky) * geo->kw + kx];
                    }
                }
                g[(iy * geo->w + ix) * geo->cin + c] = acc;
            }
        }
    }
}

/* Real-valued dL/dW element (oc, ky, kx, x channel xc) from dy and the int8 input. */
static float conv_dw_elem(const float *dy, const int8_t *x, float x_scale, int32_t x_zp,
                          const tt_conv_geom *g, int32_t oc, int32_t ky, int32_t kx,
                          int32_t xc)
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
            acc += dy[(oy * g->ow + ox) * g->cout + oc] *
                   (float)((int32_t)x[(iy * g->w + ix) * g->cin + xc] - x_zp);
        }
    }
    return acc * x_scale;
}

void tt_conv2d_backward_weight_s8(float *dw, const float *dy, const int8_t *x, float x_scale,
                                  int32_t x_zp, const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oc, ky, kx, ic;

    for (oc = 0; oc < g->cout; ++oc) {
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                for (ic = 0; ic < cin_g; ++ic) {
                    dw[((oc * g->kh + ky) * g->kw + kx) * cin_g + ic] +=
                        conv_dw_elem(dy, x, x_scale, x_zp, g, oc, ky, kx,
                                     (oc / cout_g) * cin_g + ic);
                }
            }
        }
    }
}

void tt_dense_backward_input_s8(float *dx, const float *dy, const int8_t *w,
                                const float *w_scale, int32_t in, int32_t out)
{
    int32_t o, i;

    for (i = 0; i < in; ++i) {
        dx[i] = 0.0f;
    }
    for (o = 0; o < out; ++o) {
        const float d = dy[o] * w_scale[o];
        for (i = 0; i < in; ++i) {
            dx[i] += d * (float)w[o * in + i];
        }
    }
}

void tt_dense_backward_weight_s8(float *dw, const float *dy, const int8_t *x, float x_scale,
                                 int32_t x_zp, int32_t in, int32_t out)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        for (i = 0; i < in; ++i) {
            dw[o * in + i] += dy[o] * ((float)((int32_t)x[i] - x_zp) * x_scale);
        }
    }
}

/* ---- updates ---- */

/* Counter-based uniform in [0, 1) and the delta clamp: tt_q8_round.h, shared with the
 * optimised kernels so both draw the same bits. */
static float uniform(uint32_t salt, uint32_t step, uint32_t idx)
{
    return tt_sr_uniform(tt_sr_key(salt, step), idx);
}

static float clamp_delta(float d)
{
    return tt_sr_clamp(d);
}

static int8_t update_s8(int8_t w, uint8_t *shadow, float delta, const tt_q8_update *u,
                        uint32_t idx)
{
    int32_t v;

    delta = clamp_delta(delta);
    if (u->mode == TT_Q8_STOCHASTIC) {
        v = (int32_t)w - (int32_t)floorf(delta + uniform(u->salt, u->step, idx));
    } else if (u->mode == TT_Q8_SHADOW) {
        /* w + shadow/256 is a 16-bit fixed-point master weight for just this element; the
         * forward reads its floor. A step beyond 512 LSB saturates the master anyway: the
         * limit keeps d * 256 an int32 (past 2^31 the conversion saturates on Cortex-M and
         * wraps on x86, so the host and a board would disagree). */
        const float d = delta > 512.0f ? 512.0f : (delta < -512.0f ? -512.0f : delta);
        int32_t f = (int32_t)w * 256 + (int32_t)*shadow - (int32_t)roundf(d * 256.0f);
        if (f > 127 * 256) {
            f = 127 * 256;
        } else if (f < -127 * 256) {
            f = -127 * 256;
        }
        *shadow = (uint8_t)(f & 255);
        return (int8_t)((f - (f & 255)) / 256);
    } else {
        const float t = (float)w - delta; /* TTE's `int8 -= float`: truncates toward zero */
        v = (int32_t)(t > 127.0f ? 127.0f : (t < -127.0f ? -127.0f : t));
    }
    return (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
}

static int32_t update_s32(int32_t b, float delta, const tt_q8_update *u, uint32_t idx)
{
    int64_t v;

    delta = clamp_delta(delta);
    if (u->mode == TT_Q8_STOCHASTIC) {
        v = (int64_t)b - (int64_t)floorf(delta + uniform(u->salt, u->step, idx));
    } else if (u->mode == TT_Q8_SHADOW) {
        v = (int64_t)b - (int64_t)roundf(delta); /* one bias LSB is already s_x*s_w: tiny */
    } else {
        v = (int64_t)b - (int64_t)delta;
    }
    if (v > INT32_MAX || v < INT32_MIN) {
        tt_q8_saturations++;
        v = v > INT32_MAX ? INT32_MAX : INT32_MIN;
    }
    return (int32_t)v;
}

void tt_conv2d_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                             float x_scale, int32_t x_zp, const tt_conv_geom *g,
                             int32_t w_cin, const int32_t *idx, const float *step,
                             const tt_q8_update *u)
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
                    const int32_t wi = ((oc * g->kh + ky) * g->kw + kx) * w_cin + tt_channel(idx, ic);
                    const int32_t at = u->packed ? si : wi;
                    const float gr = conv_dw_elem(dy, x, x_scale, x_zp, g, oc, ky, kx,
                                                  (oc / cout_g) * cin_g + ic);
                    w[at] = update_s8(w[at], shadow != NULL ? &shadow[si] : NULL, gr * s, u,
                                      (uint32_t)wi);
                }
            }
        }
    }
}

void tt_dense_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, int32_t k, int32_t out, int32_t w_in,
                            const int32_t *idx, const float *step, const tt_q8_update *u)
{
    int32_t o, j;

    for (o = 0; o < out; ++o) {
        const float s = tt_q8_lr_step(step, o, u);
        for (j = 0; j < k; ++j) {
            const int32_t wi = o * w_in + tt_channel(idx, j);
            const int32_t at = u->packed ? o * k + j : wi;
            const float gr = dy[o] * ((float)((int32_t)x[j] - x_zp) * x_scale);
            w[at] = update_s8(w[at], shadow != NULL ? &shadow[o * k + j] : NULL, gr * s, u,
                              (uint32_t)wi);
        }
    }
}

void tt_bias_sgd_s32(int32_t *b, const float *dy, int32_t rows, int32_t c, const float *step,
                     const tt_q8_update *u)
{
    int32_t r, j;

    for (j = 0; j < c; ++j) {
        float acc = 0.0f;
        for (r = 0; r < rows; ++r) {
            acc += dy[r * c + j];
        }
        b[j] = update_s32(b[j], acc * tt_q8_lr_step(step, j, u), u, (uint32_t)j);
    }
}

void tt_sgd_s8(int8_t *p, float *g, uint8_t *shadow, int32_t rows, int32_t c,
               const int32_t *idx, int32_t k, int32_t rows_per_channel, const float *step,
               float grad_scale, const tt_q8_update *u)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            const int32_t gi = r * k + j;
            const int32_t pi = r * c + tt_channel(idx, j);
            const int32_t at = u->packed ? gi : pi;
            p[at] = update_s8(p[at], shadow != NULL ? &shadow[gi] : NULL,
                              g[gi] * grad_scale * tt_q8_lr_step(step, r / rows_per_channel, u),
                              u, (uint32_t)pi);
            g[gi] = 0.0f;
        }
    }
}

void tt_sgd_s32(int32_t *p, float *g, int32_t n, const float *step, float grad_scale,
                const tt_q8_update *u)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        p[i] = update_s32(p[i], g[i] * grad_scale * tt_q8_lr_step(step, i, u), u, (uint32_t)i);
        g[i] = 0.0f;
    }
}

int8_t tt_q8_step_s8(int8_t w, uint8_t *shadow, float delta, const tt_q8_update *u,
                     uint32_t idx)
{
    return update_s8(w, shadow, delta, u, idx);
}

int32_t tt_q8_step_s32(int32_t b, float delta, const tt_q8_update *u, uint32_t idx)
{
    return update_s32(b, delta, u, idx);
}
