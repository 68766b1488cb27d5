/* Bit-exactness of the optimised int8 conv / dense kernels (runtime_c/optimized/tt_q8_conv_opt.c)
 * against the reference kernels (tt_q8_core.c): every pointwise / regular conv and fully
 * connected geometry of the benchmark networks, then random geometries and requantisation
 * parameters (several seeds), whole-tensor and row (ring) entry points.
 *
 * -DCHECK_ROWS=n: for large layers compare n rows only (the reference is slow on the twins).
 * -DBENCH: instead print instructions per MAC, reference vs optimised (twins: SysTick ticks
 * of 40 instructions). */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#ifndef CHECK_ROWS
#define CHECK_ROWS 0 /* 0: all rows */
#endif

#define MAX_X 65536
#define MAX_Y 200000
#define MAX_W 100000
#define MAX_C 1024

static int8_t X[MAX_X], W[MAX_W], Y_ref[MAX_Y], Y_opt[MAX_Y];
#ifndef BENCH
static int8_t RX[MAX_X], RY_ref[8192], RY_opt[8192];
#endif
static int32_t B[MAX_C], MULT[MAX_C], SHIFT[MAX_C];
static uint32_t seed = 1;
static int failures = 0;
static char line[400];

static int32_t rnd(int32_t lo, int32_t hi) /* inclusive */
{
    return lo + (int32_t)(th_rand(&seed) % (uint32_t)(hi - lo + 1));
}

static void fill8(int8_t *p, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) p[i] = (int8_t)th_rand(&seed);
}

/* Requantisation parameters. profile 0: typical conv layer; 1: narrow activation range, the
 * whole range of fast shifts; 2: stress (any shift, tiny / zero multipliers, huge biases,
 * edge offsets: channels mix the fast and the reference requantisation); 3: real-data
 * weights' dead channels (bench/real_weights.py: multiplier 0 with the compiler's shift -1,
 * the int32 bias saturated or anything), at least one, the rest typical; 4: as 3, and
 * near-dead channels (right shifts 23..31, small biases) and dead ones with shift 0. */
static void params(tt_q8_requant *q, int32_t cout, int32_t profile, int32_t has_bias)
{
    const int32_t dead_at = rnd(0, cout - 1);
    int32_t i;
    q->in_offset = rnd(-127, 128);
    q->out_offset = rnd(-128, 127);
    q->act_min = -128;
    q->act_max = 127;
    if (profile == 1 || (profile >= 2 && rnd(0, 1))) {
        q->act_min = rnd(-128, 20);
        q->act_max = rnd(q->act_min, 126);
    }
    if (profile == 2) {
        const int32_t e = rnd(0, 5);
        q->in_offset = e == 0 ? -127 : (e == 1 ? 128 : q->in_offset);
        if (e == 2) q->in_offset = rnd(-300, 300); /* outside int8 zero points: fallback */
        if (e == 3) q->out_offset = rnd(-300, 300);
    }
    for (i = 0; i < cout; ++i) {
        MULT[i] = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3fffffffu));
        SHIFT[i] = profile == 0 || profile >= 3 ? rnd(-12, -1)
                   : profile == 1                ? rnd(-22, -1)
                                                 : rnd(-24, 0);
        if (profile == 0 && rnd(0, 3) == 0) {
            SHIFT[i] = rnd(-22, -13); /* every shift of the fast path without a clamp */
        }
        B[i] = rnd(-20000, 20000);
        if (profile == 2) {
            const int32_t e = rnd(0, 9);
            if (e == 0) SHIFT[i] = rnd(-31, 30);
            if (e == 1) MULT[i] = rnd(0, 3) == 0 ? 0 : (int32_t)(th_rand(&seed) >> 1);
            if (e == 2) B[i] = (int32_t)th_rand(&seed); /* any int32: may wrap the sum */
            if (e == 3) B[i] = rnd(0, 1) ? 0x3fffffff : -0x3fffffff;
            if (e == 4) SHIFT[i] = rnd(-23, -21);
            if (e == 5) SHIFT[i] = rnd(1, 4);
        }
        if (profile >= 3 && (i == dead_at || rnd(0, 5) == 0)) { /* dead */
            const int32_t e = rnd(0, 3);
            MULT[i] = 0;
            SHIFT[i] = profile == 4 && rnd(0, 2) == 0 ? 0 : -1;
            B[i] = e == 0 ? 0x7fffffff : e == 1 ? -0x7fffffff : (int32_t)th_rand(&seed);
        } else if (profile == 4 && rnd(0, 4) == 0) { /* near-dead */
            SHIFT[i] = rnd(-31, -23);
            B[i] = rnd(-3000, 3000);
        }
    }
    q->mult = MULT;
    q->shift = SHIFT;
    (void)has_bias;
}

#ifndef BENCH
static int compare(const char *what, const tt_conv_geom *g, const int8_t *a, const int8_t *b,
                   int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        if (a[i] != b[i]) {
            snprintf(line, sizeof line,
                     "MISMATCH %s h%ld w%ld cin%ld cout%ld k%ldx%ld s%ld,%ld p%ld,%ld d%ld,%ld "
                     "at %ld: ref %d opt %d (seed state %lu)\n",
                     what, (long)g->h, (long)g->w, (long)g->cin, (long)g->cout, (long)g->kh,
                     (long)g->kw, (long)g->sh, (long)g->sw, (long)g->pt, (long)g->pl,
                     (long)g->dh, (long)g->dw, (long)i, a[i], b[i], (unsigned long)seed);
            th_puts(line);
            ++failures;
            return 0;
        }
    }
    return 1;
}

#endif

static void geom(tt_conv_geom *g, int32_t h, int32_t w, int32_t cin, int32_t cout, int32_t kh,
                 int32_t kw, int32_t sh, int32_t sw, int32_t pt, int32_t pl, int32_t pb,
                 int32_t pr, int32_t dh, int32_t dw)
{
    g->h = h;
    g->w = w;
    g->cin = cin;
    g->cout = cout;
    g->kh = kh;
    g->kw = kw;
    g->sh = sh;
    g->sw = sw;
    g->pt = pt;
    g->pl = pl;
    g->dh = dh;
    g->dw = dw;
    g->groups = 1;
    g->oh = (h + pt + pb - dh * (kh - 1) - 1) / sh + 1;
    g->ow = (w + pl + pr - dw * (kw - 1) - 1) / sw + 1;
}

static int is_pw(const tt_conv_geom *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
           g->oh == g->h && g->ow == g->w && g->dh == 1 && g->dw == 1;
}

#ifdef EXACT_BUFFERS
/* host sanitizer runs (-fsanitize=address): every tensor the optimised kernels see lives in
 * its own exact-size heap block, so any read or write outside it is reported */
#include <stdlib.h>
static void *dup(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (p != NULL && n) memcpy(d, p, n);
    return d;
}
#define EXACT(call, yp, yn, xp, xn, wn, cout)                                             \
    do {                                                                                  \
        int8_t *y_ = dup(yp, yn), *x_ = dup(xp, xn), *w_ = dup(W, wn);                    \
        int32_t *b_ = b != NULL ? dup(b, 4 * (size_t)(cout)) : NULL;                      \
        tt_q8_requant q_ = *q;                                                            \
        q_.mult = dup(q->mult, 4 * (size_t)(cout));                                       \
        q_.shift = dup(q->shift, 4 * (size_t)(cout));                                     \
        call;                                                                             \
        memcpy(yp, y_, yn);                                                               \
        free(y_), free(x_), free(w_), free(b_), free((void *)q_.mult);                    \
        free((void *)q_.shift);                                                           \
    } while (0)
#endif

#ifndef BENCH
/* rows checked: all, or CHECK_ROWS spread over the output including both borders */
static int32_t row_of(int32_t i, int32_t oh, int32_t n)
{
    return n <= 1 ? 0 : (int32_t)((int64_t)i * (oh - 1) / (n - 1));
}

/* whole-tensor kernel against the reference (whole, or rows of it) */
static void check_whole(const tt_conv_geom *g, const tt_q8_requant *q, const int32_t *b)
{
    const int32_t row = g->ow * g->cout;
    const int32_t n = CHECK_ROWS == 0 || g->oh <= CHECK_ROWS ? g->oh : CHECK_ROWS;
    const tt_rows yr = {Y_ref, g->oh, row};
    const tt_rows xr = {X, g->h, g->w * g->cin};
    int32_t i;

    memset(Y_opt, 0x55, (size_t)(g->oh * row + 4));
#ifdef EXACT_BUFFERS
    {
        const size_t yn = (size_t)(g->oh * row), xn = (size_t)(g->h * g->w * g->cin);
        const size_t wn = (size_t)(g->cout * g->kh * g->kw * g->cin);
        if (is_pw(g)) {
            EXACT(tt_conv2d_s8_pw(y_, x_, w_, b_, g, &q_), Y_opt, yn, X, xn, wn, g->cout);
        }
        else {
            EXACT(tt_conv2d_s8_reg(y_, x_, w_, b_, g, &q_), Y_opt, yn, X, xn, wn, g->cout);
        }
    }
#else
    if (is_pw(g)) {
        tt_conv2d_s8_pw(Y_opt, X, W, b, g, q);
    }
    else {
        tt_conv2d_s8_reg(Y_opt, X, W, b, g, q);
    }
#endif
    for (i = 0; i < 4; ++i) {
        if (Y_opt[g->oh * row + i] != 0x55) {
            th_puts("write past the output\n");
            ++failures;
        }
    }
    for (i = 0; i < n; ++i) {
        const int32_t oy = n == g->oh ? i : row_of(i, g->oh, n);
        tt_conv2d_s8_row(&yr, &xr, oy, W, b, g, q);
        if (!compare(is_pw(g) ? "pw" : "reg", g, Y_ref + oy * row, Y_opt + oy * row, row)) {
            return;
        }
    }
}

/* row kernels with x in a ring shorter than the tensor and padded row strides */
static void check_rows(const tt_conv_geom *g, const tt_q8_requant *q, const int32_t *b)
{
    const int32_t pad = rnd(0, 3) * 4;
    const int32_t xrb = g->w * g->cin + pad, yrb = g->ow * g->cout + pad;
    const int32_t rows = g->kh + rnd(0, 2);
    const int32_t n = CHECK_ROWS == 0 || g->oh <= CHECK_ROWS ? g->oh : CHECK_ROWS;
    tt_rows xr, yr, yo;
    int32_t i, ky;

    if (xrb * rows > MAX_X || yrb * 3 > (int32_t)sizeof RY_ref) return;
    xr.base = RX;
    xr.rows = rows;
    xr.row_bytes = xrb;
    yr.base = RY_ref;
    yr.rows = 3;
    yr.row_bytes = yrb;
    yo = yr;
    yo.base = RY_opt;
    fill8(RX, xrb * rows); /* stale ring contents must not matter */
    for (i = 0; i < n; ++i) {
        const int32_t oy = n == g->oh ? i : row_of(i, g->oh, n);
        for (ky = 0; ky < g->kh; ++ky) { /* stream the rows under oy into the ring */
            const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
            if (iy >= 0 && iy < g->h) {
                memcpy(tt_row(&xr, iy), X + iy * g->w * g->cin, (size_t)(g->w * g->cin));
            }
        }
        memset(tt_row(&yo, oy), 0x55, (size_t)yrb);
        memset(tt_row(&yr, oy), 0x55, (size_t)yrb);
        tt_conv2d_s8_row(&yr, &xr, oy, W, b, g, q);
#ifdef EXACT_BUFFERS
        {
            const size_t wn = (size_t)(g->cout * g->kh * g->kw * g->cin);
            tt_rows xe = xr, ye = yo;
            if (is_pw(g)) {
                EXACT((xe.base = x_, ye.base = y_,
                       tt_conv2d_s8_pw_row(&ye, &xe, oy, w_, b_, g, &q_)),
                      RY_opt, (size_t)(yrb * 3), RX, (size_t)(xrb * rows), wn, g->cout);
            }
            else {
                EXACT((xe.base = x_, ye.base = y_,
                       tt_conv2d_s8_reg_row(&ye, &xe, oy, w_, b_, g, &q_)),
                      RY_opt, (size_t)(yrb * 3), RX, (size_t)(xrb * rows), wn, g->cout);
            }
        }
#else
        if (is_pw(g)) {
            tt_conv2d_s8_pw_row(&yo, &xr, oy, W, b, g, q);
        }
        else {
            tt_conv2d_s8_reg_row(&yo, &xr, oy, W, b, g, q);
        }
#endif
        /* the padding bytes after the row too: nothing may be written there */
        if (!compare(is_pw(g) ? "pw_row" : "reg_row", g, tt_row(&yr, oy), tt_row(&yo, oy),
                     yrb)) {
            return;
        }
    }
}

static void check_conv(const tt_conv_geom *g, int32_t profile, int32_t rows)
{
    tt_q8_requant q;
    const int32_t has_bias = rnd(0, 4) != 0;
    const int32_t *b = has_bias ? B : NULL;
    const int32_t nw = g->cout * g->kh * g->kw * g->cin;

    if (g->h * g->w * g->cin > MAX_X || g->oh * g->ow * g->cout > MAX_Y || nw > MAX_W ||
        g->cout > MAX_C || g->oh < 1 || g->ow < 1) {
        th_puts("geometry too large for the test buffers\n");
        ++failures;
        return;
    }
    fill8(X, g->h * g->w * g->cin);
    fill8(W, nw);
    params(&q, g->cout, profile, has_bias);
    check_whole(g, &q, b);
    if (rows) check_rows(g, &q, b);
}

static void check_dense(int32_t in, int32_t out, int32_t profile)
{
    tt_q8_requant q;
    const int32_t *b = rnd(0, 4) != 0 ? B : NULL;
    tt_conv_geom g;

    fill8(X, in);
    fill8(W, in * out);
    params(&q, out, profile, b != NULL);
    memset(Y_ref, 0x55, (size_t)out + 4);
    memset(Y_opt, 0x55, (size_t)out + 4);
    tt_dense_s8(Y_ref, X, W, b, in, out, &q);
#ifdef EXACT_BUFFERS
    {
        const tt_q8_requant *qq = &q;
        {
            const tt_q8_requant *q = qq;
            EXACT(tt_dense_s8_opt(y_, x_, w_, b_, in, out, &q_), Y_opt, (size_t)out, X,
                  (size_t)in, (size_t)(in * out), out);
        }
    }
#else
    tt_dense_s8_opt(Y_opt, X, W, b, in, out, &q);
#endif
    geom(&g, 1, 1, in, out, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1);
    compare("dense", &g, Y_ref, Y_opt, out + 4);
}

#endif

/* pointwise / regular conv and fc geometries of MobileNetV2(0.35, 128, 10),
 * ProxylessNAS(0.3, 128, 10) and MCUNet5FPS(128, 10) (tests/torch_models.py):
 * h, w, cin, cout, kernel, stride, pad */
static const int16_t NETS[][7] = {
    {128, 128, 3, 16, 3, 2, 1}, /* the three stems */
    {64, 64, 16, 8, 1, 1, 0},   {64, 64, 8, 48, 1, 1, 0},   {32, 32, 48, 8, 1, 1, 0},
    {32, 32, 8, 48, 1, 1, 0},   {16, 16, 48, 16, 1, 1, 0},  {16, 16, 16, 96, 1, 1, 0},
    {16, 16, 96, 16, 1, 1, 0},  {8, 8, 96, 24, 1, 1, 0},    {8, 8, 24, 144, 1, 1, 0},
    {8, 8, 144, 24, 1, 1, 0},   {8, 8, 144, 32, 1, 1, 0},   {8, 8, 32, 192, 1, 1, 0},
    {8, 8, 192, 32, 1, 1, 0},   {4, 4, 192, 56, 1, 1, 0},   {4, 4, 56, 336, 1, 1, 0},
    {4, 4, 336, 56, 1, 1, 0},   {4, 4, 336, 112, 1, 1, 0},  {64, 64, 8, 24, 1, 1, 0},
    {32, 32, 24, 16, 1, 1, 0},  {32, 32, 16, 48, 1, 1, 0},  {32, 32, 48, 16, 1, 1, 0},
    {16, 16, 16, 48, 1, 1, 0},  {8, 8, 24, 72, 1, 1, 0},    {8, 8, 72, 24, 1, 1, 0},
    {8, 8, 32, 96, 1, 1, 0},    {8, 8, 96, 32, 1, 1, 0},    {4, 4, 192, 64, 1, 1, 0},
    {4, 4, 64, 384, 1, 1, 0},   {4, 4, 384, 64, 1, 1, 0},   {4, 4, 64, 192, 1, 1, 0},
    {4, 4, 384, 96, 1, 1, 0},   {64, 64, 8, 32, 1, 1, 0},   {32, 32, 32, 16, 1, 1, 0},
    {16, 16, 48, 24, 1, 1, 0},  {16, 16, 24, 120, 1, 1, 0}, {16, 16, 120, 24, 1, 1, 0},
    {8, 8, 120, 40, 1, 1, 0},   {8, 8, 40, 160, 1, 1, 0},   {8, 8, 160, 40, 1, 1, 0},
    {8, 8, 160, 48, 1, 1, 0},   {8, 8, 48, 144, 1, 1, 0},   {8, 8, 144, 48, 1, 1, 0},
    {8, 8, 48, 192, 1, 1, 0},   {8, 8, 192, 48, 1, 1, 0},   {8, 8, 48, 240, 1, 1, 0},
    {4, 4, 240, 96, 1, 1, 0},   {4, 4, 96, 384, 1, 1, 0},   {4, 4, 96, 576, 1, 1, 0},
    {4, 4, 576, 160, 1, 1, 0},
};
#ifndef BENCH
/* edge geometries: h, w, cin, cout, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw */
static const int16_t EDGES[][14] = {
    {3, 2, 3, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1},   /* kernel wider than the input + pad */
    {2, 2, 5, 3, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1},   {1, 1, 2, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {5, 4, 1, 1, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1},   {7, 9, 3, 7, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2},
    {6, 6, 4, 6, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},   {4, 5, 64, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},   {2, 3, 1, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},
    {1, 7, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},   {2, 2, 193, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},
    {14, 14, 3, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, /* stems with an odd pixel per row */
    {9, 26, 3, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
};
#endif
static const int16_t FCS[][2] = {{112, 10}, {96, 10}, {160, 10}};

#define COUNT(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

#ifdef BENCH
static int64_t tot_macs, tot_ref, tot_opt, tot_row;
/* the same geometries with one dead channel (mult 0, shift -1, bias INT32_MAX), and with one
 * near-dead channel (right shift 27): [0] whole tensor, [1] row by row */
static int64_t tot_dead[2], tot_near[2];

/* instructions per MAC as "12.34" (newlib-nano's printf has no %f) */
static const char *ipm(char *s, int64_t ticks, int64_t macs)
{
    const int32_t c = (int32_t)((ticks * TH_TICK_CENTI + macs / 2) / macs) % 100000;
    snprintf(s, 16, "%3d.%02d", (int)(c / 100), (int)(c % 100));
    return s;
}

/* instructions of the optimised kernel on g (whole tensor, then row by row: t[0], t[1]),
 * its output checked against Y_ref */
static void time_opt(const tt_conv_geom *g, const tt_q8_requant *q, uint32_t *t)
{
    const tt_rows yr = {Y_opt, g->oh, g->ow * g->cout};
    const tt_rows xr = {X, g->h, g->w * g->cin};
    const size_t n = (size_t)(g->oh * g->ow * g->cout);
    uint32_t t0;
    int32_t oy;

    memset(Y_opt, 0, n);
    t0 = th_ticks();
    if (is_pw(g)) {
        tt_conv2d_s8_pw(Y_opt, X, W, B, g, q);
    }
    else {
        tt_conv2d_s8_reg(Y_opt, X, W, B, g, q);
    }
    t[0] = th_elapsed(t0);
    if (memcmp(Y_ref, Y_opt, n) != 0) ++failures;
    memset(Y_opt, 0, n);
    t0 = th_ticks();
    for (oy = 0; oy < g->oh; ++oy) {
        if (is_pw(g)) {
            tt_conv2d_s8_pw_row(&yr, &xr, oy, W, B, g, q);
        }
        else {
            tt_conv2d_s8_reg_row(&yr, &xr, oy, W, B, g, q);
        }
    }
    t[1] = th_elapsed(t0);
    if (memcmp(Y_ref, Y_opt, n) != 0) ++failures;
}

static void bench_conv(const int16_t *n)
{
    tt_conv_geom g;
    tt_q8_requant q;
    uint32_t t0, ref, opt, opt_row;
    int64_t macs;
    char a[16], o[16], r[16];

    geom(&g, n[0], n[1], n[2], n[3], n[4], n[4], n[5], n[5], n[6], n[6], n[6], n[6], 1, 1);
    macs = (int64_t)g.oh * g.ow * g.cout * g.kh * g.kw * g.cin;
    fill8(X, g.h * g.w * g.cin);
    fill8(W, g.cout * g.kh * g.kw * g.cin);
    params(&q, g.cout, 0, 1);
    t0 = th_ticks();
    tt_conv2d_s8(Y_ref, X, W, B, &g, &q);
    ref = th_elapsed(t0);
    t0 = th_ticks();
    if (is_pw(&g)) {
        tt_conv2d_s8_pw(Y_opt, X, W, B, &g, &q);
    }
    else {
        tt_conv2d_s8_reg(Y_opt, X, W, B, &g, &q);
    }
    opt = th_elapsed(t0);
    if (memcmp(Y_ref, Y_opt, (size_t)(g.oh * g.ow * g.cout)) != 0) ++failures;
    {   /* the row entry points, one call per output row (as row streaming runs them) */
        const tt_rows yr = {Y_opt, g.oh, g.ow * g.cout};
        const tt_rows xr = {X, g.h, g.w * g.cin};
        int32_t oy;
        memset(Y_opt, 0, (size_t)(g.oh * g.ow * g.cout));
        t0 = th_ticks();
        for (oy = 0; oy < g.oh; ++oy) {
            if (is_pw(&g)) {
                tt_conv2d_s8_pw_row(&yr, &xr, oy, W, B, &g, &q);
            }
            else {
                tt_conv2d_s8_reg_row(&yr, &xr, oy, W, B, &g, &q);
            }
        }
        opt_row = th_elapsed(t0);
    }
    if (memcmp(Y_ref, Y_opt, (size_t)(g.oh * g.ow * g.cout)) != 0) ++failures;
    tot_macs += macs;
    tot_ref += ref;
    tot_opt += opt;
    tot_row += opt_row;
    { /* one dead channel, then one near-dead channel (the reference run again for each) */
        const int32_t c = g.cout / 2, m = MULT[c], sh = SHIFT[c], b = B[c];
        uint32_t t[2];
        MULT[c] = 0;
        SHIFT[c] = -1;
        B[c] = 0x7fffffff;
        tt_conv2d_s8(Y_ref, X, W, B, &g, &q);
        time_opt(&g, &q, t);
        tot_dead[0] += t[0];
        tot_dead[1] += t[1];
        MULT[c] = m;
        SHIFT[c] = -27;
        B[c] = b / 64;
        tt_conv2d_s8(Y_ref, X, W, B, &g, &q);
        time_opt(&g, &q, t);
        tot_near[0] += t[0];
        tot_near[1] += t[1];
        SHIFT[c] = sh;
        B[c] = b;
    }
    snprintf(line, sizeof line, "%s %3dx%-3d %3d->%-3d k%d s%d %8ld MACs  ref %s  opt %s"
             "  opt_row %s instr/MAC%s\n", is_pw(&g) ? "pw " : "reg", n[0], n[1], n[2], n[3],
             n[4], n[5], (long)macs, ipm(a, ref, macs), ipm(o, opt, macs),
             ipm(r, opt_row, macs), failures == 0 ? "" : "  DIFFERENT");
    th_puts(line);
}

static void bench_dense(int32_t in, int32_t out)
{
    tt_q8_requant q;
    uint32_t t0, ref, opt;
    int32_t r;
    char a[16], o[16];

    fill8(X, in);
    fill8(W, in * out);
    params(&q, out, 0, 1);
    t0 = th_ticks();
    for (r = 0; r < 100; ++r) tt_dense_s8(Y_ref, X, W, B, in, out, &q);
    ref = th_elapsed(t0);
    t0 = th_ticks();
    for (r = 0; r < 100; ++r) tt_dense_s8_opt(Y_opt, X, W, B, in, out, &q);
    opt = th_elapsed(t0);
    snprintf(line, sizeof line, "fc  %ld->%-12ld %8ld MACs  ref %s  opt %s instr/MAC\n",
             (long)in, (long)out, (long)(in * out), ipm(a, ref, 100 * in * out),
             ipm(o, opt, 100 * in * out));
    th_puts(line);
}

int main(void)
{
    int32_t i;
    char a[16], o[16], r[16];

    th_ticks_start();
    for (i = 0; i < COUNT(NETS); ++i) bench_conv(NETS[i]);
    for (i = 0; i < COUNT(FCS); ++i) bench_dense(FCS[i][0], FCS[i][1]);
    snprintf(line, sizeof line, "all conv geometries: %ld MACs  ref %s  opt %s  opt_row %s"
             " instr/MAC\n", (long)tot_macs, ipm(a, tot_ref, tot_macs),
             ipm(o, tot_opt, tot_macs), ipm(r, tot_row, tot_macs));
    th_puts(line);
    snprintf(line, sizeof line, "one dead channel: opt %s  opt_row %s instr/MAC\n",
             ipm(o, tot_dead[0], tot_macs), ipm(r, tot_dead[1], tot_macs));
    th_puts(line);
    snprintf(line, sizeof line, "one near-dead channel: opt %s  opt_row %s instr/MAC\n",
             ipm(o, tot_near[0], tot_macs), ipm(r, tot_near[1], tot_macs));
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}
#else
int main(void)
{
    int32_t i, s;
    tt_conv_geom g;

    for (i = 0; i < COUNT(NETS); ++i) {
        const int16_t *n = NETS[i];
        geom(&g, n[0], n[1], n[2], n[3], n[4], n[4], n[5], n[5], n[6], n[6], n[6], n[6], 1, 1);
        for (s = 0; s < 5; ++s) check_conv(&g, s, 1);
    }
    for (i = 0; i < COUNT(FCS); ++i) {
        for (s = 0; s < 5; ++s) check_dense(FCS[i][0], FCS[i][1], s);
    }
    for (i = 0; i < COUNT(EDGES); ++i) {
        const int16_t *e = EDGES[i];
        geom(&g, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8], e[9], e[10], e[11], e[12],
             e[13]);
        for (s = 0; s < 5; ++s) check_conv(&g, s, 1);
    }
    for (s = 0; s < 600; ++s) { /* random geometries */
        const int32_t kind = rnd(0, 3);
        int32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
        int32_t h = rnd(1, 9), w = rnd(1, 13), cin = rnd(1, 40), cout = rnd(1, 21);
        if (kind == 1) cin = rnd(150, 300); /* wider than the buffer */
        if (kind == 0 && rnd(0, 1)) cin = rnd(0, 1) ? 8 : 16; /* the narrow-input kernels */
        if (kind >= 2) {
            const int32_t ks[5] = {1, 2, 3, 5, 7};
            kh = ks[rnd(0, 4)];
            kw = rnd(0, 2) ? kh : ks[rnd(0, 4)];
            sh = rnd(1, 3);
            sw = rnd(0, 1) ? sh : rnd(1, 3);
            dh = rnd(0, 4) ? 1 : 2;
            dw = rnd(0, 4) ? 1 : 2;
            pt = rnd(0, kh - 1);
            pb = rnd(0, kh - 1);
            pl = rnd(0, kw - 1);
            pr = rnd(0, kw - 1);
            h = rnd(1, 12) + dh * (kh - 1);
            if (rnd(0, 3) == 0) h = h - pt - pb > 0 ? h - pt - pb : 1;
            w = rnd(1, 14) + dw * (kw - 1);
            if (rnd(0, 3) == 0) w = w - pl - pr > 0 ? w - pl - pr : 1; /* kernel wider */
            if (kind == 3) cin = rnd(1, 6); /* stem-like */
            if (rnd(0, 5) == 0) cin = rnd(20, 70); /* patches wider than the buffer */
        }
        geom(&g, h, w, cin, cout, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw);
        if (g.oh < 1 || g.ow < 1) continue;
        check_conv(&g, rnd(0, 2), 1);
        if (failures > 10) break;
        check_conv(&g, rnd(3, 4), 1); /* the same geometry with dead / near-dead channels */
    }
    for (s = 0; s < 160; ++s) { /* 3x3x3 stems (on Helium tt_q8_stem_mve.c): any stride and
                                 * padding, odd widths, rows wider than its column buffer
                                 * (84 outputs at stride 2), more channels than it prepares
                                 * at once (16), every requantisation profile */
        const int32_t sh = rnd(1, 3), sw = rnd(0, 2) ? 2 : rnd(1, 3), wide = rnd(0, 4) == 0;
        const int32_t w = wide ? rnd(150, 250) : rnd(1, 40);
        geom(&g, rnd(1, 9), w, 3, wide ? rnd(1, 9) : rnd(1, 36), 3, 3, sh, sw, rnd(0, 2),
             rnd(0, 2), rnd(0, 2), rnd(0, 2), 1, 1);
        if (g.oh < 1 || g.ow < 1) continue;
        check_conv(&g, rnd(0, 4), 1);
        if (failures > 10) break;
    }
    for (s = 0; s < 200; ++s) {
        check_dense(rnd(0, 3) ? rnd(1, 40) : rnd(100, 700), rnd(1, 33), rnd(0, 4));
    }
    snprintf(line, sizeof line, "conv_opt: %d failures\n", failures);
    th_puts(line);
    th_exit(failures != 0);
    return 0;
}
#endif
