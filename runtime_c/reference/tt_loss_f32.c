/*
 * Softmax, log-softmax and loss heads.  All softmaxes subtract the maximum
 * first so expf never overflows.
 */
#include "tt_reference.h"

#include <math.h>
#include <stdint.h>

static float max_of(const float *x, int32_t n)
{
    float m = x[0];
    int32_t i;

    for (i = 1; i < n; ++i) {
        if (x[i] > m) {
            m = x[i];
        }
    }
    return m;
}

void tt_softmax_f32(float *y, const float *x, int32_t n)
{
    const float m = max_of(x, n);
    float sum = 0.0f;
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] = tt_expf(x[i] - m);
        sum += y[i];
    }
    for (i = 0; i < n; ++i) {
        y[i] /= sum;
    }
}

void tt_log_softmax_f32(float *y, const float *x, int32_t n)
{
    const float m = max_of(x, n);
    float sum = 0.0f;
    float lse;
    int32_t i;

    for (i = 0; i < n; ++i) {
        sum += tt_expf(x[i] - m);
    }
    lse = tt_logf(sum);
    for (i = 0; i < n; ++i) {
        y[i] = (x[i] - m) - lse;
    }
}

float tt_softmax_ce_f32(float *dlogits, const float *logits, int32_t n, int32_t label,
                        float scale, int32_t *pred)
{
    const float m = max_of(logits, n);
    float sum = 0.0f;
    int32_t i;
    int32_t arg = 0;

    for (i = 0; i < n; ++i) {
        sum += tt_expf(logits[i] - m);
        if (logits[i] > logits[arg]) {
            arg = i; /* strict '>' keeps the first maximum */
        }
    }
    for (i = 0; i < n; ++i) {
        const float p = tt_expf(logits[i] - m) / sum;
        dlogits[i] = scale * (p - ((i == label) ? 1.0f : 0.0f));
    }
    *pred = arg;
    /* -log_softmax[label] = logsumexp - logit[label], both shifted by m */
    return tt_logf(sum) - (logits[label] - m);
}

/* FedRS's restricted softmax (a fleet's devices that lack some classes, passes/
 * fleet_correction.py): softmax cross-entropy on z[i] = (1 - damp[i]) * logits[i], so the
 * classes a device has no samples of are damped and dlogits[i] = (1 - damp[i]) * scale *
 * (p[i] - [i == label]). pred stays the argmax of the logits themselves. damp all zero is
 * tt_softmax_ce_f32's arithmetic (z = logits exactly). */
float tt_softmax_ce_damped_f32(float *dlogits, const float *logits, int32_t n, int32_t label,
                               float scale, int32_t *pred, const float *damp)
{
    float m = (1.0f - damp[0]) * logits[0];
    float sum = 0.0f;
    int32_t i;
    int32_t arg = 0;

    for (i = 1; i < n; ++i) {
        const float z = (1.0f - damp[i]) * logits[i];
        if (z > m) {
            m = z;
        }
    }
    for (i = 0; i < n; ++i) {
        sum += tt_expf((1.0f - damp[i]) * logits[i] - m);
        if (logits[i] > logits[arg]) {
            arg = i;
        }
    }
    for (i = 0; i < n; ++i) {
        const float k = 1.0f - damp[i];
        const float p = tt_expf(k * logits[i] - m) / sum;
        dlogits[i] = k * (scale * (p - ((i == label) ? 1.0f : 0.0f)));
    }
    *pred = arg;
    return tt_logf(sum) - ((1.0f - damp[label]) * logits[label] - m);
}

float tt_mse_f32(float *dy, const float *y, const float *target, int32_t n, float scale)
{
    const float nf = (float)n;
    float acc = 0.0f;
    int32_t i;

    for (i = 0; i < n; ++i) {
        const float d = y[i] - target[i];
        acc += d * d;
        dy[i] = scale * 2.0f * d / nf;
    }
    return acc / nf;
}
