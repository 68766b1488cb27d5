/*
 * Fleet drift correction (SCAFFOLD, FedProx), run once per optimizer step after the step's
 * own updates (tinytrain/passes/fleet_correction.py):
 *
 *     p[e] -= lr * (mu * p[e] + b[e])          for every trained element e
 *
 * in the parameter's own units (values for fp32, codes for int8 weights and int32 biases).
 * The fleet's client writes b and mu through the state table before each round: SCAFFOLD's
 * b = c - c_i, FedProx's b = -mu * w_global; b = 0 and mu = 0 leave every parameter as it is.
 *
 * b holds the trained elements in the order the link hands them out (numpy's take of the
 * trained channels along their axis): element (o, j, i) of an outer x k x inner walk is
 * p[(o * n_ch + channel j) * inner + i]. Trained input channels of a weight are outer = rows,
 * n_ch = its input channels, inner = 1; the rows of a depthwise weight are outer = 1, n_ch =
 * its channels, inner = a row; a whole (or packed) tensor is outer = n_ch = k = 1.
 */
#include "tt_reference.h"

#include <stddef.h>
#include <stdint.h>

void tt_fleet_correct_f32(float *p, const float *b, int32_t outer, int32_t n_ch, int32_t inner,
                          const int32_t *idx, int32_t k, float lr, float mu)
{
    int32_t o, j, i, e = 0;

    for (o = 0; o < outer; ++o) {
        for (j = 0; j < k; ++j) {
            float *row = p + tt_walk_row(o, n_ch, inner, idx, j);
            for (i = 0; i < inner; ++i, ++e) {
                const float t = mu * row[i] + b[e];
                row[i] = row[i] - lr * t;
            }
        }
    }
}

/* int8: the step lr * (mu * q + b) in LSBs, rounded as the build's updates round (u: its
 * mode, the rounding stream's salt and step); e is the stochastic rounding's element index
 * and the shadow byte's (shaped like the trained slice) */
void tt_fleet_correct_s8(int8_t *p, uint8_t *shadow, const float *b, int32_t outer,
                         int32_t n_ch, int32_t inner, const int32_t *idx, int32_t k, float lr,
                         float mu, const tt_q8_update *u)
{
    int32_t o, j, i, e = 0;

    for (o = 0; o < outer; ++o) {
        for (j = 0; j < k; ++j) {
            int8_t *row = p + tt_walk_row(o, n_ch, inner, idx, j);
            for (i = 0; i < inner; ++i, ++e) {
                const float t = mu * (float)row[i] + b[e];
                row[i] = tt_q8_step_s8(row[i], shadow != NULL ? &shadow[e] : NULL, lr * t, u,
                                       (uint32_t)e);
            }
        }
    }
}

/* int32 biases: the same, rounded as the build's bias updates round */
void tt_fleet_correct_s32(int32_t *p, const float *b, int32_t outer, int32_t n_ch,
                          int32_t inner, const int32_t *idx, int32_t k, float lr, float mu,
                          const tt_q8_update *u)
{
    int32_t o, j, i, e = 0;

    for (o = 0; o < outer; ++o) {
        for (j = 0; j < k; ++j) {
            int32_t *row = p + tt_walk_row(o, n_ch, inner, idx, j);
            for (i = 0; i < inner; ++i, ++e) {
                const float t = mu * (float)row[i] + b[e];
                row[i] = tt_q8_step_s32(row[i], lr * t, u, (uint32_t)e);
            }
        }
    }
}
