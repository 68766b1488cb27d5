/*
 * --rounding master: the int8 layers whose weights train whole with a shadow byte read the
 * 16-bit master m = 256 w + s instead of w, the floor a plain int8 kernel reads. The shadow
 * update (tt_q8_core.c) keeps sub-LSB steps in s; reading m lets the forward and the input
 * gradient see them, as fp32 training would.
 *
 * Forward: acc = sum (x + in_offset) * m + 256 * b in int64 (a product is below 2^23, a sum of
 * a few thousand of them is not), then (acc + 128) >> 8, saturated to int32, is requantised
 * as the int8 kernels do. Input gradient: m / 256 is exact in float32 (16 significant bits).
 * numpy: tinytrain/ops/conv2d_q8.py (weight_values, master_acc, real_weight).
 */
#include "tt_reference.h"

#include <stdint.h>

static inline int32_t master_at(const int8_t *w, const uint8_t *s, int32_t i)
{
    return (int32_t)w[i] * 256 + (int32_t)s[i];
}

static inline float master_real(const int8_t *w, const uint8_t *s, int32_t i)
{
    return (float)master_at(w, s, i) * (1.0f / 256.0f);
}

void tt_conv2d_s8_master(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oy, ox, oc, ky, kx, ic;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                int64_t acc = 0;
                int32_t v;
                for (ky = 0; ky < g->kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        continue; /* padding contributes (zp - zp) * m = 0 */
                    }
                    for (kx = 0; kx < g->kw; ++kx) {
                        const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                        const int32_t wo = ((oc * g->kh + ky) * g->kw + kx) * cin_g;
                        const int8_t *xp;
                        if (ix < 0 || ix >= g->w) {
                            continue;
                        }
                        xp = &x[(iy * g->w + ix) * g->cin + grp * cin_g];
                        for (ic = 0; ic < cin_g; ++ic) {
                            acc += (int64_t)(((int32_t)xp[ic] + q->in_offset) *
                                             master_at(w, shadow, wo + ic));
                        }
                    }
                }
                if (b != NULL) {
                    acc += (int64_t)b[oc] * 256;
                }
                v = tt_mbqm_double_rounding(tt_q8_master_round(acc), q->mult[oc], q->shift[oc]);
                y[(oy * g->ow + ox) * g->cout + oc] = tt_sat8(v + q->out_offset, q->act_min,
                                                              q->act_max);
            }
        }
    }
}

void tt_dense_s8_master(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                        const int32_t *b, int32_t in, int32_t out, const tt_q8_requant *q)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        int64_t acc = 0;
        int32_t v;
        for (i = 0; i < in; ++i) {
            acc += (int64_t)(((int32_t)x[i] + q->in_offset) * master_at(w, shadow, o * in + i));
        }
        if (b != NULL) {
            acc += (int64_t)b[o] * 256;
        }
        v = tt_mbqm(tt_q8_master_round(acc), q->mult[o], q->shift[o]);
        y[o] = tt_sat8(v + q->out_offset, q->act_min, q->act_max);
    }
}

#define TT_BWDI_NAME tt_conv2d_backward_input_s8_master
#define TT_BWDI_ARGS const uint8_t *shadow, const float *w_scale
#define TT_BWDI_W(i) master_real(w, shadow, i)
#include "tt_conv_bwd_input_s8_body.h"

void tt_dense_backward_input_s8_master(float *dx, const float *dy, const int8_t *w,
                                       const uint8_t *shadow, const float *w_scale, int32_t in,
                                       int32_t out)
{
    int32_t o, i;

    for (i = 0; i < in; ++i) {
        dx[i] = 0.0f;
    }
    for (o = 0; o < out; ++o) {
        const float d = dy[o] * w_scale[o];
        for (i = 0; i < in; ++i) {
            dx[i] += d * master_real(w, shadow, o * in + i);
        }
    }
}

/* channel streaming (tt_channel_stream.c): channel c's share, summed in the order of
 * tt_conv2d_backward_input_s8_master, so a streamed region gives the same floats */
void tt_cs_pw_input_s8_master(float *plane, const float *dy, const int8_t *w,
                              const uint8_t *shadow, const float *w_scale, int32_t n,
                              int32_t cout, int32_t cin, int32_t c)
{
    int32_t p, o;

    for (p = 0; p < n; ++p) {
        float acc = 0.0f;
        for (o = 0; o < cout; ++o) {
            const float d = dy[p * cout + o] * w_scale[o];
            acc += d * master_real(w, shadow, o * cin + c);
        }
        plane[p] = acc;
    }
}

#define TT_MASTER_ROW 64 /* master values converted once per channel, this many at a time */

void tt_cs_pw_input_add_s8_master(float *dx, const float *dy, const int8_t *w,
                                  const uint8_t *shadow, const float *w_scale, int32_t n,
                                  int32_t dx_c, const int32_t *idx, int32_t k, int32_t c)
{
    /* each dx element still gets one add per channel: the order of the sums is unchanged */
    float row[TT_MASTER_ROW];
    int32_t p, j, j0;

    for (j0 = 0; j0 < k; j0 += TT_MASTER_ROW) {
        const int32_t m = k - j0 < TT_MASTER_ROW ? k - j0 : TT_MASTER_ROW;
        for (j = 0; j < m; ++j) {
            row[j] = master_real(w, shadow, c * k + j0 + j);
        }
        for (p = 0; p < n; ++p) {
            const float d = dy[p] * w_scale[c];
            float *out = &dx[p * dx_c];
            for (j = 0; j < m; ++j) {
                out[tt_channel(idx, j0 + j)] += d * row[j];
            }
        }
    }
}
