/*
 * int8 broadcasting add and mul over rank-4 shapes, bit-exact with LiteRT's reference
 * kernels, and the fp32 backward of mul. y is contiguous with shape `shape`; a and b are
 * read through element strides (stride 0 broadcasts an axis), as tt_add_f32.
 */
#include "tt_reference.h"

#include <stdint.h>

/* LiteRT's reference kernels round twice (gemmlowp SRDHM, then a rounding shift) */
static int32_t rescale(int32_t x, int32_t mult, int32_t shift)
{
    return tt_mbqm_double_rounding(x, mult, shift);
}

static int8_t add_one(int32_t a, int32_t b, const tt_q8_add *p)
{
    const int32_t sa = rescale((a + p->a_offset) * (1 << p->left_shift), p->a_mult, p->a_shift);
    const int32_t sb = rescale((b + p->b_offset) * (1 << p->left_shift), p->b_mult, p->b_shift);
    return tt_sat8(rescale(sa + sb, p->out_mult, p->out_shift) + p->out_offset, p->act_min,
                   p->act_max);
}

void tt_add_s8(int8_t *y, const int8_t *a, const int8_t *b, const int32_t shape[4],
               const int32_t astr[4], const int32_t bstr[4], const tt_q8_add *p)
{
    int32_t i0, i1, i2, i3;

    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t ao = i0 * astr[0] + i1 * astr[1] + i2 * astr[2];
                const int32_t bo = i0 * bstr[0] + i1 * bstr[1] + i2 * bstr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    *y++ = add_one(a[ao + i3 * astr[3]], b[bo + i3 * bstr[3]], p);
                }
            }
        }
    }
}

void tt_add_s8_row(const tt_rows *y, const tt_rows *a, const tt_rows *b, int32_t r,
                   const tt_q8_add *p)
{
    const int8_t *ar = tt_row(a, r);
    const int8_t *br = tt_row(b, r);
    int8_t *out = tt_row(y, r);
    int32_t i;

    for (i = 0; i < y->row_bytes; ++i) {
        out[i] = add_one(ar[i], br[i], p);
    }
}

void tt_mul_s8(int8_t *y, const int8_t *a, const int8_t *b, const int32_t shape[4],
               const int32_t astr[4], const int32_t bstr[4], const tt_q8_mul *p)
{
    int32_t i0, i1, i2, i3;

    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t ao = i0 * astr[0] + i1 * astr[1] + i2 * astr[2];
                const int32_t bo = i0 * bstr[0] + i1 * bstr[1] + i2 * bstr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    const int32_t va = (int32_t)a[ao + i3 * astr[3]] + p->a_offset;
                    const int32_t vb = (int32_t)b[bo + i3 * bstr[3]] + p->b_offset;
                    *y++ = tt_sat8(rescale(va * vb, p->out_mult, p->out_shift) + p->out_offset,
                                   p->act_min, p->act_max);
                }
            }
        }
    }
}

void tt_mul_backward_s8(float *dx, const float *dy, const int8_t *other,
                        const int32_t shape[4], const int32_t ostr[4], float scale,
                        int32_t zp)
{
    int32_t i0, i1, i2, i3;

    for (i0 = 0; i0 < shape[0]; ++i0) {
        for (i1 = 0; i1 < shape[1]; ++i1) {
            for (i2 = 0; i2 < shape[2]; ++i2) {
                const int32_t oo = i0 * ostr[0] + i1 * ostr[1] + i2 * ostr[2];
                for (i3 = 0; i3 < shape[3]; ++i3) {
                    const float real = scale * (float)((int32_t)other[oo + i3 * ostr[3]] - zp);
                    *dx++ = *dy++ * real;
                }
            }
        }
    }
}
