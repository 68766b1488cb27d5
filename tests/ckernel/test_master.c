/* --rounding master's kernels (runtime_c/reference/tt_q8_master.c and the optimised
 * tt_q8_conv_opt.c) on the cases that tests/test_q8_master.py writes to master_cases.h next
 * to this file (a copy of it in the test's directory): the int8 forward, reference and
 * optimised, against numpy's outputs bit for bit; the input gradient against numpy's float64
 * one (the largest error is printed for Python to judge); both with all-zero shadows against
 * the plain int8 kernels bit for bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

typedef struct {
    const char *name;
    int dense; /* 1: tt_dense_s8 (in = g.cin, out = g.cout) */
    tt_conv_geom g;
    tt_q8_requant q;
    const int8_t *x, *w;
    const uint8_t *s;
    const int32_t *b;
    const int8_t *y;   /* numpy's forward with the master */
    const float *dy;
    const float *dx;   /* numpy's input gradient with the master (float64, rounded) */
} master_case;

#include "master_cases.h" /* CASES[], N_CASES, MAX_Y, MAX_X, MAX_W */

static int8_t y_out[MAX_Y], y_ref[MAX_Y];
static float dx_out[MAX_X], dx_ref[MAX_X];
static uint8_t zeros[MAX_W];

static void forward(const master_case *c, const uint8_t *s, int8_t *y)
{
    if (c->dense) {
        tt_dense_s8_master(y, c->x, c->w, s, c->b, c->g.cin, c->g.cout, &c->q);
    } else {
        tt_conv2d_s8_master(y, c->x, c->w, s, c->b, &c->g, &c->q);
    }
}

static void forward_opt(const master_case *c, int8_t *y)
{
    if (c->dense) {
        tt_dense_s8_master_opt(y, c->x, c->w, c->s, c->b, c->g.cin, c->g.cout, &c->q);
    } else {
        tt_conv2d_s8_master_opt(y, c->x, c->w, c->s, c->b, &c->g, &c->q);
    }
}

static void backward(const master_case *c, const uint8_t *s, float *dx)
{
    static float scale[MAX_Y];
    int32_t i;

    for (i = 0; i < c->g.cout; ++i) {
        scale[i] = 0.0078125f * (float)(i + 1); /* the test's w_scale: (i + 1) / 128 */
    }
    if (c->dense) {
        tt_dense_backward_input_s8_master(dx, c->dy, c->w, s, scale, c->g.cin, c->g.cout);
    } else {
        tt_conv2d_backward_input_s8_master(dx, c->dy, c->w, s, scale, &c->g);
    }
}

static void plain_backward(const master_case *c, float *dx)
{
    static float scale[MAX_Y];
    int32_t i;

    for (i = 0; i < c->g.cout; ++i) {
        scale[i] = 0.0078125f * (float)(i + 1);
    }
    if (c->dense) {
        tt_dense_backward_input_s8(dx, c->dy, c->w, scale, c->g.cin, c->g.cout);
    } else {
        tt_conv2d_backward_input_s8(dx, c->dy, c->w, scale, &c->g);
    }
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

int main(void)
{
    char line[160];
    int32_t k, i;

    for (k = 0; k < N_CASES; ++k) {
        const master_case *c = &CASES[k];
        const int32_t ny = c->dense ? c->g.cout : c->g.oh * c->g.ow * c->g.cout;
        const int32_t nx = c->dense ? c->g.cin : c->g.h * c->g.w * c->g.cin;
        int32_t fwd = 0, zero = 0, bwd_zero = 0;
        float err = 0.0f, top = 0.0f;

        forward(c, c->s, y_out);
        forward_opt(c, y_ref);
        for (i = 0; i < ny; ++i) {
            fwd += (y_out[i] != c->y[i]) + (y_ref[i] != c->y[i]);
        }
        forward(c, zeros, y_out); /* a zero shadow reads exactly the int8 weight */
        if (c->dense) {
            tt_dense_s8(y_ref, c->x, c->w, c->b, c->g.cin, c->g.cout, &c->q);
        } else {
            tt_conv2d_s8(y_ref, c->x, c->w, c->b, &c->g, &c->q);
        }
        zero = memcmp(y_out, y_ref, (size_t)ny) != 0;
        backward(c, c->s, dx_out);
        for (i = 0; i < nx; ++i) {
            const float d = fabsf(dx_out[i] - c->dx[i]);
            err = d > err ? d : err;
            top = fabsf(c->dx[i]) > top ? fabsf(c->dx[i]) : top;
        }
        backward(c, zeros, dx_out);
        plain_backward(c, dx_ref);
        bwd_zero = memcmp(dx_out, dx_ref, (size_t)nx * sizeof(float)) != 0;
        /* floats as their bits: newlib-nano's printf has no %e */
        snprintf(line, sizeof line, "case %s fwd %ld zero %ld bwd_zero %ld err %08lx top %08lx\n",
                 c->name, (long)fwd, (long)zero, (long)bwd_zero, (unsigned long)bits(err),
                 (unsigned long)bits(top));
        th_puts(line);
    }
    th_puts("done\n");
    th_exit(0);
    return 0;
}
