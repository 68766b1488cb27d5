/*
 * The max pool's backward, written once for each input type: dy goes to the input element the
 * forward chose. Not a header of its own: a kernel file includes it after defining
 *   TT_POOL_T             the input's element type (float in tt_pool_f32.c, int8_t in
 *                         tt_q8_pool.c),
 *   TT_MAX_POOL_BACKWARD  the kernel's name,
 * and its static max_tap(x, g, oy, ox, ch): the index of the window's first maximum, or -1
 * when every tap is padding, exactly as its forward kernel chooses.
 */

void TT_MAX_POOL_BACKWARD(float *dx, const float *dy, const TT_POOL_T *x, const tt_conv_geom *g)
{
    const int32_t c = g->cout;
    const int32_t nx = g->h * g->w * c;
    int32_t i, oy, ox, ch;

    for (i = 0; i < nx; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            for (ch = 0; ch < c; ++ch) {
                /* recompute the argmax instead of storing indices (saves RAM) */
                const int32_t best = max_tap(x, g, oy, ox, ch);
                if (best >= 0) {
                    dx[best] += dy[(oy * g->ow + ox) * c + ch];
                }
            }
        }
    }
}

#undef TT_POOL_T
#undef TT_MAX_POOL_BACKWARD
