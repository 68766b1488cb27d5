/* The optimised updates of int8 layers against the reference, bit for bit: the bias gradients
 * (tt_f32_opt.c) and the fully connected weight update (tt_dense_weight_sgd_s8_opt,
 * tt_f32_bwd_opt.c: every mode, whole or packed rows, with and without an index, shadows, odd
 * and even row lengths, weights at -128 and 127, deltas that saturate and NaN / infinite dy).
 * The bias kernels:
 * tt_bias_sgd_s32_opt (an int8 layer's int32 bias: fp32 column sums of dy, then the update) in
 * every rounding mode, with per-channel steps, a run-time learning rate other than the build's,
 * biases near the int32 limits (the saturation counter must agree too) and sums that hit the
 * delta clamp; tt_bias_grad_row_f32_opt (a row's pixels added to running sums) from random
 * sums. Random shapes: 0 to 3 rows or pixels and many, channel counts that leave 8-, 4- and
 * 1-wide chunks; dy with -0, infinities and NaNs now and then. Entries past c stay untouched.
 * -DBENCH: instructions per element of both on the twins. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#define C_MAX 83
#define R_MAX 300
#define GUARD 0x5A5A5A5Au

static float dy[R_MAX * C_MAX], step[C_MAX];
static int32_t b_opt[C_MAX + 4];
static uint32_t s_opt[C_MAX + 4];
static uint32_t seed = 2024u;
static char line[160];

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(th_rand(&seed) >> 8) * (1.0f / 16777216.0f);
}

static void fill_dy(int32_t n, int special)
{
    static const uint32_t odd[] = {0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00001u};
    int32_t i;

    for (i = 0; i < n; ++i) {
        const uint32_t r = th_rand(&seed);
        dy[i] = uniform(-2.0f, 2.0f) * (float)(1u << (r % 12u));
        if (special && r % 97u == 0u) {
            memcpy(&dy[i], &odd[(r >> 8) % 4u], 4);
        }
    }
}

#ifndef BENCH
static int32_t b_ref[C_MAX + 4];
static uint32_t s_ref[C_MAX + 4];

static int32_t pick(int32_t lo, int32_t hi)
{
    return lo + (int32_t)(th_rand(&seed) % (uint32_t)(hi - lo + 1));
}

static int bias_case(int32_t rows, int32_t c, int32_t mode, int special)
{
    tt_q8_update u = {mode, th_rand(&seed), th_rand(&seed) % 1000u, 0, 1.0f};
    uint32_t sat_ref, sat_opt;
    int32_t i;

    if (th_rand(&seed) % 4u == 0u) {
        u.lr_scale = uniform(0.1f, 3.0f);
    }
    fill_dy(rows * c, special);
    for (i = 0; i < c; ++i) {
        step[i] = uniform(0.01f, 50.0f) * (float)(1u << (th_rand(&seed) % 16u));
    }
    for (i = 0; i < C_MAX + 4; ++i) {
        const uint32_t r = th_rand(&seed);
        b_ref[i] = (r % 8u == 0u) ? (int32_t)(0x7FFFFF00u + (r >> 24)) * ((r & 256u) ? -1 : 1)
                                  : (int32_t)r >> 8;
        b_opt[i] = b_ref[i];
    }
    sat_ref = tt_q8_saturations;
    tt_bias_sgd_s32(b_ref, dy, rows, c, step, &u);
    sat_ref = tt_q8_saturations - sat_ref;
    sat_opt = tt_q8_saturations;
    tt_bias_sgd_s32_opt(b_opt, dy, rows, c, step, &u);
    sat_opt = tt_q8_saturations - sat_opt;
    return memcmp(b_ref, b_opt, sizeof b_ref) != 0 || sat_ref != sat_opt;
}

#define K_MAX 70
#define O_MAX 12
static int8_t x8[K_MAX], w_ref[O_MAX * (K_MAX + 3)], w_opt[O_MAX * (K_MAX + 3)];
static uint8_t sh_ref[O_MAX * K_MAX], sh_opt[O_MAX * K_MAX];
static int32_t idx[K_MAX];

static int dense_case(int32_t k, int32_t out, int32_t mode, int special)
{
    tt_q8_update u = {mode, th_rand(&seed), th_rand(&seed) % 1000u, (int32_t)(th_rand(&seed) & 1u),
                      1.0f};
    const int32_t w_in = k + pick(0, 3);
    const int32_t *ix = th_rand(&seed) % 3u == 0u ? idx : NULL;
    const float x_scale = uniform(0.001f, 0.1f);
    const int32_t x_zp = pick(-128, 127);
    uint8_t *shr = mode == TT_Q8_SHADOW ? sh_ref : NULL, *sho = mode == TT_Q8_SHADOW ? sh_opt : NULL;
    int32_t i;

    if (th_rand(&seed) % 4u == 0u) {
        u.lr_scale = uniform(0.1f, 3.0f);
    }
    fill_dy(out, special);
    for (i = 0; i < out; ++i) { /* up to 2^15 LSB: some deltas move a weight to a bound */
        step[i] = uniform(0.01f, 2.0f) * (float)(1u << (th_rand(&seed) % 16u));
    }
    for (i = 0; i < k; ++i) {
        x8[i] = (int8_t)(th_rand(&seed) >> 24);
        idx[i] = i + (w_in - k) * (i == k - 1); /* ascending, inside w_in */
    }
    for (i = 0; i < O_MAX * (K_MAX + 3); ++i) {
        const uint32_t r = th_rand(&seed);
        w_ref[i] = w_opt[i] = r % 8u == 0u ? (int8_t)(r & 1u ? 127 : -128) : (int8_t)(r >> 24);
    }
    for (i = 0; i < O_MAX * K_MAX; ++i) {
        sh_ref[i] = sh_opt[i] = (uint8_t)th_rand(&seed);
    }
    tt_dense_weight_sgd_s8(w_ref, shr, dy, x8, x_scale, x_zp, k, out, w_in, ix, step, &u);
    tt_dense_weight_sgd_s8_opt(w_opt, sho, dy, x8, x_scale, x_zp, k, out, w_in, ix, step, &u);
    return memcmp(w_ref, w_opt, sizeof w_ref) != 0 || memcmp(sh_ref, sh_opt, sizeof sh_ref) != 0;
}

static int is_nan(uint32_t v) { return (v & 0x7FFFFFFFu) > 0x7F800000u; }

static int row_case(int32_t pixels, int32_t c, int special)
{
    int32_t i;

    fill_dy(pixels * c, special);
    for (i = 0; i < C_MAX + 4; ++i) {
        const float v = i < c ? uniform(-100.0f, 100.0f) : 0.0f;
        memcpy(&s_ref[i], &v, 4);
        if (i >= c) s_ref[i] = GUARD;
        s_opt[i] = s_ref[i];
    }
    tt_bias_grad_row_f32((float *)s_ref, dy, pixels, c);
    tt_bias_grad_row_f32_opt((float *)s_opt, dy, pixels, c);
    for (i = 0; i < C_MAX + 4; ++i) { /* the same bits, or both NaN (payloads aside, as
                                       * tt_f32_opt.h says: a host compiler may swap an
                                       * addition's operands, and x86 keeps the first's) */
        if (s_ref[i] != s_opt[i] && !(is_nan(s_ref[i]) && is_nan(s_opt[i]))) return 1;
    }
    return 0;
}

int main(void)
{
    static const int32_t modes[] = {TT_Q8_STOCHASTIC, TT_Q8_SHADOW, TT_Q8_TRUNCATE};
    int failures = 0, t;

    for (t = 0; t < 600; ++t) {
        const int32_t rows = t % 5 < 4 ? t % 5 : pick(4, R_MAX);
        const int32_t c = t < 100 ? 1 + t % 20 : pick(0, C_MAX);
        const int special = t % 7 == 0;
        if (rows * c > R_MAX * C_MAX) continue;
        {
            const int a = bias_case(rows, c, modes[t % 3], special);
            const int r = row_case(rows, c, special);
            if (a || r) {
                snprintf(line, sizeof line, "case %d: %ld rows x %ld, mode %ld, special %d: "
                         "%s%s differ\n", t, (long)rows, (long)c, (long)modes[t % 3], special,
                         a ? "bias_sgd_s32 " : "", r ? "grad_row" : "");
                th_puts(line);
            }
            failures += a + r;
        }
    }
    for (t = 0; t < 400; ++t) {
        const int32_t k = t < 40 ? 1 + t : pick(1, K_MAX), out = pick(1, O_MAX);
        const int32_t mode = t % 4 == 3 ? modes[(t / 4) % 3] : TT_Q8_STOCHASTIC;
        if (dense_case(k, out, mode, t % 5 == 0)) {
            snprintf(line, sizeof line, "dense case %d: k %ld, out %ld, mode %ld differ\n", t,
                     (long)k, (long)out, (long)mode);
            th_puts(line);
            ++failures;
        }
    }
    snprintf(line, sizeof line, "bias_opt: %d failures\n", failures);
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}
#else
static int32_t g_c;

static void b_sgd(int o)
{
    tt_q8_update u = {TT_Q8_STOCHASTIC, 7u, 1u, 0, 1.0f};
    (o ? tt_bias_sgd_s32_opt : tt_bias_sgd_s32)(b_opt, dy, 16, g_c, step, &u);
}

static void b_row(int o)
{
    (o ? tt_bias_grad_row_f32_opt : tt_bias_grad_row_f32)((float *)s_opt, dy, 16, g_c);
}

int main(void)
{
    static const int32_t cs[] = {16, 48, 80};
    int32_t i;

    th_ticks_start();
    fill_dy(16 * C_MAX, 0);
    for (i = 0; i < C_MAX; ++i) step[i] = 1e-3f;
    for (i = 0; i < 3; ++i) {
        uint32_t r, o, rr, ro;
        g_c = cs[i];
        memset(s_opt, 0, sizeof s_opt);
        r = th_instructions(b_sgd, 0), o = th_instructions(b_sgd, 1);
        rr = th_instructions(b_row, 0), ro = th_instructions(b_row, 1);
        snprintf(line, sizeof line, "16 x %ld: bias_sgd_s32 ref %lu opt %lu, grad_row ref %lu "
                 "opt %lu instructions (x100 per element)\n", (long)g_c,
                 (unsigned long)(100u * r / (16u * (uint32_t)g_c)),
                 (unsigned long)(100u * o / (16u * (uint32_t)g_c)),
                 (unsigned long)(100u * rr / (16u * (uint32_t)g_c)),
                 (unsigned long)(100u * ro / (16u * (uint32_t)g_c)));
        th_puts(line);
    }
    th_exit(0);
    return 0;
}
#endif
