/* Helium (MVE) channel mask of the fp32 backward: declaration. Compiled only where the core
 * has MVE's float lanes (TT_MVE_F32, tt_mve.h); tt_cs_mask_opt (tt_f32_bwd_opt.c) calls it
 * there, and runs its DSP / C loops (the same bits) elsewhere. */
#ifndef TT_F32_MASK_MVE_H
#define TT_F32_MASK_MVE_H

#include <stdint.h>

#include "tt_mve.h"

#if TT_MVE_F32
/* tt_cs_mask_opt for ch a multiple of 8 (the same arguments, so that it can jump here):
 * out[p] = in[p] where bit c % 8 of mask byte p * ch / 8 + c / 8 is set, else +0, p < n.
 * out may be in: each element is read before it is written. */
void tt_cs_mask_mve(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                    int32_t c);
#endif

#endif /* TT_F32_MASK_MVE_H */
