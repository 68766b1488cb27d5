/*
 * Dense (fully connected) reference kernels.
 * w is (out, in) row-major: y[o] = sum_i w[o*in + i] * x[i] + b[o].
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

/* b may be NULL (dense without bias). */
void tt_dense_f32(float *y, const float *x, const float *w, const float *b,
                  int32_t in, int32_t out)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        const float *wr = w + o * in;
        float acc = (b != NULL) ? b[o] : 0.0f;
        for (i = 0; i < in; ++i) {
            acc += wr[i] * x[i];
        }
        y[o] = acc;
    }
}

/* dx = w^T dy (overwrites dx). */
void tt_dense_backward_input_f32(float *dx, const float *dy, const float *w,
                                 int32_t in, int32_t out)
{
    int32_t o, i;

    for (i = 0; i < in; ++i) {
        float acc = 0.0f;
        for (o = 0; o < out; ++o) {
            acc += dy[o] * w[o * in + i];
        }
        dx[i] = acc;
    }
}

/* dw += dy x^T (accumulates across the samples of a batch). */
void tt_dense_backward_weight_f32(float *dw, const float *dy, const float *x,
                                  int32_t in, int32_t out)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        float *dwr = dw + o * in;
        const float d = dy[o];
        for (i = 0; i < in; ++i) {
            dwr[i] += d * x[i];
        }
    }
}
