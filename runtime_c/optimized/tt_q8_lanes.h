/* Four int8 lanes of one word, shared by the optimised int8 kernels (tt_q8_conv_opt.c,
 * tt_q8_dw_opt.c). */
#ifndef TT_Q8_LANES_H
#define TT_Q8_LANES_H

#include <stdint.h>

/* M(e) for each right shift e = 1..22 of the fast requantisation (SMMLAR then ASR; the
 * kernels' fast path takes no other): loops whose shift is one value are instantiated per
 * shift with it as SSAT's immediate, inside a switch on e */
#define TT_Q8_EACH_SHIFT(M)                                                                \
    M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)     \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22)

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
