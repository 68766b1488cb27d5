/* expf and logf in plain float arithmetic, so the host build and every Cortex-M build (glibc vs
 * newlib) compute the loss and its gradient bit for bit alike: with -ffp-contract=off each
 * operation below is one IEEE-754 single-precision rounding on every target. Accuracy: within
 * 2 ulp of the exact values over the whole float range (tests/test_kernels_c.py). */
#include <stdint.h>
#include <string.h>

#include "tt_reference.h"

static float tt_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t tt_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln2 / 2 (Cody-Waite: ln 2 split in a
 * high part exact in float times any n here, and a low part); e^r by its Taylor polynomial to
 * degree 7, which is within 0.2 ulp on that interval. */
float tt_expf(float x)
{
    if (x != x) return x;
    if (x > 88.7228394f) return tt_bits_to_float(0x7F800000u); /* overflows to +inf */
    if (x < -103.972084f) return 0.0f;                          /* below the least subnormal */
    const float t = x * 1.44269504f;
    const int32_t n = (int32_t)(t < 0.0f ? t - 0.5f : t + 0.5f);
    const float r = (x - (float)n * 0.693145752f) - (float)n * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    if (n > 127) /* 2^n split in two exact powers so neither overflows nor underflows */
        return p * tt_bits_to_float((uint32_t)(127 + 127) << 23) *
               tt_bits_to_float((uint32_t)(n - 127 + 127) << 23);
    if (n < -126)
        return p * tt_bits_to_float((uint32_t)(-100 + 127) << 23) *
               tt_bits_to_float((uint32_t)(n + 100 + 127) << 23);
    return p * tt_bits_to_float((uint32_t)(n + 127) << 23);
}

/* ln x = e ln 2 + ln m with x = m 2^e, m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s) with
 * s = (m - 1) / (m + 1), |s| < 0.172: s * (2 + 2/3 s^2 + 2/5 s^4 + ...), odd series to s^9. */
float tt_logf(float x)
{
    uint32_t u = tt_float_to_bits(x);
    int32_t e = 0;
    if (x != x || x < 0.0f) return tt_bits_to_float(0x7FC00000u); /* NaN */
    if (x == 0.0f) return -tt_bits_to_float(0x7F800000u);          /* -inf */
    if (u >= 0x7F800000u) return x;                                 /* +inf */
    if (u < 0x00800000u) { /* subnormal: scale into the normal range first */
        x *= 16777216.0f; /* 2^24 */
        u = tt_float_to_bits(x);
        e = -24;
    }
    e += (int32_t)(u >> 23) - 127;
    float m = tt_bits_to_float((u & 0x007FFFFFu) | 0x3F800000u); /* [1, 2) */
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    const float f = m - 1.0f;
    const float s = f / (m + 1.0f);
    const float z = s * s;
    float p = 2.0f / 9.0f;
    p = p * z + 2.0f / 7.0f;
    p = p * z + 2.0f / 5.0f;
    p = p * z + 2.0f / 3.0f;
    /* ln m = f - s*(f - p z) (fdlibm's form: f carries the leading term exactly) */
    const float lm = f - s * (f - p * z);
    return (float)e * 0.693145752f + ((float)e * 1.42860677e-6f + lm);
}
