/* tt_q8_clamp_mask_opt against tt_q8_clamp_mask, bit for bit: random lengths (partial last
 * bytes), random and edge bounds (the int8 extremes, empty ranges, bounds outside int8 that
 * take the portable path), random data and data at the bounds.
 * tt_mask_backward_f32_opt against tt_mask_backward_f32, bit for bit: random lengths, masks
 * with random, all-set and all-clear bytes, in place and into another buffer, values that
 * include -0, infinities and NaNs with payloads; the words past n untouched.
 * Prints instructions per element of each kernel on the twins. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#define N_MAX 1031

static int8_t y[N_MAX];
static uint8_t ref[N_MAX / 8 + 2], opt[N_MAX / 8 + 2];

#define F_MAX 1037
#define GUARD 0x5A5A5A5Au

static uint32_t dy[F_MAX + 8], dx_ref[F_MAX + 8], dx_opt[F_MAX + 8];
static uint8_t bits[F_MAX / 8 + 2];

/* one case of n elements: into another buffer, then in place */
static int check_apply(int32_t n)
{
    int32_t i, bad = 0;

    for (i = 0; i < F_MAX + 8; ++i) dx_ref[i] = dx_opt[i] = GUARD;
    tt_mask_backward_f32((float *)dx_ref, (const float *)dy, bits, n);
    tt_mask_backward_f32_opt((float *)dx_opt, (const float *)dy, bits, n);
    bad |= memcmp(dx_ref, dx_opt, sizeof dx_ref) != 0;
    memcpy(dx_ref, dy, sizeof dy);
    memcpy(dx_opt, dy, sizeof dy);
    tt_mask_backward_f32((float *)dx_ref, (const float *)dx_ref, bits, n);
    tt_mask_backward_f32_opt((float *)dx_opt, (const float *)dx_opt, bits, n);
    bad |= memcmp(dx_ref, dx_opt, sizeof dx_ref) != 0;
    return bad;
}

static int apply_cases(uint32_t *s)
{
    static const uint32_t special[] = {0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00001u,
                                       0xFFA00123u, 0x00000001u, 0x3F800000u};
    int failures = 0, t;
    int32_t i;

    for (t = 0; t < 300; ++t) {
        const int32_t n = t < 20 ? t : (int32_t)(th_rand(s) % F_MAX);
        for (i = 0; i < F_MAX + 8; ++i) { /* random words, one in 8 a special value */
            const uint32_t r = th_rand(s);
            dy[i] = (r & 7u) == 0 ? special[(r >> 3) % 7u] : th_rand(s);
        }
        for (i = 0; i < F_MAX / 8 + 2; ++i) { /* random, all-set and all-clear bytes */
            const uint32_t r = th_rand(s) % 4u;
            bits[i] = (uint8_t)(r == 0 ? 0xFFu : (r == 1 ? 0u : th_rand(s)));
        }
        failures += check_apply(n);
    }
    return failures;
}

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
    failures += apply_cases(&s);
    {
        uint32_t t0, t_ref, t_opt;
        th_ticks_start();
        t0 = th_ticks();
        tt_q8_clamp_mask(ref, y, 1024, 0, 127);
        t_ref = th_elapsed(t0);
        t0 = th_ticks();
        tt_q8_clamp_mask_opt(opt, y, 1024, 0, 127);
        t_opt = th_elapsed(t0);
        snprintf(buf, sizeof buf, "clamp mask per element: ref %lu opt %lu "
                 "instructions/1024\n", (unsigned long)(t_ref * TH_TICK_CENTI / 100u), (unsigned long)(t_opt * TH_TICK_CENTI / 100u));
        th_puts(buf);
        for (t = 0; t < 1024 / 8; ++t) bits[t] = (uint8_t)th_rand(&s); /* mixed bytes */
        t0 = th_ticks();
        tt_mask_backward_f32((float *)dx_ref, (const float *)dy, bits, 1024);
        t_ref = th_elapsed(t0);
        t0 = th_ticks();
        tt_mask_backward_f32_opt((float *)dx_opt, (const float *)dy, bits, 1024);
        t_opt = th_elapsed(t0);
        snprintf(buf, sizeof buf, "mask backward per element: ref %lu opt %lu "
                 "instructions/1024\n", (unsigned long)(t_ref * TH_TICK_CENTI / 100u), (unsigned long)(t_opt * TH_TICK_CENTI / 100u));
        th_puts(buf);
    }
    snprintf(buf, sizeof buf, "mask_opt: %d failures\n", failures);
    th_puts(buf);
    th_exit(failures != 0);
    return 0;
}
