/*
 * Optimised 1-bit masks (tt_kernels_opt.h).
 * Building one, tt_q8_clamp_mask: the bits of int8 outputs, a byte at a time instead of
 * read-modify-write per element. On cores with the DSP extension four int8 values are compared
 * at once: USUB8 sets a GE flag per byte (see pick4), SEL turns the flags into the element's
 * bit, and one multiply gathers a mask byte's eight bits.
 * Applying one, tt_mask_backward_f32: a mask byte's eight floats at a time, each moved as an
 * integer ANDed with its bit widened to a word (the float's bits, or +0's all-zero bits), so
 * every value, NaN payloads included, comes out as the reference's assignment stores it.
 */
#include "tt_kernels.h"
#include "tt_mve.h"

#include <stdint.h>
#include <string.h>

#if TT_MVE
#include <arm_mve.h>
#endif

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>

/* each byte of v: lo < byte < hi as (byte - (lo + 1)) mod 256 < hi - lo - 1 (the bytes
 * below lo + 1 wrap to 256 - ..., past every inside value). USUB8 sets a GE flag where
 * t >= rng (outside); SEL then keeps the byte of `out` there and takes the byte of `in`
 * elsewhere. lo1 = lo + 1, rng = hi - lo - 1 in every byte lane. */
static inline uint32_t pick4(uint32_t v, uint32_t lo1, uint32_t rng, uint32_t out, uint32_t in)
{
    (void)__usub8(__usub8(v, lo1), rng);
    return __sel(out, in);
}
#endif

static inline uint32_t inside(int8_t v, int32_t lo, int32_t hi)
{
    return ((int32_t)v > lo && (int32_t)v < hi) ? 1u : 0u;
}

void tt_q8_clamp_mask_opt(uint8_t *mask, const int8_t *y, int32_t n, int32_t lo, int32_t hi)
{
    int32_t i = 0, j;

#if TT_MVE
    if (lo >= -128 && lo <= 127 && hi >= -128 && hi <= 127) { /* both int8 lanes */
        /* Helium: sixteen bytes compared a VPT block, whose predicate is the sixteen bits
         * of the mask in element order (bit j of a lane pair's byte: element j) */
        for (; i + 16 <= n; i += 16) {
            const int8x16_t v = vldrbq_s8(y + i);
            const mve_pred16_t p = vcmpltq_m_n_s8(v, (int8_t)hi, vcmpgtq_n_s8(v, (int8_t)lo));
            memcpy(mask + (i >> 3), &p, 2);
        }
    }
#endif
#if defined(__ARM_FEATURE_DSP)
    if (lo >= -128 && hi <= 127 && lo < hi) { /* lanes: lo + 1 as int8, hi - lo - 1 <= 254 */
        const uint32_t lo1 = 0x01010101u * (uint8_t)(int8_t)(lo + 1);
        const uint32_t rng = 0x01010101u * (uint32_t)(hi - lo - 1); /* 0 .. 254 */
        const int8_t *yp = y + i, *const ye = y + (n & ~7); /* from the Helium blocks' end */
        uint32_t ones = 0x01010101u, k0 = 0x08040201u, k1 = 0x80402010u;
        uint8_t *m = mask + (i >> 3);
        /* in registers: one MUL below, not GCC's two shifted adds; no literal loads */
        __asm__("" : "+r"(ones), "+r"(k0), "+r"(k1));
        for (; yp < ye; yp += 8) {
            uint32_t a, b;
            memcpy(&a, yp, 4);
            memcpy(&b, yp + 4, 4);
            /* bit j of byte j (element j), then bit 4 + j (element 4 + j); one multiply
             * adds the four bytes' disjoint bits into the top byte */
            a = pick4(a, lo1, rng, 0u, k0);
            a = pick4(b, lo1, rng, a, a | k1);
            *m++ = (uint8_t)((a * ones) >> 24);
        }
        i = n & ~7;
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

/* ---- applying a mask: dx[i] = dy[i] where bit i is set, else +0 (dx is dy or disjoint) */

#if defined(__thumb2__) && (defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_7M__) || \
                             defined(__ARM_ARCH_8M_MAIN__))
/* the whole bytes of mask[0 .. nb): per byte LDM four floats, SBFX + AND each, STM, twice
 * (25 instructions per 8 elements); a full byte copies them, or in place leaves them. */
void ttm_mask8(float *dx, const float *dy, const uint8_t *mask, int32_t nb);
#define TTM_HALF(b0, b1, b2, b3)                                                           \
    "  ldmia r1!, {r4, r5, r6, r7}\n"                                                       \
    "  sbfx lr, ip, #" #b0 ", #1\n  and r4, r4, lr\n"                                      \
    "  sbfx lr, ip, #" #b1 ", #1\n  and r5, r5, lr\n"                                      \
    "  sbfx lr, ip, #" #b2 ", #1\n  and r6, r6, lr\n"                                      \
    "  sbfx lr, ip, #" #b3 ", #1\n  and r7, r7, lr\n"                                      \
    "  stmia r0!, {r4, r5, r6, r7}\n"
__asm__(".syntax unified\n"
        ".thumb\n"
        ".pushsection .text.ttm_mask8,\"ax\",%progbits\n"
        ".balign 4\n"
        ".global ttm_mask8\n"
        ".type ttm_mask8, %function\n"
        ".thumb_func\n"
        "ttm_mask8:\n"
        "  push {r4, r5, r6, r7, lr}\n"
        "  adds r3, r2, r3\n" /* the mask's end */
        "1:\n"
        "  ldrb ip, [r2], #1\n"
        "  cmp ip, #255\n"
        "  beq 3f\n"
        TTM_HALF(0, 1, 2, 3) TTM_HALF(4, 5, 6, 7)
        "2:\n"
        "  cmp r2, r3\n"
        "  bne 1b\n"
        "  pop {r4, r5, r6, r7, pc}\n"
        "3:\n"
        "  cmp r0, r1\n"
        "  beq 4f\n"
        "  ldmia r1!, {r4, r5, r6, r7}\n"
        "  stmia r0!, {r4, r5, r6, r7}\n"
        "  ldmia r1!, {r4, r5, r6, r7}\n"
        "  stmia r0!, {r4, r5, r6, r7}\n"
        "  b 2b\n"
        "4:\n"
        "  adds r0, r0, #32\n"
        "  adds r1, r1, #32\n"
        "  b 2b\n"
        ".size ttm_mask8, .-ttm_mask8\n"
        ".popsection\n");
#undef TTM_HALF
#define TTM_ASM 1
#endif

static inline uint32_t bits_of(const float *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

void tt_mask_backward_f32_opt(float *dx, const float *dy, const uint8_t *mask, int32_t n)
{
    int32_t i = 0;

#if defined(TTM_ASM)
    if (n >= 8) {
        ttm_mask8(dx, dy, mask, n >> 3);
        i = n & ~7;
    }
#endif
    for (; i < n; ++i) { /* every element elsewhere; after the assembly, the last partial byte */
        const uint32_t v = bits_of(&dy[i]) & (0u - ((uint32_t)(mask[i >> 3] >> (i & 7)) & 1u));
        memcpy(&dx[i], &v, 4);
    }
}
