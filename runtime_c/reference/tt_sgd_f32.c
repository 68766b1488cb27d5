/*
 * SGD step with PyTorch semantics (no dampening, no Nesterov):
 *   g' = g*grad_scale + wd*p;  m = momentum*m + g' (if m != NULL);
 *   p -= lr * (m or g');  then g = 0 for the next accumulation.
 * grad_scale typically is 1/batch to turn the accumulated sum into a mean.
 * With m zero-initialised the first step gives m = g', matching PyTorch's
 * buffer initialisation.
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

void tt_sgd_f32(float *p, float *g, float *m, int32_t n, float lr, float momentum,
                float wd, float grad_scale)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        p[i] = tt_sgd_elem(p[i], g[i] * grad_scale, m != NULL ? &m[i] : NULL, lr, momentum, wd);
        g[i] = 0.0f; /* ready for the next batch's accumulation */
    }
}
