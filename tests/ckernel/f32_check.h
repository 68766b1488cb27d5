/* Shared by the fp32 kernel tests (test_f32_opt.c, test_pooled_opt.c): random floats with
 * signed zeros, and the comparison of an optimised output with the reference's that prints
 * "ck <case>.<what> <hash>" (FNV-1a of the optimised bits) for host/twin agreement. */
#ifndef TT_F32_CHECK_H
#define TT_F32_CHECK_H
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* in [-1, 1), one in 16 a signed zero (they exercise 0.0f + ... exactly) */
static inline float th_rnd_f32(uint32_t *seed)
{
    const uint32_t r = th_rand(seed);
    if ((r & 15u) == 0) {
        return (r & 16u) ? -0.0f : 0.0f;
    }
    return (float)((int32_t)(r >> 9) - (1 << 22)) * (1.0f / (float)(1 << 22));
}

static inline void th_fill_f32(uint32_t *seed, float *p, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        p[i] = th_rnd_f32(seed);
    }
}

static inline uint32_t th_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ulps between two floats of the same sign (large for opposite signs) */
static inline uint32_t th_ulps(float a, float b)
{
    const uint32_t x = th_bits(a), y = th_bits(b);
    if ((x ^ y) & 0x80000000u) {
        return (x == y) ? 0 : 0xFFFFFFFFu;
    }
    return x > y ? x - y : y - x;
}

/* Counts the elements more than tol_ulps apart in *failures (printing the first 20) and
 * prints the optimised output's hash. */
static inline void th_check_f32(const char *name, const char *what, const float *ref,
                                const float *opt, int32_t n, uint32_t tol_ulps, int *failures)
{
    char line[160];
    int32_t i;
    uint32_t h = 2166136261u;

    for (i = 0; i < n; ++i) {
        uint32_t u = th_bits(opt[i]);
        int k;
        if (th_ulps(ref[i], opt[i]) > tol_ulps) {
            if (*failures < 20) {
                snprintf(line, sizeof line, "MISMATCH %s %s [%ld] ref %08lx opt %08lx\n", name,
                         what, (long)i, (unsigned long)th_bits(ref[i]), (unsigned long)u);
                th_puts(line);
            }
            ++*failures;
        }
        for (k = 0; k < 4; ++k) {
            h = (h ^ (u & 0xFFu)) * 16777619u;
            u >>= 8;
        }
    }
    snprintf(line, sizeof line, "ck %s.%s %08lx\n", name, what, (unsigned long)h);
    th_puts(line);
}
#endif
