/*
 * Channel-streamed backward kernels: the optimised ones (runtime_c/optimized/tt_f32_bwd_opt.c) against
 * the reference (runtime_c/reference/tt_channel_stream.c), over the inverted-residual blocks of the
 * three benchmark networks at 128x128 (tests/torch_models.py) and random geometries.
 *
 * Every kernel must be bit-identical to the reference except tt_cs_pw_input_s8_opt, whose
 * terms are grouped dy * (w_scale * w) instead of (dy * w_scale) * w: it must stay within
 * PW_SRC_TOL (below). Prints a hash of every optimised kernel's outputs (pytest compares them
 * across host, m7 and m4) and exits nonzero on any mismatch.
 *
 * The depthwise kernels also meet inf / NaN in dy, x and fp32 weights (their zero padding
 * must fall back to the reference there); those outputs are compared, not hashed.
 *
 * -DCS_BENCH instead prints instructions per MAC (per element for the masks and biases) of
 * reference and optimised kernels on benchmark blocks, every channel as the generated loop
 * runs them, then the totals of whole networks' streamed regions with every s8 sub-op (the
 * twins' SysTick counts TH_TICK_CENTI / 100 instructions per tick). -DCS_SEED / -DCS_RANDOM: a longer soak.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

/* pw_input_s8: both versions add the same cout terms in the same order; each term is the
 * exact product rounded twice, grouped differently (<= 2 ulp apart), and each of the cout
 * running sums rounds once (<= 1 ulp of the sum of |terms| each, in both): so
 * |opt - ref| <= PW_SRC_TOL(cout) * sum|terms|, with u = 2^-24 */
#define UNIT_ROUNDOFF 5.9604645e-8f
#define PW_SRC_TOL(cout) ((2.0f * (float)(cout) + 4.0f) * UNIT_ROUNDOFF)
#define TINY 1e-30f

/* ---- buffers (the widest benchmark tensors: 64x64x48 int8/fp32 depthwise input) ---- */
#define NX 200000
#define NF 70000
static float g_x[NX];
static int8_t g_x8[NX];
static float g_w[100000]; /* weights: 576 x 160 at most (MCUNet's last projection) */
static int8_t g_w8[100000], g_w8b[100000];
static float g_dy[NF], g_a[NF], g_b[NF], g_ma[NF], g_mb[NF];
static uint8_t g_sha[NF], g_shb[NF], g_mask[NX / 8 + 16];
static float g_ws[1024], g_step[1024];
static int32_t g_idx[1024];
static int32_t g_bi_a[1024], g_bi_b[1024];

#ifndef CS_SEED
#define CS_SEED 12345u /* -DCS_SEED=... -DCS_RANDOM=... for a longer soak on the host */
#endif
#ifndef CS_RANDOM
#define CS_RANDOM 300
#endif
static uint32_t g_seed = CS_SEED;
static int g_fail;
static char g_line[256];

static uint32_t rnd(void)
{
    return th_rand(&g_seed);
}

static int32_t rint_(int32_t lo, int32_t hi) /* uniform in [lo, hi] */
{
    return lo + (int32_t)(rnd() % (uint32_t)(hi - lo + 1));
}

/* floats in [-1, 1), with exact +0 and -0 now and then (masked gradients are full of them) */
static float frand(void)
{
    const uint32_t r = rnd();
    if ((r & 15u) == 0u) {
        return (r & 16u) ? -0.0f : 0.0f;
    }
    return (float)((int32_t)(r >> 8) - (1 << 23)) * (1.0f / 8388608.0f);
}

static void fill(float *p, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        p[i] = frand();
    }
}

static void fill8(int8_t *p, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        p[i] = (int8_t)(rnd() >> 24);
    }
}

static void fill_bits(float *p, int32_t n, uint32_t bits) /* "not written" markers */
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        memcpy(&p[i], &bits, 4);
    }
}

/* ---- per-kernel hashes of the optimised outputs (FNV-1a) ---- */
enum {
    K_PWI_S8, K_PWI_F32, K_ADD_S8, K_ADD_F32, K_PWW_S8, K_PWW_F32, K_DWI_S8, K_DWI_F32,
    K_DWW_S8, K_DWW_F32, K_MASK, K_CLAMP, K_CLIP, K_BIAS_S32, K_BIAS_F32, K_ADD_MASTER, K_PWW_S8_G,
    K_ADD_S8_G, K_PWI_S8_G, K_PWW_S8F, K_N
};
static const char *const K_NAME[K_N] = {
    "pw_input_s8", "pw_input_f32", "pw_input_add_s8", "pw_input_add_f32", "pw_weight_sgd_s8",
    "pw_weight_sgd_f32", "dw_input_s8", "dw_input_f32", "dw_weight_sgd_s8", "dw_weight_sgd_f32",
    "mask", "q8_clamp", "clip_f32", "bias_sgd_s32", "bias_sgd_f32", "pw_input_add_s8_master",
    "pw_weight_sgd_s8_g", "pw_input_add_s8_g", "pw_input_s8_g", "pw_weight_sgd_s8f"};
static uint32_t g_hash[K_N];
static uint32_t g_cases[K_N];
static float g_worst_rel; /* pw_input_s8: largest |opt - ref| / sum|terms| seen */
static uint32_t g_nonfinite; /* depthwise cases with inf / NaN inputs */

static void hash(int k, const void *p, int32_t bytes)
{
    const uint8_t *b = (const uint8_t *)p;
    uint32_t h = g_hash[k] ? g_hash[k] : 2166136261u;
    int32_t i;
    for (i = 0; i < bytes; ++i) {
        h = (h ^ b[i]) * 16777619u;
    }
    g_hash[k] = h;
}

static void fail(int k, const char *what, int32_t i)
{
    if (g_fail < 20) {
        snprintf(g_line, sizeof g_line, "MISMATCH %s: %s at %ld\n", K_NAME[k], what, (long)i);
        th_puts(g_line);
    }
    ++g_fail;
}

static void same(int k, const void *a, const void *b, int32_t bytes, const char *what)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    int32_t i;
    for (i = 0; i < bytes; ++i) {
        if (x[i] != y[i]) {
            fail(k, what, i);
            return;
        }
    }
}

static float absf(float v)
{
    return v < 0.0f ? -v : v;
}

#ifdef CS_BENCH
/* v with two decimals (newlib-nano's printf has no floating point) */
static const char *fix2(char *buf, size_t size, float v)
{
    const long h = (long)(v * 100.0f + 0.5f);
    snprintf(buf, size, "%ld.%02ld", h / 100, h % 100);
    return buf;
}
#endif

/* ---- one test per kernel ---- */

static void t_pw_input(int32_t n, int32_t cout, int32_t cin, int32_t c)
{
    int32_t p, o;

    fill(g_dy, n * cout);
    fill8(g_w8, cout * cin);
    fill(g_w, cout * cin);
    for (o = 0; o < cout; ++o) {
        g_ws[o] = 0.001f + 0.01f * absf(frand());
    }
    /* int8: within PW_SRC_TOL of the reference */
    fill_bits(g_a, n, 0x7fc00001u);
    fill_bits(g_b, n, 0x7fc00002u);
    tt_cs_pw_input_s8(g_a, g_dy, g_w8, g_ws, n, cout, cin, c);
    tt_cs_pw_input_s8_opt(g_b, g_dy, g_w8, g_ws, n, cout, cin, c);
    for (p = 0; p < n; ++p) {
        float s = 0.0f, e;
        for (o = 0; o < cout; ++o) {
            s += absf(g_dy[p * cout + o] * g_ws[o] * (float)g_w8[o * cin + c]);
        }
        e = absf(g_a[p] - g_b[p]);
        if (!(e <= PW_SRC_TOL(cout) * s + TINY)) {
            fail(K_PWI_S8, "beyond PW_SRC_TOL", p);
            break;
        }
        if (s > 0.0f && e / s > g_worst_rel) {
            g_worst_rel = e / s;
        }
    }
    hash(K_PWI_S8, g_b, n * 4);
    ++g_cases[K_PWI_S8];
    /* a group of channels into planes ps apart (tt_cs_pw_input_s8_g): each plane the bits of
     * the one-channel kernel's (mostly 4 channels, the fast path; else a region's last few) */
    {
        const int32_t cnt = cin >= 4 && (rnd() % 4u) != 0u ? 4 : rint_(1, cin < 4 ? cin : 4);
        const int32_t c0 = rint_(0, cin - cnt), ps = n + rint_(0, 3);
        int32_t i;
        fill_bits(g_a, cnt * ps, 0x7fc00001u);
        fill_bits(g_b, cnt * ps, 0x7fc00002u);
        for (i = 0; i < cnt; ++i) {
            tt_cs_pw_input_s8_opt(g_a + i * ps, g_dy, g_w8, g_ws, n, cout, cin, c0 + i);
        }
        tt_cs_pw_input_s8_g_opt(g_b, ps, g_dy, g_w8, g_ws, n, cout, cin, c0, cnt);
        for (i = 0; i < cnt; ++i) {
            same(K_PWI_S8_G, g_a + i * ps, g_b + i * ps, n * 4, "plane");
            hash(K_PWI_S8_G, g_b + i * ps, n * 4);
        }
        tt_cs_pw_input_s8_g(g_b, ps, g_dy, g_w8, g_ws, n, cout, cin, c0, cnt);
        for (i = 0; i < cnt; ++i) { /* the reference's group: its one-channel kernel's bits */
            tt_cs_pw_input_s8(g_a + i * ps, g_dy, g_w8, g_ws, n, cout, cin, c0 + i);
        }
        for (i = 0; i < cnt; ++i) {
            same(K_PWI_S8_G, g_a + i * ps, g_b + i * ps, n * 4, "reference planes");
        }
        ++g_cases[K_PWI_S8_G];
    }
    /* fp32: bit-identical */
    fill_bits(g_a, n, 0x7fc00001u);
    fill_bits(g_b, n, 0x7fc00002u);
    tt_cs_pw_input_f32(g_a, g_dy, g_w, n, cout, cin, c);
    tt_cs_pw_input_f32_opt(g_b, g_dy, g_w, n, cout, cin, c);
    same(K_PWI_F32, g_a, g_b, n * 4, "plane");
    hash(K_PWI_F32, g_b, n * 4);
    ++g_cases[K_PWI_F32];
}

/* a random subset of k of the dx_c channels (distinct, in random order when shuffle) */
static void make_idx(int32_t dx_c, int32_t k, int shuffle)
{
    int32_t i, j = 0;
    for (i = 0; i < dx_c && j < k; ++i) {
        if ((int32_t)(rnd() % (uint32_t)(dx_c - i)) < k - j) {
            g_idx[j++] = i;
        }
    }
    if (shuffle) {
        for (i = k - 1; i > 0; --i) {
            const int32_t r = (int32_t)(rnd() % (uint32_t)(i + 1)), t = g_idx[i];
            g_idx[i] = g_idx[r];
            g_idx[r] = t;
        }
    }
}

/* a channel group of a region with `rows` channels (passes/channel_group.py): mostly 4, the
 * kernels' fast path, else a region's last few; planes of n floats ds apart, filled */
static void pick_group(int32_t rows, int32_t n, int32_t *cnt, int32_t *c0, int32_t *ds)
{
    *cnt = rows >= 4 && (rnd() % 4u) != 0u ? 4 : rint_(1, rows < 4 ? rows : 4);
    *c0 = rint_(0, rows - *cnt);
    *ds = n + rint_(0, 3);
    fill(g_dy, *ds * *cnt);
}

static void t_pw_input_add(int32_t n, int32_t dx_c, int32_t k, int32_t rows, int32_t c,
                           int use_idx)
{
    const int32_t *idx = use_idx ? g_idx : NULL;

    if (use_idx) {
        make_idx(dx_c, k, (int)(rnd() & 1u));
    }
    fill(g_dy, n);
    fill8(g_w8, rows * k);
    fill(g_w, rows * k);
    fill(g_ws, rows);
    fill(g_a, n * dx_c);
    memcpy(g_b, g_a, sizeof(float) * (size_t)(n * dx_c));
    tt_cs_pw_input_add_s8(g_a, g_dy, g_w8, g_ws, n, dx_c, idx, k, c);
    tt_cs_pw_input_add_s8_opt(g_b, g_dy, g_w8, g_ws, n, dx_c, idx, k, c);
    same(K_ADD_S8, g_a, g_b, n * dx_c * 4, "dx");
    hash(K_ADD_S8, g_b, n * dx_c * 4);
    ++g_cases[K_ADD_S8];
    fill(g_a, n * dx_c);
    memcpy(g_b, g_a, sizeof(float) * (size_t)(n * dx_c));
    tt_cs_pw_input_add_f32(g_a, g_dy, g_w, n, dx_c, idx, k, c);
    tt_cs_pw_input_add_f32_opt(g_b, g_dy, g_w, n, dx_c, idx, k, c);
    same(K_ADD_F32, g_a, g_b, n * dx_c * 4, "dx");
    hash(K_ADD_F32, g_b, n * dx_c * 4);
    ++g_cases[K_ADD_F32];
    fill8(g_w8b, rows * k); /* --rounding master: the shadow bytes */
    fill(g_a, n * dx_c);
    memcpy(g_b, g_a, sizeof(float) * (size_t)(n * dx_c));
    tt_cs_pw_input_add_s8_master(g_a, g_dy, g_w8, (const uint8_t *)g_w8b, g_ws, n, dx_c, idx, k,
                                 c);
    tt_cs_pw_input_add_s8_master_opt(g_b, g_dy, g_w8, (const uint8_t *)g_w8b, g_ws, n, dx_c,
                                     idx, k, c);
    same(K_ADD_MASTER, g_a, g_b, n * dx_c * 4, "dx");
    hash(K_ADD_MASTER, g_b, n * dx_c * 4);
    ++g_cases[K_ADD_MASTER];

    /* a group of channels from kept planes ds apart (tt_cs_pw_input_add_s8_g) */
    {
        int32_t cnt, c0, ds;
        pick_group(rows, n, &cnt, &c0, &ds);
        fill(g_a, n * dx_c);
        memcpy(g_b, g_a, sizeof(float) * (size_t)(n * dx_c));
        tt_cs_pw_input_add_s8_g(g_a, g_dy, ds, g_w8, g_ws, n, dx_c, idx, k, c0, cnt);
        tt_cs_pw_input_add_s8_g_opt(g_b, g_dy, ds, g_w8, g_ws, n, dx_c, idx, k, c0, cnt);
        same(K_ADD_S8_G, g_a, g_b, n * dx_c * 4, "dx");
        hash(K_ADD_S8_G, g_b, n * dx_c * 4);
        ++g_cases[K_ADD_S8_G];
    }
}

static int32_t g_mode = -1; /* >= 0: every update in this rounding mode (the sweeps) */

static void random_update(tt_q8_update *u, int packed)
{
    u->mode = (int32_t)(rnd() % 3u);
    if (g_mode >= 0) {
        u->mode = g_mode;
    }
    u->salt = rnd();
    u->step = rnd() % 1000u;
    u->packed = packed;
    /* a learning rate changed at run time (the model's set_lr) half of the time */
    u->lr_scale = (rnd() & 1u) ? 1.0f : 0.25f + 2.0f * absf(frand());
}

/* an int8 update's weights g_w8b (and shadows g_shb) against the reference's g_w8 (g_sha):
 * the same bits, hashed */
static void same_update(int kern, int32_t wsize, int32_t ssize, int shadow)
{
    same(kern, g_w8, g_w8b, wsize, "w");
    if (shadow) {
        same(kern, g_sha, g_shb, ssize, "shadow");
        hash(kern, g_shb, ssize);
    }
    hash(kern, g_w8b, wsize);
    ++g_cases[kern];
}

static void t_pw_weight(int32_t n, int32_t k, int32_t w_cin, int32_t rows, int32_t c,
                        int use_idx, int packed)
{
    const int32_t *idx = use_idx ? g_idx : NULL;
    const int32_t wsize = rows * (packed ? k : w_cin);
    const int32_t x_zp = rint_(-128, 127);
    const float x_scale = 0.005f + 0.05f * absf(frand());
    tt_q8_update u;
    uint8_t *sha, *shb;
    float lr = 0.01f, mom = 0.0f, wd = 0.0f;
    float *ma = NULL, *mb = NULL;
    int32_t i;

    if (use_idx) {
        make_idx(w_cin, k, (int)(rnd() & 1u));
    }
    random_update(&u, packed);
    sha = u.mode == TT_Q8_SHADOW ? g_sha : NULL;
    shb = u.mode == TT_Q8_SHADOW ? g_shb : NULL;
    fill(g_dy, n);
    fill8(g_x8, n * k);
    for (i = 0; i < rows; ++i) {
        g_step[i] = 0.5f + 40.0f * absf(frand());
    }
    fill8(g_w8, wsize);
    memcpy(g_w8b, g_w8, (size_t)wsize);
    for (i = 0; i < rows * k; ++i) {
        g_sha[i] = g_shb[i] = (uint8_t)rnd();
    }
    tt_cs_pw_weight_sgd_s8(g_w8, sha, g_dy, g_x8, x_scale, x_zp, n, k, w_cin, idx, c, g_step,
                           &u);
    tt_cs_pw_weight_sgd_s8_opt(g_w8b, shb, g_dy, g_x8, x_scale, x_zp, n, k, w_cin, idx, c,
                               g_step, &u);
    same_update(K_PWW_S8, wsize, rows * k, sha != NULL);

    /* a group of rows from kept planes ds apart (tt_cs_pw_weight_sgd_s8_g) */
    {
        int32_t cnt, c0, ds;
        pick_group(rows, n, &cnt, &c0, &ds);
        memcpy(g_w8b, g_w8, (size_t)wsize);
        memcpy(g_shb, g_sha, (size_t)(rows * k));
        tt_cs_pw_weight_sgd_s8_g(g_w8, sha, g_dy, ds, g_x8, x_scale, x_zp, n, k, w_cin, idx, c0,
                                 cnt, g_step, &u);
        tt_cs_pw_weight_sgd_s8_g_opt(g_w8b, shb, g_dy, ds, g_x8, x_scale, x_zp, n, k, w_cin, idx,
                                     c0, cnt, g_step, &u);
        same_update(K_PWW_S8_G, wsize, rows * k, sha != NULL);
    }

    /* the same rows from x converted to float once (tt_cs_x_float_s8, then
     * tt_cs_pw_weight_sgd_s8f): the bits of the int8 path */
    tt_cs_x_float_s8(g_x, g_x8, n * k, x_zp);
    memcpy(g_w8b, g_w8, (size_t)wsize);
    memcpy(g_shb, g_sha, (size_t)(rows * k));
    tt_cs_pw_weight_sgd_s8f(g_w8, sha, g_dy, g_x, x_scale, n, k, w_cin, idx, c, g_step, &u);
    tt_cs_pw_weight_sgd_s8f_opt(g_w8b, shb, g_dy, g_x, x_scale, n, k, w_cin, idx, c, g_step,
                                &u);
    same_update(K_PWW_S8F, wsize, rows * k, sha != NULL);

    /* fp32 (the weight is never packed: w_cin columns) */
    fill(g_x, n * k);
    fill(g_a, rows * w_cin);
    memcpy(g_b, g_a, sizeof(float) * (size_t)(rows * w_cin));
    if (rnd() & 1u) {
        mom = 0.9f;
        ma = g_ma;
        mb = g_mb;
        fill(g_ma, rows * k);
        memcpy(g_mb, g_ma, sizeof(float) * (size_t)(rows * k));
    }
    if (rnd() & 1u) {
        wd = 1e-3f;
    }
    tt_cs_pw_weight_sgd_f32(g_a, ma, g_dy, g_x, n, k, w_cin, idx, c, lr, mom, wd);
    tt_cs_pw_weight_sgd_f32_opt(g_b, mb, g_dy, g_x, n, k, w_cin, idx, c, lr, mom, wd);
    same(K_PWW_F32, g_a, g_b, rows * w_cin * 4, "w");
    hash(K_PWW_F32, g_b, rows * w_cin * 4);
    if (ma != NULL) {
        same(K_PWW_F32, g_ma, g_mb, rows * k * 4, "m");
        hash(K_PWW_F32, g_mb, rows * k * 4);
    }
    ++g_cases[K_PWW_F32];
}

/* depthwise geometry: ch channels, h x w input, kernel kh x kw, strides, dilations, top /
 * left pads and bottom / right pads pb / pr */
static int geom(tt_conv_geom *g, int32_t h, int32_t w, int32_t ch, int32_t kh, int32_t kw,
                int32_t sh, int32_t sw, int32_t pt, int32_t pl, int32_t pb, int32_t pr,
                int32_t dh, int32_t dw)
{
    const int32_t eh = h + pt + pb - dh * (kh - 1), ew = w + pl + pr - dw * (kw - 1);
    if (eh < 1 || ew < 1) {
        return 0;
    }
    g->h = h, g->w = w, g->cin = ch, g->cout = ch, g->groups = ch;
    g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw, g->pt = pt, g->pl = pl;
    g->dh = dh, g->dw = dw;
    g->oh = (eh - 1) / sh + 1;
    g->ow = (ew - 1) / sw + 1;
    return 1;
}

static void t_dw(const tt_conv_geom *g, int32_t c)
{
    const int32_t hw = g->h * g->w, ohw = g->oh * g->ow, kk = g->kh * g->kw;
    const int32_t x_zp = rint_(-128, 127);
    const float x_scale = 0.005f + 0.05f * absf(frand());
    tt_q8_update u;
    uint8_t *sha, *shb;
    float mom = 0.0f, wd = 0.0f;
    float *ma = NULL, *mb = NULL;
    int32_t i;

    /* input gradients */
    fill(g_dy, ohw);
    fill8(g_w8, g->cin * kk);
    fill(g_w, g->cin * kk);
    fill(g_ws, g->cin);
    fill_bits(g_a, hw, 0x7fc00001u);
    fill_bits(g_b, hw, 0x7fc00002u);
    tt_cs_dw_input_s8(g_a, g_dy, g_w8, g_ws, g, c);
    tt_cs_dw_input_s8_opt(g_b, g_dy, g_w8, g_ws, g, c);
    same(K_DWI_S8, g_a, g_b, hw * 4, "dx");
    hash(K_DWI_S8, g_b, hw * 4);
    ++g_cases[K_DWI_S8];
    fill_bits(g_a, hw, 0x7fc00001u);
    fill_bits(g_b, hw, 0x7fc00002u);
    tt_cs_dw_input_f32(g_a, g_dy, g_w, g, c);
    tt_cs_dw_input_f32_opt(g_b, g_dy, g_w, g, c);
    same(K_DWI_F32, g_a, g_b, hw * 4, "dx");
    hash(K_DWI_F32, g_b, hw * 4);
    ++g_cases[K_DWI_F32];

    /* weight updates */
    random_update(&u, 0);
    sha = u.mode == TT_Q8_SHADOW ? g_sha : NULL;
    shb = u.mode == TT_Q8_SHADOW ? g_shb : NULL;
    fill8(g_x8, hw * g->cin);
    for (i = 0; i < g->cin; ++i) {
        g_step[i] = 0.5f + 40.0f * absf(frand());
    }
    memcpy(g_w8b, g_w8, (size_t)(g->cin * kk));
    for (i = 0; i < g->cin * kk; ++i) {
        g_sha[i] = g_shb[i] = (uint8_t)rnd();
    }
    tt_cs_dw_weight_sgd_s8(g_w8, sha, g_dy, g_x8, x_scale, x_zp, g, c, g_step, &u);
    tt_cs_dw_weight_sgd_s8_opt(g_w8b, shb, g_dy, g_x8, x_scale, x_zp, g, c, g_step, &u);
    same(K_DWW_S8, g_w8, g_w8b, g->cin * kk, "w");
    hash(K_DWW_S8, g_w8b, g->cin * kk);
    if (sha != NULL) {
        same(K_DWW_S8, g_sha, g_shb, g->cin * kk, "shadow");
        hash(K_DWW_S8, g_shb, g->cin * kk);
    }
    ++g_cases[K_DWW_S8];

    fill(g_x, hw * g->cin);
    memcpy(g_a, g_w, sizeof(float) * (size_t)(g->cin * kk));
    memcpy(g_b, g_w, sizeof(float) * (size_t)(g->cin * kk));
    if (rnd() & 1u) {
        mom = 0.9f;
        ma = g_ma;
        mb = g_mb;
        fill(g_ma, g->cin * kk);
        memcpy(g_mb, g_ma, sizeof(float) * (size_t)(g->cin * kk));
    }
    if (rnd() & 1u) {
        wd = 1e-3f;
    }
    tt_cs_dw_weight_sgd_f32(g_a, ma, g_dy, g_x, g, c, 0.01f, mom, wd);
    tt_cs_dw_weight_sgd_f32_opt(g_b, mb, g_dy, g_x, g, c, 0.01f, mom, wd);
    same(K_DWW_F32, g_a, g_b, g->cin * kk * 4, "w");
    hash(K_DWW_F32, g_b, g->cin * kk * 4);
    if (ma != NULL) {
        same(K_DWW_F32, g_ma, g_mb, g->cin * kk * 4, "m");
        hash(K_DWW_F32, g_mb, g->cin * kk * 4);
    }
    ++g_cases[K_DWW_F32];
}

/* inf / NaN in dy, x or fp32 weights: the depthwise fast paths pad with zeros and must
 * fall back where a zero would meet them (compared on this target only: NaN bits differ
 * between the host's and the twins' FPUs, so these outputs are not hashed) */
static void t_dw_nonfinite(const tt_conv_geom *g, int32_t c)
{
    static const uint32_t BAD[3] = {0x7f800000u, 0xff800000u, 0x7fc00000u};
    const int32_t hw = g->h * g->w, ohw = g->oh * g->ow, kk = g->kh * g->kw;
    const uint32_t bad = BAD[rnd() % 3u];
    const int32_t where = (int32_t)(rnd() % 3u);
    tt_q8_update u = {TT_Q8_SHADOW, 1u, 2u, 0, 1.0f};
    int32_t i;

    fill(g_dy, ohw);
    fill(g_w, g->cin * kk);
    fill8(g_w8, g->cin * kk);
    fill(g_ws, g->cin);
    fill(g_x, hw * g->cin);
    fill8(g_x8, hw * g->cin);
    if (where == 0) {
        memcpy(&g_dy[rint_(0, ohw - 1)], &bad, 4);
    } else if (where == 1) {
        memcpy(&g_w[c * kk + rint_(0, kk - 1)], &bad, 4);
    } else {
        memcpy(&g_x[rint_(0, hw - 1) * g->cin + c], &bad, 4);
    }
    tt_cs_dw_input_f32(g_a, g_dy, g_w, g, c);
    tt_cs_dw_input_f32_opt(g_b, g_dy, g_w, g, c);
    same(K_DWI_F32, g_a, g_b, hw * 4, "dx (inf/NaN)");
    tt_cs_dw_input_s8(g_a, g_dy, g_w8, g_ws, g, c);
    tt_cs_dw_input_s8_opt(g_b, g_dy, g_w8, g_ws, g, c);
    same(K_DWI_S8, g_a, g_b, hw * 4, "dx (inf/NaN)");
    memcpy(g_a, g_w, sizeof(float) * (size_t)(g->cin * kk));
    memcpy(g_b, g_w, sizeof(float) * (size_t)(g->cin * kk));
    tt_cs_dw_weight_sgd_f32(g_a, NULL, g_dy, g_x, g, c, 0.01f, 0.0f, 0.0f);
    tt_cs_dw_weight_sgd_f32_opt(g_b, NULL, g_dy, g_x, g, c, 0.01f, 0.0f, 0.0f);
    same(K_DWW_F32, g_a, g_b, g->cin * kk * 4, "w (inf/NaN)");
    for (i = 0; i < g->cin; ++i) {
        g_step[i] = 1.0f;
    }
    memcpy(g_w8b, g_w8, (size_t)(g->cin * kk));
    memset(g_sha, 0, (size_t)(g->cin * kk));
    memset(g_shb, 0, (size_t)(g->cin * kk));
    tt_cs_dw_weight_sgd_s8(g_w8, g_sha, g_dy, g_x8, 0.02f, 1, g, c, g_step, &u);
    tt_cs_dw_weight_sgd_s8_opt(g_w8b, g_shb, g_dy, g_x8, 0.02f, 1, g, c, g_step, &u);
    same(K_DWW_S8, g_w8, g_w8b, g->cin * kk, "w (inf/NaN)");
    same(K_DWW_S8, g_sha, g_shb, g->cin * kk, "shadow (inf/NaN)");
    ++g_nonfinite;
}

static void t_masks(int32_t n, int32_t ch, int32_t c)
{
    const int32_t lo = rint_(-130, 20), hi = lo + rint_(-1, 140);
    const float flo = frand() * 0.5f - 0.5f, fhi = flo + absf(frand()) * 1.5f;
    int32_t i;

    fill(g_dy, n);
    for (i = 0; i < (n * ch + 7) / 8; ++i) {
        g_mask[i] = (uint8_t)rnd();
    }
    fill8(g_x8, n * ch);
    fill(g_x, n * ch);
    /* the masks may write over their input: test in place too */
    tt_cs_mask(g_a, g_dy, g_mask, n, ch, c);
    memcpy(g_b, g_dy, sizeof(float) * (size_t)n);
    tt_cs_mask_opt(g_b, g_b, g_mask, n, ch, c);
    same(K_MASK, g_a, g_b, n * 4, "out (in place)");
    fill_bits(g_b, n, 0x7fc00002u);
    tt_cs_mask_opt(g_b, g_dy, g_mask, n, ch, c);
    same(K_MASK, g_a, g_b, n * 4, "out");
    hash(K_MASK, g_b, n * 4);
    ++g_cases[K_MASK];

    tt_cs_q8_clamp(g_a, g_dy, g_x8, n, ch, c, lo, hi);
    memcpy(g_b, g_dy, sizeof(float) * (size_t)n);
    tt_cs_q8_clamp_opt(g_b, g_b, g_x8, n, ch, c, lo, hi);
    same(K_CLAMP, g_a, g_b, n * 4, "out (in place)");
    fill_bits(g_b, n, 0x7fc00002u);
    tt_cs_q8_clamp_opt(g_b, g_dy, g_x8, n, ch, c, lo, hi);
    same(K_CLAMP, g_a, g_b, n * 4, "out");
    hash(K_CLAMP, g_b, n * 4);
    ++g_cases[K_CLAMP];

    tt_cs_clip_f32(g_a, g_dy, g_x, n, ch, c, flo, fhi);
    memcpy(g_b, g_dy, sizeof(float) * (size_t)n);
    tt_cs_clip_f32_opt(g_b, g_b, g_x, n, ch, c, flo, fhi);
    same(K_CLIP, g_a, g_b, n * 4, "out (in place)");
    fill_bits(g_b, n, 0x7fc00002u);
    tt_cs_clip_f32_opt(g_b, g_dy, g_x, n, ch, c, flo, fhi);
    same(K_CLIP, g_a, g_b, n * 4, "out");
    hash(K_CLIP, g_b, n * 4);
    ++g_cases[K_CLIP];
}

static void t_bias(int32_t n, int32_t ch, int32_t c)
{
    tt_q8_update u;
    int32_t i;
    float *ma = NULL, *mb = NULL;
    const float mom = (rnd() & 1u) ? 0.9f : 0.0f;

    random_update(&u, 0);
    fill(g_dy, n);
    for (i = 0; i < ch; ++i) {
        g_bi_a[i] = g_bi_b[i] = (int32_t)(rnd() >> 12) - (1 << 19);
        g_step[i] = 1.0f + 1000.0f * absf(frand());
    }
    tt_cs_bias_sgd_s32(g_bi_a, g_dy, n, c, g_step, &u);
    tt_cs_bias_sgd_s32_opt(g_bi_b, g_dy, n, c, g_step, &u);
    same(K_BIAS_S32, g_bi_a, g_bi_b, ch * 4, "b");
    hash(K_BIAS_S32, g_bi_b, ch * 4);
    ++g_cases[K_BIAS_S32];

    fill(g_a, ch);
    memcpy(g_b, g_a, sizeof(float) * (size_t)ch);
    if (mom != 0.0f) {
        ma = g_ma;
        mb = g_mb;
        fill(g_ma, ch);
        memcpy(g_mb, g_ma, sizeof(float) * (size_t)ch);
    }
    tt_cs_bias_sgd_f32(g_a, ma, g_dy, n, c, 0.01f, mom, 1e-4f);
    tt_cs_bias_sgd_f32_opt(g_b, mb, g_dy, n, c, 0.01f, mom, 1e-4f);
    same(K_BIAS_F32, g_a, g_b, ch * 4, "b");
    hash(K_BIAS_F32, g_b, ch * 4);
    if (ma != NULL) {
        same(K_BIAS_F32, g_ma, g_mb, ch * 4, "m");
    }
    ++g_cases[K_BIAS_F32];
}

/* ---- the benchmark networks' inverted-residual blocks at 128x128:
 * input side H, block input channels cin (0: no expand conv), mid, cout, kernel, stride ---- */
typedef struct {
    int16_t h, cin, mid, cout, k, s;
} block;

static const block BLOCKS[] = {
    /* MobileNetV2(0.35, 128, 10) */
    {64, 0, 16, 8, 3, 1}, {64, 8, 48, 8, 3, 2}, {32, 8, 48, 8, 3, 1}, {32, 8, 48, 16, 3, 2},
    {16, 16, 96, 16, 3, 1}, {16, 16, 96, 24, 3, 2}, {8, 24, 144, 24, 3, 1},
    {8, 24, 144, 32, 3, 1}, {8, 32, 192, 32, 3, 1}, {8, 32, 192, 56, 3, 2},
    {4, 56, 336, 56, 3, 1}, {4, 56, 336, 112, 3, 1},
    /* ProxylessNAS(0.3, 128, 10) */
    {64, 8, 24, 16, 5, 2}, {32, 16, 48, 16, 3, 1}, {32, 16, 48, 16, 7, 2},
    {16, 16, 48, 16, 3, 1}, {16, 16, 48, 16, 5, 1}, {16, 16, 96, 24, 7, 2},
    {8, 24, 72, 24, 5, 1}, {8, 24, 144, 32, 5, 1}, {8, 32, 96, 32, 5, 1},
    {8, 32, 192, 64, 7, 2}, {4, 64, 384, 64, 7, 1}, {4, 64, 192, 64, 7, 1},
    {4, 64, 384, 96, 7, 1},
    /* MCUNet5FPS(128, 10) */
    {64, 8, 32, 16, 3, 2}, {32, 16, 48, 24, 7, 2}, {16, 24, 120, 24, 3, 1},
    {16, 24, 120, 40, 3, 2}, {8, 40, 160, 40, 7, 1}, {8, 40, 160, 48, 5, 1},
    {8, 48, 144, 48, 3, 1}, {8, 48, 192, 48, 3, 1}, {8, 48, 240, 96, 7, 2},
    {4, 96, 384, 96, 5, 1}, {4, 96, 576, 160, 3, 1},
};
#define NBLOCKS ((int32_t)(sizeof BLOCKS / sizeof BLOCKS[0]))

static int32_t out_side(const block *b)
{
    return (b->h + 2 * (b->k / 2) - b->k) / b->s + 1;
}

static void test_block(const block *b)
{
    const int32_t ho = out_side(b), n_in = b->h * b->h, n_out = ho * ho;
    const int32_t chans[2] = {rint_(0, b->mid - 1), b->mid - 1};
    tt_conv_geom g;
    int32_t i;

    for (i = 0; i < 2; ++i) {
        const int32_t c = chans[i];
        t_pw_input(n_out, b->cout, b->mid, c);
        t_masks(n_out, b->mid, c);
        t_bias(n_out, b->mid, c);
        geom(&g, b->h, b->h, b->mid, b->k, b->k, b->s, b->s, b->k / 2, b->k / 2, b->k / 2,
             b->k / 2, 1, 1);
        t_dw(&g, c);
        if (b->cin > 0) {
            const int32_t part = b->cin / 4 > 0 ? b->cin / 4 : 1;
            t_masks(n_in, b->mid, c);
            t_pw_input_add(n_in, b->cin, b->cin, b->mid, c, 0);
            t_pw_weight(n_in, b->cin, b->cin, b->mid, c, 0, 0);
            /* a partial update (TTE's weight_update_ratio): a split weight's two parts */
            t_pw_weight(n_in, part, b->cin, b->mid, c, 1, (int)(rnd() & 1u));
            t_pw_input_add(n_in, b->cin, part, b->mid, c, 1);
            t_pw_input_add(n_in, b->cin, b->cin - part, b->mid, c, 1);
        }
    }
}

/* the 1x1 weight updates' column and pixel tails, stochastically rounded: every row length k
 * from 1 to 70 (4-, 8- and 16-column blocks, whole rows of 4, 8 and 16, 1..3 columns left,
 * past one 32- and 64-column chunk) with odd and even pixel counts (a pair loop's last
 * pixel), packed rows (the first k of w_cin) or whole, an index now and then: the Helium
 * kernels' predicated tails and contiguous-row loops */
static void test_pw_weight_tails(void)
{
    static const int32_t ns[] = {1, 2, 3, 6, 17};
    int32_t k, i;

    g_mode = TT_Q8_STOCHASTIC;
    for (k = 1; k <= 70; ++k) {
        for (i = 0; i < (int32_t)(sizeof ns / sizeof ns[0]); ++i) {
            const int packed = (int)((k + i) & 1), use_idx = (k + i) % 5 == 0;
            const int32_t w_cin = k + (packed ? rint_(1, 5) : 0); /* packed: the first k */
            const int32_t rows = rint_(4, 9); /* (one draw a statement, see test_random) */
            const int32_t c = rint_(0, 3);
            t_pw_weight(ns[i], k, w_cin, rows, c, use_idx, packed);
        }
    }
    g_mode = -1;
}

/* the 1x1 sinks' column and pixel tails: every row length k from 1 to 60 (the Helium
 * one-channel kernel's blocks of 1..6 column vectors, two and three blocks a row, 1..3
 * columns left) with pixel counts across its 64-pixel passes and the four-channel source's
 * VST4 of four pixels (1, 3, 6, 16, 67), rows packed into wider pixels or whole, a group of
 * 1..4 channels each time (t_pw_input_add) */
static void test_pw_sink_tails(void)
{
    static const int32_t ns[] = {1, 3, 6, 16, 67};
    int32_t k, i;

    for (k = 1; k <= 60; ++k) {
        for (i = 0; i < (int32_t)(sizeof ns / sizeof ns[0]); ++i) {
            const int32_t dx_c = k + ((k + i) & 1 ? rint_(1, 9) : 0);
            const int32_t rows = rint_(4, 9); /* (one draw a statement, see test_random) */
            const int32_t c = rint_(0, 3);
            t_pw_input_add(ns[i], dx_c, k, rows, c, 0);
        }
    }
}

/* the masks' pixel tails where every pixel's bit sits at one position (ch a multiple of 8,
 * the Helium kernel's eight-pixel passes): every n from 1 to 24 and a few longer ones (a
 * pass or more plus 0..7 pixels), each channel byte and bit position now and then, in place
 * and not (t_masks) */
static void test_mask_tails(void)
{
    static const int32_t chs[] = {8, 16, 40};
    static const int32_t longer[] = {37, 67, 130};
    int32_t n, i;

    for (n = 1; n <= 27; ++n) {
        for (i = 0; i < (int32_t)(sizeof chs / sizeof chs[0]); ++i) {
            const int32_t ch = chs[i];
            const int32_t len = n <= 24 ? n : longer[n - 25];
            t_masks(len, ch, rint_(0, ch - 1));
        }
    }
}

static void test_random(void)
{
    tt_conv_geom g;
    const int32_t n = rint_(1, 150), ch = rint_(1, 80), c = rint_(0, ch - 1);
    const int32_t cout = rint_(1, 150), k = rint_(1, 70);
    const int32_t dx_c = k + ((rnd() & 1u) ? 0 : rint_(1, 20));
    int32_t kh = rint_(1, 8), kw = rint_(1, 8), sh = rint_(1, 3), sw = rint_(1, 3);
    int32_t dh = (rnd() % 4u) == 0u ? 2 : 1, dw = (rnd() % 4u) == 0u ? 2 : 1;
    int32_t h = rint_(1, 20), w = rint_(1, 20), pt, pl, pb, pr;
    int use_idx, packed;

    if ((rnd() % 16u) == 0u) {
        w = rint_(120, 140); /* past the fast paths' row buffer */
    }
    if ((rnd() % 3u) == 0u) { /* the common shapes more often */
        kw = kh = 3 + 2 * rint_(0, 2);
        sw = sh = rint_(1, 2);
        dh = dw = 1;
    }
    t_pw_input(n, cout, ch, c);
    t_masks(n, ch, c);
    t_bias(n, ch, c);
    /* (one random draw per statement: argument evaluation order differs between targets) */
    use_idx = dx_c > k ? (int)(rnd() & 1u) : 0;
    t_pw_input_add(n, dx_c, k, ch, c, use_idx);
    use_idx = dx_c > k ? 1 : (int)(rnd() & 1u);
    packed = (int)(rnd() & 1u);
    t_pw_weight(n, k, dx_c, ch, c, use_idx, packed);
    pt = rint_(0, kh);
    pl = rint_(0, kw);
    pb = rint_(0, kh);
    pr = rint_(0, kw);
    if ((rnd() % 4u) == 0u) { /* the small planes with their own gathers: 4x4 stride 1, 8x8
                               * stride 2, 3x3 / 5x5 / 7x7 with "same" pads */
        kh = kw = 3 + 2 * rint_(0, 2);
        h = w = (rnd() & 1u) ? 4 : 8;
        sh = sw = h == 8 ? 2 : 1;
        dh = dw = 1;
        pt = pl = pb = pr = kh / 2;
    }
    if (geom(&g, h, w, ch, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw) && g.h * g.w * ch <= NX) {
        t_dw(&g, c);
        t_dw_nonfinite(&g, c);
    }
}

#ifdef CS_BENCH
#define M_INSTR(ticks) ((uint64_t)(ticks) * TH_TICK_CENTI / 100000000u) /* millions */
/* ---- instructions per MAC on the twin: every channel of a block, as the generated loop ---- */
static uint32_t g_t0;
static void tick(void)
{
    g_t0 = th_ticks();
}
static uint32_t tock(void)
{
    return th_elapsed(g_t0);
}

static void report(const char *name, const block *b, uint32_t ref, uint32_t opt, float macs)
{
    char r[16], o[16], x[16];
    snprintf(g_line, sizeof g_line,
             "bench %-20s h%-2d cin%-3d mid%-3d cout%-3d k%d s%d  ref %6s  opt %5s  x%s\n", name,
             b->h, b->cin, b->mid, b->cout, b->k, b->s, fix2(r, sizeof r, (float)TH_TICK_CENTI / 100.0f * (float)ref / macs),
             fix2(o, sizeof o, (float)TH_TICK_CENTI / 100.0f * (float)opt / macs),
             fix2(x, sizeof x, (float)ref / (float)(opt ? opt : 1u)));
    th_puts(g_line);
}

static void bench_block(const block *b)
{
    const int32_t ho = out_side(b), n_in = b->h * b->h, n_out = ho * ho, kk = b->k * b->k;
    tt_conv_geom g;
    tt_q8_update u = {TT_Q8_STOCHASTIC, 7u, 1u, 0, 1.0f};
    uint32_t tr, to;
    int32_t c;

    geom(&g, b->h, b->h, b->mid, b->k, b->k, b->s, b->s, b->k / 2, b->k / 2, b->k / 2,
         b->k / 2, 1, 1);
    fill(g_dy, n_out * b->cout);
    fill8(g_w8, b->mid * (b->cout > kk ? b->cout : kk));
    fill(g_ws, b->mid);
    fill(g_step, b->mid);
    fill8(g_x8, n_in * b->mid);
    fill(g_x, n_in * b->mid);
    fill(g_w, b->mid * (b->cout > kk ? b->cout : kk));
    for (c = 0; c < 1024; ++c) {
        g_step[c] = 1.0f;
    }

    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_pw_input_s8(g_a, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_pw_input_s8_opt(g_a, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c);
    to = tock();
    report("pw_input_s8", b, tr, to, (float)b->mid * (float)n_out * (float)b->cout);
    tick(); /* 4 channels at a time into kept planes (the last group may be short) */
    for (c = 0; c < b->mid; c += 4) tt_cs_pw_input_s8_g(g_a, n_out, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c, b->mid - c < 4 ? b->mid - c : 4);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; c += 4) tt_cs_pw_input_s8_g_opt(g_a, n_out, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c, b->mid - c < 4 ? b->mid - c : 4);
    to = tock();
    report("pw_input_s8_g", b, tr, to, (float)b->mid * (float)n_out * (float)b->cout);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_pw_input_f32(g_a, g_dy, g_w, n_out, b->cout, b->mid, c);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_pw_input_f32_opt(g_a, g_dy, g_w, n_out, b->cout, b->mid, c);
    to = tock();
    report("pw_input_f32", b, tr, to, (float)b->mid * (float)n_out * (float)b->cout);

    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_input_s8(g_b, g_a, g_w8, g_ws, &g, c);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_input_s8_opt(g_b, g_a, g_w8, g_ws, &g, c);
    to = tock();
    report("dw_input_s8", b, tr, to, (float)b->mid * (float)n_out * (float)kk);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_input_f32(g_b, g_a, g_w, &g, c);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_input_f32_opt(g_b, g_a, g_w, &g, c);
    to = tock();
    report("dw_input_f32", b, tr, to, (float)b->mid * (float)n_out * (float)kk);

    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_weight_sgd_s8(g_w8b, NULL, g_a, g_x8, 0.02f, 3, &g, c, g_step, &u);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_weight_sgd_s8_opt(g_w8b, NULL, g_a, g_x8, 0.02f, 3, &g, c, g_step, &u);
    to = tock();
    report("dw_weight_sgd_s8", b, tr, to, (float)b->mid * (float)n_out * (float)kk);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_weight_sgd_f32(g_ma, NULL, g_a, g_x, &g, c, 0.01f, 0.0f, 0.0f);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_dw_weight_sgd_f32_opt(g_ma, NULL, g_a, g_x, &g, c, 0.01f, 0.0f, 0.0f);
    to = tock();
    report("dw_weight_sgd_f32", b, tr, to, (float)b->mid * (float)n_out * (float)kk);

    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_q8_clamp(g_b, g_a, g_x8, n_out, b->mid, c, -128, 127);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_q8_clamp_opt(g_b, g_a, g_x8, n_out, b->mid, c, -128, 127);
    to = tock();
    report("q8_clamp (/elem)", b, tr, to, (float)b->mid * (float)n_out);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_mask(g_b, g_a, g_mask, n_out, b->mid, c);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_mask_opt(g_b, g_a, g_mask, n_out, b->mid, c);
    to = tock();
    report("mask (/elem)", b, tr, to, (float)b->mid * (float)n_out);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_clip_f32(g_b, g_a, g_x, n_out, b->mid, c, 0.0f, 6.0f);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_clip_f32_opt(g_b, g_a, g_x, n_out, b->mid, c, 0.0f, 6.0f);
    to = tock();
    report("clip_f32 (/elem)", b, tr, to, (float)b->mid * (float)n_out);
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_bias_sgd_s32(g_bi_a, g_a, n_out, c, g_step, &u);
    tr = tock();
    tick();
    for (c = 0; c < b->mid; ++c) tt_cs_bias_sgd_s32_opt(g_bi_a, g_a, n_out, c, g_step, &u);
    to = tock();
    report("bias_sgd_s32 (/elem)", b, tr, to, (float)b->mid * (float)n_out);

    if (b->cin > 0) {
        fill(g_b, n_in * b->cin);
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_input_add_s8(g_b, g_a, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_input_add_s8_opt(g_b, g_a, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c);
        to = tock();
        report("pw_input_add_s8", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick(); /* 4 channels at a time from kept planes (the last group may be short) */
        for (c = 0; c < b->mid; c += 4) tt_cs_pw_input_add_s8_g(g_b, g_a, n_in, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c, b->mid - c < 4 ? b->mid - c : 4);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; c += 4) tt_cs_pw_input_add_s8_g_opt(g_b, g_a, n_in, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c, b->mid - c < 4 ? b->mid - c : 4);
        to = tock();
        report("pw_input_add_s8_g", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_input_add_f32(g_b, g_a, g_w, n_in, b->cin, NULL, b->cin, c);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_input_add_f32_opt(g_b, g_a, g_w, n_in, b->cin, NULL, b->cin, c);
        to = tock();
        report("pw_input_add_f32", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_s8(g_w8b, NULL, g_a, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, g_step, &u);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_s8_opt(g_w8b, NULL, g_a, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, g_step, &u);
        to = tock();
        report("pw_weight_sgd_s8", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick(); /* the same rows 4 at a time from kept planes (the last group may be short) */
        for (c = 0; c < b->mid; c += 4) tt_cs_pw_weight_sgd_s8_g(g_w8b, NULL, g_a, n_in, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, b->mid - c < 4 ? b->mid - c : 4, g_step, &u);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; c += 4) tt_cs_pw_weight_sgd_s8_g_opt(g_w8b, NULL, g_a, n_in, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, b->mid - c < 4 ? b->mid - c : 4, g_step, &u);
        to = tock();
        report("pw_weight_sgd_s8_g", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_f32(g_ma, NULL, g_a, g_x, n_in, b->cin, b->cin, NULL, c, 0.01f, 0.0f, 0.0f);
        tr = tock();
        tick();
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_f32_opt(g_ma, NULL, g_a, g_x, n_in, b->cin, b->cin, NULL, c, 0.01f, 0.0f, 0.0f);
        to = tock();
        report("pw_weight_sgd_f32", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        tick(); /* x converted once for the region (as the generated code), then every row */
        tt_cs_x_float_s8(g_x, g_x8, n_in * b->cin, 3);
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_s8f(g_w8b, NULL, g_a, g_x, 0.02f, n_in, b->cin, b->cin, NULL, c, g_step, &u);
        tr = tock();
        tick();
        tt_cs_x_float_s8_opt(g_x, g_x8, n_in * b->cin, 3);
        for (c = 0; c < b->mid; ++c) tt_cs_pw_weight_sgd_s8f_opt(g_w8b, NULL, g_a, g_x, 0.02f, n_in, b->cin, b->cin, NULL, c, g_step, &u);
        to = tock();
        report("pw_weight_sgd_s8f", b, tr, to, (float)b->mid * (float)n_in * (float)b->cin);
        /* a row update alone: the fully connected one over mid x cin weights (its stochastic
         * rounding per weight, x's conversion once per 64 columns) */
        tick();
        tt_dense_weight_sgd_s8(g_w8b, NULL, g_a, g_x8, 0.02f, 3, b->cin, b->mid, b->cin, NULL, g_step, &u);
        tr = tock();
        tick();
        tt_dense_weight_sgd_s8_opt(g_w8b, NULL, g_a, g_x8, 0.02f, 3, b->cin, b->mid, b->cin, NULL, g_step, &u);
        to = tock();
        report("sr_row (/elem)", b, tr, to, (float)b->mid * (float)b->cin);
    }
}

/* a whole network's streamed regions, every channel, with every s8 sub-op (all trained):
 * the ticks of sub-op `which` (0..8), reference or optimised */
#define NSUB 9
static const char *const SUB_NAME[NSUB] = {"pw_input", "q8_clamp(out)", "bias(out)",
                                           "dw_weight_sgd", "dw_input", "q8_clamp(in)",
                                           "bias(in)", "pw_weight_sgd", "pw_input_add"};

static uint32_t bench_net(int32_t first, int32_t last, int opt, int which)
{
    tt_q8_update u = {TT_Q8_STOCHASTIC, 7u, 1u, 0, 1.0f};
    uint32_t t = 0;
    int32_t i, c;

    for (i = first; i <= last; ++i) {
        const block *b = &BLOCKS[i];
        const int32_t ho = out_side(b), n_in = b->h * b->h, n_out = ho * ho;
        tt_conv_geom g;
        geom(&g, b->h, b->h, b->mid, b->k, b->k, b->s, b->s, b->k / 2, b->k / 2, b->k / 2,
             b->k / 2, 1, 1);
        if (which >= 5 && b->cin == 0) {
            continue;
        }
        tick();
        for (c = 0; c < b->mid; ++c) {
            switch (which * 2 + (opt != 0)) {
            case 0: tt_cs_pw_input_s8(g_a, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c); break;
            case 1: tt_cs_pw_input_s8_opt(g_a, g_dy, g_w8, g_ws, n_out, b->cout, b->mid, c); break;
            case 2: tt_cs_q8_clamp(g_a, g_a, g_x8, n_out, b->mid, c, -128, 127); break;
            case 3: tt_cs_q8_clamp_opt(g_a, g_a, g_x8, n_out, b->mid, c, -128, 127); break;
            case 4: tt_cs_bias_sgd_s32(g_bi_a, g_a, n_out, c, g_step, &u); break;
            case 5: tt_cs_bias_sgd_s32_opt(g_bi_a, g_a, n_out, c, g_step, &u); break;
            case 6: tt_cs_dw_weight_sgd_s8(g_w8b, NULL, g_a, g_x8, 0.02f, 3, &g, c, g_step, &u); break;
            case 7: tt_cs_dw_weight_sgd_s8_opt(g_w8b, NULL, g_a, g_x8, 0.02f, 3, &g, c, g_step, &u); break;
            case 8: tt_cs_dw_input_s8(g_b, g_a, g_w8, g_ws, &g, c); break;
            case 9: tt_cs_dw_input_s8_opt(g_b, g_a, g_w8, g_ws, &g, c); break;
            case 10: tt_cs_q8_clamp(g_b, g_b, g_x8, n_in, b->mid, c, -128, 127); break;
            case 11: tt_cs_q8_clamp_opt(g_b, g_b, g_x8, n_in, b->mid, c, -128, 127); break;
            case 12: tt_cs_bias_sgd_s32(g_bi_b, g_b, n_in, c, g_step, &u); break;
            case 13: tt_cs_bias_sgd_s32_opt(g_bi_b, g_b, n_in, c, g_step, &u); break;
            case 14: tt_cs_pw_weight_sgd_s8(g_w8b, NULL, g_b, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, g_step, &u); break;
            case 15: tt_cs_pw_weight_sgd_s8_opt(g_w8b, NULL, g_b, g_x8, 0.02f, 3, n_in, b->cin, b->cin, NULL, c, g_step, &u); break;
            case 16: tt_cs_pw_input_add_s8(g_ma, g_b, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c); break;
            default: tt_cs_pw_input_add_s8_opt(g_ma, g_b, g_w8, g_ws, n_in, b->cin, NULL, b->cin, c); break;
            }
        }
        t += tock();
    }
    return t;
}
#endif

int main(void)
{
    int32_t i;

    th_ticks_start();
#ifdef CS_BENCH
    {
        /* one block per (network, resolution) kind, the ones sparse updates train */
        static const int32_t pick[] = {0, 1, 2, 6, 8, 10, 12, 14, 18, 20, 22, 27, 29, 31, 34};
        static const int32_t nets[3][2] = {{0, 11}, {12, 24}, {25, 35}};
        static const char *const names[3] = {"MobileNetV2", "ProxylessNAS", "MCUNet5FPS"};
        for (i = 0; i < (int32_t)(sizeof pick / sizeof pick[0]); ++i) {
            bench_block(&BLOCKS[pick[i]]);
        }
        fill(g_dy, NF);
        fill8(g_w8, 100000);
        fill8(g_x8, NX);
        for (i = 0; i < 3; ++i) {
            uint32_t tr = 0, to = 0;
            int k;
            char x[16];
            for (k = 0; k < NSUB; ++k) {
                const uint32_t r = bench_net(nets[i][0], nets[i][1], 0, k);
                const uint32_t o = bench_net(nets[i][0], nets[i][1], 1, k);
                snprintf(g_line, sizeof g_line, "net %-12s %-14s ref %4lu M instr  opt %4lu M  x%s\n",
                         names[i], SUB_NAME[k], (unsigned long)M_INSTR(r),
                         (unsigned long)M_INSTR(o), fix2(x, sizeof x, (float)r / (float)o));
                th_puts(g_line);
                tr += r;
                to += o;
            }
            snprintf(g_line, sizeof g_line, "net %-12s %-14s ref %4lu M instr  opt %4lu M  x%s\n",
                     names[i], "total", (unsigned long)M_INSTR(tr), (unsigned long)M_INSTR(to),
                     fix2(x, sizeof x, (float)tr / (float)to));
            th_puts(g_line);
        }
        th_exit(0);
    }
#endif
    for (i = 0; i < NBLOCKS; ++i) {
        test_block(&BLOCKS[i]);
    }
    test_pw_weight_tails();
    test_pw_sink_tails();
    test_mask_tails();
    for (i = 0; i < CS_RANDOM; ++i) {
        test_random();
    }
    for (i = 0; i < K_N; ++i) {
        snprintf(g_line, sizeof g_line, "hash %s %08lx cases %lu\n", K_NAME[i],
                 (unsigned long)g_hash[i], (unsigned long)g_cases[i]);
        th_puts(g_line);
    }
    snprintf(g_line, sizeof g_line, "pw_input_s8 worst |opt-ref|/sum|terms| %lu e-10\n",
             (unsigned long)(g_worst_rel * 1e10f));
    th_puts(g_line);
    snprintf(g_line, sizeof g_line, "depthwise cases with inf/NaN inputs %lu\n",
             (unsigned long)g_nonfinite);
    th_puts(g_line);
    snprintf(g_line, sizeof g_line, g_fail ? "FAIL %d\n" : "OK\n", g_fail);
    th_puts(g_line);
    th_exit(g_fail ? 1 : 0);
    return 0;
}
