/*
 * int8 layout kernels: constant pad (with the zero point) and the concatenation copy.
 */
#include "tt_reference.h"

#include <stdint.h>
#include <string.h>

void tt_pad_s8(int8_t *y, const int8_t *x, const int32_t in_shape[4],
               const int32_t out_shape[4], const int32_t before[4], int32_t value)
{
    const int32_t ny = out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3];
    const int32_t s2 = out_shape[3], s1 = out_shape[2] * s2, s0 = out_shape[1] * s1;
    int32_t i0, i1, i2;

    memset(y, (int8_t)value, (size_t)ny);
    /* copy x one innermost row at a time into its shifted position */
    for (i0 = 0; i0 < in_shape[0]; ++i0) {
        for (i1 = 0; i1 < in_shape[1]; ++i1) {
            for (i2 = 0; i2 < in_shape[2]; ++i2) {
                const int32_t yo = (i0 + before[0]) * s0 + (i1 + before[1]) * s1 +
                                   (i2 + before[2]) * s2 + before[3];
                const int32_t xo = ((i0 * in_shape[1] + i1) * in_shape[2] + i2) * in_shape[3];
                if (in_shape[3] > 0) {
                    memcpy(y + yo, x + xo, (size_t)in_shape[3]);
                }
            }
        }
    }
}

void tt_concat_part_s8(int8_t *y, const int8_t *x, int32_t outer, int32_t inner_x,
                       int32_t inner_y, int32_t offset)
{
    int32_t o;

    for (o = 0; o < outer; ++o) {
        memcpy(y + o * inner_y + offset, x + o * inner_x, (size_t)inner_x);
    }
}
