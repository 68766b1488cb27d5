/*
 * Optimised fp32 gradients of a conv whose dy is a global average pool's gradient kept per
 * channel (the reference: tt_pooled_grad.c). The reference reads every dy element through the
 * gate inside its innermost loop, 10-40 instructions per MAC. These kernels materialise dy a
 * slab at a time on the stack (tt_pooled_slab: the values the reference reads) and hand the
 * slab to the optimised plain-dy kernels (tt_f32_opt.c) on a sub-geometry:
 *   - weight gradients, a few output channels at a time: their gradient rows depend on those
 *     channels' dy only, so the sub-conv has cout = the slab's channels (groups == 1);
 *   - the input gradient, a band of output rows at a time: each input element's products are
 *     added in (oy, ox, oc) order, so consecutive bands accumulated into dx give its bits.
 * Each element gets the reference's products in the reference's order, so results are
 * bit-identical. Geometries a slab does not suit (grouped weight gradients, a fused update
 * over more pixels than a slab holds, an output row wider than a slab) take the reference.
 */
#include "tt_kernels.h"

#include <stdint.h>

#define TT_SLAB 128 /* floats of materialised dy on the stack (512 B) */

/* output channels per weight-gradient slab of npx pixels: 8, 4, 2 or 1 (0: a pixel row of
 * one channel does not fit) */
static int32_t slab_channels(int32_t npx)
{
    int32_t nq = 8;

    while (nq > 0 && npx * nq > TT_SLAB) {
        nq /= 2;
    }
    return nq;
}

/* g for nq of its output channels and its output rows [oy, oy + nr) */
static tt_conv_geom sub_geom(const tt_conv_geom *g, int32_t nq, int32_t oy, int32_t nr)
{
    tt_conv_geom s = *g;

    s.cout = nq;
    s.oh = nr;
    s.pt = g->pt - oy * g->sh; /* output row 0 of the band reads input row oy * sh - pt */
    return s;
}

void tt_conv2d_backward_weight_pooled_f32_opt(float *dw, const tt_pooled *dy, const float *x,
                                              const tt_conv_geom *g)
{
    float slab[TT_SLAB];
    const int32_t npx = g->oh * g->ow, taps = g->kh * g->kw;
    int32_t nq = slab_channels(npx), oc, oy;

    if (g->groups != 1 || g->ow > TT_SLAB) {
        tt_conv2d_backward_weight_pooled_f32(dw, dy, x, g);
        return;
    }
    if (nq == 0) {
        nq = 1; /* one channel, in bands of rows */
    }
    for (oc = 0; oc < g->cout; oc += nq) {
        const int32_t n = (g->cout - oc < nq) ? g->cout - oc : nq;
        /* bands of output rows: dw accumulates, so pixels stay in ascending order */
        const int32_t rows = TT_SLAB / (g->ow * n);
        for (oy = 0; oy < g->oh; oy += rows) {
            const int32_t nr = (g->oh - oy < rows) ? g->oh - oy : rows;
            const tt_conv_geom s = sub_geom(g, n, oy, nr);
            tt_pooled_slab(slab, dy, g->cout, oy * g->ow, nr * g->ow, oc, n);
            tt_conv2d_backward_weight_f32_opt(dw + oc * taps * g->cin, slab, x, &s);
        }
    }
}

void tt_conv2d_backward_weight_sgd_pooled_f32_opt(float *w, float *m, const tt_pooled *dy,
                                                  const float *x, const tt_conv_geom *g,
                                                  int32_t w_cin, const int32_t *idx, float lr,
                                                  float momentum, float wd)
{
    float slab[TT_SLAB];
    const int32_t npx = g->oh * g->ow, taps = g->kh * g->kw;
    const int32_t nq = slab_channels(npx);
    int32_t oc;

    /* a fused update needs each element's whole sum at once: every pixel in one slab */
    if (g->groups != 1 || nq == 0) {
        tt_conv2d_backward_weight_sgd_pooled_f32(w, m, dy, x, g, w_cin, idx, lr, momentum, wd);
        return;
    }
    for (oc = 0; oc < g->cout; oc += nq) {
        const int32_t n = (g->cout - oc < nq) ? g->cout - oc : nq;
        const tt_conv_geom s = sub_geom(g, n, 0, g->oh);
        tt_pooled_slab(slab, dy, g->cout, 0, npx, oc, n);
        tt_conv2d_backward_weight_sgd_f32_opt(w + oc * taps * w_cin,
                                              m != NULL ? m + oc * taps * g->cin : NULL, slab,
                                              x, &s, w_cin, idx, lr, momentum, wd);
    }
}

void tt_conv2d_backward_input_pooled_f32_opt(float *dx, const tt_pooled *dy, const float *w,
                                             const tt_conv_geom *g)
{
    float slab[TT_SLAB];
    const int32_t row = g->ow * g->cout, nx = g->h * g->w * g->cin;
    int32_t i, oy, rows;

    if (row > TT_SLAB) {
        tt_conv2d_backward_input_pooled_f32(dx, dy, w, g);
        return;
    }
    rows = TT_SLAB / row;
    for (i = 0; i < nx; ++i) {
        dx[i] = 0.0f; /* as the reference: padding taps receive nothing */
    }
    for (oy = 0; oy < g->oh; oy += rows) {
        const int32_t nr = (g->oh - oy < rows) ? g->oh - oy : rows;
        const tt_conv_geom s = sub_geom(g, g->cout, oy, nr);
        tt_pooled_slab(slab, dy, g->cout, oy * g->ow, nr * g->ow, 0, g->cout);
        tt_conv2d_backward_input_acc_f32_opt(dx, slab, w, &s);
    }
}
