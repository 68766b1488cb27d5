/*
 * Optimised partial-channel copies: tt_gather_channels_* / tt_scatter_channels_* of a run of
 * channels. A split partial update (passes/split_weights.py) rebuilds a layer's whole int8
 * weight from its trained and frozen parts on every forward pass, and gathers the trained
 * input channels of a saved activation: the code generator passes a run of channels (TTE's
 * first k, and the rest after them) as an offset pointer and no index table, which the
 * reference copies element by element; here one memcpy per row. Index tables go to the
 * reference loops. Same results bit for bit (copies).
 */
#include "tt_kernels.h"

#include <stdint.h>
#include <string.h>

/* NAME_opt: a row of k elements of type T per memcpy when idx is NULL (a run); y's rows
 * YS elements apart, x's XS (gather: y k, x c; scatter: y c, x k) */
#define TT_CHANNELS_OPT(NAME, T, YS, XS)                                                   \
    void NAME##_opt(T *y, const T *x, int32_t rows, int32_t c, const int32_t *idx,          \
                    int32_t k)                                                             \
    {                                                                                      \
        int32_t r;                                                                         \
        if (idx != NULL) {                                                                 \
            NAME(y, x, rows, c, idx, k);                                                   \
            return;                                                                        \
        }                                                                                  \
        for (r = 0; r < rows; ++r) {                                                       \
            memcpy(&y[r * (YS)], &x[r * (XS)], sizeof(T) * (size_t)k);                     \
        }                                                                                  \
    }

TT_CHANNELS_OPT(tt_gather_channels_s8, int8_t, k, c)
TT_CHANNELS_OPT(tt_scatter_channels_s8, int8_t, c, k)
TT_CHANNELS_OPT(tt_gather_channels_f32, float, k, c)
TT_CHANNELS_OPT(tt_scatter_channels_f32, float, c, k)
#undef TT_CHANNELS_OPT
