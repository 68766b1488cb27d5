/* The inline stochastic rounding of the optimised kernels (runtime_c/reference/tt_q8_round.h: tt_sr_s8,
 * tt_sr_s32) against the reference updates tt_q8_step_s8 / tt_q8_step_s32, bit for bit, for
 * every int8 weight value and deltas at the edges: NaN, infinities, the +-2^24 clamp, the
 * +-512 saturation of the Cortex-M path, values next to integers, and random ones. On the
 * twins the hardware path (VCVT saturation, SSAT) runs; on the host the portable one. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"
#include "tt_q8_round.h"

static float bits_f(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

int main(void)
{
    static const float edges[] = {0.0f, -0.0f, 0.5f, -0.5f, 0.999999f, -0.999999f, 1.0f,
                                  -1.0f, 1.5f, -1.5f, 126.5f, -126.5f, 127.0f, 255.0f,
                                  -255.0f, 510.99f, -510.99f, 511.0f, -511.0f, 511.5f,
                                  -511.5f, 512.0f, -512.0f, 512.5f, -512.5f, 513.0f, -513.0f,
                                  1e6f, -1e6f, 16777215.0f, -16777215.0f, 16777216.0f,
                                  -16777216.0f, 16777218.0f, -16777218.0f, 3e9f, -3e9f, 1e30f,
                                  -1e30f, 1e-30f, -1e-30f};
    const float specials[] = {bits_f(0x7F800000u), bits_f(0xFF800000u), bits_f(0x7FC00000u),
                              bits_f(0xFFC00001u), bits_f(0x7F800001u)};
    tt_q8_update u = {TT_Q8_STOCHASTIC, 0x1234567u, 9u, 0, 1.0f};
    uint32_t seed = 7u, failures = 0, cases = 0;
    char line[160];
    int32_t w, i, r;

    for (r = 0; r < 3; ++r) {
        u.salt = th_rand(&seed);
        u.step = th_rand(&seed) & 0xFFFFu;
        const uint32_t key = tt_sr_key(u.salt, u.step);
        for (w = -128; w <= 127; ++w) {
            const int32_t ne = (int32_t)(sizeof edges / sizeof edges[0]);
            for (i = 0; i < ne + 5 + 64; ++i) {
                float d;
                if (i < ne) {
                    d = edges[i];
                } else if (i < ne + 5) {
                    d = specials[i - ne];
                } else { /* random magnitudes from 2^-8 to 2^12 */
                    const uint32_t h = th_rand(&seed);
                    d = (float)(int32_t)(h & 0xFFFFFu) * (1.0f / 256.0f) *
                        (float)(1u << ((h >> 20) & 3u)) * ((h >> 31) ? -1.0f : 1.0f);
                }
                const uint32_t idx = th_rand(&seed) & 0xFFFFu;
                const int8_t ref = tt_q8_step_s8((int8_t)w, NULL, d, &u, idx);
                const int8_t got = tt_sr_s8(w, d, key, idx);
                const int32_t bias = w * 1000003;
                const int32_t ref32 = tt_q8_step_s32(bias, d, &u, idx);
                const int32_t got32 = tt_sr_s32(bias, d, key, idx);
                ++cases;
                if (ref != got || ref32 != got32) {
                    if (++failures <= 10) {
                        snprintf(line, sizeof line, "w %ld d %e: s8 %d vs %d, s32 %ld vs %ld\n",
                                 (long)w, (double)d, ref, got, (long)ref32, (long)got32);
                        th_puts(line);
                    }
                }
            }
        }
    }
    /* an int32 bias at its limits saturates alike */
    {
        const uint32_t key = tt_sr_key(u.salt, u.step);
        static const int32_t b[] = {2147483647, -2147483647 - 1, 2147480000, -2147480000};
        for (i = 0; i < 4; ++i) {
            for (r = 0; r < 4; ++r) {
                const float d = r == 0 ? -1e9f : (r == 1 ? 1e9f : (r == 2 ? -5000.5f : 5000.5f));
                ++cases;
                if (tt_q8_step_s32(b[i], d, &u, 3u) != tt_sr_s32(b[i], d, key, 3u)) {
                    ++failures;
                }
            }
        }
    }
    snprintf(line, sizeof line, "round: %lu cases, %lu failures\n", (unsigned long)cases,
             (unsigned long)failures);
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}
