/* Four int8 lanes of one word, shared by the optimised int8 kernels (tt_q8_conv_opt.c,
 * tt_q8_dw_opt.c). */
#ifndef TT_Q8_LANES_H
#define TT_Q8_LANES_H

#include <stdint.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>

/* per signed byte: min(max(v, lo), hi), as two SSUB8 / SEL pairs */
static inline uint32_t tt_clamp4_s8(uint32_t v, uint32_t lo, uint32_t hi)
{
    (void)__ssub8((int32_t)v, (int32_t)lo);
    v = __sel(v, lo);
    (void)__ssub8((int32_t)hi, (int32_t)v);
    return __sel(v, hi);
}
#else
static inline uint32_t tt_clamp4_s8(uint32_t v, uint32_t lo, uint32_t hi)
{
    uint32_t out = 0;
    int32_t k;
    for (k = 0; k < 32; k += 8) {
        const int32_t x = (int8_t)(uint8_t)(v >> k), l = (int8_t)(uint8_t)(lo >> k);
        const int32_t h = (int8_t)(uint8_t)(hi >> k);
        out |= ((uint32_t)(x < l ? l : x > h ? h : x) & 0xFFu) << k;
    }
    return out;
}
#endif

#endif /* TT_Q8_LANES_H */
