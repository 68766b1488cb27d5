/*
 * The partial-channel copies, written once for each element type. Not a header of its own: a
 * kernel file includes it after defining
 *   TT_CH_T            the element type (float in tt_sparse_f32.c, int8_t in tt_q8_core.c),
 *   TT_CHANNELS(base)  a kernel's name from its base name (tt_gather_channels -> ..._f32).
 */

void TT_CHANNELS(tt_gather_channels)(TT_CH_T *y, const TT_CH_T *x, int32_t rows, int32_t c,
                                     const int32_t *idx, int32_t k)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            y[r * k + j] = x[r * c + tt_channel(idx, j)];
        }
    }
}

void TT_CHANNELS(tt_scatter_channels)(TT_CH_T *y, const TT_CH_T *x, int32_t rows, int32_t c,
                                      const int32_t *idx, int32_t k)
{
    int32_t r, j;

    for (r = 0; r < rows; ++r) {
        for (j = 0; j < k; ++j) {
            y[r * c + tt_channel(idx, j)] = x[r * k + j];
        }
    }
}

#undef TT_CH_T
#undef TT_CHANNELS
