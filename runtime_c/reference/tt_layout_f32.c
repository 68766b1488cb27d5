/*
 * Layout reference kernels: constant pad and its backward (crop), axis
 * permutation, and the column copies behind concat / split.
 * All shapes are rank 4 (left-padded with 1s) and tensors are contiguous.
 */
#include "tt_reference.h"

#include <stdint.h>
#include <string.h>

/* Row-major element strides of a contiguous rank-4 shape. */
static void contiguous_strides(int32_t str[4], const int32_t shape[4])
{
    str[3] = 1;
    str[2] = shape[3];
    str[1] = shape[2] * str[2];
    str[0] = shape[1] * str[1];
}

void tt_pad_f32(float *y, const float *x, const int32_t in_shape[4],
                const int32_t out_shape[4], const int32_t before[4], float value)
{
    const int32_t ny = out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3];
    int32_t ystr[4];
    int32_t i, i0, i1, i2;

    contiguous_strides(ystr, out_shape);
    for (i = 0; i < ny; ++i) {
        y[i] = value;
    }
    /* copy x one innermost row at a time into its shifted position */
    for (i0 = 0; i0 < in_shape[0]; ++i0) {
        for (i1 = 0; i1 < in_shape[1]; ++i1) {
            for (i2 = 0; i2 < in_shape[2]; ++i2) {
                const int32_t yo = (i0 + before[0]) * ystr[0] + (i1 + before[1]) * ystr[1] +
                                   (i2 + before[2]) * ystr[2] + before[3];
                const int32_t xo = ((i0 * in_shape[1] + i1) * in_shape[2] + i2) * in_shape[3];
                if (in_shape[3] > 0) {
                    memcpy(y + yo, x + xo, (size_t)in_shape[3] * sizeof(float));
                }
            }
        }
    }
}

void tt_crop_f32(float *dx, const float *dy, const int32_t in_shape[4],
                 const int32_t out_shape[4], const int32_t before[4])
{
    int32_t ystr[4];
    int32_t i0, i1, i2;

    contiguous_strides(ystr, out_shape);
    /* gradient of a pad: the padded cells got a constant, so only the window
     * that came from x carries gradient back */
    for (i0 = 0; i0 < in_shape[0]; ++i0) {
        for (i1 = 0; i1 < in_shape[1]; ++i1) {
            for (i2 = 0; i2 < in_shape[2]; ++i2) {
                const int32_t yo = (i0 + before[0]) * ystr[0] + (i1 + before[1]) * ystr[1] +
                                   (i2 + before[2]) * ystr[2] + before[3];
                const int32_t xo = ((i0 * in_shape[1] + i1) * in_shape[2] + i2) * in_shape[3];
                if (in_shape[3] > 0) {
                    memcpy(dx + xo, dy + yo, (size_t)in_shape[3] * sizeof(float));
                }
            }
        }
    }
}

void tt_transpose_f32(float *y, const float *x, const int32_t in_shape[4],
                      const int32_t perm[4])
{
    int32_t xstr[4];
    int32_t oshape[4];
    int32_t pstr[4];
    int32_t k, j0, j1, j2, j3;

    contiguous_strides(xstr, in_shape);
    for (k = 0; k < 4; ++k) {
        oshape[k] = in_shape[perm[k]];
        pstr[k] = xstr[perm[k]]; /* output axis k walks input axis perm[k] */
    }
    for (j0 = 0; j0 < oshape[0]; ++j0) {
        for (j1 = 0; j1 < oshape[1]; ++j1) {
            for (j2 = 0; j2 < oshape[2]; ++j2) {
                const int32_t xo = j0 * pstr[0] + j1 * pstr[1] + j2 * pstr[2];
                for (j3 = 0; j3 < oshape[3]; ++j3) {
                    *y++ = x[xo + j3 * pstr[3]];
                }
            }
        }
    }
}

void tt_concat_part_f32(float *y, const float *x, int32_t outer, int32_t inner_x,
                        int32_t inner_y, int32_t offset)
{
    int32_t o;

    if (inner_x <= 0) {
        return;
    }
    for (o = 0; o < outer; ++o) {
        memcpy(y + o * inner_y + offset, x + o * inner_x, (size_t)inner_x * sizeof(float));
    }
}

void tt_slice_part_f32(float *dx, const float *dy, int32_t outer, int32_t inner_x,
                       int32_t inner_y, int32_t offset)
{
    int32_t o;

    if (inner_x <= 0) {
        return;
    }
    for (o = 0; o < outer; ++o) {
        memcpy(dx + o * inner_x, dy + o * inner_y + offset, (size_t)inner_x * sizeof(float));
    }
}
