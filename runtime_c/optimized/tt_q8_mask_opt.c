/*
 * Optimised 1-bit masks of int8 outputs (tt_kernels_opt.h): tt_q8_clamp_mask's bits, built a
 * byte at a time instead of read-modify-write per element. On cores with the DSP extension
 * four int8 values are compared at once: SSUB8 sets a GE flag per byte where the difference is
 * >= 0, SEL turns the flags into 0xFF/0x00 bytes, and one multiply gathers the four bits.
 */
#include "tt_kernels.h"

#include <stdint.h>
#include <string.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>

/* bit i of the result = lo < byte i of v < hi (signed); lo1 = lo + 1, hi1 = hi - 1 in every
 * byte lane */
static inline uint32_t mask4(uint32_t v, uint32_t lo1, uint32_t hi1)
{
    uint32_t above, below;
    (void)__ssub8(v, lo1); /* GE: v - (lo + 1) >= 0 */
    above = __sel(0xFFFFFFFFu, 0u);
    (void)__ssub8(hi1, v); /* GE: (hi - 1) - v >= 0 */
    below = __sel(0xFFFFFFFFu, 0u);
    /* one bit per byte lane, then the four summed into the top byte (no carries) */
    return ((above & below & 0x08040201u) * 0x01010101u) >> 24;
}
#endif

static inline uint32_t inside(int8_t v, int32_t lo, int32_t hi)
{
    return ((int32_t)v > lo && (int32_t)v < hi) ? 1u : 0u;
}

void tt_q8_clamp_mask_opt(uint8_t *mask, const int8_t *y, int32_t n, int32_t lo, int32_t hi)
{
    int32_t i = 0, j;

#if defined(__ARM_FEATURE_DSP)
    if (lo >= -128 && hi <= 127 && lo < hi) { /* lanes hold lo + 1 and hi - 1 as int8 */
        const uint32_t lo1 = 0x01010101u * (uint8_t)(int8_t)(lo + 1);
        const uint32_t hi1 = 0x01010101u * (uint8_t)(int8_t)(hi - 1);
        for (; i + 8 <= n; i += 8) {
            uint32_t a, b;
            memcpy(&a, y + i, 4);
            memcpy(&b, y + i + 4, 4);
            mask[i >> 3] = (uint8_t)(mask4(a, lo1, hi1) | (mask4(b, lo1, hi1) << 4));
        }
    }
#endif
    for (; i + 8 <= n; i += 8) {
        uint32_t m = 0;
        for (j = 0; j < 8; ++j) {
            m |= inside(y[i + j], lo, hi) << j;
        }
        mask[i >> 3] = (uint8_t)m;
    }
    if (i < n) { /* the last partial byte: its unused high bits are 0, as the reference's */
        uint32_t m = 0;
        for (j = 0; i + j < n; ++j) {
            m |= inside(y[i + j], lo, hi) << j;
        }
        mask[i >> 3] = (uint8_t)m;
    }
}
