/*
 * An int8 conv's input gradient, written once for each way of reading the weight. Not a header
 * of its own: a kernel file includes it after defining
 *   TT_BWDI_NAME       the kernel (tt_conv2d_backward_input_s8 in tt_q8_core.c,
 *                      ..._s8_master in tt_q8_master.c),
 *   TT_BWDI_ARGS       the parameters after w (`const float *w_scale` or with the shadow first),
 *   TT_BWDI_W(i)       weight element i as a float (w[i], or the master w[i] + shadow[i] / 256).
 */

void TT_BWDI_NAME(float *dx, const float *dy, const int8_t *w, TT_BWDI_ARGS,
                  const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t cout_g = g->cout / g->groups;
    int32_t i, oy, ox, oc, ky, kx, ic;

    for (i = 0; i < g->h * g->w * g->cin; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (oc = 0; oc < g->cout; ++oc) {
                const int32_t grp = oc / cout_g;
                const float d = dy[(oy * g->ow + ox) * g->cout + oc] * w_scale[oc];
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
                        for (ic = 0; ic < cin_g; ++ic) {
                            dx[(iy * g->w + ix) * g->cin + grp * cin_g + ic] +=
                                d * TT_BWDI_W(((oc * g->kh + ky) * g->kw + kx) * cin_g + ic);
                        }
                    }
                }
            }
        }
    }
}

#undef TT_BWDI_NAME
#undef TT_BWDI_ARGS
#undef TT_BWDI_W
