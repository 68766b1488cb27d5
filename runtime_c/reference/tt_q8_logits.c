/*
 * The real-valued logits the training loss reads from an int8 classifier
 * (tinytrain/ops/dense_logits_q8.py): the head's accumulators scaled to reals, without the
 * requantisation to 8 bits that the model's inference output goes through.
 *
 * y[o] = (float)acc[o] * scale[o], acc = sum (x + in_offset) * w + b. With a shadow (--rounding
 * master) the weight is the 16-bit master 256 w + s, the bias counts 256 times, the sum is
 * int64 (as tt_dense_s8_master's) and scale[o] carries the 1/256. The int -> float conversion
 * rounds to nearest, as numpy's astype(float32) does.
 */
#include "tt_reference.h"

#include <stdint.h>

void tt_dense_s8_logits(float *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                        const int32_t *b, int32_t in, int32_t out, int32_t in_offset,
                        const float *scale)
{
    int32_t o, i;

    for (o = 0; o < out; ++o) {
        const int8_t *wr = &w[o * in];
        if (shadow == NULL) {
            int32_t acc = b != NULL ? b[o] : 0;
            for (i = 0; i < in; ++i) {
                acc += ((int32_t)x[i] + in_offset) * (int32_t)wr[i];
            }
            y[o] = (float)acc * scale[o];
        } else {
            const uint8_t *sr = &shadow[o * in];
            int64_t acc = b != NULL ? (int64_t)b[o] * 256 : 0;
            for (i = 0; i < in; ++i) {
                acc += (int64_t)(((int32_t)x[i] + in_offset) *
                                 ((int32_t)wr[i] * 256 + (int32_t)sr[i]));
            }
            y[o] = (float)acc * scale[o];
        }
    }
}
