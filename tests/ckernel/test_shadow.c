/* The shadow update of the reference (tt_q8_step_s8 in TT_Q8_SHADOW mode) over every
 * (int8 weight, shadow byte) state and the steps listed in DELTAS, hashed (FNV-1a over the new
 * weight and shadow byte of each case, in order) so that tests/test_q8_shadow.py can compare
 * it with the numpy reference (tinytrain/quant/update.py) on the host and the twins. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

static float bits_f(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t fnv(uint32_t h, uint32_t byte)
{
    return (h ^ (byte & 255u)) * 16777619u;
}

int main(void)
{
    /* keep in step with DELTAS in tests/test_q8_shadow.py (the last two: +inf, NaN) */
    static const float deltas[] = {0.0f, 0.001953125f, -0.001953125f, 0.0019f, 0.3f, -0.49f,
                                   0.5f, -0.5f, 1.7f, -3.2f, 127.5f, 300.0f, -511.9f, 512.5f,
                                   -1e7f, 3e9f, 1e-30f};
    const int32_t nd = (int32_t)(sizeof deltas / sizeof deltas[0]);
    tt_q8_update u = {TT_Q8_SHADOW, 0x1234567u, 9u, 0, 1.0f};
    uint32_t h = 2166136261u, cases = 0;
    char line[96];
    int32_t w, s, i;

    for (i = 0; i < nd + 2; ++i) {
        const float d = i < nd ? deltas[i] : bits_f(i == nd ? 0x7F800000u : 0x7FC00000u);
        for (w = -127; w <= 127; ++w) {
            for (s = 0; s < 256; ++s) {
                uint8_t sh = (uint8_t)s;
                const int8_t q = tt_q8_step_s8((int8_t)w, &sh, d, &u, (uint32_t)s);
                h = fnv(fnv(h, (uint32_t)(uint8_t)q), sh);
                ++cases;
            }
        }
    }
    snprintf(line, sizeof line, "shadow: %lu cases, hash %08lx\n", (unsigned long)cases,
             (unsigned long)h);
    th_puts(line);
    th_exit(0);
    return 0;
}
