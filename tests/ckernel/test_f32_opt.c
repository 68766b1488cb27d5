/*
 * The optimised fp32 kernels (runtime_c/optimized/tt_f32_opt.c) against the reference kernels, on the
 * host and the QEMU twins (tests/test_kernels_opt_f32.py): every layer geometry of the fp32
 * models in tests/torch_models.py (MLP, AifesCNN, DigitsCNN, TinyMobileNet) and random ones
 * (stride, padding, groups, depthwise with and without a multiplier, dilation, partial-channel
 * updates), several seeds. Prints "ck <case> <hash>" of the optimised outputs so that the
 * host's and the twins' results can be compared bit for bit, and exits nonzero on a mismatch.
 *
 * Built with -DTT_BENCH it instead prints, per layer of the AIfES CNN and MLP, the executed
 * instructions per MAC of the reference and the optimised kernel (on the twins one SysTick
 * tick is 40 instructions).
 */
#include <stdio.h>
#include <string.h>

#include "f32_check.h"
#include "harness.h"
#include "tt_kernels.h"

/* Every optimised kernel applies the reference's operations in the reference's order to each
 * output element (only the loop nesting and the instructions differ), so any difference at
 * all, even of one ulp, is a bug: the tolerance is zero, and bits are compared. */
#define TOL_ULPS 0
/* The one exception: the plain dense update (no momentum buffer, wd == 0) computes
 * p - (lr*d)*x where the reference computes p - lr*(d*x): its step is 4 roundings of 2^-24
 * from the reference's at most, and the result can round to the neighbouring float. */
#define STEP_REL 2.4e-7 /* 4 * 2^-24, plus slack for the product of the bounds */
#define RESULT_REL 1.2e-7 /* 2^-23: one ulp of the result */
#define TINY 1.5e-45 /* subnormal products: one rounding is at most 2^-149 absolute */

#define MAXN 16384

static float X[MAXN], W[MAXN], B[MAXN], DY[MAXN];
static float YR[MAXN], YO[MAXN], WR[MAXN], WO[MAXN], MR[MAXN], MO[MAXN];
static int32_t IDX[MAXN];
static uint32_t seed = 1;
static int failures;
static char line[160];

static float rnd(void) { return th_rnd_f32(&seed); }

static void fill(float *p, int32_t n) { th_fill_f32(&seed, p, n); }

static void check(const char *name, const char *what, const float *ref, const float *opt,
                  int32_t n)
{
    th_check_f32(name, what, ref, opt, n, TOL_ULPS, &failures);
}

/* A plain update (no momentum buffer, wd 0) from the weights w0: within STEP_REL of its step
 * (w0 - ref, the reference's step up to a rounding) and one ulp of the result of the
 * reference, element by element; prints the hash of the optimised bits. */
static void check_plain(const char *name, const char *what, const float *w0, const float *ref,
                        const float *opt, int32_t n)
{
    int32_t i, bad = 0;
    uint32_t h = 2166136261u;

    for (i = 0; i < n; ++i) {
        const double r = ref[i], v = opt[i], step = (double)w0[i] - r;
        const double tol = STEP_REL * (step < 0 ? -step : step) +
                           RESULT_REL * (r < 0 ? -r : r) + 4 * TINY;
        const uint32_t u = th_bits(opt[i]);
        if (!(r - v <= tol && v - r <= tol) && bad++ < 5) {
            snprintf(line, sizeof line, "MISMATCH %s %s [%ld] ref %08lx opt %08lx\n", name, what,
                     (long)i, (unsigned long)th_bits(ref[i]), (unsigned long)u);
            th_puts(line);
        }
        h = (h ^ u) * 16777619u;
    }
    failures += bad != 0;
    snprintf(line, sizeof line, "ck %s.%s %08lx\n", name, what, (unsigned long)h);
    th_puts(line);
}

/* The plain update of a whole weight (and of a bias): the reference's and the optimised
 * kernel's from the same w0 (kept in MR), compared by check_plain. */
static void plain_conv(const char *name, const tt_conv_geom *g, int32_t nw, float lr)
{
    fill(MR, nw);
    memcpy(WR, MR, sizeof(float) * (size_t)nw);
    memcpy(WO, MR, sizeof(float) * (size_t)nw);
    tt_conv2d_backward_weight_sgd_f32(WR, NULL, DY, X, g, g->cin / g->groups, NULL, lr, 0.0f,
                                      0.0f);
    tt_conv2d_backward_weight_sgd_f32_opt(WO, NULL, DY, X, g, g->cin / g->groups, NULL, lr,
                                          0.0f, 0.0f);
    check_plain(name, "sgd_plain", MR, WR, WO, nw);
    fill(MR, g->cout);
    memcpy(WR, MR, sizeof(float) * (size_t)g->cout);
    memcpy(WO, MR, sizeof(float) * (size_t)g->cout);
    tt_bias_backward_sgd_f32(WR, NULL, DY, g->oh * g->ow, g->cout, lr, 0.0f, 0.0f);
    tt_bias_backward_sgd_f32_opt(WO, NULL, DY, g->oh * g->ow, g->cout, lr, 0.0f, 0.0f);
    check_plain(name, "sgd_plain_b", MR, WR, WO, g->cout);
}

static tt_conv_geom geom(int32_t h, int32_t w, int32_t cin, int32_t cout, int32_t kh,
                         int32_t kw, int32_t sh, int32_t sw, int32_t pt, int32_t pl,
                         int32_t pb, int32_t pr, int32_t dh, int32_t dw, int32_t groups)
{
    tt_conv_geom g;
    g.h = h;
    g.w = w;
    g.cin = cin;
    g.cout = cout;
    g.kh = kh;
    g.kw = kw;
    g.sh = sh;
    g.sw = sw;
    g.pt = pt;
    g.pl = pl;
    g.dh = dh;
    g.dw = dw;
    g.groups = groups;
    g.oh = (h + pt + pb - ((kh - 1) * dh + 1)) / sh + 1;
    g.ow = (w + pl + pr - ((kw - 1) * dw + 1)) / sw + 1;
    return g;
}

/* square kernel k, stride s, symmetric padding p */
static tt_conv_geom conv(int32_t hw, int32_t cin, int32_t cout, int32_t k, int32_t s,
                         int32_t p, int32_t groups)
{
    return geom(hw, hw, cin, cout, k, k, s, s, p, p, p, p, 1, 1, groups);
}

/* a random subset of n of the w_cin channels, in random order */
static const int32_t *random_idx(int32_t n, int32_t w_cin)
{
    int32_t i;
    for (i = 0; i < w_cin; ++i) {
        IDX[i] = i;
    }
    for (i = w_cin - 1; i > 0; --i) {
        const int32_t j = (int32_t)(th_rand(&seed) % (uint32_t)(i + 1));
        const int32_t t = IDX[i];
        IDX[i] = IDX[j];
        IDX[j] = t;
    }
    (void)n;
    return IDX;
}

static void conv_case(const char *name, const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t nx = g->h * g->w * g->cin, ny = g->oh * g->ow * g->cout;
    const int32_t nw = g->cout * g->kh * g->kw * cin_g;
    const int32_t extra = (int32_t)(th_rand(&seed) % 3u); /* untrained input channels */
    const int32_t w_cin = cin_g + extra;
    const int32_t *idx = (extra > 0) ? random_idx(cin_g, w_cin) : NULL;
    const int32_t nwf = g->cout * g->kh * g->kw * w_cin;
    const int use_m = (th_rand(&seed) & 1u) != 0;
    const float lr = 0.0625f + 0.25f * rnd(), mom = use_m ? 0.9f : 0.0f;
    const float wd = 1e-3f * (1.5f + rnd()); /* never 0: the exact path */

    if (nx > MAXN || ny > MAXN || nw > MAXN || nwf > MAXN) {
        th_puts("geometry too large for the test buffers\n");
        th_exit(2);
    }
    fill(X, nx);
    fill(W, nw);
    fill(B, g->cout);
    fill(DY, ny);

    fill(YR, ny);
    memcpy(YO, YR, sizeof(float) * (size_t)ny);
    tt_conv2d_f32(YR, X, W, B, g);
    tt_conv2d_f32_opt(YO, X, W, B, g);
    check(name, "fwd", YR, YO, ny);
    tt_conv2d_f32(YR, X, W, NULL, g);
    tt_conv2d_f32_opt(YO, X, W, NULL, g);
    check(name, "fwd_nobias", YR, YO, ny);

    fill(YR, nx); /* overwritten */
    memcpy(YO, YR, sizeof(float) * (size_t)nx);
    tt_conv2d_backward_input_f32(YR, DY, W, g);
    tt_conv2d_backward_input_f32_opt(YO, DY, W, g);
    check(name, "bwd_in", YR, YO, nx);

    fill(WR, nw); /* accumulated into */
    memcpy(WO, WR, sizeof(float) * (size_t)nw);
    tt_conv2d_backward_weight_f32(WR, DY, X, g);
    tt_conv2d_backward_weight_f32_opt(WO, DY, X, g);
    check(name, "bwd_w", WR, WO, nw);

    fill(WR, nwf);
    memcpy(WO, WR, sizeof(float) * (size_t)nwf);
    fill(MR, nw);
    memcpy(MO, MR, sizeof(float) * (size_t)nw);
    tt_conv2d_backward_weight_sgd_f32(WR, use_m ? MR : NULL, DY, X, g, w_cin, idx, lr, mom, wd);
    tt_conv2d_backward_weight_sgd_f32_opt(WO, use_m ? MO : NULL, DY, X, g, w_cin, idx, lr, mom,
                                          wd);
    check(name, "sgd_w", WR, WO, nwf);
    check(name, "sgd_m", MR, MO, nw);

    fill(WR, g->cout);
    memcpy(WO, WR, sizeof(float) * (size_t)g->cout);
    tt_bias_backward_sgd_f32(WR, use_m ? MR : NULL, DY, g->oh * g->ow, g->cout, lr, mom, wd);
    tt_bias_backward_sgd_f32_opt(WO, use_m ? MO : NULL, DY, g->oh * g->ow, g->cout, lr, mom,
                                 wd);
    check(name, "sgd_b", WR, WO, g->cout);
    check(name, "sgd_bm", MR, MO, g->cout);

    plain_conv(name, g, nw, lr);
}

static void dense_case(const char *name, int32_t in, int32_t out)
{
    const int32_t extra = (int32_t)(th_rand(&seed) % 3u);
    const int32_t w_in = in + extra;
    const int32_t *idx = (extra > 0 && (th_rand(&seed) & 1u)) ? random_idx(in, w_in) : NULL;
    const int use_m = (th_rand(&seed) & 1u) != 0;
    const float lr = 0.0625f + 0.25f * rnd(), mom = use_m ? 0.9f : 0.0f;
    const float wd = 1e-3f * (1.5f + rnd()); /* never 0: the exact path */

    if (w_in * out > MAXN) {
        th_puts("dense too large for the test buffers\n");
        th_exit(2);
    }
    fill(X, in);
    fill(W, in * out);
    fill(B, out);
    fill(DY, out);

    tt_dense_f32(YR, X, W, B, in, out);
    tt_dense_f32_opt(YO, X, W, B, in, out);
    check(name, "fwd", YR, YO, out);
    tt_dense_f32(YR, X, W, NULL, in, out);
    tt_dense_f32_opt(YO, X, W, NULL, in, out);
    check(name, "fwd_nobias", YR, YO, out);

    tt_dense_backward_input_f32(YR, DY, W, in, out);
    tt_dense_backward_input_f32_opt(YO, DY, W, in, out);
    check(name, "bwd_in", YR, YO, in);

    fill(WR, in * out);
    memcpy(WO, WR, sizeof(float) * (size_t)(in * out));
    tt_dense_backward_weight_f32(WR, DY, X, in, out);
    tt_dense_backward_weight_f32_opt(WO, DY, X, in, out);
    check(name, "bwd_w", WR, WO, in * out);

    /* the fused update, whole (w_in == in, idx NULL) or partial */
    fill(WR, w_in * out);
    memcpy(WO, WR, sizeof(float) * (size_t)(w_in * out));
    fill(MR, in * out);
    memcpy(MO, MR, sizeof(float) * (size_t)(in * out));
    tt_dense_backward_weight_sgd_f32(WR, use_m ? MR : NULL, DY, X, in, out,
                                     idx != NULL ? w_in : in, idx, lr, mom, wd);
    tt_dense_backward_weight_sgd_f32_opt(WO, use_m ? MO : NULL, DY, X, in, out,
                                         idx != NULL ? w_in : in, idx, lr, mom, wd);
    check(name, "sgd_w", WR, WO, w_in * out);
    check(name, "sgd_m", MR, MO, in * out);

    fill(WR, out);
    memcpy(WO, WR, sizeof(float) * (size_t)out);
    tt_bias_backward_sgd_f32(WR, use_m ? MR : NULL, DY, 1, out, lr, mom, wd);
    tt_bias_backward_sgd_f32_opt(WO, use_m ? MO : NULL, DY, 1, out, lr, mom, wd);
    check(name, "sgd_b", WR, WO, out);

    /* plain SGD, whole weight and bias: the optimised path of one multiply per weight */
    fill(MR, in * out);
    memcpy(WR, MR, sizeof(float) * (size_t)(in * out));
    memcpy(WO, MR, sizeof(float) * (size_t)(in * out));
    tt_dense_backward_weight_sgd_f32(WR, NULL, DY, X, in, out, in, NULL, lr, 0.0f, 0.0f);
    tt_dense_backward_weight_sgd_f32_opt(WO, NULL, DY, X, in, out, in, NULL, lr, 0.0f, 0.0f);
    check_plain(name, "sgd_plain", MR, WR, WO, in * out);
    fill(MR, out);
    memcpy(WR, MR, sizeof(float) * (size_t)out);
    memcpy(WO, MR, sizeof(float) * (size_t)out);
    tt_bias_backward_sgd_f32(WR, NULL, DY, 1, out, lr, 0.0f, 0.0f);
    tt_bias_backward_sgd_f32_opt(WO, NULL, DY, 1, out, lr, 0.0f, 0.0f);
    check_plain(name, "sgd_plain_b", MR, WR, WO, out);
}

static void pool_case(const char *name, const tt_conv_geom *g)
{
    const int32_t nx = g->h * g->w * g->cin, ny = g->oh * g->ow * g->cout;
    int32_t i;

    fill(X, nx);
    for (i = 0; i < nx; i += 3) {
        X[i] = X[i / 2]; /* ties: the first maximal tap must win */
    }
    fill(DY, ny);
    tt_max_pool2d_f32(YR, X, g);
    tt_max_pool2d_f32_opt(YO, X, g);
    check(name, "fwd", YR, YO, ny);
    fill(YR, nx);
    memcpy(YO, YR, sizeof(float) * (size_t)nx);
    tt_max_pool2d_backward_f32(YR, DY, X, g);
    tt_max_pool2d_backward_f32_opt(YO, DY, X, g);
    check(name, "bwd", YR, YO, nx);
}

static int32_t pick(int32_t lo, int32_t hi)
{
    return lo + (int32_t)(th_rand(&seed) % (uint32_t)(hi - lo + 1));
}

static tt_conv_geom random_conv(void)
{
    for (;;) {
        const int32_t kind = pick(0, 5);
        int32_t groups = 1, cin_g, cout_g, kh, kw, dh, dw, h, w, sh, sw, pt, pl, pb, pr;
        tt_conv_geom g;
        if (kind == 0 || kind == 1) { /* regular */
            cin_g = pick(1, 20);
            cout_g = pick(1, 20);
        } else if (kind == 2) { /* depthwise */
            groups = pick(1, 26);
            cin_g = cout_g = 1;
        } else if (kind == 3) { /* depthwise with a channel multiplier */
            groups = pick(1, 10);
            cin_g = 1;
            cout_g = pick(2, 5);
        } else if (kind == 4) { /* grouped */
            groups = pick(2, 4);
            cin_g = pick(1, 9);
            cout_g = pick(1, 9);
        } else { /* pointwise */
            cin_g = pick(1, 30);
            cout_g = pick(1, 30);
        }
        kh = kind == 5 ? 1 : pick(1, 5);
        kw = kind == 5 ? 1 : (pick(0, 3) ? kh : pick(1, 5));
        dh = pick(0, 3) ? 1 : 2;
        dw = pick(0, 3) ? dh : pick(1, 2);
        h = pick(1, 11);
        w = pick(1, 11);
        /* one draw per statement: argument evaluation order differs between compilers */
        sh = pick(1, 3);
        sw = pick(1, 3);
        pt = pick(0, kh);
        pl = pick(0, kw);
        pb = pick(0, kh);
        pr = pick(0, kw);
        g = geom(h, w, groups * cin_g, groups * cout_g, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw,
                 groups);
        if (g.oh >= 1 && g.ow >= 1 && g.cout * kh * kw * (cin_g + 2) <= MAXN &&
            g.oh * g.ow * g.cout <= MAXN && g.h * g.w * g.cin <= MAXN) {
            return g;
        }
    }
}

static tt_conv_geom random_pool(void)
{
    for (;;) {
        const int32_t k = pick(1, 4), s = pick(1, 3), d = pick(0, 3) ? 1 : 2;
        const int32_t p = pick(0, k / 2);
        const int32_t h = pick(1, 12), w = pick(1, 12), kw = pick(0, 2) ? k : pick(1, 4);
        const int32_t sw = pick(1, 3), pl = pick(0, 1), pr = pick(0, 2), dw = pick(1, 2);
        const int32_t c = pick(1, 20);
        const tt_conv_geom g = geom(h, w, c, c, k, kw, s, sw, p, pl, p, pr, d, dw, 1);
        if (g.oh >= 1 && g.ow >= 1) {
            return g;
        }
    }
}

#ifndef TT_BENCH

int main(void)
{
    char name[32];
    int32_t i, round;

    /* the fp32 models' layers */
    {
        const tt_conv_geom aifes1 = conv(16, 1, 8, 3, 1, 1, 1);
        const tt_conv_geom aifes2 = conv(8, 8, 16, 3, 1, 1, 1);
        const tt_conv_geom digits_dw = conv(8, 8, 8, 3, 1, 1, 8);
        const tt_conv_geom digits_pw = conv(8, 8, 8, 1, 1, 0, 1);
        const tt_conv_geom digits_down = conv(8, 8, 16, 3, 2, 1, 1);
        const tt_conv_geom stem8 = conv(8, 1, 8, 3, 1, 1, 1);
        const tt_conv_geom tm[] = {
            conv(8, 8, 16, 1, 1, 0, 1), conv(8, 16, 16, 3, 1, 1, 16), conv(1, 16, 4, 1, 1, 0, 1),
            conv(1, 4, 16, 1, 1, 0, 1), conv(8, 16, 8, 1, 1, 0, 1), conv(8, 8, 24, 1, 1, 0, 1),
            conv(8, 24, 24, 3, 2, 1, 24), conv(1, 24, 6, 1, 1, 0, 1), conv(1, 6, 24, 1, 1, 0, 1),
            conv(4, 24, 12, 1, 1, 0, 1), conv(4, 12, 24, 1, 1, 0, 1), conv(4, 24, 24, 3, 1, 1, 24),
            conv(4, 24, 12, 1, 1, 0, 1), conv(4, 12, 24, 1, 1, 0, 1),
        };
        const tt_conv_geom pool1 = geom(16, 16, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1);
        const tt_conv_geom pool2 = geom(8, 8, 16, 16, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1);
        const tt_conv_geom opsmix_pool = geom(8, 8, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1);
        for (round = 0; round < 2; ++round) {
            seed = 0x9E3779B9u + (uint32_t)round;
            dense_case("mlp_fc1", 64, 32);
            dense_case("mlp_fc2", 32, 10);
            conv_case("aifes_conv1", &aifes1);
            pool_case("aifes_pool1", &pool1);
            conv_case("aifes_conv2", &aifes2);
            pool_case("aifes_pool2", &pool2);
            dense_case("aifes_fc", 256, 10);
            conv_case("digits_stem", &stem8);
            conv_case("digits_dw", &digits_dw);
            conv_case("digits_pw", &digits_pw);
            conv_case("digits_down", &digits_down);
            dense_case("digits_fc", 16, 10);
            for (i = 0; i < (int32_t)(sizeof tm / sizeof tm[0]); ++i) {
                snprintf(name, sizeof name, "tinymb_%ld", (long)i);
                conv_case(name, &tm[i]);
            }
            dense_case("tinymb_fc", 24, 10);
            pool_case("opsmix_pool", &opsmix_pool);
        }
    }
    /* random geometries */
    seed = 12345u;
    for (i = 0; i < 300; ++i) {
        const tt_conv_geom g = random_conv();
        snprintf(name, sizeof name, "rconv_%ld", (long)i);
        conv_case(name, &g);
    }
    for (i = 0; i < 80; ++i) {
        const int32_t in = pick(1, 70), out = pick(1, 40);
        snprintf(name, sizeof name, "rdense_%ld", (long)i);
        dense_case(name, in, out);
    }
    for (i = 0; i < 80; ++i) {
        const tt_conv_geom g = random_pool();
        snprintf(name, sizeof name, "rpool_%ld", (long)i);
        pool_case(name, &g);
    }
    snprintf(line, sizeof line, "failures %d\n", failures);
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}

#else /* TT_BENCH */

typedef void (*bench_fn)(int opt);

static uint32_t measure(bench_fn f, int opt) { return th_instructions(f, opt); }

static tt_conv_geom G1, G2, P1, P2;

static void b_fc1_fwd(int o) { (o ? tt_dense_f32_opt : tt_dense_f32)(YO, X, W, B, 64, 32); }
static void b_fc1_sgd(int o)
{
    (o ? tt_dense_backward_weight_sgd_f32_opt
       : tt_dense_backward_weight_sgd_f32)(W, NULL, DY, X, 64, 32, 64, NULL, 1e-3f, 0.0f, 0.0f);
}
static void b_fc1_b(int o)
{
    (o ? tt_bias_backward_sgd_f32_opt : tt_bias_backward_sgd_f32)(B, NULL, DY, 1, 32, 1e-3f,
                                                                  0.0f, 0.0f);
}
static void b_fc2_fwd(int o) { (o ? tt_dense_f32_opt : tt_dense_f32)(YO, X, W, B, 32, 10); }
static void b_fc2_in(int o)
{
    (o ? tt_dense_backward_input_f32_opt : tt_dense_backward_input_f32)(YO, DY, W, 32, 10);
}
static void b_fc2_sgd(int o)
{
    (o ? tt_dense_backward_weight_sgd_f32_opt
       : tt_dense_backward_weight_sgd_f32)(W, NULL, DY, X, 32, 10, 32, NULL, 1e-3f, 0.0f, 0.0f);
}
static void b_fc2_b(int o)
{
    (o ? tt_bias_backward_sgd_f32_opt : tt_bias_backward_sgd_f32)(B, NULL, DY, 1, 10, 1e-3f,
                                                                  0.0f, 0.0f);
}
static void b_c1_fwd(int o) { (o ? tt_conv2d_f32_opt : tt_conv2d_f32)(YO, X, W, B, &G1); }
static void b_c1_sgd(int o)
{
    (o ? tt_conv2d_backward_weight_sgd_f32_opt
       : tt_conv2d_backward_weight_sgd_f32)(W, NULL, DY, X, &G1, 1, NULL, 1e-3f, 0.0f, 0.0f);
}
static void b_c1_b(int o)
{
    (o ? tt_bias_backward_sgd_f32_opt : tt_bias_backward_sgd_f32)(B, NULL, DY, 256, 8, 1e-3f,
                                                                  0.0f, 0.0f);
}
static void b_p1_fwd(int o) { (o ? tt_max_pool2d_f32_opt : tt_max_pool2d_f32)(YO, X, &P1); }
static void b_p1_bwd(int o)
{
    (o ? tt_max_pool2d_backward_f32_opt : tt_max_pool2d_backward_f32)(YO, DY, X, &P1);
}
static void b_c2_fwd(int o) { (o ? tt_conv2d_f32_opt : tt_conv2d_f32)(YO, X, W, B, &G2); }
static void b_c2_in(int o)
{
    (o ? tt_conv2d_backward_input_f32_opt : tt_conv2d_backward_input_f32)(YO, DY, W, &G2);
}
static void b_c2_sgd(int o)
{
    (o ? tt_conv2d_backward_weight_sgd_f32_opt
       : tt_conv2d_backward_weight_sgd_f32)(W, NULL, DY, X, &G2, 8, NULL, 1e-3f, 0.0f, 0.0f);
}
static void b_c2_b(int o)
{
    (o ? tt_bias_backward_sgd_f32_opt : tt_bias_backward_sgd_f32)(B, NULL, DY, 64, 16, 1e-3f,
                                                                  0.0f, 0.0f);
}
static void b_p2_fwd(int o) { (o ? tt_max_pool2d_f32_opt : tt_max_pool2d_f32)(YO, X, &P2); }
static void b_p2_bwd(int o)
{
    (o ? tt_max_pool2d_backward_f32_opt : tt_max_pool2d_backward_f32)(YO, DY, X, &P2);
}
static void b_fc_fwd(int o) { (o ? tt_dense_f32_opt : tt_dense_f32)(YO, X, W, B, 256, 10); }
static void b_fc_in(int o)
{
    (o ? tt_dense_backward_input_f32_opt : tt_dense_backward_input_f32)(YO, DY, W, 256, 10);
}
static void b_fc_sgd(int o)
{
    (o ? tt_dense_backward_weight_sgd_f32_opt
       : tt_dense_backward_weight_sgd_f32)(W, NULL, DY, X, 256, 10, 256, NULL, 1e-3f, 0.0f,
                                           0.0f);
}
static void b_fc_b(int o)
{
    (o ? tt_bias_backward_sgd_f32_opt : tt_bias_backward_sgd_f32)(B, NULL, DY, 1, 10, 1e-3f,
                                                                  0.0f, 0.0f);
}

typedef struct {
    const char *name;
    bench_fn f;
    uint32_t macs; /* multiply-accumulates; for pools and biases the elements read */
    int is_mac;    /* counts towards the model's MACs */
} bench;

/* host builds count clock() ticks, which can be 0 */
static uint64_t nz(uint64_t v) { return v != 0 ? v : 1; }

static void fmt100(char *s, size_t n, uint32_t x100)
{
    snprintf(s, n, "%lu.%02lu", (unsigned long)(x100 / 100u), (unsigned long)(x100 % 100u));
}

static void run(const char *model, const bench *b, int n)
{
    uint64_t tr = 0, to = 0, macs = 0;
    char a[16], c[16], d[16];
    int i;

    for (i = 0; i < n; ++i) {
        const uint32_t r = measure(b[i].f, 0), o = measure(b[i].f, 1);
        tr += r;
        to += o;
        macs += b[i].is_mac ? b[i].macs : 0u;
        fmt100(a, sizeof a, (uint32_t)((100ull * r + b[i].macs / 2) / b[i].macs));
        fmt100(c, sizeof c, (uint32_t)((100ull * o + b[i].macs / 2) / b[i].macs));
        fmt100(d, sizeof d, (uint32_t)((100ull * r + o / 2) / nz(o)));
        snprintf(line, sizeof line, "bench %-6s %-14s %6lu %s %9lu %9lu %7s %7s x%s\n", model,
                 b[i].name, (unsigned long)b[i].macs, b[i].is_mac ? "MAC " : "elem",
                 (unsigned long)r, (unsigned long)o, a, c, d);
        th_puts(line);
    }
    fmt100(a, sizeof a, (uint32_t)((100u * tr + macs / 2) / macs));
    fmt100(c, sizeof c, (uint32_t)((100u * to + macs / 2) / macs));
    fmt100(d, sizeof d, (uint32_t)((100u * tr + to / 2) / nz(to)));
    snprintf(line, sizeof line,
             "total  %-6s step: %lu MACs, ref %lu instr (%s/MAC), opt %lu instr (%s/MAC), x%s\n",
             model, (unsigned long)macs, (unsigned long)tr, a, (unsigned long)to, c, d);
    th_puts(line);
}

/* the other fp32 models' conv layers: forward, input gradient, fused weight update */
static tt_conv_geom GX;

static void b_x_fwd(int o) { (o ? tt_conv2d_f32_opt : tt_conv2d_f32)(YO, X, W, B, &GX); }
static void b_x_in(int o)
{
    (o ? tt_conv2d_backward_input_f32_opt : tt_conv2d_backward_input_f32)(YO, DY, W, &GX);
}
static void b_x_sgd(int o)
{
    (o ? tt_conv2d_backward_weight_sgd_f32_opt
       : tt_conv2d_backward_weight_sgd_f32)(W, NULL, DY, X, &GX, GX.cin / GX.groups, NULL,
                                            1e-3f, 0.0f, 0.0f);
}

static void run_convs(const char *model, const char *const *names, const tt_conv_geom *gs,
                      int n)
{
    static const bench_fn fns[3] = {b_x_fwd, b_x_in, b_x_sgd};
    static const char *const what[3] = {"fwd", "bwd_in", "w_sgd"};
    char a[16], c[16], d[16];
    int i, k;

    for (i = 0; i < n; ++i) {
        const uint32_t macs = (uint32_t)(gs[i].oh * gs[i].ow * gs[i].cout * gs[i].kh *
                                         gs[i].kw * (gs[i].cin / gs[i].groups));
        GX = gs[i];
        for (k = 0; k < 3; ++k) {
            const uint32_t r = measure(fns[k], 0), o = measure(fns[k], 1);
            fmt100(a, sizeof a, (uint32_t)((100ull * r + macs / 2) / macs));
            fmt100(c, sizeof c, (uint32_t)((100ull * o + macs / 2) / macs));
            fmt100(d, sizeof d, (uint32_t)((100ull * r + o / 2) / nz(o)));
            snprintf(line, sizeof line, "layer %-6s %-8s %-6s %6lu MAC  %9lu %9lu %7s %7s x%s\n",
                     model, names[i], what[k], (unsigned long)macs, (unsigned long)r,
                     (unsigned long)o, a, c, d);
            th_puts(line);
        }
    }
}

int main(void)
{
    static const char *const digits_names[] = {"stem", "dw", "pw", "down"};
    static const char *const tiny_names[] = {"stem", "b1_pw", "b1_dw", "b1_se1", "b1_se2",
                                             "b1_proj", "b2_pw", "b2_dw", "b2_se1", "b2_se2",
                                             "b2_proj", "b3_pw", "b3_dw", "b3_proj", "head"};
    tt_conv_geom digits[4], tiny[15];
    /* one training step's kernels (batch 1, plain SGD), in their order of execution */
    static const bench mlp[] = {
        {"fc1 fwd", b_fc1_fwd, 64 * 32, 1}, {"fc2 fwd", b_fc2_fwd, 32 * 10, 1},
        {"fc2 bwd_in", b_fc2_in, 32 * 10, 1}, {"fc2 w_sgd", b_fc2_sgd, 32 * 10, 1},
        {"fc2 b_sgd", b_fc2_b, 10, 0}, {"fc1 w_sgd", b_fc1_sgd, 64 * 32, 1},
        {"fc1 b_sgd", b_fc1_b, 32, 0},
    };
    static const bench cnn[] = {
        {"conv1 fwd", b_c1_fwd, 16 * 16 * 8 * 9, 1}, {"pool1 fwd", b_p1_fwd, 16 * 16 * 8, 0},
        {"conv2 fwd", b_c2_fwd, 8 * 8 * 16 * 72, 1}, {"pool2 fwd", b_p2_fwd, 8 * 8 * 16, 0},
        {"fc fwd", b_fc_fwd, 2560, 1}, {"fc bwd_in", b_fc_in, 2560, 1},
        {"fc w_sgd", b_fc_sgd, 2560, 1}, {"fc b_sgd", b_fc_b, 10, 0},
        {"pool2 bwd", b_p2_bwd, 8 * 8 * 16, 0}, {"conv2 bwd_in", b_c2_in, 8 * 8 * 16 * 72, 1},
        {"conv2 w_sgd", b_c2_sgd, 8 * 8 * 16 * 72, 1}, {"conv2 b_sgd", b_c2_b, 64 * 16, 0},
        {"pool1 bwd", b_p1_bwd, 16 * 16 * 8, 0}, {"conv1 w_sgd", b_c1_sgd, 16 * 16 * 8 * 9, 1},
        {"conv1 b_sgd", b_c1_b, 256 * 8, 0},
    };

    G1 = conv(16, 1, 8, 3, 1, 1, 1);
    G2 = conv(8, 8, 16, 3, 1, 1, 1);
    P1 = geom(16, 16, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1);
    P2 = geom(8, 8, 16, 16, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1);
    fill(X, MAXN);
    fill(W, MAXN);
    fill(B, MAXN);
    fill(DY, MAXN);
    th_ticks_start();
    th_puts("bench model  kernel           MACs      ref_instr opt_instr ref/MAC opt/MAC "
            "speedup\n");
    run("mlp", mlp, (int)(sizeof mlp / sizeof mlp[0]));
    run("cnn", cnn, (int)(sizeof cnn / sizeof cnn[0]));
    digits[0] = conv(8, 1, 8, 3, 1, 1, 1);
    digits[1] = conv(8, 8, 8, 3, 1, 1, 8);
    digits[2] = conv(8, 8, 8, 1, 1, 0, 1);
    digits[3] = conv(8, 8, 16, 3, 2, 1, 1);
    tiny[0] = conv(8, 1, 8, 3, 1, 1, 1);
    tiny[1] = conv(8, 8, 16, 1, 1, 0, 1);
    tiny[2] = conv(8, 16, 16, 3, 1, 1, 16);
    tiny[3] = conv(1, 16, 4, 1, 1, 0, 1);
    tiny[4] = conv(1, 4, 16, 1, 1, 0, 1);
    tiny[5] = conv(8, 16, 8, 1, 1, 0, 1);
    tiny[6] = conv(8, 8, 24, 1, 1, 0, 1);
    tiny[7] = conv(8, 24, 24, 3, 2, 1, 24);
    tiny[8] = conv(1, 24, 6, 1, 1, 0, 1);
    tiny[9] = conv(1, 6, 24, 1, 1, 0, 1);
    tiny[10] = conv(4, 24, 12, 1, 1, 0, 1);
    tiny[11] = conv(4, 12, 24, 1, 1, 0, 1);
    tiny[12] = conv(4, 24, 24, 3, 1, 1, 24);
    tiny[13] = conv(4, 24, 12, 1, 1, 0, 1);
    tiny[14] = conv(4, 12, 24, 1, 1, 0, 1);
    th_puts("layer model  layer    kernel   MACs     ref_instr opt_instr ref/MAC opt/MAC "
            "speedup\n");
    run_convs("digits", digits_names, digits, 4);
    run_convs("tinymb", tiny_names, tiny, 15);
    (void)random_conv;
    (void)random_pool;
    (void)conv_case;
    (void)dense_case;
    (void)pool_case;
    th_exit(0);
    return 0;
}

#endif /* TT_BENCH */
