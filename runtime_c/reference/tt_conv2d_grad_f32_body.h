/*
 * The fp32 convolution gradient kernels, written once for the two ways they read dy: a
 * float tensor (tt_conv2d_f32.c: tt_conv2d_backward_input_f32, ..._weight_f32,
 * ..._weight_sgd_f32) and a pooled gradient (tt_pooled_grad.c: the same names with
 * _pooled_f32). The same floats are added in the same order either way. Not a header of its
 * own: a kernel file includes it once after defining
 *   TT_DY_T               the element type dy points to (float, tt_pooled),
 *   TT_DY(dy, i, oc)      dy's element i, whose channel is oc, as a float,
 *   TT_CONV_GRAD(base)    a kernel's name from its base name.
 * Layouts and padding as in tt_conv2d_f32.c.
 */

/* Scatter form of the transposed convolution: every dy element adds its
 * contribution back to the input taps it was computed from. */
void TT_CONV_GRAD(tt_conv2d_backward_input)(float *dx, const TT_DY_T *dy, const float *w,
                                            const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    const int32_t nx = g->h * g->w * g->cin;
    int32_t i, oy, ox, oc, ky, kx, ic;

    for (i = 0; i < nx; ++i) {
        dx[i] = 0.0f; /* overwrite: padding taps receive nothing */
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                const float d = TT_DY(dy, (oy * g->ow + ox) * g->cout + oc, oc);
                for (ky = 0; ky < g->kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        continue;
                    }
                    for (kx = 0; kx < g->kw; ++kx) {
                        const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                        float *dxp;
                        const float *wp;
                        if (ix < 0 || ix >= g->w) {
                            continue;
                        }
                        dxp = dx + (iy * g->w + ix) * g->cin + grp * cin_g;
                        wp = w + ((oc * g->kh + ky) * g->kw + kx) * cin_g;
                        for (ic = 0; ic < cin_g; ++ic) {
                            dxp[ic] += d * wp[ic];
                        }
                    }
                }
            }
        }
    }
}

/* Accumulates (+=) so that calling it once per sample sums a batch. */
void TT_CONV_GRAD(tt_conv2d_backward_weight)(float *dw, const TT_DY_T *dy, const float *x,
                                             const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oy, ox, oc, ky, kx, ic;

    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                const float d = TT_DY(dy, (oy * g->ow + ox) * g->cout + oc, oc);
                for (ky = 0; ky < g->kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
                    if (iy < 0 || iy >= g->h) {
                        continue; /* padding tap: x is zero, no contribution */
                    }
                    for (kx = 0; kx < g->kw; ++kx) {
                        const int32_t ix = ox * g->sw - g->pl + kx * g->dw;
                        const float *xp;
                        float *dwp;
                        if (ix < 0 || ix >= g->w) {
                            continue;
                        }
                        xp = x + (iy * g->w + ix) * g->cin + grp * cin_g;
                        dwp = dw + ((oc * g->kh + ky) * g->kw + kx) * cin_g;
                        for (ic = 0; ic < cin_g; ++ic) {
                            dwp[ic] += d * xp[ic];
                        }
                    }
                }
            }
        }
    }
}

/* The weight gradient fused with its SGD update (batch 1): each element's gradient is summed
 * in tt_conv2d_backward_weight's order, then applied at once; only the idx channels of a
 * partial update (w has w_cin input channels per tap) are touched. */
void TT_CONV_GRAD(tt_conv2d_backward_weight_sgd)(float *w, float *m, const TT_DY_T *dy,
                                                 const float *x, const tt_conv_geom *g,
                                                 int32_t w_cin, const int32_t *idx, float lr,
                                                 float momentum, float wd)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t oc, ky, kx, ic, oy, ox;

    for (oc = 0; oc < g->cout; ++oc) {
        const int32_t grp = oc / cout_g;
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                for (ic = 0; ic < cin_g; ++ic) {
                    const int32_t gi = ((oc * g->kh + ky) * g->kw + kx) * cin_g + ic;
                    float *wp = &w[((oc * g->kh + ky) * g->kw + kx) * w_cin + tt_channel(idx, ic)];
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
                            acc += TT_DY(dy, (oy * g->ow + ox) * g->cout + oc, oc) *
                                   x[(iy * g->w + ix) * g->cin + grp * cin_g + ic];
                        }
                    }
                    *wp = tt_sgd_elem(*wp, acc, m != NULL ? &m[gi] : NULL, lr, momentum, wd);
                }
            }
        }
    }
}

#undef TT_DY_T
#undef TT_DY
#undef TT_CONV_GRAD
