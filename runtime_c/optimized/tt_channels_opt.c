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

void tt_gather_channels_s8_opt(int8_t *y, const int8_t *x, int32_t rows, int32_t c,
                               const int32_t *idx, int32_t k)
{
    int32_t r;

    if (idx != NULL) {
        tt_gather_channels_s8(y, x, rows, c, idx, k);
        return;
    }
    for (r = 0; r < rows; ++r) {
        memcpy(&y[r * k], &x[r * c], (size_t)k);
    }
}

void tt_scatter_channels_s8_opt(int8_t *y, const int8_t *x, int32_t rows, int32_t c,
                                const int32_t *idx, int32_t k)
{
    int32_t r;

    if (idx != NULL) {
        tt_scatter_channels_s8(y, x, rows, c, idx, k);
        return;
    }
    for (r = 0; r < rows; ++r) {
        memcpy(&y[r * c], &x[r * k], (size_t)k);
    }
}

void tt_gather_channels_f32_opt(float *y, const float *x, int32_t rows, int32_t c,
                                const int32_t *idx, int32_t k)
{
    int32_t r;

    if (idx != NULL) {
        tt_gather_channels_f32(y, x, rows, c, idx, k);
        return;
    }
    for (r = 0; r < rows; ++r) {
        memcpy(&y[r * k], &x[r * c], sizeof(float) * (size_t)k);
    }
}

void tt_scatter_channels_f32_opt(float *y, const float *x, int32_t rows, int32_t c,
                                 const int32_t *idx, int32_t k)
{
    int32_t r;

    if (idx != NULL) {
        tt_scatter_channels_f32(y, x, rows, c, idx, k);
        return;
    }
    for (r = 0; r < rows; ++r) {
        memcpy(&y[r * c], &x[r * k], sizeof(float) * (size_t)k);
    }
}
