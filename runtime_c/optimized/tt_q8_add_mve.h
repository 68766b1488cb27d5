/* Helium (MVE) kernel for the int8 residual add (tt_add_s8_opt / tt_add_s8_row_opt of
 * tt_q8_dw_opt.c call it): declarations. Compiled only where the core has MVE's integer lanes
 * (TT_MVE, tt_mve.h); elsewhere the DSP-extension loops of tt_q8_dw_opt.c run. Bit-identical
 * with tt_add_s8 for every input and every parameter set it takes. */
#ifndef TT_Q8_ADD_MVE_H
#define TT_Q8_ADD_MVE_H

#include <stdint.h>

#include "tt_mve.h"
#include "tt_reference.h"

#if TT_MVE
/* y = a + b over n elements under p, as tt_add_s8 on same-shape contiguous tensors. Takes
 * left_shift 20, input offsets in [-255, 255], input rescales linear (2^30, 0) or a multiplier
 * >= 0 with a right shift of 1..31, an output multiplier >= 0 with a right shift of 1..31, an
 * int8 output offset and an activation range inside int8; returns 0 without writing anything
 * for any other p. Sixteen elements a block (3.2 instructions an element with LiteRT's
 * constants, one input linear). */
int tt_q8_add_mve(int8_t *y, const int8_t *a, const int8_t *b, int32_t n, const tt_q8_add *p);
#endif

#endif /* TT_Q8_ADD_MVE_H */
