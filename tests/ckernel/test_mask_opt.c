/* tt_q8_clamp_mask_opt against tt_q8_clamp_mask, bit for bit: random lengths (partial last
 * bytes), random and edge bounds (the int8 extremes, empty ranges, bounds outside int8 that
 * take the portable path), random data and data at the bounds. Prints instructions per element
 * of both on the twins. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#define N_MAX 1031

static int8_t y[N_MAX];
static uint8_t ref[N_MAX / 8 + 2], opt[N_MAX / 8 + 2];

static int check(int32_t n, int32_t lo, int32_t hi)
{
    memset(ref, 0xA5, sizeof ref);
    memset(opt, 0xA5, sizeof opt);
    tt_q8_clamp_mask(ref, y, n, lo, hi);
    tt_q8_clamp_mask_opt(opt, y, n, lo, hi);
    return memcmp(ref, opt, sizeof ref) != 0; /* bytes past the mask untouched too */
}

int main(void)
{
    static const int32_t bounds[][2] = {{-128, 127}, {-128, 0}, {0, 127}, {-129, 128},
                                        {-200, 200}, {5, 5}, {10, -10}, {-128, -127},
                                        {126, 127}, {-1, 1}};
    uint32_t s = 12345u;
    int failures = 0, t;
    char buf[120];

    for (t = 0; t < 400; ++t) {
        const int32_t n = (int32_t)(th_rand(&s) % N_MAX);
        int32_t lo, hi, i;
        if (t < 40) {
            lo = bounds[t % 10][0];
            hi = bounds[t % 10][1];
        } else {
            lo = (int32_t)(th_rand(&s) % 260u) - 130;
            hi = (int32_t)(th_rand(&s) % 260u) - 130;
        }
        for (i = 0; i < n; ++i) { /* half the values at or next to a bound */
            const uint32_t r = th_rand(&s);
            const int32_t v = (r & 1u) ? (int32_t)((r >> 8) & 0xFFu) - 128
                                       : ((r & 2u) ? lo : hi) + (int32_t)((r >> 8) % 3u) - 1;
            y[i] = (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
        }
        failures += check(n, lo, hi);
    }
    {
        uint32_t t0, t_ref, t_opt;
        th_ticks_start();
        t0 = th_ticks();
        tt_q8_clamp_mask(ref, y, 1024, 0, 127);
        t_ref = th_elapsed(t0);
        t0 = th_ticks();
        tt_q8_clamp_mask_opt(opt, y, 1024, 0, 127);
        t_opt = th_elapsed(t0);
        snprintf(buf, sizeof buf, "per element: ref %lu opt %lu instructions/1024\n",
                 (unsigned long)(t_ref * 40u), (unsigned long)(t_opt * 40u));
        th_puts(buf);
    }
    snprintf(buf, sizeof buf, "mask_opt: %d failures\n", failures);
    th_puts(buf);
    th_exit(failures != 0);
    return 0;
}
