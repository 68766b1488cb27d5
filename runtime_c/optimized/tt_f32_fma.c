/*
 * The channel-streamed 1x1 backward's sums with fused multiply-adds, in portable C (see
 * tt_f32_fma.h). Every output element is its own running sum, from +0 or its old value, its
 * terms in the reference's order: Helium's lanes (tt_f32_mve.c with VFMA) and these loops
 * give the same bits, and fmaf compiles to the FPU's VFMA on Cortex-M cores that have one.
 */
#include "tt_f32_fma.h"

#if TT_F32_FMA
void tt_cs_pw_input_s8_fma(float *planes, int32_t ps, const float *dy, const int8_t *w,
                           const float *w_scale, int32_t n, int32_t cout, int32_t cin,
                           int32_t c0, int32_t cnt)
{
    int32_t j, p, o;

    for (j = 0; j < cnt; ++j) {
        float *const plane = planes + j * ps;
        for (p = 0; p < n; ++p) {
            float a = 0.0f;
            for (o = 0; o < cout; ++o) {
                a = tt_cs_fmac(a, dy[p * cout + o], w_scale[o] * (float)w[o * cin + c0 + j]);
            }
            plane[p] = a;
        }
    }
}

void tt_cs_pw_wgrad_s8_fma(float *acc, int32_t as, const float *dy, int32_t ds,
                           const int8_t *x, int32_t x_zp, int32_t n, int32_t k, int32_t nb,
                           int32_t rows)
{
    int32_t i, j, p;

    for (i = 0; i < rows; ++i) {
        for (j = 0; j < nb; ++j) {
            float a = 0.0f;
            for (p = 0; p < n; ++p) {
                a = tt_cs_fmac(a, dy[i * ds + p], (float)((int32_t)x[p * k + j] - x_zp));
            }
            acc[i * as + j] = a;
        }
    }
}

void tt_cs_pw_wgrad_f32_fma(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                            int32_t nb)
{
    int32_t j, p;

    for (j = 0; j < nb; ++j) {
        float a = 0.0f;
        for (p = 0; p < n; ++p) {
            a = tt_cs_fmac(a, dy[p], x[p * k + j]);
        }
        acc[j] = a;
    }
}
#endif
