/*
 * Convolution reference kernels (regular, grouped, depthwise, pointwise).
 *
 * Layouts: x (h, w, cin), y / dy (oh, ow, cout), w (cout, kh, kw, cin/groups).
 * Output (oy, ox) reads the window starting at input (oy*sh - pt, ox*sw - pl)
 * with taps spaced (dh, dw); taps outside the input are zero padding and are
 * skipped.  Output channel oc belongs to group oc / (cout/groups) and reads the
 * input channels [grp*cin_g, (grp+1)*cin_g).
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* b may be NULL (conv without bias). */
void tt_conv2d_f32(float *y, const float *x, const float *w, const float *b,
                   const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oy, ox, oc, ky, kx, ic;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                float acc = (b != NULL) ? b[oc] : 0.0f;
                for (ky = 0; ky < g->kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        continue; /* zero padding row */
                    }
                    for (kx = 0; kx < g->kw; ++kx) {
                        const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                        const float *xp;
                        const float *wp;
                        if (ix < 0 || ix >= g->w) {
                            continue; /* zero padding column */
                        }
                        xp = x + (iy * g->w + ix) * g->cin + grp * cin_g;
                        wp = w + ((oc * g->kh + ky) * g->kw + kx) * cin_g;
                        for (ic = 0; ic < cin_g; ++ic) {
                            acc += xp[ic] * wp[ic];
                        }
                    }
                }
                y[(oy * g->ow + ox) * g->cout + oc] = acc;
            }
        }
    }
}

#define TT_DY_T float
#define TT_DY(dy, i, oc) ((dy)[i])
#define TT_CONV_GRAD(base) base##_f32
#include "tt_conv2d_grad_f32_body.h" /* tt_conv2d_backward_{input,weight,weight_sgd}_f32 */


/* Accumulates (+=): the per-sample channel sums are added to db. */
void tt_bias_backward_f32(float *db, const float *dy, int32_t rows, int32_t c)
{
    int32_t r, ch;

    for (ch = 0; ch < c; ++ch) {
        float acc = 0.0f;
        for (r = 0; r < rows; ++r) {
            acc += dy[r * c + ch];
        }
        db[ch] += acc;
    }
}
