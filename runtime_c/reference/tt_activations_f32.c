/*
 * Elementwise activation reference kernels.
 *
 * Gradient edge conventions follow PyTorch exactly (checked against
 * torch 2.x autograd):
 *   - clip (relu, relu6, hardtanh): gradient passes only where lo < x < hi,
 *     so relu'(0) = 0 and relu6'(6) = 0;
 *   - leaky_relu: slope 1 where x > 0, alpha where x <= 0 (alpha at x == 0);
 *   - hard_sigmoid: slope alpha only strictly inside 0 < alpha*x + beta < 1
 *     (-3 < x < 3 for PyTorch's hardsigmoid);
 *   - hard_swish: 0 for x <= -3, 1 for x >= 3, x/3 + 1/2 strictly between.
 */
#include "tt_reference.h"

#include <math.h>
#include <stdint.h>

void tt_clip_f32(float *y, const float *x, int32_t n, float lo, float hi)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = (v < lo) ? lo : ((v > hi) ? hi : v);
    }
}

void tt_clip_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                          float lo, float hi)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        /* strict on both sides, like PyTorch's relu/hardtanh backward */
        dx[i] = (x[i] > lo && x[i] < hi) ? dy[i] : 0.0f;
    }
}

void tt_leaky_relu_f32(float *y, const float *x, int32_t n, float alpha)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] = (x[i] > 0.0f) ? x[i] : x[i] * alpha;
    }
}

void tt_leaky_relu_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                                float alpha)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        /* x == 0 takes the negative slope, as in PyTorch */
        dx[i] = (x[i] > 0.0f) ? dy[i] : dy[i] * alpha;
    }
}

void tt_sigmoid_f32(float *y, const float *x, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        /* expf(-x) overflows to +inf for very negative x, giving exactly 0 */
        y[i] = 1.0f / (1.0f + tt_expf(-x[i]));
    }
}

void tt_sigmoid_backward_f32(float *dx, const float *dy, const float *y, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dx[i] = dy[i] * y[i] * (1.0f - y[i]);
    }
}

void tt_tanh_f32(float *y, const float *x, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] = tanhf(x[i]);
    }
}

void tt_tanh_backward_f32(float *dx, const float *dy, const float *y, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
}

void tt_hard_sigmoid_f32(float *y, const float *x, int32_t n, float alpha, float beta)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        const float t = alpha * x[i] + beta;
        y[i] = (t < 0.0f) ? 0.0f : ((t > 1.0f) ? 1.0f : t);
    }
}

void tt_hard_sigmoid_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                                  float alpha, float beta)
{
    /* The linear region 0 < alpha*x + beta < 1, as bounds on x.  Testing
     * alpha*x + beta itself would round to 0 or 1 for x one ulp inside the
     * edges; the x bounds are exact for PyTorch's alpha = 1/6, beta = 1/2,
     * i.e. -3 < x < 3 (strict, zero gradient at the edges). */
    float lo = 0.0f;
    float hi = 0.0f; /* alpha == 0: constant output, no gradient */
    int32_t i;

    if (alpha > 0.0f) {
        lo = -beta / alpha;
        hi = (1.0f - beta) / alpha;
    } else if (alpha < 0.0f) {
        lo = (1.0f - beta) / alpha;
        hi = -beta / alpha;
    }
    for (i = 0; i < n; ++i) {
        dx[i] = (x[i] > lo && x[i] < hi) ? dy[i] * alpha : 0.0f;
    }
}

void tt_hard_swish_f32(float *y, const float *x, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        /* same operation order as PyTorch: x * clamp(x + 3, 0, 6) / 6 */
        const float v = x[i];
        float r = v + 3.0f;
        r = (r < 0.0f) ? 0.0f : ((r > 6.0f) ? 6.0f : r);
        y[i] = v * r / 6.0f;
    }
}

void tt_hard_swish_backward_f32(float *dx, const float *dy, const float *x, int32_t n)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        const float v = x[i];
        if (v <= -3.0f) {
            dx[i] = 0.0f;           /* flat zero region, including x == -3 */
        } else if (v >= 3.0f) {
            dx[i] = dy[i];          /* identity region, including x == 3 */
        } else {
            dx[i] = dy[i] * (v / 3.0f + 0.5f);
        }
    }
}
