/*
 * Broadcasting binary ops over rank-4 shapes, reductions for their backward,
 * and gradient copy / accumulate helpers.
 *
 * y is contiguous with shape `shape`; operands are read through element
 * strides, so a stride of 0 broadcasts that axis.
 */
#include "tt_reference.h"

#include <stdint.h>
#include <string.h>

void tt_add_f32(float *y, const float *a, const float *b, const int32_t shape[4],
                const int32_t astr[4], const int32_t bstr[4])
{
    int32_t i0, i1, i2, i3;

    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t ao = i0 * astr[0] + i1 * astr[1] + i2 * astr[2];
                const int32_t bo = i0 * bstr[0] + i1 * bstr[1] + i2 * bstr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    *y++ = a[ao + i3 * astr[3]] + b[bo + i3 * bstr[3]];
                }
            }
        }
    }
}

void tt_mul_f32(float *y, const float *a, const float *b, const int32_t shape[4],
                const int32_t astr[4], const int32_t bstr[4])
{
    int32_t i0, i1, i2, i3;

    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t ao = i0 * astr[0] + i1 * astr[1] + i2 * astr[2];
                const int32_t bo = i0 * bstr[0] + i1 * bstr[1] + i2 * bstr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    *y++ = a[ao + i3 * astr[3]] * b[bo + i3 * bstr[3]];
                }
            }
        }
    }
}

/* Gradient of a broadcast: every src element is summed into the dst element it
 * was broadcast from (dst stride 0 on the reduced axes). */
void tt_reduce_to_f32(float *dst, int32_t dst_n, const float *src, const int32_t shape[4],
                      const int32_t dstr[4])
{
    int32_t i, i0, i1, i2, i3;

    for (i = 0; i < dst_n; ++i) {
        dst[i] = 0.0f;
    }
    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t d = i0 * dstr[0] + i1 * dstr[1] + i2 * dstr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    dst[d + i3 * dstr[3]] += *src++;
                }
            }
        }
    }
}

void tt_copy_f32(float *dst, const float *src, int32_t n)
{
    if (n > 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

void tt_accumulate_f32(float *dst, const float *src, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dst[i] += src[i];
    }
}
