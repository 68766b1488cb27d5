/*
 * int8 pooling bit-exact with LiteRT's reference kernels: average / max pool over the
 * in-bounds taps of each window, MEAN over H and W; and the int8 max-pool backward.
 */
#include "tt_reference.h"

#include <stdint.h>

/* first and one-past-last in-bounds taps of a window starting at `origin` */
static void tap_range(int32_t origin, int32_t k, int32_t d, int32_t n, int32_t *lo,
                      int32_t *hi)
{
    int32_t t = 0;
    while (t < k && origin + t * d < 0) ++t;
    *lo = t;
    while (t < k && origin + t * d < n) ++t;
    *hi = t;
}

/* integer division rounding half away from zero, as TFLite's average pool and mean */
static int32_t rounded_div(int32_t acc, int32_t n)
{
    return acc > 0 ? (acc + n / 2) / n : (acc - n / 2) / n;
}

void tt_avg_pool2d_s8(int8_t *y, const int8_t *x, const tt_conv_geom *g, int32_t act_min,
                      int32_t act_max)
{
    const int32_t c = g->cout;
    int32_t oy, ox, ch, ky, kx;

    for (oy = 0; oy < g->oh; ++oy) {
        const int32_t iy0 = oy * g->sh - g->pt;
        int32_t ky0, ky1;
        tap_range(iy0, g->kh, g->dh, g->h, &ky0, &ky1);
        for (ox = 0; ox < g->ow; ++ox) {
            const int32_t ix0 = ox * g->sw - g->pl;
            int32_t kx0, kx1;
            tap_range(ix0, g->kw, g->dw, g->w, &kx0, &kx1);
            for (ch = 0; ch < c; ++ch) {
                int32_t acc = 0, count = (ky1 - ky0) * (kx1 - kx0);
                for (ky = ky0; ky < ky1; ++ky) {
                    for (kx = kx0; kx < kx1; ++kx) {
                        acc += x[((iy0 + ky * g->dh) * g->w + ix0 + kx * g->dw) * c + ch];
                    }
                }
                if (count == 0) count = 1; /* TFLite rejects empty windows */
                y[(oy * g->ow + ox) * c + ch] = tt_sat8(rounded_div(acc, count), act_min,
                                                        act_max);
            }
        }
    }
}

/* flat index of the first maximal in-bounds tap of window (oy, ox) in channel ch, or -1 */
static int32_t max_tap(const int8_t *x, const tt_conv_geom *g, int32_t oy, int32_t ox,
                       int32_t ch)
{
    const int32_t iy0 = oy * g->sh - g->pt, ix0 = ox * g->sw - g->pl;
    int32_t ky0, ky1, kx0, kx1, ky, kx, best = -1, best_v = -129;

    tap_range(iy0, g->kh, g->dh, g->h, &ky0, &ky1);
    tap_range(ix0, g->kw, g->dw, g->w, &kx0, &kx1);
    for (ky = ky0; ky < ky1; ++ky) {
        for (kx = kx0; kx < kx1; ++kx) {
            const int32_t i = ((iy0 + ky * g->dh) * g->w + ix0 + kx * g->dw) * g->cout + ch;
            if (x[i] > best_v) {
                best_v = x[i];
                best = i;
            }
        }
    }
    return best;
}

void tt_max_pool2d_s8(int8_t *y, const int8_t *x, const tt_conv_geom *g, int32_t act_min,
                      int32_t act_max)
{
    const int32_t c = g->cout;
    int32_t oy, ox, ch;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (ch = 0; ch < c; ++ch) {
                const int32_t best = max_tap(x, g, oy, ox, ch);
                y[(oy * g->ow + ox) * c + ch] =
                    tt_sat8(best >= 0 ? x[best] : -128, act_min, act_max);
            }
        }
    }
}

#define TT_POOL_T int8_t
#define TT_MAX_POOL_BACKWARD tt_max_pool2d_backward_s8
#include "tt_max_pool_backward_body.h"

void tt_mean_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t c, int32_t in_zp,
                int32_t out_zp, int32_t mult, int32_t shift)
{
    int32_t r, ch;

    for (ch = 0; ch < c; ++ch) {
        int32_t acc = 0;
        for (r = 0; r < rows; ++r) {
            acc += (int32_t)x[r * c + ch] - in_zp;
        }
        y[ch] = tt_sat8(tt_mbqm_double_rounding(acc, mult, shift) + out_zp, -128, 127);
    }
}
