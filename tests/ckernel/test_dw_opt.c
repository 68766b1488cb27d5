/* Bit-exactness of tt_conv2d_s8_dw(_row) and tt_add_s8(_row)_opt against the reference
 * kernels (tt_conv2d_s8(_row), tt_add_s8(_row)), on the host and the QEMU twins; with
 * -DTT_DW_BENCH a microbenchmark of instructions per MAC / per element instead (twins). */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#define MAX_X (64 * 64 * 48)
#define MAX_Y (64 * 64 * 48)
#define MAX_C 576
#define MAX_TAPS 81

static int8_t xbuf[MAX_X], ring[MAX_X];
static int8_t yref[MAX_Y], yopt[MAX_Y], yring[MAX_Y];
static int8_t wbuf[MAX_C * MAX_TAPS];
static int32_t pack[MAX_C / 4 * (23 + 2 * MAX_TAPS)];
static int32_t bias[MAX_C], mult[MAX_C], shift[MAX_C];
static uint32_t seed = 12345u;
static int failures = 0;

static void say(const char *s)
{
    th_puts(s);
}

static int32_t rnd(int32_t lo, int32_t hi) /* uniform in [lo, hi] */
{
    return lo + (int32_t)(th_rand(&seed) % (uint32_t)(hi - lo + 1));
}

static void fill(int8_t *p, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        p[i] = (int8_t)rnd(-128, 127);
    }
}

/* {h, w, c, oh, ow, k, stride, pad}: every depthwise conv of MobileNetV2(0.35, 128),
 * ProxylessNAS(0.3, 128) and MCUNet5FPS(128) (tests/torch_models.py) */
static const int16_t BENCH_DW[][8] = {
    {4, 4, 192, 4, 4, 7, 1, 3},    {4, 4, 336, 4, 4, 3, 1, 1},    {4, 4, 384, 4, 4, 5, 1, 2},
    {4, 4, 384, 4, 4, 7, 1, 3},    {4, 4, 576, 4, 4, 3, 1, 1},    {8, 8, 72, 8, 8, 5, 1, 2},
    {8, 8, 96, 8, 8, 5, 1, 2},     {8, 8, 144, 8, 8, 3, 1, 1},    {8, 8, 144, 8, 8, 5, 1, 2},
    {8, 8, 160, 8, 8, 5, 1, 2},    {8, 8, 160, 8, 8, 7, 1, 3},    {8, 8, 192, 4, 4, 3, 2, 1},
    {8, 8, 192, 4, 4, 7, 2, 3},    {8, 8, 192, 8, 8, 3, 1, 1},    {8, 8, 240, 4, 4, 7, 2, 3},
    {16, 16, 48, 16, 16, 3, 1, 1}, {16, 16, 48, 16, 16, 5, 1, 2}, {16, 16, 96, 8, 8, 3, 2, 1},
    {16, 16, 96, 8, 8, 7, 2, 3},   {16, 16, 96, 16, 16, 3, 1, 1}, {16, 16, 120, 8, 8, 3, 2, 1},
    {16, 16, 120, 16, 16, 3, 1, 1}, {32, 32, 48, 16, 16, 3, 2, 1}, {32, 32, 48, 16, 16, 7, 2, 3},
    {32, 32, 48, 32, 32, 3, 1, 1}, {64, 64, 16, 64, 64, 3, 1, 1}, {64, 64, 24, 32, 32, 5, 2, 2},
    {64, 64, 32, 32, 32, 3, 2, 1}, {64, 64, 48, 32, 32, 3, 2, 1},
};
#define N_BENCH_DW ((int32_t)(sizeof BENCH_DW / sizeof BENCH_DW[0]))

/* {h, w, c}: the residual adds of the same networks */
static const int16_t BENCH_ADD[][3] = {
    {4, 4, 56}, {4, 4, 64}, {4, 4, 96}, {8, 8, 24}, {8, 8, 32}, {8, 8, 40},
    {8, 8, 48}, {16, 16, 16}, {16, 16, 24}, {32, 32, 8}, {32, 32, 16},
};
#define N_BENCH_ADD ((int32_t)(sizeof BENCH_ADD / sizeof BENCH_ADD[0]))

static tt_conv_geom geom(int32_t h, int32_t w, int32_t c, int32_t kh, int32_t kw, int32_t sh,
                         int32_t sw, int32_t pt, int32_t pl, int32_t pb, int32_t pr)
{
    tt_conv_geom g;
    g.h = h;
    g.w = w;
    g.cin = g.cout = g.groups = c;
    g.kh = kh;
    g.kw = kw;
    g.sh = sh;
    g.sw = sw;
    g.pt = pt;
    g.pl = pl;
    g.dh = g.dw = 1;
    g.oh = (h + pt + pb - kh) / sh + 1;
    g.ow = (w + pl + pr - kw) / sw + 1;
    return g;
}

/* Random requantisation; `style` picks ordinary values or edge cases (slow paths); 3:
 * real-data weights (bench/real_weights.py): ordinary channels, dead ones (multiplier 0 with
 * the compiler's shift -1, now and then 0; the bias saturated or anything) and near-dead ones
 * (right shifts 23..31, small biases). */
static void random_requant(tt_q8_requant *q, int32_t c, int32_t style)
{
    int32_t i, a;

    q->in_offset = rnd(-127, 128);
    q->out_offset = rnd(-128, 127);
    a = rnd(0, 3);
    if (a == 0) {
        q->act_min = -128;
        q->act_max = 127;
    } else if (a == 1) { /* ReLU6-like */
        q->act_min = q->out_offset;
        q->act_max = rnd(q->out_offset, 127);
    } else {
        q->act_min = rnd(-128, 127);
        q->act_max = rnd(q->act_min, 127);
    }
    for (i = 0; i < c; ++i) {
        mult[i] = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
        shift[i] = rnd(-12, -1);
        bias[i] = rnd(-40000, 40000);
        if (style == 1) { /* every shape of constant the fast path must accept or refuse */
            switch (rnd(0, 9)) {
            case 0: shift[i] = 0; break;
            case 1: shift[i] = rnd(1, 3); break;
            case 2: shift[i] = rnd(-31, -18); break;
            case 3: bias[i] = rnd(-(1 << 30), 1 << 30); break;
            case 4: bias[i] = (int32_t)th_rand(&seed); break;
            case 5: mult[i] = 0; break;
            case 6: mult[i] = rnd(1, 1 << 20); break;
            case 7: bias[i] = rnd(-(1 << 29), 1 << 29); shift[i] = rnd(-22, -10); break;
            default: break;
            }
        } else if (style == 2) { /* small accumulators: requant rounding ties, few output bits */
            shift[i] = rnd(-9, -1);
            bias[i] = rnd(-300, 300);
        } else if (style == 3) {
            const int32_t e = rnd(0, 9);
            if (e < 3) { /* dead */
                mult[i] = 0;
                shift[i] = e == 0 && rnd(0, 1) ? 0 : -1;
                bias[i] = e == 1 ? 0x7FFFFFFF : (e == 2 ? -0x7FFFFFFF : (int32_t)th_rand(&seed));
            } else if (e == 3) { /* near-dead */
                shift[i] = rnd(-31, -23);
                bias[i] = rnd(-3000, 3000);
            }
        }
    }
    q->mult = mult;
    q->shift = shift;
}

static int check(const int8_t *a, const int8_t *b, int32_t n, const char *what, int32_t id)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        if (a[i] != b[i]) {
            char s[160];
            snprintf(s, sizeof s, "MISMATCH %s case %ld at %ld: ref %d opt %d\n", what,
                     (long)id, (long)i, a[i], b[i]);
            say(s);
            ++failures;
            return 1;
        }
    }
    return 0;
}

/* One depthwise geometry: whole tensor, then row by row through small rings (each ring
 * holds just the input rows under the current output row, as row streaming does). */
static void test_dw(const tt_conv_geom *g, int32_t style, int32_t use_bias, int32_t id)
{
    const int32_t c = g->cin, taps = g->kh * g->kw;
    const int32_t xrow = g->w * c, yrow = g->ow * c;
    const int32_t *b = use_bias ? bias : NULL;
    tt_q8_requant q;
    tt_rows xr, yr;
    int32_t oy, iy, last;

    fill(xbuf, g->h * xrow);
    fill(wbuf, c * taps);
    random_requant(&q, c, style);
    tt_conv2d_s8(yref, xbuf, wbuf, b, g, &q);
    memset(yopt, 0x5A, (size_t)(g->oh * yrow));
    tt_conv2d_s8_dw(yopt, xbuf, wbuf, b, g, &q);
    if (check(yref, yopt, g->oh * yrow, "dw", id)) {
        return;
    }
    /* the frozen-parameter kernels, from a pack of the same constants */
    tt_conv2d_s8_dw_pack(pack, wbuf, b, g, &q);
    memset(yopt, 0x5A, (size_t)(g->oh * yrow));
    tt_conv2d_s8_dw_pk(yopt, xbuf, wbuf, b, g, &q, pack);
    if (check(yref, yopt, g->oh * yrow, "dw_pk", id)) {
        return;
    }
    /* the input ring: kh rows (+1 so a wrap lands mid-window), output ring: 2 rows */
    xr.base = ring;
    xr.rows = g->kh + 1 < g->h ? g->kh + 1 : g->h;
    xr.row_bytes = xrow;
    yr.base = yring;
    yr.rows = 2;
    yr.row_bytes = yrow;
    last = -1;
    for (oy = 0; oy < g->oh; ++oy) {
        const int32_t top = oy * g->sh - g->pt;
        for (iy = top > last + 1 ? top : last + 1; iy < top + g->kh && iy < g->h; ++iy) {
            if (iy >= 0) {
                memcpy(tt_row(&xr, iy), xbuf + iy * xrow, (size_t)xrow);
                last = iy;
            }
        }
        memset(tt_row(&yr, oy), 0x5A, (size_t)yrow);
        tt_conv2d_s8_dw_row(&yr, &xr, oy, wbuf, b, g, &q);
        if (check(yref + oy * yrow, tt_row(&yr, oy), yrow, "dw_row", id)) {
            return;
        }
        memset(tt_row(&yr, oy), 0x5A, (size_t)yrow);
        tt_conv2d_s8_dw_pk_row(&yr, &xr, oy, wbuf, b, g, &q, pack);
        if (check(yref + oy * yrow, tt_row(&yr, oy), yrow, "dw_pk_row", id)) {
            return;
        }
    }
}

static void random_add_params(tt_q8_add *p, int32_t style)
{
    int32_t bigger = rnd(0, 2);
    p->a_offset = rnd(-127, 128);
    p->b_offset = rnd(-127, 128);
    p->out_offset = rnd(-128, 127);
    p->left_shift = 20;
    /* as AddPrepare: the input of the larger scale has multiplier 0.5 = (2^30, 0) */
    p->a_mult = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
    p->a_shift = rnd(-6, -1);
    p->b_mult = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
    p->b_shift = rnd(-6, -1);
    if (bigger == 0) {
        p->a_mult = 1 << 30;
        p->a_shift = 0;
    } else if (bigger == 1) {
        p->b_mult = 1 << 30;
        p->b_shift = 0;
    }
    p->out_mult = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
    p->out_shift = rnd(-21, -17);
    if (rnd(0, 2) == 0) {
        p->act_min = -128;
        p->act_max = 127;
    } else {
        p->act_min = rnd(-128, 127);
        p->act_max = rnd(p->act_min, 127);
    }
    if (style == 2) {
        /* LiteRT's constants put the inputs' rounding far below the output's LSB; tiny input
         * multipliers make every rounding (and its ties) of the input rescales visible */
        p->a_mult = rnd(1, 1 << 12);
        p->a_shift = rnd(-4, -1);
        p->b_mult = rnd(1, 1 << 12);
        p->b_shift = rnd(-4, -1);
        p->out_shift = rnd(-3, -2);
        if (bigger == 0) { /* the linear input small too: it is then (x + off) << 19 */
            p->a_shift = 0;
            p->a_mult = 1 << 30;
            p->out_shift = -22;
        }
    }
    if (style == 1) { /* constants outside the fast path's range, and its limits */
        switch (rnd(0, 7)) {
        case 0: p->out_shift = rnd(-31, -22); break;
        case 1: p->out_shift = 0; break;
        case 2: p->a_shift = rnd(-31, -20); break;
        case 3: p->b_mult = 0; p->b_shift = 0; break;
        case 4: p->out_shift = -1; break;
        case 5: p->left_shift = rnd(15, 21); break;
        case 6: p->out_shift = -22; p->out_offset = rnd(0, 1) ? -128 : 127; break;
        default: p->out_shift = rnd(-16, -2); break;
        }
    }
}

static void test_add(int32_t h, int32_t w, int32_t c, int32_t style, int32_t id)
{
    const int32_t n = h * w * c, rb = w * c;
    int32_t shape[4], str[4], r;
    tt_q8_add p;
    tt_rows ar, br, yr;
    int8_t *a = xbuf, *b = xbuf + n;

    shape[0] = 1;
    shape[1] = h;
    shape[2] = w;
    shape[3] = c;
    str[0] = n;
    str[1] = w * c;
    str[2] = c;
    str[3] = 1;
    fill(a, n);
    fill(b, n);
    random_add_params(&p, style);
    tt_add_s8(yref, a, b, shape, str, str, &p);
    tt_add_s8_opt(yopt, a, b, n, &p);
    if (check(yref, yopt, n, "add", id)) {
        return;
    }
    /* rows: operands in 3-row rings, the result in a 2-row ring */
    ar.base = ring;
    ar.rows = 3;
    ar.row_bytes = rb;
    br.base = ring + 3 * rb;
    br.rows = 3;
    br.row_bytes = rb;
    yr.base = yring;
    yr.rows = 2;
    yr.row_bytes = rb;
    for (r = 0; r < h; ++r) {
        memcpy(tt_row(&ar, r), a + r * rb, (size_t)rb);
        memcpy(tt_row(&br, r), b + r * rb, (size_t)rb);
        tt_add_s8_row_opt(&yr, &ar, &br, r, &p);
        if (check(yref + r * rb, tt_row(&yr, r), rb, "add_row", id)) {
            return;
        }
    }
}

/* every (a, b) byte pair under the constants p */
static void test_add_all_pairs(const tt_q8_add *p, int32_t id)
{
    static const int32_t shape[4] = {1, 1, 256, 256}, str[4] = {65536, 65536, 256, 1};
    int32_t i;
    int8_t *a = xbuf, *b = xbuf + 65536;

    for (i = 0; i < 65536; ++i) {
        a[i] = (int8_t)(i >> 8);
        b[i] = (int8_t)i;
    }
    tt_add_s8(yref, a, b, shape, str, str, p);
    tt_add_s8_opt(yopt, a, b, 65536, p);
    check(yref, yopt, 65536, "add_all_pairs", id);
}

/* The limits of the add's fast path: output shifts and offsets around the overflow bound,
 * extreme input multipliers and shifts (all byte pairs each). */
static void test_add_limits(int32_t *id)
{
    static const int32_t out_shifts[] = {0, -1, -21, -22, -23, -31};
    static const int32_t in_mults[][2] = {{1 << 30, 0}, {0x7FFFFFFF, -1}, {1 << 30, -31},
                                          {0, 0}, {1, -1}, {0x7FFFFFFF, 0}};
    int32_t i, j;
    for (i = 0; i < (int32_t)(sizeof out_shifts / sizeof out_shifts[0]); ++i) {
        for (j = 0; j < (int32_t)(sizeof in_mults / sizeof in_mults[0]); ++j) {
            tt_q8_add p;
            random_add_params(&p, 0);
            p.out_shift = out_shifts[i];
            p.out_offset = (i + j) % 2 ? 127 : -128;
            p.a_offset = (j % 3 == 0) ? 128 : -127;
            p.b_offset = (j % 2 == 0) ? -127 : 128;
            p.a_mult = in_mults[j][0];
            p.a_shift = in_mults[j][1];
            p.act_min = -128;
            p.act_max = 127;
            test_add_all_pairs(&p, (*id)++);
        }
    }
}

/* A rescale of one input: linear (LiteRT's for the input of the larger scale), ordinary,
 * tiny (every rounding tie visible) or extreme (shift down to -31, multiplier 0 or 2^31 - 1) */
static void random_add_input(int32_t *mult_, int32_t *shift_)
{
    switch (rnd(0, 5)) {
    case 0:
    case 1: *mult_ = 1 << 30; *shift_ = 0; break;
    case 2: *mult_ = rnd(1, 1 << 12); *shift_ = rnd(-5, -1); break;
    case 3:
        *mult_ = rnd(0, 2) == 0 ? rnd(0, 1) * 0x7FFFFFFF : (int32_t)(th_rand(&seed) >> 1);
        *shift_ = rnd(-31, -1);
        break;
    default:
        *mult_ = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
        *shift_ = rnd(-8, -1);
        break;
    }
}

/* Random constants over every path of the optimised adds (the Helium kernel: a linear input
 * folded into the other's rounding for shifts 1..3, other shifts, both or neither input
 * linear, clamped or not), input offsets over the whole accepted [-255, 255], output shifts
 * 1..31; one case in eight outside the fast paths (the reference arithmetic's fallback).
 * Lengths from 1 up, most with a tail past a multiple of 16; the bytes past the output must
 * stay as they were, and the row form runs the same constants on rings. */
static void test_add_sweep(int32_t *id)
{
    int32_t i;
    for (i = 0; i < 240; ++i) {
        const int32_t n = i % 4 == 0 ? rnd(1, 40) : 16 * rnd(1, 20) + rnd(0, 15);
        const int32_t h = rnd(1, 3);
        const int32_t shape[4] = {1, 1, h, n}, str[4] = {h * n, h * n, n, 1};
        int8_t *a = xbuf, *b = xbuf + h * n;
        tt_rows ar, br, yr;
        tt_q8_add p;
        int32_t r;

        p.a_offset = rnd(0, 7) == 0 ? (rnd(0, 1) ? 255 : -255) : rnd(-255, 255);
        p.b_offset = rnd(0, 7) == 0 ? (rnd(0, 1) ? 255 : -255) : rnd(-255, 255);
        p.out_offset = rnd(-128, 127);
        p.left_shift = 20;
        random_add_input(&p.a_mult, &p.a_shift);
        random_add_input(&p.b_mult, &p.b_shift);
        /* the sum is up to 2^28.6: a multiplier near 2^(10 + shift) keeps the outputs
         * inside int8, where the output rounding's ties show (often for small shifts) */
        r = rnd(0, 2);
        p.out_shift = r == 0 ? rnd(-6, -1) : (r == 1 ? rnd(-31, -7) : rnd(-22, -15));
        r = -p.out_shift + 10 + rnd(-3, 1);
        p.out_mult = r >= 31 ? (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu))
                             : (int32_t)((1u << r) + (th_rand(&seed) & ((1u << r) - 1)));
        if (rnd(0, 1)) {
            p.act_min = -128;
            p.act_max = 127;
        } else {
            p.act_min = rnd(-128, 127);
            p.act_max = rnd(p.act_min, 127);
        }
        if (rnd(0, 7) == 0) { /* outside the fast paths */
            switch (rnd(0, 4)) {
            case 0: p.out_shift = rnd(0, 2); break;
            case 1: p.left_shift = rnd(17, 19); break;
            case 2: p.a_offset = rnd(0, 1) ? 256 : -256; break;
            case 3: p.b_mult = (1 << 30) + 1; p.b_shift = 0; break;
            default: p.out_mult = -p.out_mult; break;
            }
        }
        fill(a, 2 * h * n);
        if (i % 3 == 1) {
            /* The inputs' rounding (and its ties) show only where a sum's last bit moves an
             * output: one input at its zero point (0 rescaled), the other small (a tiny
             * multiplier), the output's shift 1..3. */
            int8_t *const z = rnd(0, 1) ? a : b;
            int32_t *const zo = z == a ? &p.a_offset : &p.b_offset;
            int32_t *const m = z == a ? &p.b_mult : &p.a_mult;
            int32_t *const e = z == a ? &p.b_shift : &p.a_shift;
            *zo = rnd(-127, 128);
            memset(z, -*zo, (size_t)(h * n));
            *m = rnd(1, 1 << 12);
            *e = rnd(-6, -1);
            if (rnd(0, 1)) { /* the other linear, as LiteRT has it */
                *(z == a ? &p.a_mult : &p.b_mult) = 1 << 30;
                *(z == a ? &p.a_shift : &p.b_shift) = 0;
            }
            p.out_mult = (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
            p.out_shift = rnd(-3, -1);
            p.left_shift = 20;
        } else if (rnd(0, 7) == 0) { /* the extremes of both inputs */
            memset(a, rnd(0, 1) ? 0x80 : 0x7F, (size_t)n);
            memset(b, rnd(0, 1) ? 0x80 : 0x7F, (size_t)n);
        }
        tt_add_s8(yref, a, b, shape, str, str, &p);
        memset(yopt, 0x5A, (size_t)(h * n + 16));
        tt_add_s8_opt(yopt, a, b, h * n, &p);
        if (check(yref, yopt, h * n, "add_sweep", *id)) {
            ++*id;
            continue;
        }
        for (r = h * n; r < h * n + 16; ++r) {
            if (yopt[r] != 0x5A) {
                say("MISMATCH add_sweep: a byte past the output written\n");
                ++failures;
                break;
            }
        }
        ar.base = ring;
        ar.rows = 2;
        ar.row_bytes = n;
        br.base = ring + 2 * n;
        br.rows = 2;
        br.row_bytes = n;
        yr.base = yring;
        yr.rows = 2;
        yr.row_bytes = n;
        for (r = 0; r < h; ++r) {
            memcpy(tt_row(&ar, r), a + r * n, (size_t)n);
            memcpy(tt_row(&br, r), b + r * n, (size_t)n);
            tt_add_s8_row_opt(&yr, &ar, &br, r, &p);
            if (check(yref + r * n, tt_row(&yr, r), n, "add_sweep_row", *id)) {
                break;
            }
        }
        ++*id;
    }
}

/* The limits of the depthwise fast requantisation: every shift, extreme offsets and biases
 * at the overflow bound, on 1x1 convolutions (accumulator = (x + in_offset) * w + bias). */
static void test_dw_requant_limits(int32_t *id)
{
    const tt_conv_geom g = geom(8, 8, 8, 1, 1, 1, 1, 0, 0, 0, 0);
    tt_q8_requant q;
    int32_t e, v, c;
    for (e = 0; e <= 32; ++e) {
        for (v = 0; v < 4; ++v) {
            fill(xbuf, 8 * 8 * 8);
            fill(wbuf, 8);
            q.in_offset = v % 2 ? 128 : -127;
            q.out_offset = v < 2 ? 127 : -128;
            q.act_min = -128;
            q.act_max = 127;
            for (c = 0; c < 8; ++c) {
                /* biases around 2^30 - |sum|: the fast path's bound */
                const int32_t big = (1 << 30) - 383 * 128 - 4 + rnd(0, 8);
                mult[c] = c % 3 == 0 ? 0x7FFFFFFF : (int32_t)(0x40000000u + (th_rand(&seed) & 0x3FFFFFFFu));
                shift[c] = e == 32 ? rnd(1, 30) : -e;
                bias[c] = c % 4 == 0 ? big : (c % 4 == 1 ? -big : rnd(-(1 << e % 31), 1 << e % 31));
            }
            q.mult = mult;
            q.shift = shift;
            tt_conv2d_s8(yref, xbuf, wbuf, bias, &g, &q);
            tt_conv2d_s8_dw(yopt, xbuf, wbuf, bias, &g, &q);
            check(yref, yopt, 8 * 8 * 8, "dw_requant_limits", (*id)++);
        }
    }
}

static void run_tests(void)
{
    static const uint32_t SEEDS[3] = {12345u, 2463534242u, 88172645u};
    int32_t i, sd, id = 0;
    char s[128];

    for (i = 0; i < N_BENCH_DW; ++i) { /* the networks' geometries, PyTorch padding */
        const int16_t *d = BENCH_DW[i];
        const int32_t p = d[7], k = d[5], st = d[6];
        const int32_t pb = (d[3] - 1) * st + k - d[0] - p, pr = (d[4] - 1) * st + k - d[1] - p;
        const tt_conv_geom g = geom(d[0], d[1], d[2], k, k, st, st, p, p, pb, pr);
        test_dw(&g, i % 3 == 2 ? 1 : 0, 1, id++);
    }
    for (sd = 0; sd < 3; ++sd) { /* random geometries (any kernel size, padding) per seed */
        seed = SEEDS[sd];
        for (i = 0; i < 60; ++i) {
            const int32_t kh = rnd(0, 3) == 0 ? rnd(1, 9) : 2 * rnd(1, 3) + 1;
            const int32_t kw = rnd(0, 3) == 0 ? rnd(1, 9) : (rnd(0, 3) == 0 ? rnd(1, 9) : kh);
            const int32_t h = rnd(1, 13), w = rnd(1, 13), c = rnd(1, 24);
            const int32_t sh = rnd(1, 3), sw = rnd(1, 3);
            const int32_t pt = rnd(0, kh), pl = rnd(0, kw), pb = rnd(0, kh), pr = rnd(0, kw);
            const int32_t style = rnd(0, 2), use_bias = rnd(0, 3) != 0;
            tt_conv_geom g;
            if (h + pt + pb < kh || w + pl + pr < kw) {
                continue;
            }
            g = geom(h, w, c, kh, kw, sh, sw, pt, pl, pb, pr);
            test_dw(&g, style, use_bias, id++);
        }
        for (i = 0; i < 12; ++i) { /* 1x1: acc = (x + off) * w + b, the requantisation */
            const tt_conv_geom g = geom(16, 16, 4 * rnd(1, 4), 1, 1, 1, 1, 0, 0, 0, 0);
            test_dw(&g, i % 2 == 0 ? 2 : 1, 1, id++);
        }
    }
    for (i = 0; i < 30; ++i) { /* 3x3, 5x5, 7x7 stride-1 maps for the ring path: several
                                * column blocks, odd widths, tall maps (rows moved down the
                                * window), every padding up to the kernel's */
        const int32_t k = 3 + 2 * (i % 3), tall = i % 4 == 0;
        const tt_conv_geom g = geom(tall ? rnd(10, 24) : rnd(1, 5),
                                    tall ? rnd(6, 40) : rnd(44, 150),
                                    4 * rnd(1, 2) + rnd(0, 1) * 3, k, k, 1, 1, rnd(0, k),
                                    rnd(0, k), rnd(0, k), rnd(0, k));
        if (g.oh < 1 || g.ow < 1) {
            continue;
        }
        test_dw(&g, i % 3, rnd(0, 3) != 0, id++);
    }
    for (i = 0; i < 48; ++i) { /* small whole maps through the window: 3x3 stride 1 from 4
                                * output columns (4..9 wide, 1..9 tall, pads 0..2, a few
                                * tall enough to move rows down the window) */
        const int32_t pl = rnd(0, 2), pr = rnd(0, 2), pt = rnd(0, 2), pb = rnd(0, 2);
        const int32_t ow = 4 + i % 6, h = i % 8 == 7 ? rnd(18, 30) : rnd(1, 9);
        const tt_conv_geom g = geom(h, ow + 2 - pl - pr, 4 * rnd(1, 3) + rnd(0, 3), 3, 3, 1,
                                    1, pt, pl, pb, pr);
        if (g.oh < 1 || g.w < 1) {
            continue;
        }
        test_dw(&g, i % 3, rnd(0, 3) != 0, id++);
    }
    {   /* the largest kernels the optimised path takes (7x7, 8 rows of 6), and past them */
        const tt_conv_geom g0 = geom(11, 9, 12, 7, 7, 1, 2, 3, 2, 4, 3);
        const tt_conv_geom g1 = geom(10, 10, 8, 8, 6, 1, 1, 3, 4, 4, 3);
        const tt_conv_geom g2 = geom(10, 10, 8, 8, 8, 1, 1, 3, 4, 4, 3);
        const tt_conv_geom g3 = geom(20, 6, 8, 16, 4, 1, 1, 8, 1, 7, 2);
        const tt_conv_geom g4 = geom(12, 12, 8, 9, 9, 2, 1, 4, 4, 4, 4);
        const tt_conv_geom g5 = geom(20, 3, 4, 17, 1, 1, 1, 8, 0, 8, 0);
        test_dw(&g0, 0, 1, id++);
        test_dw(&g1, 0, 1, id++);
        test_dw(&g2, 0, 1, id++);
        test_dw(&g3, 0, 1, id++);
        test_dw(&g4, 1, 1, id++);
        test_dw(&g5, 0, 1, id++);
    }
    test_dw_requant_limits(&id);
    seed = 4242u;
    for (i = 0; i < N_BENCH_DW; ++i) { /* real-data weights on the networks' geometries */
        const int16_t *d = BENCH_DW[i];
        const int32_t p = d[7], k = d[5], st = d[6];
        const int32_t pb = (d[3] - 1) * st + k - d[0] - p, pr = (d[4] - 1) * st + k - d[1] - p;
        const tt_conv_geom g = geom(d[0], d[1], d[2], k, k, st, st, p, p, pb, pr);
        test_dw(&g, 3, 1, id++);
    }
    for (i = 0; i < 60; ++i) { /* and on random ones, the ring path's among them */
        const int32_t k = i % 2 ? 3 + 2 * rnd(0, 2) : rnd(1, 7), st = i % 2 ? 1 : rnd(1, 2);
        const tt_conv_geom g = geom(rnd(k, 20), rnd(k, 60), rnd(1, 24), k, k, st, st,
                                    rnd(0, k / 2), rnd(0, k / 2), rnd(0, k / 2), rnd(0, k / 2));
        if (g.oh < 1 || g.ow < 1) {
            continue;
        }
        test_dw(&g, 3, rnd(0, 5) != 0, id++);
    }
    snprintf(s, sizeof s, "dw: %ld cases\n", (long)id);
    say(s);

    id = 0;
    for (i = 0; i < N_BENCH_ADD; ++i) {
        test_add(BENCH_ADD[i][0], BENCH_ADD[i][1], BENCH_ADD[i][2], 0, id++);
    }
    for (sd = 0; sd < 3; ++sd) {
        seed = SEEDS[sd];
        for (i = 0; i < 20; ++i) {
            const int32_t h = rnd(1, 9), w = rnd(1, 9), c = rnd(1, 21);
            test_add(h, w, c, i % 3, id++);
        }
        for (i = 0; i < 8; ++i) {
            tt_q8_add p;
            random_add_params(&p, i % 3);
            test_add_all_pairs(&p, id++);
        }
    }
    test_add_limits(&id);
    seed = 777u;
    test_add_sweep(&id);
    snprintf(s, sizeof s, "add: %ld cases\n", (long)id);
    say(s);
}

/* ---- microbenchmark (-DTT_DW_BENCH, twins): instructions (SysTick ticks x 40) per MAC or
 * per element of the reference and the optimised kernel ---- */

/* ticks * TH_TICK_CENTI / 100 / n with two decimals (nano printf has no floating point) */
static const char *fmt2(char *buf, uint32_t ticks, uint32_t n)
{
    const uint64_t v = ((uint64_t)ticks * TH_TICK_CENTI + n / 2) / n;
    snprintf(buf, 16, "%3lu.%02lu", (unsigned long)(v / 100), (unsigned long)(v % 100));
    return buf;
}

static void bench_dw_dead(int32_t h, int32_t c, int32_t k, int32_t st, int32_t rows,
                          int32_t dead);

static void bench_dw(int32_t h, int32_t c, int32_t k, int32_t st, int32_t rows)
{
    bench_dw_dead(h, c, k, st, rows, 0);
}

/* dead: channel c / 2 dead (multiplier 0, shift -1, bias INT32_MAX), as real-data weights
 * have them (bench/real_weights.py) */
static void bench_dw_dead(int32_t h, int32_t c, int32_t k, int32_t st, int32_t rows,
                          int32_t dead)
{
    const int32_t p = k / 2;
    const tt_conv_geom g = geom(h, h, c, k, k, st, st, p, p, p, p);
    const uint32_t macs = (uint32_t)(g.oh * g.ow * c * k * k);
    tt_q8_requant q;
    uint32_t t0, tref, topt;
    char s[160], ra[16], rb[16];

    fill(xbuf, h * h * c);
    fill(wbuf, c * k * k);
    random_requant(&q, c, 0);
    /* ReLU6 fused, as in the networks: their ReLU6 outputs are calibrated to the whole int8
     * range (zero point -128), so the activation range clamps nothing beyond SSAT's */
    q.out_offset = -128;
    q.act_min = q.out_offset;
    q.act_max = 127;
    if (dead) {
        mult[c / 2] = 0;
        shift[c / 2] = -1;
        bias[c / 2] = 0x7FFFFFFF;
    }
    t0 = th_ticks();
    tt_conv2d_s8(yref, xbuf, wbuf, bias, &g, &q);
    tref = th_elapsed(t0);
    if (rows == 2) {
        tt_conv2d_s8_dw_pack(pack, wbuf, bias, &g, &q);
    }
    t0 = th_ticks();
    if (rows) {
        const tt_rows xr = {xbuf, g.h, g.w * c}, yr = {yopt, g.oh, g.ow * c};
        int32_t oy;
        for (oy = 0; oy < g.oh; ++oy) {
            tt_conv2d_s8_dw_pk_row(&yr, &xr, oy, wbuf, bias, &g, &q, rows == 2 ? pack : NULL);
        }
    } else {
        tt_conv2d_s8_dw(yopt, xbuf, wbuf, bias, &g, &q);
    }
    topt = th_elapsed(t0);
    check(yref, yopt, g.oh * g.ow * c, "bench", 0);
    snprintf(s, sizeof s, "dw %2ldx%-2ld c%-3ld k%ld s%ld %s%s | ref %s opt %s instr/MAC\n",
             (long)h, (long)h, (long)c, (long)k, (long)st, rows ? (rows == 2 ? "rowp" : "row ") : "full",
             dead ? " dead" : "", fmt2(ra, tref, macs), fmt2(rb, topt, macs));
    say(s);
}

/* bshift: the rescaled input's right shift (LiteRT: 1 or 2 where the inputs' scales are
 * within 4x of each other), 0: random (1..6) */
static void bench_add(int32_t h, int32_t c, int32_t clamp, int32_t bshift)
{
    const int32_t n = h * h * c;
    const int32_t shape[4] = {1, h, h, c}, str[4] = {n, h * c, c, 1};
    tt_q8_add p;
    uint32_t t0, tref, topt;
    char s[160], ra[16], rb[16], tag[16];

    fill(xbuf, 2 * n);
    random_add_params(&p, 0);
    p.a_mult = 1 << 30; /* AddPrepare's: the input of the larger scale is linear */
    p.a_shift = 0;
    if (!clamp) {
        p.act_min = -128;
        p.act_max = 127;
    }
    if (bshift) {
        p.b_shift = -bshift;
    }
    t0 = th_ticks();
    tt_add_s8(yref, xbuf, xbuf + n, shape, str, str, &p);
    tref = th_elapsed(t0);
    t0 = th_ticks();
    tt_add_s8_opt(yopt, xbuf, xbuf + n, n, &p);
    topt = th_elapsed(t0);
    check(yref, yopt, n, "bench", 0);
    tag[0] = '\0';
    if (bshift) {
        snprintf(tag, sizeof tag, " b>>%ld", (long)bshift);
    }
    snprintf(s, sizeof s, "add %2ldx%-2ld c%-3ld %s%s | ref %s opt %s instr/element\n",
             (long)h, (long)h, (long)c, clamp ? "clamp" : "full ", tag,
             fmt2(ra, tref, (uint32_t)n), fmt2(rb, topt, (uint32_t)n));
    say(s);
}

static void run_bench(void)
{
    th_ticks_start();
    bench_dw(64, 16, 3, 1, 0);
    bench_dw(64, 16, 3, 1, 1);
    bench_dw(64, 16, 3, 1, 2);
    bench_dw(32, 48, 3, 1, 0);
    bench_dw(32, 48, 3, 1, 1);
    bench_dw(32, 48, 3, 1, 2);
    bench_dw(64, 48, 3, 2, 0);
    bench_dw(64, 48, 3, 2, 1);
    bench_dw(64, 48, 3, 2, 2);
    bench_dw(32, 48, 3, 2, 2);
    bench_dw(16, 96, 3, 1, 1);
    bench_dw(16, 96, 3, 1, 2);
    bench_dw(16, 96, 3, 1, 0);
    bench_dw(8, 144, 3, 1, 0);
    bench_dw(4, 576, 3, 1, 0);
    bench_dw(16, 48, 5, 1, 0);
    bench_dw(64, 24, 5, 2, 0);
    bench_dw(8, 144, 5, 1, 0);
    bench_dw(4, 384, 5, 1, 0);
    bench_dw(32, 48, 7, 2, 0);
    bench_dw(8, 160, 7, 1, 0);
    bench_dw(4, 384, 7, 1, 0);
    bench_dw(64, 24, 5, 2, 2);
    bench_dw(32, 48, 7, 2, 2);
    bench_dw(16, 48, 5, 1, 2);
    bench_dw(32, 24, 5, 1, 2);
    bench_dw(8, 144, 5, 1, 2);
    bench_dw(16, 48, 7, 1, 0);
    bench_dw(16, 48, 7, 1, 2);
    bench_dw(8, 96, 7, 1, 0);
    bench_dw(16, 96, 7, 1, 2);
    /* one dead channel: the same instructions as without it (ring, strip, clipped paths) */
    bench_dw_dead(32, 48, 3, 1, 0, 1);
    bench_dw_dead(32, 48, 3, 1, 1, 1);
    bench_dw_dead(32, 48, 3, 1, 2, 1);
    bench_dw_dead(64, 48, 3, 2, 1, 1);
    bench_dw_dead(16, 48, 5, 1, 2, 1);
    bench_dw_dead(32, 48, 7, 2, 0, 1);
    bench_add(32, 16, 0, 0);
    bench_add(32, 16, 1, 0);
    bench_add(8, 48, 0, 0);
    bench_add(4, 96, 0, 0);
    bench_add(16, 24, 0, 1);
    bench_add(16, 24, 1, 1);
    bench_add(16, 24, 0, 5);
}

#ifdef TT_DW_BENCH
#define DW_BENCH 1
#else
#define DW_BENCH 0
#endif

int main(void)
{
    if (DW_BENCH) {
        run_bench();
    } else {
        run_tests();
    }
    {
        char s[64];
        snprintf(s, sizeof s, "dw_opt: %d failures\n", failures);
        say(s);
    }
    th_exit(failures == 0 ? 0 : 1);
    return 0;
}
