/*
 * Adam step (Kingma & Ba 2015) with PyTorch's semantics (torch.optim.Adam: L2 weight decay
 * added to the gradient, no amsgrad), over a parameter's trained elements:
 *
 *     g' = g * grad_scale + wd * p [+ mu * p + b]     (the bracket: a fleet's correction)
 *     m += (1 - beta1) * (g' - m);   v = beta2 * v + (1 - beta2) * g'^2
 *     p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * then g = 0 for the next accumulation. t >= 1 is the step's number (the model's Adam step
 * counter, which tt_adam_tick() advances before a step's updates); m and v start at zero, as
 * PyTorch's. The walk over trained elements is the fleet correction's (tt_fleet.c): g, m, v,
 * b and gsum hold the trained elements in the order the link hands them out.
 *
 * A fleet build (tinytrain/passes/fleet_correction.py) passes b and mu, which enter the
 * gradient ahead of the moments: SCAFFOLD's correction must be scaled by Adam as the gradient
 * is, not added after the step. gsum then sums g * grad_scale + wd * p, the device's own
 * gradient, over a round: SCAFFOLD's c_i is its mean (tinytrain/fleet/correction.py).
 */
#include "tt_reference.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

void tt_adam_tick(int32_t *t)
{
    /* saturates: a written state may hold any value, and beta^t is 0 from far below this */
    if (t[0] < 0) {
        t[0] = 0;
    }
    if (t[0] < INT32_MAX) {
        t[0] += 1;
    }
}

/* beta^t by squaring, in float: the same multiplications as the NumPy reference's
 * (ops/adam.py), in log2(t) steps, and no powf to link */
static float tt_pow_step(float beta, int32_t t)
{
    float r = 1.0f;

    while (t > 0) {
        if (t & 1) {
            r *= beta;
        }
        beta *= beta;
        t >>= 1;
    }
    return r;
}

void tt_adam_f32(float *p, float *g, float *m, float *v, int32_t outer, int32_t n_ch,
                 int32_t inner, const int32_t *idx, int32_t k, const tt_adam_hyper *h,
                 int32_t t, const float *b, float mu, float *gsum)
{
    const int32_t n = t < 1 ? 1 : t;
    const float step = h->lr / (1.0f - tt_pow_step(h->beta1, n));
    const float bc2_sqrt = sqrtf(1.0f - tt_pow_step(h->beta2, n));
    int32_t o, j, i, e = 0;

    for (o = 0; o < outer; ++o) {
        for (j = 0; j < k; ++j) {
            float *row = p + tt_walk_row(o, n_ch, inner, idx, j);
            for (i = 0; i < inner; ++i, ++e) {
                float gi = g[e] * h->grad_scale + h->wd * row[i];
                if (gsum != NULL) {
                    gsum[e] += gi;
                }
                if (b != NULL) {
                    gi += mu * row[i] + b[e];
                }
                m[e] += (1.0f - h->beta1) * (gi - m[e]);
                v[e] = h->beta2 * v[e] + (1.0f - h->beta2) * (gi * gi);
                row[i] -= step * (m[e] / (sqrtf(v[e]) / bc2_sqrt + h->eps));
                g[e] = 0.0f; /* ready for the next batch's accumulation */
            }
        }
    }
}
