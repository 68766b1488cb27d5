/*
 * Row kernels for a backward region run row by row (tinytrain/passes/stream_backward.py):
 * the input gradient of a depthwise conv one row at a time, reading its output gradient from
 * a ring of rows, and a bias gradient summed row by row.
 *
 * Each adds the same floats in the same order as the whole-tensor kernel in tt_q8_core.c, so
 * results are bit-identical: tt_conv2d_backward_input_s8 adds, into dx[iy][ix][c], the taps
 * of the output pixels in increasing (oy, ox), i.e. descending (ky, kx); tt_bias_sgd_s32 sums
 * each channel over the pixels in order, which a running sum carried across rows continues.
 */
#include "tt_reference.h"

#include <stdint.h>

void tt_dw_backward_input_s8_row(float *dx, const tt_rows *dy, int32_t iy, const int8_t *w,
                                 const float *w_scale, const tt_conv_geom *g)
{
    int32_t ix, c, ky, kx;

    for (ix = 0; ix < g->w; ++ix) {
        for (c = 0; c < g->cin; ++c) {
            float acc = 0.0f;
            for (ky = g->kh - 1; ky >= 0; --ky) {
                const int32_t ty = iy + g->pt - ky * g->dh;
                const float *row;
                int32_t oy;
                if (ty < 0 || ty % g->sh != 0) {
                    continue;
                }
                oy = ty / g->sh;
                if (oy >= g->oh) {
                    continue;
                }
                row = (const float *)tt_row(dy, oy);
                for (kx = g->kw - 1; kx >= 0; --kx) {
                    const int32_t tx = ix + g->pl - kx * g->dw;
                    int32_t ox;
                    if (tx < 0 || tx % g->sw != 0) {
                        continue;
                    }
                    ox = tx / g->sw;
                    if (ox >= g->ow) {
                        continue;
                    }
                    acc += (row[ox * g->cout + c] * w_scale[c]) *
                           (float)w[(c * g->kh + ky) * g->kw + kx];
                }
            }
            dx[ix * g->cin + c] = acc;
        }
    }
}

void tt_bias_grad_row_f32(float *sum, const float *dy, int32_t pixels, int32_t c)
{
    int32_t p, j;

    for (p = 0; p < pixels; ++p) {
        for (j = 0; j < c; ++j) {
            sum[j] += dy[p * c + j];
        }
    }
}
