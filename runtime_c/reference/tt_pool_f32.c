/*
 * Pooling reference kernels.  Geometry is the conv geometry with cin == cout
 * (groups ignored): window of output (oy, ox) starts at input
 * (oy*sh - pt, ox*sw - pl) with taps spaced (dh, dw).  Layouts are HWC.
 */
#include "tt_reference.h"

#include <stdint.h>

void tt_avg_pool2d_f32(float *y, const float *x, const tt_conv_geom *g,
                       int32_t count_include_pad)
{
    const int32_t c = g->cout;
    int32_t oy, ox, ch, ky, kx;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (ch = 0; ch < c; ++ch) {
                float acc = 0.0f;
                int32_t count = 0;
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
                        acc += x[(iy * g->w + ix) * c + ch];
                        ++count;
                    }
                }
                if (count_include_pad) {
                    count = g->kh * g->kw; /* padding taps count as zeros */
                }
                y[(oy * g->ow + ox) * c + ch] = (count > 0) ? acc / (float)count : 0.0f;
            }
        }
    }
}

void tt_avg_pool2d_backward_f32(float *dx, const float *dy, const tt_conv_geom *g,
                                int32_t count_include_pad)
{
    const int32_t c = g->cout;
    const int32_t nx = g->h * g->w * c;
    int32_t i, oy, ox, ch, ky, kx;

    for (i = 0; i < nx; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (ch = 0; ch < c; ++ch) {
                int32_t count = 0;
                float share;
                /* the divisor must be the one the forward pass used */
                if (count_include_pad) {
                    count = g->kh * g->kw;
                } else {
                    for (ky = 0; ky < g->kh; ++ky) {
                        const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                        for (kx = 0; kx < g->kw; ++kx) {
                            const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                            if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w) {
                                ++count;
                            }
                        }
                    }
                }
                if (count == 0) {
                    continue; /* window entirely in padding: no input to feed */
                }
                share = dy[(oy * g->ow + ox) * c + ch] / (float)count;
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
                        dx[(iy * g->w + ix) * c + ch] += share;
                    }
                }
            }
        }
    }
}

/* Index (into x) of the first maximal in-bounds tap of a window, scanning ky
 * outer, kx inner; -1 if the window lies entirely in the padding. */
static int32_t max_tap(const float *x, const tt_conv_geom *g, int32_t oy, int32_t ox,
                       int32_t ch)
{
    const int32_t c = g->cout;
    int32_t best = -1;
    int32_t ky, kx;

    for (ky = 0; ky < g->kh; ++ky) {
        const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
        if (iy < 0 || iy >= g->h) {
            continue; /* padding is never selected */
        }
        for (kx = 0; kx < g->kw; ++kx) {
            const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
            int32_t idx;
            if (ix < 0 || ix >= g->w) {
                continue;
            }
            idx = (iy * g->w + ix) * c + ch;
            /* strict '>' keeps the first of equal maxima */
            if (best < 0 || x[idx] > x[best]) {
                best = idx;
            }
        }
    }
    return best;
}

void tt_max_pool2d_f32(float *y, const float *x, const tt_conv_geom *g)
{
    const int32_t c = g->cout;
    int32_t oy, ox, ch;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (ch = 0; ch < c; ++ch) {
                const int32_t best = max_tap(x, g, oy, ox, ch);
                y[(oy * g->ow + ox) * c + ch] = (best >= 0) ? x[best] : 0.0f;
            }
        }
    }
}

#define TT_POOL_T float
#define TT_MAX_POOL_BACKWARD tt_max_pool2d_backward_f32
#include "tt_max_pool_backward_body.h"

void tt_global_avg_pool_f32(float *y, const float *x, int32_t rows, int32_t c)
{
    int32_t r, ch;

    for (ch = 0; ch < c; ++ch) {
        float acc = 0.0f;
        for (r = 0; r < rows; ++r) {
            acc += x[r * c + ch];
        }
        y[ch] = acc / (float)rows;
    }
}

void tt_global_avg_pool_backward_f32(float *dx, const float *dy, int32_t rows, int32_t c)
{
    int32_t r, ch;

    for (ch = 0; ch < c; ++ch) {
        const float share = dy[ch] / (float)rows;
        for (r = 0; r < rows; ++r) {
            dx[r * c + ch] = share;
        }
    }
}
