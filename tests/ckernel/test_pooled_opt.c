/*
 * The optimised pooled-gradient kernels (runtime_c/optimized/tt_pooled_opt.c) against the
 * reference (tt_pooled_grad.c), on the host and the QEMU twins (tests/test_kernels_opt_pooled.py):
 * the DigitsCNN's pooled conv and random geometries (stride, padding, dilation, groups, maps
 * from one pixel to more than a slab holds, rows wider than a slab), every gate kind, fused
 * updates with and without momentum and partial input channels. Prints "ck <case> <hash>" of
 * the optimised outputs (host and twins must agree bit for bit) and exits nonzero on a
 * mismatch.
 *
 * Built with -DTT_BENCH it prints the instructions of the DigitsCNN's pooled conv gradients,
 * reference and optimised (on the twins one SysTick tick is 40 instructions).
 */
#include <stdio.h>
#include <string.h>

#include "f32_check.h"
#include "harness.h"
#include "tt_kernels.h"

/* The optimised kernels give every element the reference's products in its order: any
 * difference, even of one ulp, is a bug, so bits are compared. */
#define MAXN 40000

static float X[MAXN], W[MAXN], V[1024], GF[MAXN];
static float YO[MAXN];
static uint8_t GM[MAXN / 8 + 1];
static int8_t G8[MAXN];
static uint32_t seed = 1;
static char line[160];

static int32_t pick(int32_t lo, int32_t hi) /* inclusive */
{
    return lo + (int32_t)(th_rand(&seed) % (uint32_t)(hi - lo + 1));
}

static float rnd(void) { return th_rnd_f32(&seed); }

static void fill(float *p, int32_t n) { th_fill_f32(&seed, p, n); }

#ifndef TT_BENCH

static float YR[MAXN], MR[MAXN], MO[MAXN];
static int32_t IDX[64];
static int failures;

static void check(const char *name, const char *what, const float *ref, const float *opt,
                  int32_t n)
{
    th_check_f32(name, what, ref, opt, n, 0, &failures);
}

#endif /* !TT_BENCH */

static tt_conv_geom geom(int32_t h, int32_t w, int32_t cin, int32_t cout, int32_t k, int32_t s,
                         int32_t p, int32_t d, int32_t groups)
{
    tt_conv_geom g;
    g.h = h;
    g.w = w;
    g.cin = cin;
    g.cout = cout;
    g.kh = g.kw = k;
    g.sh = g.sw = s;
    g.pt = g.pl = p;
    g.dh = g.dw = d;
    g.groups = groups;
    g.oh = (h + 2 * p - ((k - 1) * d + 1)) / s + 1;
    g.ow = (w + 2 * p - ((k - 1) * d + 1)) / s + 1;
    return g;
}

/* the gate of dy (oh, ow, cout) of the given kind, about 3/4 of it open */
static tt_pooled gate(int32_t kind, int32_t n)
{
    tt_pooled p;
    int32_t i;

    memset(&p, 0, sizeof p);
    p.v = V;
    p.gate = kind;
    p.on = NULL;
    if (kind == TT_POOLED_MASK) {
        for (i = 0; i < n / 8 + 1; ++i) {
            GM[i] = (uint8_t)(th_rand(&seed) | th_rand(&seed));
        }
        p.on = GM;
    } else if (kind == TT_POOLED_S8) {
        for (i = 0; i < n; ++i) {
            G8[i] = (int8_t)pick(-128, 127);
        }
        p.lo8 = -100;
        p.hi8 = 90;
        p.on = G8;
    } else if (kind == TT_POOLED_F32) {
        for (i = 0; i < n; ++i) {
            GF[i] = 1.5f * rnd();
        }
        p.lo = -1.0f;
        p.hi = 0.9f;
        p.on = GF;
    }
    return p;
}

#ifndef TT_BENCH

static void pooled_case(const char *name, const tt_conv_geom *g, int32_t kind)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t nx = g->h * g->w * g->cin, ny = g->oh * g->ow * g->cout;
    const int32_t nw = g->cout * g->kh * g->kw * cin_g;
    const int32_t extra = (g->groups == 1) ? pick(0, 2) : 0; /* untrained input channels */
    const int32_t w_cin = cin_g + extra;
    const int32_t nwf = g->cout * g->kh * g->kw * w_cin;
    const int use_m = (th_rand(&seed) & 1u) != 0;
    const float lr = 0.0625f + 0.25f * rnd(), mom = use_m ? 0.9f : 0.0f, wd = 1e-3f * rnd();
    const tt_pooled dy = gate(kind, ny);
    const int32_t *idx = NULL;
    int32_t i;

    if (nx > MAXN || ny > MAXN || nwf > MAXN || g->cout > 1024) {
        th_puts("geometry too large for the test buffers\n");
        th_exit(2);
    }
    if (extra > 0) { /* the cin_g trained channels of w_cin, in a shuffled order */
        for (i = 0; i < w_cin; ++i) {
            IDX[i] = i;
        }
        for (i = w_cin - 1; i > 0; --i) {
            const int32_t j = pick(0, i), t = IDX[i];
            IDX[i] = IDX[j];
            IDX[j] = t;
        }
        idx = IDX;
    }
    fill(X, nx);
    fill(W, nwf);
    fill(V, g->cout);

    fill(YR, nx); /* overwritten */
    memcpy(YO, YR, sizeof(float) * (size_t)nx);
    tt_conv2d_backward_input_pooled_f32(YR, &dy, W, g);
    tt_conv2d_backward_input_pooled_f32_opt(YO, &dy, W, g);
    check(name, "bwd_in", YR, YO, nx);

    fill(YR, nw); /* accumulated into */
    memcpy(YO, YR, sizeof(float) * (size_t)nw);
    tt_conv2d_backward_weight_pooled_f32(YR, &dy, X, g);
    tt_conv2d_backward_weight_pooled_f32_opt(YO, &dy, X, g);
    check(name, "bwd_w", YR, YO, nw);

    fill(YR, nwf);
    memcpy(YO, YR, sizeof(float) * (size_t)nwf);
    fill(MR, nw);
    memcpy(MO, MR, sizeof(float) * (size_t)nw);
    tt_conv2d_backward_weight_sgd_pooled_f32(YR, use_m ? MR : NULL, &dy, X, g, w_cin, idx, lr,
                                             mom, wd);
    tt_conv2d_backward_weight_sgd_pooled_f32_opt(YO, use_m ? MO : NULL, &dy, X, g, w_cin, idx,
                                                 lr, mom, wd);
    check(name, "sgd_w", YR, YO, nwf);
    check(name, "sgd_m", MR, MO, nw);
}

static tt_conv_geom random_geom(void)
{
    for (;;) {
        const int32_t kind = pick(0, 9);
        const int32_t k = (kind == 9) ? 1 : pick(1, 3);
        const int32_t groups = (kind == 8) ? pick(2, 3) : 1;
        const int32_t cin = groups * pick(1, 12), cout = groups * pick(1, 24);
        const int32_t s = pick(1, 2), d = pick(0, 3) ? 1 : 2;
        const int32_t p = pick(0, k / 2 + (d - 1));
        /* mostly small maps (one slab), some past a slab's 128 floats */
        const int32_t hw = pick(0, 3) ? pick(1, 8) : pick(9, 24);
        const tt_conv_geom g = geom(hw, pick(0, 1) ? hw : pick(1, 24), cin, cout, k, s, p, d,
                                    groups);
        if (g.oh >= 1 && g.ow >= 1 && g.h * g.w * g.cin <= MAXN &&
            g.oh * g.ow * g.cout <= MAXN && g.cout * k * k * (cin / groups + 2) <= MAXN) {
            return g;
        }
    }
}

int main(void)
{
    char name[32];
    int32_t i, kind;
    const tt_conv_geom digits_down = geom(8, 8, 8, 16, 3, 2, 1, 1, 1);
    const tt_conv_geom wide = geom(4, 4, 8, 80, 1, 1, 0, 1, 1); /* a row of 320 floats */
    const tt_conv_geom big = geom(20, 20, 3, 6, 3, 1, 1, 1, 1); /* 400 pixels */

    seed = 0x9E3779B9u;
    for (kind = 0; kind < 4; ++kind) {
        snprintf(name, sizeof name, "digits_down_g%ld", (long)kind);
        pooled_case(name, &digits_down, kind);
        snprintf(name, sizeof name, "wide_g%ld", (long)kind);
        pooled_case(name, &wide, kind);
        snprintf(name, sizeof name, "big_g%ld", (long)kind);
        pooled_case(name, &big, kind);
    }
    seed = 12345u;
    for (i = 0; i < 240; ++i) {
        const tt_conv_geom g = random_geom();
        snprintf(name, sizeof name, "rpooled_%ld", (long)i);
        pooled_case(name, &g, i % 4);
    }
    snprintf(line, sizeof line, "failures %d\n", failures);
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}

#else /* TT_BENCH */


static tt_conv_geom G;
static tt_pooled D;

static void b_in(int o)
{
    (o ? tt_conv2d_backward_input_pooled_f32_opt : tt_conv2d_backward_input_pooled_f32)(
        YO, &D, W, &G);
}

static void b_w(int o)
{
    (o ? tt_conv2d_backward_weight_pooled_f32_opt : tt_conv2d_backward_weight_pooled_f32)(
        YO, &D, X, &G);
}

static void b_sgd(int o)
{
    (o ? tt_conv2d_backward_weight_sgd_pooled_f32_opt
       : tt_conv2d_backward_weight_sgd_pooled_f32)(YO, NULL, &D, X, &G, G.cin, NULL, 0.01f, 0.0f,
                                                   0.0f);
}

int main(void)
{
    static const char *const names[] = {"bwd_in", "bwd_w", "sgd_w"};
    void (*const fns[])(int) = {b_in, b_w, b_sgd};
    const int32_t macs = 16 * 9 * 8 * 4 * 4; /* DigitsCNN's down conv, every tap counted */
    int32_t i;

    th_ticks_start();
    G = geom(8, 8, 8, 16, 3, 2, 1, 1, 1);
    fill(X, 8 * 8 * 8);
    fill(W, 16 * 9 * 8);
    fill(V, 16);
    D = gate(TT_POOLED_F32, 4 * 4 * 16);
    for (i = 0; i < 3; ++i) {
        const uint32_t ref = th_instructions(fns[i], 0), opt = th_instructions(fns[i], 1);
        snprintf(line, sizeof line, "bench digits_down %s %ld MAC %lu %lu\n", names[i],
                 (long)macs, (unsigned long)ref, (unsigned long)opt);
        th_puts(line);
    }
    th_exit(0);
    return 0;
}

#endif /* TT_BENCH */
