/*
 * Recurrent layers: the LSTM and GRU recurrences over a precomputed input projection, and
 * their backpropagation through time (tinytrain/ops/lstm.py and gru.py hold the equations and
 * the numpy references these match).
 *
 * The backward kernels need a carried gradient from step t+1 to step t (dh, and the LSTM's
 * dc) but no scratch buffer: they walk the steps backwards, writing row t of their output, so
 * row 0 is free until the last step and holds the carries. At step 0 each element's carries
 * are read before its own gradients overwrite them.
 */
#include "tt_reference.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static float tt_sigmoid1(float x) { return 1.0f / (1.0f + tt_expf(-x)); }

/* out[g] = base[g] + (Rb ? Rb[g] : 0) + sum_j R[g*hidden + j] * h[j] (h NULL: zero state) */
static void tt_rnn_project(float *out, const float *base, const float *R, const float *Rb,
                           const float *h, int32_t gates, int32_t hidden)
{
    int32_t g, j;

    for (g = 0; g < gates; ++g) {
        float acc = (base != NULL) ? base[g] : 0.0f;
        if (Rb != NULL) acc += Rb[g];
        if (h != NULL) {
            const float *rg = R + g * hidden;
            for (j = 0; j < hidden; ++j) acc += rg[j] * h[j];
        }
        out[g] = acc;
    }
}

/* carry[j] += sum_g R[g*hidden + j] * d[g], with the gradients of gates >= scale_from times
 * scale[g - scale_from] (the GRU's n gate, scaled by r); scale NULL: none scaled */
static void tt_rnn_back_project(float *carry, const float *d, const float *R, int32_t gates,
                                int32_t hidden, const float *scale, int32_t scale_from)
{
    int32_t g, j;

    for (g = 0; g < gates; ++g) {
        const float *rg = R + g * hidden;
        const float dg = (scale != NULL && g >= scale_from) ? d[g] * scale[g - scale_from] : d[g];
        for (j = 0; j < hidden; ++j) carry[j] += dg * rg[j];
    }
}

void tt_lstm_f32(float *gates, float *y, float *cells, const float *xproj, const float *R,
                 const float *Rb, const float *h0, const float *c0, int32_t steps,
                 int32_t hidden, float cell_clip)
{
    const int32_t H = hidden;
    int32_t t, j;

    for (t = 0; t < steps; ++t) {
        float *gt = gates + t * 4 * H; /* may be xproj's row t itself (in place) */
        const float *hp = (t > 0) ? y + (t - 1) * H : h0;
        const float *cp = (t > 0) ? cells + (t - 1) * H : c0;
        tt_rnn_project(gt, xproj + t * 4 * H, R, Rb, hp, 4 * H, H);
        for (j = 0; j < H; ++j) {
            const float i = tt_sigmoid1(gt[j]);
            const float o = tt_sigmoid1(gt[H + j]);
            const float f = tt_sigmoid1(gt[2 * H + j]);
            const float u = tanhf(gt[3 * H + j]);
            float c = f * ((cp != NULL) ? cp[j] : 0.0f) + i * u;
            if (cell_clip > 0.0f) {
                c = (c < -cell_clip) ? -cell_clip : ((c > cell_clip) ? cell_clip : c);
            }
            gt[j] = i;
            gt[H + j] = o;
            gt[2 * H + j] = f;
            gt[3 * H + j] = u;
            cells[t * H + j] = c;
            y[t * H + j] = o * tanhf(c);
        }
    }
}

void tt_lstm_backward_f32(float *dg, const float *dy, const float *gates, const float *cells,
                          const float *R, const float *c0, int32_t steps, int32_t hidden,
                          float cell_clip)
{
    const int32_t H = hidden;
    float *carry_h = dg;     /* dL/dh_t from the steps after t */
    float *carry_c = dg + H; /* dL/dc_t from the steps after t */
    int32_t t, j;

    for (j = 0; j < 2 * H; ++j) dg[j] = 0.0f;
    for (t = steps - 1; t >= 0; --t) {
        const float *gt = gates + t * 4 * H;
        const float *cp = (t > 0) ? cells + (t - 1) * H : c0;
        float *row = dg + t * 4 * H;
        for (j = 0; j < H; ++j) {
            const float i = gt[j], o = gt[H + j], f = gt[2 * H + j], u = gt[3 * H + j];
            const float c = cells[t * H + j];
            const float tc = tanhf(c);
            const float dh = dy[t * H + j] + carry_h[j];
            /* a clipped cell state passes no gradient (strictly inside the clip passes) */
            const int clipped = cell_clip > 0.0f && !(c > -cell_clip && c < cell_clip);
            const float dc = clipped ? 0.0f : carry_c[j] + dh * o * (1.0f - tc * tc);
            row[j] = dc * u * i * (1.0f - i);
            row[H + j] = dh * tc * o * (1.0f - o);
            row[2 * H + j] = dc * ((cp != NULL) ? cp[j] : 0.0f) * f * (1.0f - f);
            row[3 * H + j] = dc * i * (1.0f - u * u);
            if (t > 0) carry_c[j] = dc * f;
        }
        if (t > 0) {
            for (j = 0; j < H; ++j) carry_h[j] = 0.0f;
            tt_rnn_back_project(carry_h, row, R, 4 * H, H, NULL, 0);
        }
    }
}

void tt_gru_f32(float *gates, float *y, float *pn, const float *xproj, const float *R,
                const float *Rb, const float *h0, int32_t steps, int32_t hidden)
{
    const int32_t H = hidden;
    int32_t t, g, j;

    for (t = 0; t < steps; ++t) {
        float *gt = gates + t * 3 * H; /* may be xproj's row t itself (in place) */
        const float *xp = xproj + t * 3 * H;
        float *pt = pn + t * H;
        const float *hp = (t > 0) ? y + (t - 1) * H : h0;
        for (g = 0; g < 3 * H; ++g) { /* p = R h + Rb: z and r add to xproj, n kept apart */
            float acc = (Rb != NULL) ? Rb[g] : 0.0f;
            if (hp != NULL) {
                const float *rg = R + g * H;
                for (j = 0; j < H; ++j) acc += rg[j] * hp[j];
            }
            if (g < 2 * H) {
                gt[g] = xp[g] + acc;
            } else {
                pt[g - 2 * H] = acc;
            }
        }
        for (j = 0; j < H; ++j) {
            const float z = tt_sigmoid1(gt[j]);
            const float r = tt_sigmoid1(gt[H + j]);
            const float n = tanhf(xp[2 * H + j] + r * pt[j]);
            gt[j] = z;
            gt[H + j] = r;
            gt[2 * H + j] = n;
            y[t * H + j] = (1.0f - z) * n + z * ((hp != NULL) ? hp[j] : 0.0f);
        }
    }
}

void tt_gru_backward_f32(float *dx, const float *dy, const float *gates, const float *pn,
                         const float *y, const float *R, const float *h0, int32_t steps,
                         int32_t hidden)
{
    const int32_t H = hidden;
    float *carry = dx; /* dL/dh_t from the steps after t */
    int32_t t, j;

    for (j = 0; j < H; ++j) carry[j] = 0.0f;
    for (t = steps - 1; t >= 0; --t) {
        const float *gt = gates + t * 3 * H;
        const float *hp = (t > 0) ? y + (t - 1) * H : h0;
        float *row = dx + t * 3 * H;
        for (j = 0; j < H; ++j) {
            const float z = gt[j], r = gt[H + j], n = gt[2 * H + j], p = pn[t * H + j];
            const float dh = dy[t * H + j] + carry[j];
            const float dn = dh * (1.0f - z) * (1.0f - n * n);
            row[j] = dh * (((hp != NULL) ? hp[j] : 0.0f) - n) * z * (1.0f - z);
            row[H + j] = dn * p * r * (1.0f - r);
            row[2 * H + j] = dn;
            if (t > 0) carry[j] = dh * z;
        }
        if (t > 0) tt_rnn_back_project(carry, row, R, 3 * H, H, gt + H, 2 * H);
    }
}

/* The recurrent projection's gradient dhp[t][g] is dx[t][g], or for a GRU (reset != NULL: its
 * gates) the n rows times the reset gate r, which multiplies R_n h + Rb_n. The r that scales row
 * g of step t is *(rs + t * gates), rs from tt_rnn_reset_row (NULL: row g is not scaled). */
static const float *tt_rnn_reset_row(const float *reset, int32_t g, int32_t gates)
{
    const int32_t H = gates / 3;
    return (reset != NULL && g >= 2 * H) ? reset + H + (g - 2 * H) : NULL;
}

void tt_rnn_backward_recurrent_f32(float *dR, const float *dx, const float *y, const float *h0,
                                   const float *reset, int32_t steps, int32_t gates,
                                   int32_t hidden)
{
    int32_t t, g, j;

    for (t = 0; t < steps; ++t) {
        const float *hp = (t > 0) ? y + (t - 1) * hidden : h0;
        if (hp == NULL) continue; /* a zero initial state adds nothing */
        for (g = 0; g < gates; ++g) {
            const float *rs = tt_rnn_reset_row(reset, g, gates);
            const float d = (rs != NULL) ? dx[t * gates + g] * rs[t * gates] : dx[t * gates + g];
            float *rg = dR + g * hidden;
            for (j = 0; j < hidden; ++j) rg[j] += d * hp[j];
        }
    }
}

void tt_rnn_recurrent_sgd_f32(float *R, float *m, const float *dx, const float *y,
                              const float *h0, const float *reset, int32_t steps, int32_t gates,
                              int32_t hidden, float lr, float momentum, float wd)
{
    int32_t t, g, j;

    for (g = 0; g < gates; ++g) {
        const float *d = dx + g;
        const float *rs = tt_rnn_reset_row(reset, g, gates);
        for (j = 0; j < hidden; ++j) {
            /* summed in tt_rnn_backward_recurrent_f32's order: step 0 (h0), then 1, 2, ... */
            float acc = 0.0f;
            const float *h = y + j;
            if (h0 != NULL) acc += ((rs != NULL) ? d[0] * rs[0] : d[0]) * h0[j];
            if (rs != NULL) {
                for (t = 1; t < steps; ++t) {
                    acc += (d[t * gates] * rs[t * gates]) * h[(t - 1) * hidden];
                }
            } else {
                for (t = 1; t < steps; ++t) acc += d[t * gates] * h[(t - 1) * hidden];
            }
            R[g * hidden + j] = tt_sgd_elem(R[g * hidden + j], acc,
                                            m != NULL ? &m[g * hidden + j] : NULL, lr, momentum,
                                            wd);
        }
    }
}

/* sum_t dhp[t][g] of a GRU, in step order */
static float tt_gru_bias_sum(const float *dx, const float *gates, int32_t steps, int32_t g,
                             int32_t hidden)
{
    const float *rs = tt_rnn_reset_row(gates, g, 3 * hidden);
    float acc = 0.0f;
    int32_t t;

    for (t = 0; t < steps; ++t) {
        const float d = dx[t * 3 * hidden + g];
        acc += (rs != NULL) ? d * rs[t * 3 * hidden] : d;
    }
    return acc;
}

void tt_gru_bias_backward_f32(float *db, const float *dx, const float *gates, int32_t steps,
                              int32_t hidden)
{
    int32_t g;

    for (g = 0; g < 3 * hidden; ++g) db[g] += tt_gru_bias_sum(dx, gates, steps, g, hidden);
}

void tt_gru_bias_sgd_f32(float *b, float *m, const float *dx, const float *gates, int32_t steps,
                         int32_t hidden, float lr, float momentum, float wd)
{
    int32_t g;

    for (g = 0; g < 3 * hidden; ++g) {
        b[g] = tt_sgd_elem(b[g], tt_gru_bias_sum(dx, gates, steps, g, hidden),
                           m != NULL ? &m[g] : NULL, lr, momentum, wd);
    }
}
