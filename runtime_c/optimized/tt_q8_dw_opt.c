/*
 * Optimised int8 depthwise convolution and residual add, bit-identical with tt_conv2d_s8 /
 * tt_conv2d_s8_row (depthwise geometries) and tt_add_s8 / tt_add_s8_row (same shape).
 *
 * Depthwise: 4 channels at a time along the contiguous C axis. Per call, the weights of a
 * 4-channel group (stored (C, kh, kw): channel-major) are repacked on the stack as one
 * doubleword per tap holding the four weights, doubled, as 16-bit lanes (channels 0, 2 | 1, 3).
 * SXTAB16 of an input word gives (x + in_offset) of channels (0, 2) and (1, 3) as 16-bit lanes
 * and SMLABB / SMLATT accumulate per channel: 8 instructions per tap for 4 channels. Every
 * pixel runs its window clipped to the input (padding taps contribute nothing, as in the
 * reference), unrolled per kernel row for rows of 1 to 7 taps. Interior pixels of 3x3 (stride
 * 1 or 2) and 5x5 (stride 1) convolutions go two at a time: their shared input columns are
 * loaded and extended once, the requantisation constants loaded once, and the input offset
 * is folded into the accumulators' start value (in_offset * sum(w)). 3x3, 5x5 and 7x7
 * stride-1 convolutions (whole tensors from 8 columns, 3x3 and 5x5 rows from 16) take the
 * ring path instead: one channel at a time, two taps per SMLAD over rows of 16-bit lanes
 * (see "the ring path" below).
 *
 * Requantisation: for m >= 0 and e = -shift >= 1,
 *     tt_mbqm_double_rounding(acc, m, -e) + out_offset
 *       == SMMLAR(2 acc, m, 2^(e-1) + out_offset * 2^e - [acc < 0]) >> e
 * because SRDHM(acc, m) = floor((2 acc m + 2^31) / 2^32) (m != INT32_MIN: no saturation), and
 * the rounding shift (v + 2^(e-1) - [v < 0]) >> e may use [acc < 0] for [v < 0]: they differ
 * only when v == 0, where both round to 0. The doubled weights make the accumulator 2 acc.
 * Channel groups whose constants could overflow this (huge bias, e < 1, ...) keep the fast
 * accumulation and requantise with the reference arithmetic instead. Dead channels (m == 0)
 * never add their bias (dw_fast_channel), so a saturated one does not refuse their group.
 *
 * Add: LiteRT's per-input rescale RDBPOT(SRDHM((x + off) << 20, m), e) is exactly
 * SMMLAR((x + off) << 21, m, 2^(e-1) - [x + off < 0]) >> e by the same argument (or
 * (x + off) << 19 for the usual m = 2^30, e = 0 of the input with the larger scale); the sum
 * is rescaled likewise. Constants are hoisted and 4 results are packed per store. On Helium
 * cores (Cortex-M55) the add runs tt_q8_add_mve.c's kernel instead, sixteen elements a block.
 *
 * On Cortex-M4/M7 the inner blocks are inline assembly of DSP instructions: the equivalent
 * arm_acle.h intrinsics come out of GCC 12 with split 64-bit loads, separate rotations and
 * spills (about 1.25x the instructions), and SMMLAR, BFI and the rotated SXTAB16 have no
 * intrinsic there. Elsewhere (host builds, and Cortex-M builds at -O0 or -Os: see TT_DW_DSP)
 * a portable C path computes the same integers.
 */
#include "tt_kernels.h"
#include "tt_q8_add_mve.h"
#include "tt_q8_lanes.h"
#include "tt_q8_mve.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif

#if defined(__GNUC__)
#define TT_DW_INLINE static inline __attribute__((always_inline))
#define TT_DW_NOINLINE static __attribute__((noinline))
#else
#define TT_DW_INLINE static inline
#define TT_DW_NOINLINE static
#endif

TT_DW_INLINE int32_t dw_sx8(uint32_t v) /* sign-extend the low byte */
{
    return (int32_t)(v & 0xFFu) - (int32_t)((v & 0x80u) << 1);
}

TT_DW_INLINE uint32_t dw_load32(const int8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v); /* one unaligned LDR on Cortex-M4/M7 */
    return v;
}

TT_DW_INLINE void dw_store32(int8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

static uint32_t dw_bcast8(int32_t v)
{
    return ((uint32_t)v & 0xFFu) * 0x01010101u;
}

/* The DSP blocks need 14 registers beside their SP-relative memory operands. GCC 12 allocates
 * them when it optimises for speed (-O1 and up, -Og); at -O0 (r7 is the frame pointer) and
 * -Os/-Oz (the weights' address is kept in a register) it stops with "impossible
 * constraints". Those builds take the portable path: the same integers, more instructions. */
#if defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define TT_DW_DSP 1
#endif

#if defined(TT_DW_DSP)

/* c + floor((a * b + 2^31) / 2^32) */
TT_DW_INLINE int32_t dw_smmlar(int32_t a, int32_t b, int32_t c)
{
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

TT_DW_INLINE int32_t dw_ssat8(int32_t v)
{
    return __ssat(v, 8);
}


/* r's byte at bit pos = v's low byte */
#define DW_INS8(r, v, pos) __asm__("bfi %0, %1, #" #pos ", #8" : "+r"(r) : "r"(v))

/* lo, hi = the two words of mem in one LDRD (volatile: stays in the loop, not hoisted into a
 * spilled register pair) */
#define DW_LDRD(lo, hi, mem) __asm__ volatile("ldrd %0, %1, %2" : "=r"(lo), "=r"(hi) : "m"(mem))

/* ---- tap blocks. A tap: the input word (LDR), the tap's repacked weights (LDRD), two sign
 * extensions (bytes 0, 2 and 1, 3 with the input offset, or without it when it is folded into
 * the start value) and four multiply-accumulates. Input column j of a row at p + j * c: LDR's
 * scaled register offsets give j = 0, 1, 2, 4 and p steps by c for the others. The blocks
 * only read the input and the repacked weights, which nothing writes during a kernel call. */
#define DW_LX(addr) "ldr %[x], " addr "\n\t"
#define DW_LW(off) "ldrd %[w0], %[w1], [%[w], #" #off "]\n\t"
#define DW_LWM(j) "ldr %[w0], %[k" #j "l]\n\tldr %[w1], %[k" #j "h]\n\t"
#define DW_EXT_O "sxtab16 %[t], %[o], %[x]\n\tsxtab16 %[x], %[o], %[x], ror #8\n\t"
#define DW_EXT_R "sxtb16 %[t], %[x]\n\tsxtb16 %[x], %[x], ror #8\n\t"
#define DW_MAC_A                                                                           \
    "smlabb %[a0], %[t], %[w0], %[a0]\n\tsmlatt %[a2], %[t], %[w0], %[a2]\n\t"             \
    "smlabb %[a1], %[x], %[w1], %[a1]\n\tsmlatt %[a3], %[x], %[w1], %[a3]\n\t"
#define DW_MAC_B                                                                           \
    "smlabb %[b0], %[t], %[w0], %[b0]\n\tsmlatt %[b2], %[t], %[w0], %[b2]\n\t"             \
    "smlabb %[b1], %[x], %[w1], %[b1]\n\tsmlatt %[b3], %[x], %[w1], %[b3]\n\t"
#define DW_P0 "[%[p]]"
#define DW_P1 "[%[p], %[c]]"
#define DW_P2 "[%[p], %[c], lsl #1]"
#define DW_P4 "[%[p], %[c], lsl #2]"
#define DW_PADD "add %[p], %[p], %[c]\n\t"
#define DW_OPS_A                                                                           \
    [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [x] "=&r"(x_),              \
        [t] "=&r"(t_), [w0] "=&r"(w0_), [w1] "=&r"(w1_)

/* one kernel row of one pixel (accumulators a0..a3): x at P_ + j * C_, weights W_[2j],
 * W_[2j + 1] (inside the array wb, a memory operand so that its stores come first), the
 * input offset off2 added */
#define DW_ASM_A(code, P_, C_, W_)                                                         \
    do {                                                                                   \
        uint32_t x_, t_, w0_, w1_;                                                         \
        const int8_t *pp_ = (P_);                                                          \
        __asm__(code                                                                       \
                : DW_OPS_A, [p] "+r"(pp_)                                                  \
                : [c] "r"(C_), [w] "r"(W_), [o] "r"(off2), "m"(wb));                       \
    } while (0)
#define DW_ROW1(P_, C_, W_) DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A, P_, C_, W_)
#define DW_ROW2(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A, \
             P_, C_, W_)
#define DW_ROW3(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A \
             DW_LX(DW_P2) DW_LW(16) DW_EXT_O DW_MAC_A, P_, C_, W_)
#define DW_ROW4(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A \
             DW_LX(DW_P2) DW_LW(16) DW_EXT_O DW_MAC_A DW_PADD DW_LX(DW_P2) DW_LW(24)       \
             DW_EXT_O DW_MAC_A, P_, C_, W_)
#define DW_ROW5(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A \
             DW_LX(DW_P2) DW_LW(16) DW_EXT_O DW_MAC_A DW_LX(DW_P4) DW_LW(32) DW_EXT_O      \
             DW_MAC_A DW_PADD DW_LX(DW_P2) DW_LW(24) DW_EXT_O DW_MAC_A, P_, C_, W_)
#define DW_ROW6(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A \
             DW_LX(DW_P2) DW_LW(16) DW_EXT_O DW_MAC_A DW_LX(DW_P4) DW_LW(32) DW_EXT_O      \
             DW_MAC_A DW_PADD DW_LX(DW_P2) DW_LW(24) DW_EXT_O DW_MAC_A DW_LX(DW_P4)       \
             DW_LW(40) DW_EXT_O DW_MAC_A, P_, C_, W_)
#define DW_ROW7(P_, C_, W_)                                                                \
    DW_ASM_A(DW_LX(DW_P0) DW_LW(0) DW_EXT_O DW_MAC_A DW_LX(DW_P1) DW_LW(8) DW_EXT_O DW_MAC_A \
             DW_LX(DW_P2) DW_LW(16) DW_EXT_O DW_MAC_A DW_LX(DW_P4) DW_LW(32) DW_EXT_O      \
             DW_MAC_A DW_PADD DW_LX(DW_P2) DW_LW(24) DW_EXT_O DW_MAC_A DW_LX(DW_P4)       \
             DW_LW(40) DW_EXT_O DW_MAC_A DW_PADD DW_LX(DW_P4) DW_LW(48) DW_EXT_O DW_MAC_A, \
             P_, C_, W_)

/* One kernel row ROW of a pair of neighbouring pixels A (a0..a3) and B (b0..b3), stride S,
 * input offset folded away: the input columns are loaded and extended once, column j feeding
 * A with weights j and B with weights j - S (kept in registers from A's use when S = 1). All
 * 14 registers are operands, so the weights (WL: a uint32_t array, two words per tap) are
 * SP-relative memory operands, loaded as two words each: with 64-bit operands GCC 12 finds
 * these blocks' constraints impossible once the array lies 256 bytes or more above SP. */
#define DW_ASM_AB(code, P_, C_, ...)                                                       \
    do {                                                                                   \
        uint32_t x_, t_, w0_, w1_;                                                         \
        const int8_t *pp_ = (P_);                                                          \
        __asm__(code                                                                       \
                : DW_OPS_A, [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2), [b3] "+r"(b3),     \
                  [p] "+r"(pp_)                                                            \
                : [c] "r"(C_), __VA_ARGS__);                                               \
    } while (0)
#define DW_KW(WL, T, j) [k##j##l] "m"((WL)[2 * (T)]), [k##j##h] "m"((WL)[2 * (T) + 1])
#define DW_K3(WL, ROW) DW_KW(WL, (ROW) * 3, 0), DW_KW(WL, (ROW) * 3 + 1, 1),               \
                       DW_KW(WL, (ROW) * 3 + 2, 2)
#define DW_PAIR3S1(P_, C_, WL, ROW)                                                        \
    DW_ASM_AB(DW_LX(DW_P0) DW_EXT_R DW_LWM(0) DW_MAC_A DW_LX(DW_P1) DW_EXT_R DW_MAC_B     \
              DW_LWM(1) DW_MAC_A DW_LX(DW_P2) DW_EXT_R DW_MAC_B DW_LWM(2) DW_MAC_A DW_PADD \
              DW_LX(DW_P2) DW_EXT_R DW_MAC_B, P_, C_, DW_K3(WL, ROW))
#define DW_PAIR3S2(P_, C_, WL, ROW)                                                        \
    DW_ASM_AB(DW_LX(DW_P0) DW_EXT_R DW_LWM(0) DW_MAC_A DW_LX(DW_P1) DW_EXT_R DW_LWM(1)     \
              DW_MAC_A DW_LX(DW_P2) DW_EXT_R DW_LWM(0) DW_MAC_B DW_LWM(2) DW_MAC_A         \
              DW_LX(DW_P4) DW_EXT_R DW_MAC_B DW_PADD DW_LX(DW_P2) DW_EXT_R DW_LWM(1)       \
              DW_MAC_B, P_, C_, DW_K3(WL, ROW))
/* 5x5 stride 1 in two blocks (GCC takes at most 30 operands, "+r" counting twice): the second
 * goes on with the first's pointer and last weights. */
#define DW_PAIR5S1(P_, C_, WL, ROW)                                                        \
    do {                                                                                   \
        uint32_t x_, t_, w0_, w1_;                                                         \
        const int8_t *pp_ = (P_);                                                          \
        __asm__(DW_LX(DW_P0) DW_EXT_R DW_LWM(0) DW_MAC_A DW_LX(DW_P1) DW_EXT_R DW_MAC_B    \
                DW_LWM(1) DW_MAC_A DW_LX(DW_P2) DW_EXT_R DW_MAC_B DW_LWM(2) DW_MAC_A       \
                : DW_OPS_A, [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2), [b3] "+r"(b3),     \
                  [p] "+r"(pp_)                                                            \
                : [c] "r"(C_), DW_KW(WL, (ROW) * 5, 0), DW_KW(WL, (ROW) * 5 + 1, 1),       \
                  DW_KW(WL, (ROW) * 5 + 2, 2));                                            \
        __asm__(DW_PADD DW_LX(DW_P2) DW_EXT_R DW_MAC_B DW_LWM(3) DW_MAC_A DW_PADD          \
                DW_LX(DW_P2) DW_EXT_R DW_MAC_B DW_LWM(4) DW_MAC_A DW_PADD DW_LX(DW_P2)     \
                DW_EXT_R DW_MAC_B                                                          \
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3),              \
                  [x] "=&r"(x_), [t] "=&r"(t_), [w0] "+r"(w0_), [w1] "+r"(w1_),            \
                  [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2), [b3] "+r"(b3), [p] "+r"(pp_) \
                : [c] "r"(C_), DW_KW(WL, (ROW) * 5 + 3, 3), DW_KW(WL, (ROW) * 5 + 4, 4));  \
    } while (0)

/* ---- strip blocks: one kernel row R of a pixel pair from a padded strip (dw_strip_group).
 * The strip holds one word of 4 channels per column, so column j of the row is at byte 4j
 * from p and tap (R, j)'s weights at byte 8 (R K + j) from w: literal offsets, no borders.
 * Pixel A's window starts at column 0, B's at column S. Each column is loaded and extended
 * once; B's weights are A's of S columns before (still in registers when S = 1). The block
 * ends by stepping p to the next strip row (its stride read from memory: all 14 registers
 * are in use). */
#define DW_SX(j) "ldr %[x], [%[p], #" #j "*4]\n\t" DW_EXT_R
#define DW_SW(K, R, t) "ldrd %[w0], %[w1], [%[w], #((" #R ")*" #K "+" #t ")*8]\n\t"
#define DW_S1A(K, R, j) DW_SX(j) DW_SW(K, R, j) DW_MAC_A           /* column 0 */
#define DW_S1AB(K, R, j) DW_SX(j) DW_MAC_B DW_SW(K, R, j) DW_MAC_A /* columns 1 .. K-1 */
#define DW_S1B(j) DW_SX(j) DW_MAC_B                                /* column K */
#define DW_S2A(K, R, j) DW_SX(j) DW_SW(K, R, j) DW_MAC_A           /* columns 0, 1 */
#define DW_S2AB(K, R, j) DW_SX(j) DW_SW(K, R, j - 2) DW_MAC_B DW_SW(K, R, j) DW_MAC_A
#define DW_S2B(K, R, j) DW_SX(j) DW_SW(K, R, j - 2) DW_MAC_B       /* columns K, K+1 */
#define DW_STRIP_3_1(R) DW_S1A(3, R, 0) DW_S1AB(3, R, 1) DW_S1AB(3, R, 2) DW_S1B(3)
#define DW_STRIP_3_2(R)                                                                    \
    DW_S2A(3, R, 0) DW_S2A(3, R, 1) DW_S2AB(3, R, 2) DW_S2B(3, R, 3) DW_S2B(3, R, 4)
#define DW_STRIP_5_1(R)                                                                    \
    DW_S1A(5, R, 0) DW_S1AB(5, R, 1) DW_S1AB(5, R, 2) DW_S1AB(5, R, 3) DW_S1AB(5, R, 4)    \
    DW_S1B(5)
#define DW_STRIP_5_2(R)                                                                    \
    DW_S2A(5, R, 0) DW_S2A(5, R, 1) DW_S2AB(5, R, 2) DW_S2AB(5, R, 3) DW_S2AB(5, R, 4)     \
    DW_S2B(5, R, 5) DW_S2B(5, R, 6)
#define DW_STRIP_7_1(R)                                                                    \
    DW_S1A(7, R, 0) DW_S1AB(7, R, 1) DW_S1AB(7, R, 2) DW_S1AB(7, R, 3) DW_S1AB(7, R, 4)    \
    DW_S1AB(7, R, 5) DW_S1AB(7, R, 6) DW_S1B(7)
#define DW_STRIP_7_2(R)                                                                    \
    DW_S2A(7, R, 0) DW_S2A(7, R, 1) DW_S2AB(7, R, 2) DW_S2AB(7, R, 3) DW_S2AB(7, R, 4)     \
    DW_S2AB(7, R, 5) DW_S2AB(7, R, 6) DW_S2B(7, R, 7) DW_S2B(7, R, 8)
/* kernel row R of a pair at p_ (then stepped to the next strip row); weights at w_, the
 * strip's row stride in bytes in the variable RS */
#define DW_STRIP_ROW(K, S, R, p_, w_, RS)                                                  \
    do {                                                                                   \
        uint32_t x_, t_, w0_, w1_;                                                         \
        __asm__(DW_STRIP_##K##_##S(R) "ldr %[x], %[rs]\n\tadd %[p], %[p], %[x]"            \
                : DW_OPS_A, [b0] "+r"(b0), [b1] "+r"(b1), [b2] "+r"(b2), [b3] "+r"(b3),     \
                  [p] "+r"(p_)                                                             \
                : [w] "r"(w_), [rs] "m"(RS)                                                \
                : "memory");                                                               \
    } while (0)

#else /* portable C with the instructions' exact semantics */

TT_DW_INLINE int32_t dw_lo16(int32_t v)
{
    return (int32_t)((uint32_t)v & 0xFFFFu) - (int32_t)(((uint32_t)v & 0x8000u) << 1);
}

TT_DW_INLINE int32_t dw_hi16(int32_t v)
{
    return dw_lo16((int32_t)((uint32_t)v >> 16));
}

/* SXTAB16: a's 16-bit lanes plus bytes 0 and 2 of x, sign-extended */
TT_DW_INLINE int32_t dw_sxtab16(int32_t a, uint32_t x)
{
    const uint32_t lo = ((uint32_t)a + (uint32_t)dw_sx8(x)) & 0xFFFFu;
    const uint32_t hi = (((uint32_t)a >> 16) + (uint32_t)dw_sx8(x >> 16)) & 0xFFFFu;
    return (int32_t)(lo | (hi << 16));
}

TT_DW_INLINE int32_t dw_smmlar(int32_t a, int32_t b, int32_t c)
{
    /* floor(p / 2^32) in two's complement, then c added modulo 2^32 */
    const int64_t p = (int64_t)a * (int64_t)b + (int64_t)0x80000000LL;
    return (int32_t)((uint32_t)((uint64_t)p >> 32) + (uint32_t)c);
}

TT_DW_INLINE int32_t dw_ssat8(int32_t v)
{
    return v < -128 ? -128 : (v > 127 ? 127 : v);
}


#define DW_INS8(r, v, pos) ((r) = ((r) & ~(0xFFu << (pos))) | (((uint32_t)(v) & 0xFFu) << (pos)))

#define DW_LDRD(lo, hi, mem)                                                               \
    do {                                                                                   \
        uint32_t w_[2];                                                                    \
        memcpy(w_, &(mem), sizeof w_);                                                     \
        (lo) = (int32_t)w_[0];                                                             \
        (hi) = (int32_t)w_[1];                                                             \
    } while (0)

/* one tap: acc[0..3] += (4 input bytes of xv + off2) * the repacked weights w[0], w[1] */
TT_DW_INLINE void dw_tap_c(int32_t *acc, uint32_t xv, int32_t off2, const uint32_t *w)
{
    const int32_t x02 = dw_sxtab16(off2, xv), x13 = dw_sxtab16(off2, (xv >> 8) | (xv << 24));
    const int32_t w02 = (int32_t)w[0], w13 = (int32_t)w[1];
    acc[0] = (int32_t)((uint32_t)acc[0] + (uint32_t)(dw_lo16(x02) * dw_lo16(w02)));
    acc[2] = (int32_t)((uint32_t)acc[2] + (uint32_t)(dw_hi16(x02) * dw_hi16(w02)));
    acc[1] = (int32_t)((uint32_t)acc[1] + (uint32_t)(dw_lo16(x13) * dw_lo16(w13)));
    acc[3] = (int32_t)((uint32_t)acc[3] + (uint32_t)(dw_hi16(x13) * dw_hi16(w13)));
}

TT_DW_INLINE void dw_row_c(int32_t *a0, int32_t *a1, int32_t *a2, int32_t *a3,
                           const int8_t *p, int32_t c, const uint32_t *w, int32_t n,
                           int32_t off2)
{
    int32_t acc[4], j;
    acc[0] = *a0;
    acc[1] = *a1;
    acc[2] = *a2;
    acc[3] = *a3;
    for (j = 0; j < n; ++j) {
        dw_tap_c(acc, dw_load32(p + j * c), off2, w + 2 * j);
    }
    *a0 = acc[0];
    *a1 = acc[1];
    *a2 = acc[2];
    *a3 = acc[3];
}

#define DW_ROW1(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 1, off2)
#define DW_ROW2(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 2, off2)
#define DW_ROW3(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 3, off2)
#define DW_ROW4(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 4, off2)
#define DW_ROW5(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 5, off2)
#define DW_ROW6(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 6, off2)
#define DW_ROW7(P_, C_, W_) dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (W_), 7, off2)
#define DW_PAIRK(P_, C_, WL, ROW, K, S)                                                    \
    do {                                                                                   \
        dw_row_c(&a0, &a1, &a2, &a3, (P_), (C_), (WL) + 2 * (ROW) * (K), (K), 0);          \
        dw_row_c(&b0, &b1, &b2, &b3, (P_) + (S) * (C_), (C_), (WL) + 2 * (ROW) * (K), (K),  \
                 0);                                                                       \
    } while (0)
#define DW_PAIR3S1(P_, C_, WL, ROW) DW_PAIRK(P_, C_, WL, ROW, 3, 1)
#define DW_PAIR3S2(P_, C_, WL, ROW) DW_PAIRK(P_, C_, WL, ROW, 3, 2)
#define DW_PAIR5S1(P_, C_, WL, ROW) DW_PAIRK(P_, C_, WL, ROW, 5, 1)

/* one kernel row of a pixel pair from a strip (see the DSP blocks): A's taps at columns
 * 0 .. K-1, B's at S .. S+K-1 */
TT_DW_INLINE void dw_strip_row_c(int32_t *a, int32_t *b, const uint32_t *p, const uint32_t *w,
                                 int32_t k, int32_t s)
{
    int32_t j;
    for (j = 0; j < k; ++j) {
        dw_tap_c(a, p[j], 0, w + 2 * j);
        dw_tap_c(b, p[j + s], 0, w + 2 * j);
    }
}

#define DW_STRIP_ROW(K, S, R, p_, w_, RS)                                                  \
    do {                                                                                   \
        int32_t ra_[4] = {a0, a1, a2, a3}, rb_[4] = {b0, b1, b2, b3};                      \
        dw_strip_row_c(ra_, rb_, (p_), (w_) + 2 * (R) * (K), (K), (S));                    \
        a0 = ra_[0], a1 = ra_[1], a2 = ra_[2], a3 = ra_[3];                                \
        b0 = rb_[0], b1 = rb_[1], b2 = rb_[2], b3 = rb_[3];                                \
        (p_) += (RS) / 4;                                                                  \
    } while (0)

#endif

/* ================================ depthwise convolution ================================ */

#define DW_MAX_TAPS 49 /* repacked weights of 4 channels: 49 taps (7x7) x 8 bytes */
#define DW_MAX_KH 8    /* input row pointers kept per output row */

/* Two words read by one DW_LDRD (the asm's memory operand covers both). */
typedef struct {
    int32_t w[2];
} dw_w2;

/* Requantisation constants of one 4-channel group. */
typedef struct {
    dw_w2 mc[4];    /* fast requantisation per channel: multiplier, rounding constant */
    int32_t e[4];   /* and its right shift */
    dw_w2 ini_b[2]; /* accumulator start values: 2 * bias, or 0 (reference requant) */
    dw_w2 ini_i[2]; /* pixel pairs: ini_b + 2 * in_offset * sum(w) */
    dw_w2 lohi;     /* byte-broadcast activation range */
    int32_t fast;   /* requantise with SMMLAR (else the reference arithmetic) */
} dw_consts;

/* The call's arguments. */
typedef struct {
    const tt_rows *y, *x;
    int32_t oy0, oy1;
    const int8_t *w;
    const int32_t *b;
    const tt_conv_geom *g;
    const tt_q8_requant *q;
    int32_t oxa, oxb; /* output columns whose window lies inside the input columns */
    int32_t pairs;    /* pixel pairs per full row (from oxa on), or 0 */
    const int32_t *pack; /* tt_conv2d_s8_dw_pack's constants, or NULL: derive them per call */
} dw_job;

/* |acc| <= |bias| + the sum bound: |x + in_offset| <= 128 + |in_offset| (<= 383),
 * |w| <= 128, at most 49 taps */
TT_DW_INLINE uint32_t dw_sum_bound(const tt_conv_geom *g, const tt_q8_requant *q)
{
    const uint32_t in_mag = 128u + (uint32_t)(q->in_offset < 0 ? -q->in_offset : q->in_offset);
    return (uint32_t)(g->kh * g->kw) * in_mag * 128u;
}

/* The layer-wide conditions of the fast requantisation (int8 activation range and output
 * offset). */
TT_DW_INLINE int dw_fast_range(const tt_q8_requant *q)
{
    return q->act_min >= -128 && q->act_max <= 127 && q->act_min <= q->act_max &&
           q->out_offset >= -128 && q->out_offset <= 127;
}

/* Channel c's fast requantisation: multiplier *m, rounding constant *cst (with the output
 * offset) and right shift *e; 0 when its constants could overflow it (huge bias, e < 1, ...).
 * 2 acc must fit; |SRDHM| <= acc_bound + 1 and the constant (and -1) added to it must not
 * wrap: with acc_bound < 2^30 that holds for e <= 22 (|cst| <= 129 * 2^22). A dead channel
 * (m == 0, shift -1 from the compiler) starts from 0 instead of its bias (dw_setup,
 * dw_pl_consts_k), which may be saturated: SMMLAR(2 acc, 0, cst - t) >> e = out_offset +
 * ((2^(e-1) - t) >> e) = out_offset, as the reference's SRDHM(acc, 0) = 0 gives whatever the
 * bias. */

TT_DW_INLINE int dw_fast_channel(int32_t *m, int32_t *cst, int32_t *e, int32_t c,
                                 uint32_t sum_bound, const dw_job *J)
{
    const tt_q8_requant *q = J->q;
    const int32_t mc = q->mult[c], bias = J->b != NULL && mc != 0 ? J->b[c] : 0;
    const uint32_t acc_bound = (bias < 0 ? 0u - (uint32_t)bias : (uint32_t)bias) + sum_bound;
    int ok = 1;

    *m = mc;
    *e = -q->shift[c];
    *cst = 0;
    if (*m < 0 || *e < 1 || *e > 31 || acc_bound >= (1u << 30)) {
        ok = 0;
    } else if (*e <= 22) {
        *cst = (int32_t)((1u << (*e - 1)) + ((uint32_t)q->out_offset << *e));
    } else {
        const int64_t c64 = ((int64_t)1 << (*e - 1)) + (int64_t)q->out_offset * ((int64_t)1 << *e);
        if ((int64_t)acc_bound + 2 + (c64 < 0 ? -c64 : c64) >= ((int64_t)1 << 31)) {
            ok = 0;
        }
        *cst = (int32_t)c64;
    }
    return ok;
}

/* Channel group c0: its weights repacked into wb (per tap two words: 2w of channels 0, 2 and
 * of channels 1, 3, as 16-bit lanes) and its requantisation constants. */
static void dw_setup(dw_consts *k, uint32_t *wb, int32_t c0, const dw_job *J)
{
    const tt_q8_requant *q = J->q;
    const int32_t taps = J->g->kh * J->g->kw;
    const int8_t *w0 = J->w + c0 * taps;
    const uint32_t sum_bound = dw_sum_bound(J->g, q);
    int32_t sw[4] = {0, 0, 0, 0};
    int32_t t, j;

    for (t = 0; t < taps; ++t) {
        const int32_t v0 = w0[t], v1 = w0[taps + t], v2 = w0[2 * taps + t];
        const int32_t v3 = w0[3 * taps + t];
        wb[2 * t] = ((uint32_t)(2 * v0) & 0xFFFFu) | ((uint32_t)(2 * v2) << 16);
        wb[2 * t + 1] = ((uint32_t)(2 * v1) & 0xFFFFu) | ((uint32_t)(2 * v3) << 16);
        sw[0] += v0;
        sw[1] += v1;
        sw[2] += v2;
        sw[3] += v3;
    }
    k->fast = dw_fast_range(q);
    for (j = 0; j < 4; ++j) {
        if (!dw_fast_channel(&k->mc[j].w[0], &k->mc[j].w[1], &k->e[j], c0 + j, sum_bound, J)) {
            k->fast = 0;
        }
    }
    for (j = 0; j < 4; ++j) {
        /* the start values stay within the bounds above (2 |bias| + the offset's share) */
        const int32_t ini =
            k->fast && J->b != NULL && k->mc[j].w[0] != 0 ? 2 * J->b[c0 + j] : 0;
        k->ini_b[j / 2].w[j % 2] = ini;
        k->ini_i[j / 2].w[j % 2] = ini + 2 * q->in_offset * sw[j];
    }
    k->lohi.w[0] = (int32_t)dw_bcast8(q->act_min);
    k->lohi.w[1] = (int32_t)dw_bcast8(q->act_max);
}

/* the pack's format (tt_q8_dw_opt.h) has 23 words of constants; C99 has no static assert */
typedef char dw_consts_is_23_words[sizeof(dw_consts) == 23 * sizeof(int32_t) ? 1 : -1];
#define DW_PACK_CONSTS ((int32_t)(sizeof(dw_consts) / sizeof(int32_t)))

/* Words of one group in a pack: its constants, then its repacked weights. */
static int32_t dw_pack_group_words(const tt_conv_geom *g)
{
    return DW_PACK_CONSTS + 2 * g->kh * g->kw;
}

/* Group c0's constants and weights: copied from the pack, or derived (dw_setup). */
TT_DW_NOINLINE void dw_load(dw_consts *k, uint32_t *wb, int32_t c0, const dw_job *J)
{
    if (J->pack != NULL) {
        const int32_t *p = J->pack + (c0 / 4) * dw_pack_group_words(J->g);
        memcpy(k, p, sizeof *k);
        memcpy(wb, p + DW_PACK_CONSTS, sizeof(uint32_t) * 2u * (uint32_t)(J->g->kh * J->g->kw));
    } else {
        dw_setup(k, wb, c0, J);
    }
}

/* The reference requantisation of doubled accumulators (exact sums: halve, add the bias with
 * int32 wrap-around as the reference does) for channels c0..c0+3, stored at o. */
TT_DW_NOINLINE void dw_store4_ref(int8_t *o, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                                  int32_t c0, const dw_job *J)
{
    const int32_t acc[4] = {a0 / 2, a1 / 2, a2 / 2, a3 / 2};
    const tt_q8_requant *q = J->q;
    int32_t j;
    for (j = 0; j < 4; ++j) {
        const int32_t c = c0 + j;
        int32_t v = (int32_t)((uint32_t)acc[j] + (uint32_t)(J->b != NULL ? J->b[c] : 0));
        v = tt_mbqm_double_rounding(v, q->mult[c], q->shift[c]) + q->out_offset;
        o[j] = tt_sat8(v, q->act_min, q->act_max);
    }
}

/* Fast requantisation of one doubled accumulator, before the clamp */
#define DW_RQ(v, a, m, c, e) ((v) = dw_ssat8(dw_smmlar((a), (m), (c) + ((a) >> 31)) >> (e)))

/* The group's activation range is narrower than int8's (a clamp after SSAT #8 changes
 * something) */
TT_DW_INLINE int dw_clamps(const dw_consts *k)
{
    return k->lohi.w[0] != (int32_t)0x80808080u || k->lohi.w[1] != 0x7F7F7F7F;
}

/* Requantise a0..a3 (channels c0..c0+3) and store them at o. */
TT_DW_INLINE void dw_store4(int8_t *o, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                            const dw_consts *k, int32_t c0, const dw_job *J)
{
    if (k->fast) {
        int32_t m, c, v;
        uint32_t r, lo, hi;
        DW_LDRD(m, c, k->mc[0]);
        DW_RQ(v, a0, m, c, k->e[0]);
        r = (uint32_t)v;
        DW_LDRD(m, c, k->mc[1]);
        DW_RQ(v, a1, m, c, k->e[1]);
        DW_INS8(r, v, 8);
        DW_LDRD(m, c, k->mc[2]);
        DW_RQ(v, a2, m, c, k->e[2]);
        DW_INS8(r, v, 16);
        DW_LDRD(m, c, k->mc[3]);
        DW_RQ(v, a3, m, c, k->e[3]);
        DW_INS8(r, v, 24);
        if (dw_clamps(k)) {
            DW_LDRD(lo, hi, k->lohi);
            r = tt_clamp4_s8(r, (uint32_t)lo, (uint32_t)hi);
        }
        dw_store32(o, r);
    } else {
        dw_store4_ref(o, a0, a1, a2, a3, c0, J);
    }
}

/* the kernel rows ky0..ky1 of one pixel, ROW taps each */
#define DW_ROWS(ROW)                                                                       \
    for (ky = ky0; ky < ky1; ++ky, wp += 2 * kw) {                                         \
        ROW(rp[ky] + xo, cin, wp);                                                         \
    }

/* Requantise a pixel pair's accumulators A (a0..a3) and B (b0..b3), channels c0..c0+3,
 * and store them at OA and OB (the constants k loaded once for both; the activation range
 * applied only when `clamp`: SSAT has already put every byte in int8's). */
#define DW_PAIR_STORE(OA, OB)                                                              \
    do {                                                                                   \
        int32_t m, c, e;                                                                   \
        uint32_t lo, hi;                                                                   \
        if (!k.fast) {                                                                     \
            dw_store4_ref((OA), a0, a1, a2, a3, c0, J);                                    \
            dw_store4_ref((OB), b0, b1, b2, b3, c0, J);                                    \
            break;                                                                         \
        }                                                                                  \
        DW_LDRD(m, c, k.mc[0]);                                                            \
        e = k.e[0];                                                                        \
        DW_RQ(a0, a0, m, c, e);                                                            \
        DW_RQ(b0, b0, m, c, e);                                                            \
        DW_LDRD(m, c, k.mc[1]);                                                            \
        e = k.e[1];                                                                        \
        DW_RQ(a1, a1, m, c, e);                                                            \
        DW_RQ(b1, b1, m, c, e);                                                            \
        DW_INS8(a0, a1, 8);                                                                \
        DW_INS8(b0, b1, 8);                                                                \
        DW_LDRD(m, c, k.mc[2]);                                                            \
        e = k.e[2];                                                                        \
        DW_RQ(a2, a2, m, c, e);                                                            \
        DW_RQ(b2, b2, m, c, e);                                                            \
        DW_INS8(a0, a2, 16);                                                               \
        DW_INS8(b0, b2, 16);                                                               \
        DW_LDRD(m, c, k.mc[3]);                                                            \
        e = k.e[3];                                                                        \
        DW_RQ(a3, a3, m, c, e);                                                            \
        DW_RQ(b3, b3, m, c, e);                                                            \
        DW_INS8(a0, a3, 24);                                                               \
        DW_INS8(b0, b3, 24);                                                               \
        if (clamp) {                                                                       \
            DW_LDRD(lo, hi, k.lohi);                                                       \
            a0 = (int32_t)tt_clamp4_s8((uint32_t)a0, lo, hi);                              \
            b0 = (int32_t)tt_clamp4_s8((uint32_t)b0, lo, hi);                              \
        }                                                                                  \
        dw_store32((OA), (uint32_t)a0);                                                    \
        dw_store32((OB), (uint32_t)b0);                                                    \
    } while (0)

/* a pixel pair's accumulators a0..a3 (pixel A), b0..b3 (B), both starting at the group's
 * start values with the input offset folded in */
#define DW_PAIR_INIT                                                                       \
    int32_t a0, a1, a2, a3, b0, b1, b2, b3;                                                \
    DW_LDRD(a0, a1, k.ini_i[0]);                                                           \
    DW_LDRD(a2, a3, k.ini_i[1]);                                                           \
    b0 = a0;                                                                               \
    b1 = a1;                                                                               \
    b2 = a2;                                                                               \
    b3 = a3

/* Pixel pairs: np pairs from output o and input column offset x on, all kernel rows in the
 * input (rp). PAIR is the row block, K the kernel size, S the stride. */
#define DW_PAIRS(PAIR, K, S)                                                               \
    for (; np > 0; --np, o += 2 * cin, x += 2 * (S) * cin) {                              \
        DW_PAIR_INIT;                                                                      \
        PAIR(rp[0] + x, cin, wb, 0);                                                      \
        PAIR(rp[1] + x, cin, wb, 1);                                                      \
        PAIR(rp[2] + x, cin, wb, 2);                                                      \
        if ((K) == 5) {                                                                    \
            PAIR(rp[3] + x, cin, wb, 3 % (K));                                            \
            PAIR(rp[4] + x, cin, wb, 4 % (K));                                            \
        }                                                                                  \
        DW_PAIR_STORE(o, o + cin);                                                         \
    }

/* The same for a 3x3 row with one kernel row in the padding (the first or last output row):
 * kernel rows R0, R1 from start values without the missing row's share of the folded input
 * offset (dw_ini_shift) */
#define DW_PAIRS_2ROWS(PAIR, S, R0, R1)                                                    \
    for (; np > 0; --np, o += 2 * cin, x += 2 * (S) * cin) {                              \
        DW_PAIR_INIT;                                                                      \
        PAIR(rp[R0] + x, cin, wb, R0);                                                    \
        PAIR(rp[R1] + x, cin, wb, R1);                                                    \
        DW_PAIR_STORE(o, o + cin);                                                         \
    }

/* k's pair start values (ini_i) plus sign * kernel row mr's share of the folded input offset
 * (in_offset * the sum of its doubled weights, wb's 16-bit lanes): -1 before a row that misses
 * kernel row mr, +1 after it (in place: dw_group's frame has no room for a copy within the
 * DSP blocks' memory-operand reach) */
static void dw_ini_shift(dw_consts *k, const uint32_t *wb, int32_t mr, int32_t kw,
                         int32_t in_offset, int32_t sign)
{
    int32_t s[4] = {0, 0, 0, 0};
    int32_t t, j;

    for (t = mr * kw; t < (mr + 1) * kw; ++t) {
        s[0] += (int32_t)(int16_t)(wb[2 * t] & 0xFFFFu);
        s[2] += (int32_t)(int16_t)(wb[2 * t] >> 16);
        s[1] += (int32_t)(int16_t)(wb[2 * t + 1] & 0xFFFFu);
        s[3] += (int32_t)(int16_t)(wb[2 * t + 1] >> 16);
    }
    for (j = 0; j < 4; ++j) {
        k->ini_i[j / 2].w[j % 2] += sign * in_offset * s[j];
    }
}

/* Output rows oy0..oy1 of channels c0..c0+3. Each pixel runs its window clipped to the input,
 * kernel rows unrolled for 1 to 7 taps; the interior pixels of 3x3 (stride 1, 2) and 5x5
 * (stride 1) convolutions go in pairs: each input column loaded and extended once for both,
 * the input offset folded into the start values, the requantisation constants loaded once.
 * A 3x3 row with one kernel row in the padding pairs its pixels too, over two kernel rows
 * (a clipped pixel costs about a pair). */
TT_DW_NOINLINE void dw_group(const dw_job *J, int32_t c0)
{
    dw_consts k;
    uint32_t wb[2 * DW_MAX_TAPS];
    const int8_t *rp[DW_MAX_KH];
    const tt_conv_geom *g = J->g;
    const int32_t cin = g->cin, kh = g->kh, kw = g->kw, sw = g->sw, iw = g->w, ow = g->ow;
    const int32_t oxa = J->oxa, pairs = J->pairs;
    const int32_t off2 = (int32_t)(((uint32_t)J->q->in_offset & 0xFFFFu) |
                                   ((uint32_t)J->q->in_offset << 16));
    int32_t oy, ox, ky;
    int clamp;

    dw_load(&k, wb, c0, J);
    clamp = dw_clamps(&k);
    for (oy = J->oy0; oy < J->oy1; ++oy) {
        const int32_t iy0 = oy * g->sh - g->pt;
        const int32_t ky0 = iy0 < 0 ? -iy0 : 0;
        const int32_t ky1 = g->h - iy0 < kh ? g->h - iy0 : kh;
        /* the pairs start at column oxa of the rows whose kernel rows all lie in the input,
         * or all but the first or last of a 3x3's */
        const int32_t full = ky0 == 0 && ky1 == kh;
        const int32_t two = kh == 3 && kw == 3 && ky1 - ky0 == 2;
        const int32_t pair_ox = pairs > 0 && (full || two) ? oxa : -1;
        int8_t *const out = tt_row(J->y, oy) + c0;
        int32_t ix0 = -g->pl; /* input column of kernel column 0 */
        for (ky = ky0; ky < ky1; ++ky) {
            rp[ky] = tt_row(J->x, iy0 + ky) + c0;
        }
        for (ox = 0; ox < ow; ++ox, ix0 += sw) {
            const int32_t kx0 = ix0 < 0 ? -ix0 : 0;
            const int32_t kx1 = iw - ix0 < kw ? iw - ix0 : kw;
            const int32_t xo = (ix0 + kx0) * cin;
            const uint32_t *wp = wb + 2 * (ky0 * kw + kx0);
            if (ox == pair_ox) { /* declares its own accumulators: keep ours below */
                int8_t *o = out + ox * cin;
                int32_t np = pairs, x = xo;
                ox += 2 * np - 1;
                ix0 += (2 * np - 1) * sw;
                if (!full) { /* ky0 == 1: kernel row 0 missing, else row 2 */
                    const int32_t mr = ky0 == 1 ? 0 : 2;
                    dw_ini_shift(&k, wb, mr, 3, J->q->in_offset, -1);
                    if (ky0 == 1 && sw == 1) {
                        DW_PAIRS_2ROWS(DW_PAIR3S1, 1, 1, 2)
                    } else if (ky0 == 1) {
                        DW_PAIRS_2ROWS(DW_PAIR3S2, 2, 1, 2)
                    } else if (sw == 1) {
                        DW_PAIRS_2ROWS(DW_PAIR3S1, 1, 0, 1)
                    } else {
                        DW_PAIRS_2ROWS(DW_PAIR3S2, 2, 0, 1)
                    }
                    dw_ini_shift(&k, wb, mr, 3, J->q->in_offset, 1);
                } else if (kh == 5) {
                    DW_PAIRS(DW_PAIR5S1, 5, 1)
                } else if (sw == 1) {
                    DW_PAIRS(DW_PAIR3S1, 3, 1)
                } else {
                    DW_PAIRS(DW_PAIR3S2, 3, 2)
                }
                continue;
            }
            int32_t a0, a1, a2, a3, n;
            DW_LDRD(a0, a1, k.ini_b[0]);
            DW_LDRD(a2, a3, k.ini_b[1]);
            if (kx1 - kx0 == 3 && ky1 - ky0 == 3) { /* a whole 3x3 window, rows unrolled */
                DW_ROW3(rp[ky0] + xo, cin, wp);
                DW_ROW3(rp[ky0 + 1] + xo, cin, wp + 2 * kw);
                DW_ROW3(rp[ky0 + 2] + xo, cin, wp + 4 * kw);
            } else switch (kx1 - kx0) {
            case 1: DW_ROWS(DW_ROW1) break;
            case 2: DW_ROWS(DW_ROW2) break;
            case 3: DW_ROWS(DW_ROW3) break;
            case 4: DW_ROWS(DW_ROW4) break;
            case 5: DW_ROWS(DW_ROW5) break;
            case 6: DW_ROWS(DW_ROW6) break;
            case 7: DW_ROWS(DW_ROW7) break;
            default: /* wider kernels tap by tap (nothing when the window is empty) */
                for (ky = ky0; ky < ky1 && kx1 > kx0; ++ky, wp += 2 * kw) {
                    for (n = 0; n < kx1 - kx0; ++n) {
                        DW_ROW1(rp[ky] + xo + n * cin, cin, wp + 2 * n);
                    }
                }
                break;
            }
            dw_store4(out + ox * cin, a0, a1, a2, a3, &k, c0, J);
        }
    }
}

/* ---- the strip path: square 3x3, 5x5, 7x7 kernels at column stride 1 or 2 ----
 * Per 4-channel group, the input rows under a run of output rows are copied into a stack
 * buffer, one word (4 channels) per column, padding columns and rows filled with the input
 * zero point: a padding tap then adds (zp + in_offset) * w = 0, as the reference's skipped
 * tap does, once the offset is folded into the start value. Every output pixel then runs in
 * a pair with literal offsets (DW_STRIP_ROW), borders included: no clipped windows, no row
 * pointers. Whole tensors whose padded rows fit are copied once per group; row calls copy
 * the K rows under their output row. */

#define DW_STRIP_WORDS 384 /* the strip buffer: 1.5 KB of stack */

/* rows [iy, iy + n) of the padded input (channels c0..c0+3) into d, `cols` words per row:
 * column j holds input column j - pl */
static void dw_fill(uint32_t *d, int32_t iy, int32_t n, int32_t cols, uint32_t pad,
                    const dw_job *J, int32_t c0)
{
    const tt_conv_geom *g = J->g;
    const int32_t cin = g->cin;
    const int32_t j0 = g->pl < cols ? g->pl : cols;                 /* first input column */
    const int32_t j1 = g->pl + g->w < cols ? g->pl + g->w : cols;   /* past the last */
    int32_t r, j;

    for (r = 0; r < n; ++r, ++iy, d += cols) {
        if (iy < 0 || iy >= g->h) {
            for (j = 0; j < cols; ++j) {
                d[j] = pad;
            }
            continue;
        }
        const int8_t *x = tt_row(J->x, iy) + c0;
        for (j = 0; j < j0; ++j) {
            d[j] = pad;
        }
        for (; j + 4 <= j1; j += 4, x += 4 * cin) {
            const uint32_t v0 = dw_load32(x), v1 = dw_load32(x + cin);
            const uint32_t v2 = dw_load32(x + 2 * cin), v3 = dw_load32(x + 3 * cin);
            d[j] = v0;
            d[j + 1] = v1;
            d[j + 2] = v2;
            d[j + 3] = v3;
        }
        for (; j < j1; ++j, x += cin) {
            d[j] = dw_load32(x);
        }
        for (; j < cols; ++j) {
            d[j] = pad;
        }
    }
}

/* the columns a row of ow outputs reads, in pairs (a last single pixel pairs with a phantom
 * one, which reads padding and is not stored) */
static int32_t dw_strip_cols(const tt_conv_geom *g)
{
    return ((g->ow + 1) / 2 * 2 - 1) * g->sw + g->kw;
}

/* Where strips beat the clipped-window kernel (measured, TT_DW_BENCH in test_dw_opt.c): maps
 * wider than the kernel (narrower ones are mostly padding, which clipped windows skip); for a
 * single output row (row streaming copies K input rows per output row) only 5x5 and 7x7,
 * whose clipped kernel has no pixel pairs at stride 2 or 7 taps; and not 3x3 stride 2 on maps
 * over 32 wide, whose copy costs more than the borders it saves. */
static int dw_strip_ok(const tt_conv_geom *g, const tt_q8_requant *q, int whole)
{
    const int32_t k = g->kw;
    return g->kh == k && (k == 3 || k == 5 || k == 7) && (g->sw == 1 || g->sw == 2) &&
           g->w > k && q->in_offset >= -127 && q->in_offset <= 128 &&
           dw_strip_cols(g) * k <= DW_STRIP_WORDS &&
           (whole ? !(k == 3 && g->sw == 2 && g->w > 32) : k > 3);
}

/* One output row of a group from the strip rows at s (rs bytes apart): pixel pairs at o, the
 * last one's partner stored to a spare word when the row is odd (one copy of the unrolled
 * pair in the code: a 7x7 pair is ~2.5 KB of it). */
#define DW_STRIP_PAIR(K, S, OB)                                                            \
    do {                                                                                   \
        const uint32_t *sp = s;                                                            \
        DW_PAIR_INIT;                                                                      \
        DW_STRIP_ROW(K, S, 0, sp, wb, rs);                                                 \
        DW_STRIP_ROW(K, S, 1, sp, wb, rs);                                                 \
        DW_STRIP_ROW(K, S, 2, sp, wb, rs);                                                 \
        if ((K) > 3) {                                                                     \
            DW_STRIP_ROW(K, S, 3, sp, wb, rs);                                             \
            DW_STRIP_ROW(K, S, 4, sp, wb, rs);                                             \
        }                                                                                  \
        if ((K) > 5) {                                                                     \
            DW_STRIP_ROW(K, S, 5, sp, wb, rs);                                             \
            DW_STRIP_ROW(K, S, 6, sp, wb, rs);                                             \
        }                                                                                  \
        DW_PAIR_STORE(o, (OB));                                                            \
    } while (0)
#define DW_STRIP_PAIRS(K, S)                                                               \
    do {                                                                                   \
        const uint32_t *s = srow;                                                          \
        int8_t *o = orow;                                                                  \
        int8_t *const last_b = ow & 1 ? (int8_t *)spare : orow + (ow - 1) * cin;           \
        int32_t n;                                                                         \
        for (n = (ow + 1) >> 1; n > 0; --n, s += 2 * (S), o += 2 * cin) {                  \
            DW_STRIP_PAIR(K, S, n > 1 ? o + cin : last_b);                                 \
        }                                                                                  \
    } while (0)

/* Output rows oy0..oy1 of channels c0..c0+3 through strips (dw_strip_ok), strip: the caller's
 * DW_STRIP_WORDS (in the caller's frame: this one stays small enough for DW_LDRD's 1 KB
 * reach from SP at every optimisation level). */
TT_DW_NOINLINE void dw_strip_group(const dw_job *J, int32_t c0, uint32_t *strip)
{
    dw_consts k;
    uint32_t wb[2 * DW_MAX_TAPS];
    uint32_t spare[1];
    const tt_conv_geom *g = J->g;
    const int32_t cin = g->cin, kk = g->kw, sw = g->sw, sh = g->sh, ow = g->ow;
    const int32_t cols = dw_strip_cols(g), rs = 4 * cols;
    /* output rows per fill: their input rows must fit */
    const int32_t run = (DW_STRIP_WORDS / cols - kk) / sh + 1;
    const uint32_t pad = dw_bcast8(-J->q->in_offset);
    int32_t oy, r0;
    int clamp;

    dw_load(&k, wb, c0, J);
    clamp = dw_clamps(&k);
    for (r0 = J->oy0; r0 < J->oy1; r0 += run) {
        const int32_t r1 = r0 + run < J->oy1 ? r0 + run : J->oy1;
        dw_fill(strip, r0 * sh - g->pt, (r1 - r0 - 1) * sh + kk, cols, pad, J, c0);
        for (oy = r0; oy < r1; ++oy) {
            const uint32_t *const srow = strip + (oy - r0) * sh * cols;
            int8_t *const orow = tt_row(J->y, oy) + c0;
            if (kk == 3) {
                if (sw == 1) {
                    DW_STRIP_PAIRS(3, 1);
                } else {
                    DW_STRIP_PAIRS(3, 2);
                }
            } else if (kk == 5) {
                if (sw == 1) {
                    DW_STRIP_PAIRS(5, 1);
                } else {
                    DW_STRIP_PAIRS(5, 2);
                }
            } else if (sw == 1) {
                DW_STRIP_PAIRS(7, 1);
            } else {
                DW_STRIP_PAIRS(7, 2);
            }
        }
    }
}

/* ---- the ring path: square K x K kernels (3, 5, 7) at stride 1, one channel at a time,
 * two taps per SMLAD ----
 * Per 4-channel group and block of output columns, the input rows under the current output
 * row are kept per channel as rows of 16-bit lanes x + in_offset, two neighbouring padded
 * columns per word: E[i] = (x[2i], x[2i + 1]), padding 0 (it adds nothing, as the
 * reference's skipped tap does). With doubled weights as 16-bit lanes, a kernel row of an
 * even output column o = 2i is SMLAD(E[i], (w0, w1)) + SMLAD(E[i + 1], (w2, w3)) + ... +
 * SMLABT(E[i + (K - 1) / 2], w[K-1]), of the odd one SMLATB(E[i], w0) + SMLAD(E[i + 1],
 * (w1, w2)) + ...: (K + 1) / 2 instructions for K MACs where the 4-channel blocks above
 * spend one per MAC beside the sign extensions. A group of four output columns of one
 * channel reads its words of each input row once, at literal offsets (the rows lie
 * DW_PL_RW words apart), so one assembly loop keeps everything in registers; the
 * requantisation is DW_RQ, one byte per output (the activation range clamps the 4 bytes as
 * one word). Filling a row sign-extends each input word once for its 4 channels (SXTAB16
 * adds the offset) and packs it into the 4 channels' rows (PKHBT / PKHTB). The rows are a
 * window of DW_PL_NS slots: a whole tensor fills each input row once per column block and
 * moves the K - 1 rows it still needs back to slot 0 when the window is full (every 3 rows
 * at 3x3 and 5x5, every row at 7x7: a few % of the work), so kernel row r always lies r rows
 * after the output row's first; a row call fills the K rows under its output row.
 *
 * The caller's DW_STRIP_WORDS buffer holds the 4 channels' rows (4 NS RW words) and their
 * constants (per channel K rows of K - 1 weight words: (w0, w1), (w2, w3), .., then (w1,
 * w2), ..; then the start value 2 * bias, the SMMLAR multiplier and rounding constant, the
 * right shift). */

/* words per ring row (the loop's literal offsets), rows in the window; a block is DW_PL_G
 * groups of 4 columns: 2 G + (K - 1) / 2 words */
#define DW_PL_RW(K) ((K) == 3 ? 17 : (K) == 5 ? 10 : 7)
#define DW_PL_NS(K) ((K) == 3 ? 5 : 7) /* at K = 7 a whole tensor moves 6 rows per row */
/* small maps: shorter rows, more of them in the same words (a whole 8x8 map's input rows
 * without moving any at K = 3) */
#define DW_PL_RWS(K) ((K) == 3 ? 5 : 7)
#define DW_PL_CHW(K) (DW_PL_NS(K) * DW_PL_RW(K)) /* words per channel */
typedef char dw_pl_small_rows[DW_PL_CHW(3) % DW_PL_RWS(3) == 0 && DW_PL_CHW(5) % DW_PL_RWS(5) == 0
                                  ? 1
                                  : -1];
#define DW_PL_G(K) ((DW_PL_RW(K) - ((K) - 1) / 2) / 2)
#define DW_PL_KW(K) ((K) * ((K) - 1)) /* weight words per channel */
#define DW_PL_WORDS(K) (4 * DW_PL_NS(K) * DW_PL_RW(K) + 4 * (DW_PL_KW(K) + 4))
typedef char dw_pl_fits[DW_PL_WORDS(3) <= DW_STRIP_WORDS && DW_PL_WORDS(5) <= DW_STRIP_WORDS &&
                                DW_PL_WORDS(7) <= DW_STRIP_WORDS
                            ? 1
                            : -1];

/* Where the window beats the 4-channel kernels (measured, TT_DW_BENCH in test_dw_opt.c):
 * whole tensors from 8 columns, 3x3 from 4 (4x4: 4.90 -> 4.34 instructions per MAC; 5x5 and
 * 7x7 there skip most taps as padding on the clipped path); row calls, which fill the K
 * input rows under their output row every time, from 16 and not at 7x7 (the strips do those
 * rows better). */
static int dw_plane_ok(const tt_conv_geom *g, int whole)
{
    const int32_t k = g->kh;
    return g->kw == k && (k == 3 || k == 5 || k == 7) && g->sh == 1 && g->sw == 1 &&
           (whole ? g->ow >= 8 || (k == 3 && g->ow >= 4) : k < 7 && g->ow >= 16);
}

/* (x + off) of channels (0, 2) and (1, 3) of the 4 bytes v, as 16-bit lanes */
TT_DW_INLINE void dw_ext4(uint32_t v, int32_t off2, uint32_t *e02, uint32_t *e13)
{
#if defined(TT_DW_DSP)
    __asm__("sxtab16 %0, %2, %3\n\tsxtab16 %1, %2, %3, ror #8"
            : "=&r"(*e02), "=r"(*e13)
            : "r"(off2), "r"(v));
#else
    *e02 = (uint32_t)dw_sxtab16(off2, v);
    *e13 = (uint32_t)dw_sxtab16(off2, (v >> 8) | (v << 24));
#endif
}

/* (a & 0xFFFF) | (b << 16), and (b & 0xFFFF0000) | (a >> 16): PKHBT / PKHTB */
TT_DW_INLINE uint32_t dw_pk_lo(uint32_t a, uint32_t b)
{
#if defined(TT_DW_DSP)
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return (a & 0xFFFFu) | (b << 16);
#endif
}

TT_DW_INLINE uint32_t dw_pk_hi(uint32_t a, uint32_t b)
{
#if defined(TT_DW_DSP)
    uint32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(b), "r"(a));
    return r;
#else
    return (b & 0xFFFF0000u) | (a >> 16);
#endif
}

/* word i of the 4 channels' ring rows (at d, ch words apart) from the extended columns a
 * (2i) and b (2i + 1) */
#define DW_PL_PUT(d, ch, i, a02, a13, b02, b13)                                            \
    do {                                                                                   \
        (d)[(i)] = dw_pk_lo((a02), (b02));                                                 \
        (d)[2 * (ch) + (i)] = dw_pk_hi((a02), (b02));                                      \
        (d)[(ch) + (i)] = dw_pk_lo((a13), (b13));                                          \
        (d)[3 * (ch) + (i)] = dw_pk_hi((a13), (b13));                                      \
    } while (0)

/* A block's ring row layout: word i holds input columns ix0 + 2i, ix0 + 2i + 1; words i0 ..
 * i1 - 1 have both inside the input, word i0 - 1 may have only its second (column 0: `left`),
 * word i1 only its first (column w - 1: `right`), the others none (zeros). */
typedef struct {
    int32_t ix0, i0, i1, left, right;
} dw_pl_cols;

static dw_pl_cols dw_pl_layout(const tt_conv_geom *g, int32_t q0, int32_t nw)
{
    dw_pl_cols L;
    const int32_t ix0 = q0 - g->pl, w = g->w;
    int32_t i0 = ix0 >= 0 ? 0 : (1 - ix0) / 2, i1 = w - ix0 >= 0 ? (w - ix0) / 2 : 0;

    i0 = i0 < nw ? i0 : nw;
    i1 = i1 < nw ? i1 : nw;
    i1 = i1 > i0 ? i1 : i0;
    L.ix0 = ix0;
    L.i0 = i0;
    L.i1 = i1;
    L.left = i0 > 0 && ix0 + 2 * i0 - 1 == 0;
    L.right = i1 < nw && ix0 + 2 * i1 == w - 1;
    return L;
}

/* Zero the words of the window's rows of the 4 channels that hold no input column (they stay
 * zero while the block's rows are filled and moved). */
static void dw_pl_zero_pad(uint32_t *buf, int32_t k, int32_t rw, int32_t nrows,
                           const dw_pl_cols *L, int32_t nw)
{
    const int32_t a = L->i0 - L->left, b = L->i1 + L->right;
    uint32_t zero = 0;
    int32_t j, r, i;

#if defined(__GNUC__)
    __asm__("" : "+r"(zero)); /* a few words per row: keep GCC from calling memset */
#endif
    for (j = 0; j < 4; ++j) {
        for (r = 0; r < nrows; ++r) { /* the first nrows rows of each channel */
            uint32_t *const d = buf + j * DW_PL_CHW(k) + r * rw;
            for (i = 0; i < a; ++i) {
                d[i] = zero;
            }
            for (i = b; i < nw; ++i) {
                d[i] = zero;
            }
        }
    }
}

#if defined(TT_DW_DSP)
/* One input row into the 4 channels' ring rows at d (channel j at byte offset j CH): the
 * left edge word (padding, column 0) when l, interior words until d reaches e (per word: 2
 * LDR, 4 SXTAB16, 4 PKHBT / PKHTB, 4 STR), the right edge word (column w - 1, padding) when
 * r. CH1..CH3: the channels' byte offsets as strings, CHnM4 the same minus 4. */
#define DW_PL_FILL_ASM(CH1, CH2, CH3, CH1M4, CH2M4, CH3M4)                                 \
    __asm__ volatile("cmp %[l], #0\n\t"                                                    \
                     "beq 2f\n\t"                                                          \
                     "sub %[t1], %[p], %[c]\n\t"                                           \
                     "ldr %[t0], [%[t1]]\n\t"                                              \
                     "sxtab16 %[t1], %[o], %[t0], ror #8\n\t"                              \
                     "sxtab16 %[t0], %[o], %[t0]\n\t"                                      \
                     "lsl %[t4], %[t0], #16\n\tstr %[t4], [%[d], #-4]\n\t"                 \
                     "lsr %[t4], %[t0], #16\n\tlsl %[t4], %[t4], #16\n\t"                  \
                     "str %[t4], [%[d], #" CH2M4 "]\n\t"                                   \
                     "lsl %[t4], %[t1], #16\n\tstr %[t4], [%[d], #" CH1M4 "]\n\t"          \
                     "lsr %[t4], %[t1], #16\n\tlsl %[t4], %[t4], #16\n\t"                  \
                     "str %[t4], [%[d], #" CH3M4 "]\n\t"                                   \
                     "2:\n\t"                                                              \
                     "cmp %[d], %[e]\n\t"                                                  \
                     "beq 3f\n\t"                                                          \
                     "1:\n\t"                                                              \
                     "ldr %[t0], [%[p]]\n\tldr %[t2], [%[p], %[c]]\n\t"                    \
                     "add %[p], %[p], %[c], lsl #1\n\t"                                    \
                     "sxtab16 %[t1], %[o], %[t0], ror #8\n\t"                              \
                     "sxtab16 %[t0], %[o], %[t0]\n\t"                                      \
                     "sxtab16 %[t3], %[o], %[t2], ror #8\n\t"                              \
                     "sxtab16 %[t2], %[o], %[t2]\n\t"                                      \
                     "pkhtb %[t4], %[t2], %[t0], asr #16\n\tstr %[t4], [%[d], #" CH2 "]\n\t" \
                     "pkhbt %[t4], %[t1], %[t3], lsl #16\n\tstr %[t4], [%[d], #" CH1 "]\n\t" \
                     "pkhtb %[t4], %[t3], %[t1], asr #16\n\tstr %[t4], [%[d], #" CH3 "]\n\t" \
                     "pkhbt %[t4], %[t0], %[t2], lsl #16\n\tstr %[t4], [%[d]], #4\n\t"     \
                     "cmp %[d], %[e]\n\t"                                                  \
                     "bne 1b\n\t"                                                          \
                     "3:\n\t"                                                              \
                     "cmp %[r], #0\n\t"                                                    \
                     "beq 4f\n\t"                                                          \
                     "ldr %[t0], [%[p]]\n\t"                                               \
                     "sxtab16 %[t1], %[o], %[t0], ror #8\n\t"                              \
                     "sxtab16 %[t0], %[o], %[t0]\n\t"                                      \
                     "uxth %[t4], %[t0]\n\tstr %[t4], [%[d]]\n\t"                          \
                     "lsr %[t4], %[t0], #16\n\tstr %[t4], [%[d], #" CH2 "]\n\t"            \
                     "uxth %[t4], %[t1]\n\tstr %[t4], [%[d], #" CH1 "]\n\t"                \
                     "lsr %[t4], %[t1], #16\n\tstr %[t4], [%[d], #" CH3 "]\n\t"            \
                     "4:"                                                                  \
                     : [p] "+r"(p), [d] "+r"(dp), [t0] "=&r"(t0), [t1] "=&r"(t1),          \
                       [t2] "=&r"(t2), [t3] "=&r"(t3), [t4] "=&r"(t4)                      \
                     : [c] "r"(cin), [o] "r"(off2), [e] "r"(d + i0 + n), [l] "r"(L->left),  \
                       [r] "r"(L->right)                                                   \
                     : "cc", "memory")
#endif

/* Input rows iy0 .. iy1 - 1 of channels c0..c0+3 into the window (channel j's rows at
 * buf + j NS RW, row iy in slot iy - base), layout L; rows outside the input are zeros. */
TT_DW_NOINLINE void dw_pl_fill(uint32_t *buf, int32_t k, int32_t rw, int32_t iy0, int32_t iy1,
                               int32_t base, const dw_pl_cols *L, int32_t nw, const dw_job *J,
                               int32_t c0, int32_t off2)
{
    const tt_conv_geom *g = J->g;
    const int32_t cin = g->cin, i0 = L->i0, n = L->i1 - L->i0, ch = DW_PL_CHW(k);
    int32_t iy;

    for (iy = iy0; iy < iy1; ++iy) {
        uint32_t *const d = buf + (iy - base) * rw;
        const int8_t *p;
        if (iy < 0 || iy >= g->h) {
            uint32_t zero = 0;
            int32_t i;
#if defined(__GNUC__)
            __asm__("" : "+r"(zero)); /* no memset calls (byte by byte in newlib-nano) */
#endif
            for (i = 0; i < nw; ++i) {
                d[i] = d[ch + i] = d[2 * ch + i] = d[3 * ch + i] = zero;
            }
            continue;
        }
        p = tt_row(J->x, iy) + c0 + (L->ix0 + 2 * i0) * cin; /* word i0's first column */
#if defined(TT_DW_DSP)
        {
            uint32_t *dp = d + i0;
            uint32_t t0, t1, t2, t3, t4;
            if (k == 3) { /* channels 4 NS RW = 340 bytes apart */
                DW_PL_FILL_ASM("340", "680", "1020", "336", "676", "1016");
            } else if (k == 5) { /* 280 */
                DW_PL_FILL_ASM("280", "560", "840", "276", "556", "836");
            } else { /* 196 */
                DW_PL_FILL_ASM("196", "392", "588", "192", "388", "584");
            }
        }
#else
        {
            uint32_t a02, a13, b02, b13;
            int32_t i;
            if (L->left) { /* (padding, column 0) */
                dw_ext4(dw_load32(p - cin), off2, &b02, &b13);
                DW_PL_PUT(d, ch, i0 - 1, 0u, 0u, b02, b13);
            }
            for (i = i0; i < i0 + n; ++i, p += 2 * cin) {
                dw_ext4(dw_load32(p), off2, &a02, &a13);
                dw_ext4(dw_load32(p + cin), off2, &b02, &b13);
                DW_PL_PUT(d, ch, i, a02, a13, b02, b13);
            }
            if (L->right) { /* (column w - 1, padding) */
                dw_ext4(dw_load32(p), off2, &a02, &a13);
                DW_PL_PUT(d, ch, i0 + n, a02, a13, 0u, 0u);
            }
        }
#endif
    }
}
typedef char dw_pl_fill_offsets[4 * DW_PL_CHW(3) == 340 && 4 * DW_PL_CHW(5) == 280 &&
                                        4 * DW_PL_CHW(7) == 196
                                    ? 1
                                    : -1];

/* A row's channel steps (memory operands of the loop): bytes from where q ends to the next
 * channel's first word, from where o ends to the next channel's first output, and the end
 * of the channels' constants. */
typedef struct {
    int32_t qstep, ostep;
    const uint32_t *kend;
} dw_pl_step;

#if defined(TT_DW_DSP)
/* ---- the loop's kernel rows. A row's words: E0..E2 (K = 3) or E0..E3 (5, 7) from byte OFF
 * of q, or (_0, the first row) from q, stepping q to the next group's words (the other rows'
 * offsets are relative to that). ---- */
#define DW_PL_E3(OFF) "ldrd %[e0], %[e1], [%[q], #" OFF "]\n\tldr %[e2], [%[q], #" OFF "+8]\n\t"
#define DW_PL_E3_0 "ldrd %[e0], %[e1], [%[q]], #8\n\tldr %[e2], [%[q]]\n\t"
#define DW_PL_E5(OFF)                                                                      \
    "ldrd %[e0], %[e1], [%[q], #" OFF "]\n\tldrd %[e2], %[e3], [%[q], #" OFF "+8]\n\t"
#define DW_PL_E5_0 "ldrd %[e0], %[e1], [%[q]], #8\n\tldrd %[e2], %[e3], [%[q]]\n\t"
/* (w0, w1) against E0 (columns 0, 1) and E1 (2, 3); FIRST: the sums start from a0 (the start
 * value) */
#define DW_PL_W01_FIRST                                                                    \
    "smlatb %[a1], %[e0], %[w], %[a0]\n\tsmlad %[a2], %[e1], %[w], %[a0]\n\t"               \
    "smlatb %[a3], %[e1], %[w], %[a0]\n\tsmlad %[a0], %[e0], %[w], %[a0]\n\t"
#define DW_PL_W01                                                                          \
    "smlad %[a0], %[e0], %[w], %[a0]\n\tsmlatb %[a1], %[e0], %[w], %[a1]\n\t"               \
    "smlad %[a2], %[e1], %[w], %[a2]\n\tsmlatb %[a3], %[e1], %[w], %[a3]\n\t"
/* the taps of a row, its weights at byte WO from k. 3 taps: words (w0, w1), (w1, w2) */
#define DW_PL_T3(WO, W01)                                                                  \
    "ldrd %[w], %[e3], [%[k], #" WO "]\n\t" W01                                            \
    "smlabt %[a0], %[e1], %[e3], %[a0]\n\tsmlad %[a1], %[e1], %[e3], %[a1]\n\t"             \
    "smlabt %[a2], %[e2], %[e3], %[a2]\n\tsmlad %[a3], %[e2], %[e3], %[a3]\n\t"
/* 5 taps: words (w0, w1), (w2, w3), (w1, w2), (w3, w4) */
#define DW_PL_T5(WO, W01)                                                                  \
    "ldr %[w], [%[k], #" WO "]\n\t" W01                                                    \
    "ldr %[w], [%[k], #" WO "+4]\n\t"                                                      \
    "smlad %[a0], %[e1], %[w], %[a0]\n\tsmlad %[a2], %[e2], %[w], %[a2]\n\t"                \
    "ldr %[w], [%[k], #" WO "+8]\n\t"                                                      \
    "smlad %[a1], %[e1], %[w], %[a1]\n\tsmlad %[a3], %[e2], %[w], %[a3]\n\t"                \
    "ldr %[w], [%[k], #" WO "+12]\n\t"                                                     \
    "smlabt %[a0], %[e2], %[w], %[a0]\n\tsmlad %[a1], %[e2], %[w], %[a1]\n\t"               \
    "smlabt %[a2], %[e3], %[w], %[a2]\n\tsmlad %[a3], %[e3], %[w], %[a3]\n\t"
/* 7 taps: words (w0, w1), (w2, w3), (w4, w5), (w1, w2), (w3, w4), (w5, w6); E4 (columns 8,
 * 9; loaded by E4LOAD) replaces E0 once (w0, w1) is done */
#define DW_PL_T7(E4LOAD, WO, W01)                                                          \
    "ldr %[w], [%[k], #" WO "]\n\t" W01 E4LOAD                                             \
    "ldr %[w], [%[k], #" WO "+4]\n\t"                                                      \
    "smlad %[a0], %[e1], %[w], %[a0]\n\tsmlad %[a2], %[e2], %[w], %[a2]\n\t"                \
    "ldr %[w], [%[k], #" WO "+8]\n\t"                                                      \
    "smlad %[a0], %[e2], %[w], %[a0]\n\tsmlad %[a2], %[e3], %[w], %[a2]\n\t"                \
    "ldr %[w], [%[k], #" WO "+12]\n\t"                                                     \
    "smlad %[a1], %[e1], %[w], %[a1]\n\tsmlad %[a3], %[e2], %[w], %[a3]\n\t"                \
    "ldr %[w], [%[k], #" WO "+16]\n\t"                                                     \
    "smlad %[a1], %[e2], %[w], %[a1]\n\tsmlad %[a3], %[e3], %[w], %[a3]\n\t"                \
    "ldr %[w], [%[k], #" WO "+20]\n\t"                                                     \
    "smlabt %[a0], %[e3], %[w], %[a0]\n\tsmlad %[a1], %[e3], %[w], %[a1]\n\t"               \
    "smlabt %[a2], %[e0], %[w], %[a2]\n\tsmlad %[a3], %[e0], %[w], %[a3]\n\t"
/* a 7-tap row at byte OFF from q */
#define DW_PL_R7(OFF, WO)                                                                  \
    DW_PL_E5(OFF) DW_PL_T7("ldr %[e0], [%[q], #" OFF "+16]\n\t", WO, DW_PL_W01)
/* the kernel rows with the input rows RB bytes apart (a string: 68 or 20 at K = 3, 40 or 28
 * at 5, 28 at 7) and the weight rows 8, 16, 24 bytes apart */
#define DW_PL_ROWS3(RB)                                                                    \
    DW_PL_E3_0 DW_PL_T3("0", DW_PL_W01_FIRST) DW_PL_E3("(" RB "-8)")                       \
    DW_PL_T3("8", DW_PL_W01) DW_PL_E3("(2*" RB "-8)") DW_PL_T3("16", DW_PL_W01)
#define DW_PL_ROWS5(RB)                                                                    \
    DW_PL_E5_0 DW_PL_T5("0", DW_PL_W01_FIRST) DW_PL_E5("(" RB "-8)")                       \
    DW_PL_T5("16", DW_PL_W01) DW_PL_E5("(2*" RB "-8)") DW_PL_T5("32", DW_PL_W01)           \
    DW_PL_E5("(3*" RB "-8)") DW_PL_T5("48", DW_PL_W01) DW_PL_E5("(4*" RB "-8)")            \
    DW_PL_T5("64", DW_PL_W01)
#define DW_PL_ROWS7(RB)                                                                    \
    DW_PL_E5_0 DW_PL_T7("ldr %[e0], [%[q], #8]\n\t", "0", DW_PL_W01_FIRST)                 \
    DW_PL_R7("(" RB "-8)", "24") DW_PL_R7("(2*" RB "-8)", "48")                            \
    DW_PL_R7("(3*" RB "-8)", "72") DW_PL_R7("(4*" RB "-8)", "96")                          \
    DW_PL_R7("(5*" RB "-8)", "120") DW_PL_R7("(6*" RB "-8)", "144")
typedef char dw_pl_row_offsets[4 * DW_PL_RW(3) == 68 && 4 * DW_PL_RW(5) == 40 &&
                                       4 * DW_PL_RW(7) == 28 &&
                                       4 * DW_PL_RWS(3) == 20 && 4 * DW_PL_RWS(5) == 28
                                   ? 1
                                   : -1];
#define DW_PL_RQ1(a)                                                                       \
    "add %[e0], %[e3], %[" a "], asr #31\n\tsmmlar %[" a "], %[" a "], %[w], %[e0]\n\t"     \
    "asr %[" a "], %[" a "], %[e1]\n\tssat %[" a "], #8, %[" a "]\n\t"
/* the 4 bytes to o, o + cin, o + 2 cin, o + 3 cin; o steps by 4 cin */
#define DW_PL_STORE                                                                        \
    "strb %[a0], [%[o]]\n\tstrb %[a1], [%[o], %[cin]]\n\t"                                  \
    "strb %[a2], [%[o], %[cin], lsl #1]\n\tadd %[o], %[o], %[cin], lsl #1\n\t"              \
    "strb %[a3], [%[o], %[cin]]\n\tadd %[o], %[o], %[cin], lsl #1\n\t"
/* the same through one word clamped to lo4..hi4 (as tt_clamp4_s8) */
#define DW_PL_STORE_CLAMP                                                                  \
    "bfi %[a0], %[a1], #8, #8\n\tbfi %[a0], %[a2], #16, #8\n\tbfi %[a0], %[a3], #24, #8\n\t" \
    "ldr %[w], %[lo4]\n\tldr %[e3], %[hi4]\n\t"                                             \
    "ssub8 %[e0], %[a0], %[w]\n\tsel %[a0], %[a0], %[w]\n\t"                                \
    "ssub8 %[e0], %[e3], %[a0]\n\tsel %[a0], %[a0], %[e3]\n\t"                              \
    "strb %[a0], [%[o]]\n\tlsr %[a0], %[a0], #8\n\tstrb %[a0], [%[o], %[cin]]\n\t"          \
    "lsr %[a0], %[a0], #8\n\tstrb %[a0], [%[o], %[cin], lsl #1]\n\t"                        \
    "add %[o], %[o], %[cin], lsl #1\n\tlsr %[a0], %[a0], #8\n\t"                            \
    "strb %[a0], [%[o], %[cin]]\n\tadd %[o], %[o], %[cin], lsl #1\n\t"
/* One output row of the 4 channels: per channel, groups of 4 output columns from row word q
 * on until q reaches end; then q, end, o and k step to the next channel (st: qstep, ostep,
 * kend) until k reaches kend. K_: channel 0's constants (then every KSTEP bytes), SC: the
 * byte offset of the requantisation words in them, CHB: the bytes between the channels'
 * rows (all as strings). */
#define DW_PL_LOOP(ROWS, SC, KSTEP, CHB, STORE, o_, q_, end_, cin_, K_, lo4_, hi4_, st_)    \
    do {                                                                                   \
        int32_t a0_, a1_, a2_, a3_;                                                        \
        uint32_t e0_, e1_, e2_, e3_, w_;                                                   \
        int8_t *po_ = (o_);                                                                \
        const uint32_t *pq_ = (q_), *pe_ = (end_), *pk_ = (K_);                            \
        __asm__ volatile("1:\n\t"                                                          \
                         "ldr %[a0], [%[k], #" SC "]\n\t" ROWS                              \
                         "ldrd %[w], %[e3], [%[k], #" SC "+4]\n\t"                         \
                         "ldr %[e1], [%[k], #" SC "+12]\n\t"                               \
                         DW_PL_RQ1("a0") DW_PL_RQ1("a1") DW_PL_RQ1("a2") DW_PL_RQ1("a3")   \
                         STORE                                                             \
                         "cmp %[q], %[end]\n\t"                                            \
                         "bne 1b\n\t"                                                      \
                         "ldr %[w], %[qstep]\n\tadd %[q], %[q], %[w]\n\t"                  \
                         "add %[end], %[end], #" CHB "\n\t"                                \
                         "ldr %[w], %[ostep]\n\tadd %[o], %[o], %[w]\n\t"                  \
                         "add %[k], %[k], #" KSTEP "\n\t"                                  \
                         "ldr %[w], %[kend]\n\t"                                           \
                         "cmp %[k], %[w]\n\t"                                              \
                         "bne 1b"                                                          \
                         : [q] "+r"(pq_), [o] "+r"(po_), [end] "+r"(pe_), [k] "+r"(pk_),    \
                           [a0] "=&r"(a0_), [a1] "=&r"(a1_), [a2] "=&r"(a2_),               \
                           [a3] "=&r"(a3_), [e0] "=&r"(e0_), [e1] "=&r"(e1_),               \
                           [e2] "=&r"(e2_), [e3] "=&r"(e3_), [w] "=&r"(w_)                  \
                         : [cin] "r"(cin_), [lo4] "m"(lo4_), [hi4] "m"(hi4_),               \
                           [qstep] "m"((st_).qstep), [ostep] "m"((st_).ostep),              \
                           [kend] "m"((st_).kend)                                          \
                         : "cc", "memory");                                                \
    } while (0)
#define DW_PL_RUN_K(ROWS, SC, KSTEP, CHB, clamp, o_, q_, end_, cin_, K_, lo4_, hi4_, st_) \
    do {                                                                                   \
        if (clamp) {                                                                       \
            DW_PL_LOOP(ROWS, SC, KSTEP, CHB, DW_PL_STORE_CLAMP, o_, q_, end_, cin_, K_,    \
                       lo4_, hi4_, st_);                                                   \
        } else {                                                                           \
            DW_PL_LOOP(ROWS, SC, KSTEP, CHB, DW_PL_STORE, o_, q_, end_, cin_, K_, lo4_,    \
                       hi4_, st_);                                                         \
        }                                                                                  \
    } while (0)
typedef char dw_pl_sc_offsets[4 * DW_PL_KW(3) == 24 && 4 * DW_PL_KW(5) == 80 &&
                                      4 * DW_PL_KW(7) == 168 && 4 * (DW_PL_KW(7) + 4) == 184 &&
                                      4 * (DW_PL_KW(3) + 4) == 40 &&
                                      4 * (DW_PL_KW(5) + 4) == 96
                                  ? 1
                                  : -1];
#define DW_PL_RUN(kk, rw_, clamp, o_, q_, end_, cin_, K_, lo4_, hi4_, st_)                 \
    do {                                                                                   \
        if ((kk) == 3 && (rw_) == DW_PL_RW(3)) {                                           \
            DW_PL_RUN_K(DW_PL_ROWS3("68"), "24", "40", "340", clamp, o_, q_, end_, cin_, K_, \
                        lo4_, hi4_, st_);                                                  \
        } else if ((kk) == 3) {                                                            \
            DW_PL_RUN_K(DW_PL_ROWS3("20"), "24", "40", "340", clamp, o_, q_, end_, cin_, K_, \
                        lo4_, hi4_, st_);                                                  \
        } else if ((kk) == 7) {                                                            \
            DW_PL_RUN_K(DW_PL_ROWS7("28"), "168", "184", "196", clamp, o_, q_, end_, cin_, K_,   \
                        lo4_, hi4_, st_);                                                  \
        } else if ((rw_) == DW_PL_RW(5)) {                                                 \
            DW_PL_RUN_K(DW_PL_ROWS5("40"), "80", "96", "280", clamp, o_, q_, end_, cin_, K_, \
                        lo4_, hi4_, st_);                                                  \
        } else {                                                                           \
            DW_PL_RUN_K(DW_PL_ROWS5("28"), "80", "96", "280", clamp, o_, q_, end_, cin_, K_, \
                        lo4_, hi4_, st_);                                                  \
        }                                                                                  \
    } while (0)
#else
/* the same in C: in slot s, column j of a group takes the lanes j .. j + K - 1 of its words;
 * the weights are unpacked from the slot's words ((w0, w1), (w2, w3), ..: even taps in the
 * first (K - 1) / 2 words) */
static void dw_pl_run_c(int32_t k, int32_t rw, int clamp, int8_t *o, const uint32_t *q,
                        const uint32_t *end, int32_t cin, const uint32_t *kp, uint32_t lo4,
                        uint32_t hi4, const dw_pl_step *st)
{
    const int32_t nk = k - 1, h = (k - 1) / 2;
    const int32_t chw = DW_PL_CHW(k), kcw = DW_PL_KW(k) + 4;

    for (; kp != st->kend; kp += kcw, end += chw,
                           q += st->qstep / 4, o += st->ostep) {
        const int32_t *const sc = (const int32_t *)(const void *)(kp + DW_PL_KW(k));
        for (; q != end; q += 2, o += 4 * cin) {
            int32_t a[4], s, j, t;
            for (j = 0; j < 4; ++j) {
                a[j] = sc[0];
                for (s = 0; s < k; ++s) {
                    const uint32_t *const ws = kp + s * nk;
                    for (t = 0; t < k; ++t) {
                        /* tap t: word t / 2 of the first half, lane t % 2; the last (even
                         * K - 1) in the top lane of the last word */
                        const uint32_t word = t < 2 * h ? ws[t / 2] : ws[nk - 1];
                        const int32_t wt = t < 2 * h && t % 2 == 0 ? dw_lo16((int32_t)word)
                                                                   : dw_hi16((int32_t)word);
                        const uint32_t xw = q[s * rw + (j + t) / 2];
                        const int32_t v = (int32_t)(int16_t)(uint16_t)(xw >> (16 * ((j + t) % 2)));
                        a[j] = (int32_t)((uint32_t)a[j] + (uint32_t)(v * wt));
                    }
                }
                DW_RQ(a[j], a[j], sc[1], sc[2], sc[3]);
            }
            if (clamp) {
                uint32_t r = (uint32_t)a[0];
                DW_INS8(r, a[1], 8);
                DW_INS8(r, a[2], 16);
                DW_INS8(r, a[3], 24);
                r = tt_clamp4_s8(r, lo4, hi4);
                for (j = 0; j < 4; ++j) {
                    a[j] = (int8_t)(uint8_t)(r >> (8 * j));
                }
            }
            for (j = 0; j < 4; ++j) {
                o[j * cin] = (int8_t)a[j];
            }
        }
    }
}
#define DW_PL_RUN(kk, rw_, clamp, o_, q_, end_, cin_, K_, lo4_, hi4_, st_)                 \
    dw_pl_run_c((kk), (rw_), (clamp), (o_), (q_), (end_), (cin_), (K_), (lo4_), (hi4_), &(st_))
#endif

/* The group's constants from its pack (see dw_pl_consts_k): the scalars copied, and the
 * doubled weights, stored per tap as channels (0, 2) | (1, 3) in 16-bit lanes, made into each
 * channel's tap-pair words: two taps' words give a word of each of the 4 channels. K is a
 * constant, so the loops unroll into fixed offsets (a row call runs this per 4 channels and
 * output row: the index arithmetic of a generic loop cost more than the words). */
TT_DW_INLINE void dw_pl_consts_pk(uint32_t *kc, const int32_t *pk, const int32_t k)
{
    const dw_consts *const pc = (const dw_consts *)(const void *)pk;
    const uint32_t *a = (const uint32_t *)(const void *)(pk + DW_PACK_CONSTS);
    const int32_t cw = DW_PL_KW(k) + 4, nk = k - 1, h = (k - 1) / 2;
    int32_t j, r, t;

#pragma GCC unroll 4
    for (j = 0; j < 4; ++j) {
        int32_t *const sc = (int32_t *)(void *)(kc + j * cw + DW_PL_KW(k));
        sc[0] = pc->ini_b[j / 2].w[j % 2];
        sc[1] = pc->mc[j].w[0];
        sc[2] = pc->mc[j].w[1];
        sc[3] = pc->e[j];
    }
#pragma GCC unroll 7
    for (r = 0; r < k; ++r, a += 2) { /* a: tap (r, 0) */
#pragma GCC unroll 6
        for (t = 0; t + 1 < k; ++t, a += 2) {
            /* taps (t, t + 1): word t / 2 of the row's first half when t is even, of its
             * second half when odd */
            uint32_t *const d = kc + r * nk + (t % 2 ? h + t / 2 : t / 2);
            const uint32_t a02 = a[0], a13 = a[1], b02 = a[2], b13 = a[3];
            d[0] = dw_pk_lo(a02, b02);
            d[cw] = dw_pk_lo(a13, b13);
            d[2 * cw] = dw_pk_hi(a02, b02);
            d[3 * cw] = dw_pk_hi(a13, b13);
        }
    }
}

/* The group's constants at kc, per channel DW_PL_KW(K) + 4 words: its K weight rows, then
 * ini, m, c, sh; from the pack or derived. 0 when the fast requantisation refuses the group
 * (nothing else is then used). K is a constant in each caller (dw_pl_consts). */
TT_DW_INLINE int dw_pl_consts_k(uint32_t *kc, int32_t c0, const dw_job *J, const int32_t k)
{
    const int32_t nk = k - 1, h = (k - 1) / 2;
    uint32_t sum_bound;
    int32_t j, r, t;

    if (J->pack != NULL) {
        const int32_t *const pk = J->pack + (c0 / 4) * dw_pack_group_words(J->g);
        if (!((const dw_consts *)(const void *)pk)->fast) {
            return 0;
        }
        dw_pl_consts_pk(kc, pk, k);
        return 1;
    }
    if (!dw_fast_range(J->q)) {
        return 0;
    }
    sum_bound = dw_sum_bound(J->g, J->q);
    for (j = 0; j < 4; ++j) { /* derived as dw_setup does, and the doubled weights from w */
        uint32_t *wr = kc + j * (DW_PL_KW(k) + 4);
        int32_t *const sc = (int32_t *)(void *)(wr + DW_PL_KW(k));
        const int8_t *const wj = J->w + (c0 + j) * k * k;
        if (!dw_fast_channel(&sc[1], &sc[2], &sc[3], c0 + j, sum_bound, J)) {
            return 0;
        }
        sc[0] = J->b != NULL && sc[1] != 0 ? 2 * J->b[c0 + j] : 0;
        for (r = 0; r < k; ++r, wr += nk) {
            for (t = 0; t < h; ++t) {
                const uint32_t v0 = (uint32_t)(2 * wj[r * k + 2 * t]) & 0xFFFFu;
                const uint32_t v1 = (uint32_t)(2 * wj[r * k + 2 * t + 1]) & 0xFFFFu;
                const uint32_t v2 = (uint32_t)(2 * wj[r * k + 2 * t + 2]) & 0xFFFFu;
                wr[t] = v0 | (v1 << 16);     /* (w0, w1), (w2, w3), .. */
                wr[h + t] = v1 | (v2 << 16); /* (w1, w2), (w3, w4), .. */
            }
        }
    }
    return 1;
}

TT_DW_NOINLINE int dw_pl_consts(uint32_t *kc, uint32_t *lohi, int32_t c0, const dw_job *J)
{
    lohi[0] = dw_bcast8(J->q->act_min);
    lohi[1] = dw_bcast8(J->q->act_max);
    return J->g->kh == 3   ? dw_pl_consts_k(kc, c0, J, 3)
           : J->g->kh == 5 ? dw_pl_consts_k(kc, c0, J, 5)
                           : dw_pl_consts_k(kc, c0, J, 7);
}

/* Move rows from .. from + n - 1 of the 4 channels' windows to slots 0 .. n - 1 (a forward
 * copy of n rows per channel: the rows only move down). */
static void dw_pl_slide(uint32_t *buf, int32_t k, int32_t rw, int32_t from, int32_t n)
{
    const int32_t ch = DW_PL_CHW(k);
    int32_t j;

    for (j = 0; j < 4; ++j) {
        uint32_t *d = buf + j * ch;
        const uint32_t *src = d + from * rw;
#if defined(TT_DW_DSP) /* (a C loop may become a memcpy call: byte by byte in newlib-nano) */
        uint32_t t0, t1;
        int32_t c = n * rw;
        __asm__ volatile("tst %[c], #1\n\t"
                         "beq 2f\n\t"
                         "ldr %[t0], [%[s]], #4\n\tstr %[t0], [%[d]], #4\n\t"
                         "subs %[c], %[c], #1\n\t"
                         "beq 3f\n\t"
                         "2:\n\t"
                         "ldrd %[t0], %[t1], [%[s]], #8\n\tstrd %[t0], %[t1], [%[d]], #8\n\t"
                         "subs %[c], %[c], #2\n\tbne 2b\n\t"
                         "3:"
                         : [s] "+r"(src), [d] "+r"(d), [c] "+r"(c), [t0] "=&r"(t0),
                           [t1] "=&r"(t1)
                         :
                         : "cc", "memory");
#else
        int32_t i;
        for (i = 0; i < n * rw; ++i) {
            d[i] = src[i];
        }
#endif
    }
}

/* One column block of the window's rows (from its first output column ob0): nob columns,
 * n4 of them in whole groups of 4, nw row words in use, rows of rw words, ns of them;
 * layout L. */
typedef struct {
    int32_t nob, n4, nw, rw, ns;
    dw_pl_cols L;
} dw_pl_blk;

static void dw_pl_block(dw_pl_blk *B, const tt_conv_geom *g, int32_t ob0, int32_t bw)
{
    const int32_t k = g->kh;
    B->nob = g->ow - ob0 < bw ? g->ow - ob0 : bw;
    B->nw = 2 * ((B->nob + 3) / 4) + (k - 1) / 2;
    B->n4 = B->nob & ~3;
    B->rw = B->nw <= DW_PL_RWS(k) ? DW_PL_RWS(k) : DW_PL_RW(k);
    B->ns = DW_PL_CHW(k) / B->rw;
    B->L = dw_pl_layout(g, ob0, B->nw);
}

/* Zero the pad words of block B's rows the window will see */
static void dw_pl_block_pad(uint32_t *buf, const dw_pl_blk *B, int32_t k, int32_t rows)
{
    if (B->L.i0 - B->L.left > 0 || B->L.i1 + B->L.right < B->nw) {
        dw_pl_zero_pad(buf, k, B->rw, rows < B->ns ? rows : B->ns, &B->L, B->nw);
    }
}

/* Output rows oy0..oy1 of channels c0, c0 + 4, .. (4 at a time, while 4 are left) through
 * the window (dw_plane_ok), buf: the caller's DW_STRIP_WORDS. Returns the first channel not
 * done: the end, or a group whose requantisation the fast path refuses (nothing of it is
 * written: the caller runs dw_group, not this frame's callee, to keep the stack's deepest
 * chain as it was, and calls again after it). The groups share one call's setup: with one
 * column block (maps up to 32 columns at 3x3, 16 at 5x5, 8 at 7x7) also its layout and pad
 * words, which no fill overwrites (a row call's setup was ~330 instructions per group). */
TT_DW_NOINLINE int32_t dw_plane_groups(const dw_job *J, int32_t c0, uint32_t *buf)
{
    const tt_conv_geom *g = J->g;
    const int32_t k = g->kh, ch = DW_PL_CHW(k);
    const int32_t kc_words = DW_PL_KW(k) + 4;
    const int32_t cin = g->cin, ow = g->ow;
    const int32_t off2 = (int32_t)(((uint32_t)J->q->in_offset & 0xFFFFu) |
                                   ((uint32_t)J->q->in_offset << 16));
    /* column blocks of equal width, a multiple of 4 */
    const int32_t cols = 4 * DW_PL_G(k), nblk = (ow + cols - 1) / cols;
    const int32_t bw = ((ow + nblk - 1) / nblk + 3) & ~3;
    const int32_t rows = J->oy1 - J->oy0 + k - 1; /* input rows the window sees */
    uint32_t *const kc = buf + 4 * ch; /* the channels' constants */
    uint32_t lohi[2];
    dw_pl_blk blk0, blk;
    int32_t j, t, ob0, oy, clamp;

    dw_pl_block(&blk0, g, 0, bw);
    if (nblk == 1) {
        dw_pl_block_pad(buf, &blk0, k, rows);
    }
    for (; c0 + 4 <= cin; c0 += 4) {
        if (!dw_pl_consts(kc, lohi, c0, J)) {
            return c0;
        }
        clamp = lohi[0] != 0x80808080u || lohi[1] != 0x7F7F7F7Fu;
        for (ob0 = 0; ob0 < ow; ob0 += bw) {
            const dw_pl_blk *const B = ob0 == 0 ? &blk0 : &blk;
            int32_t base = J->oy0 - g->pt; /* the input row in slot 0 */
            int32_t last = base - 1;       /* the last input row filled */
            if (ob0 > 0) {
                dw_pl_block(&blk, g, ob0, bw);
            }
            if (nblk > 1) {
                dw_pl_block_pad(buf, B, k, rows);
            }
            if (rows <= B->ns) { /* all of them at once (a small map, a row call) */
                dw_pl_fill(buf, k, B->rw, base, base + rows, base, &B->L, B->nw, J, c0, off2);
                last = base + rows - 1;
            }
            for (oy = J->oy0; oy < J->oy1; ++oy) {
                const int32_t top = oy - g->pt;
                int8_t *const out = tt_row(J->y, oy) + c0 + ob0 * cin;
                if (top + k - 1 - base >= B->ns) { /* the window is full: its last K - 1 rows
                                                    * to 0 */
                    dw_pl_slide(buf, k, B->rw, top - base, last - top + 1);
                    base = top;
                }
                if (last < top + k - 1) { /* the input rows not yet in the window */
                    dw_pl_fill(buf, k, B->rw, top > last + 1 ? top : last + 1, top + k, base,
                               &B->L, B->nw, J, c0, off2);
                    last = top + k - 1;
                }
                {
                    /* the whole groups into the output row, then a last group of 1-3
                     * columns into tail[] (one call site: the loop is instantiated per K
                     * and row length already) */
                    const int32_t nob = B->nob, n4 = B->n4, rw = B->rw;
                    const uint32_t *const q0 = buf + (top - base) * rw;
                    int8_t tail[16];
                    int32_t pass;
                    dw_pl_step st;
                    st.kend = kc + 4 * kc_words;
                    for (pass = n4 > 0 ? 0 : 1; pass < (nob > n4 ? 2 : 1); ++pass) {
                        const int32_t n = pass == 0 ? n4 : 4, oc = pass == 0 ? cin : 4;
                        const uint32_t *const q = pass == 0 ? q0 : q0 + n4 / 2;
                        int8_t *const o = pass == 0 ? out : tail;
                        st.qstep = 4 * ch - 2 * n; /* bytes */
                        st.ostep = 1 - n * oc;
                        DW_PL_RUN(k, rw, clamp, o, q, q + n / 2, oc, kc, lohi[0], lohi[1], st);
                    }
                    if (nob > n4) {
                        for (j = 0; j < 4; ++j) {
                            for (t = 0; t < nob - n4; ++t) {
                                out[j + (n4 + t) * cin] = tail[j + 4 * t];
                            }
                        }
                    }
                }
            }
        }
    }
    return c0;
}

/* The reference arithmetic for channels c0..cin-1 (fewer than 4 left over). */
static void dw_tail(const dw_job *J, int32_t c0)
{
    const tt_conv_geom *g = J->g;
    const tt_q8_requant *q = J->q;
    const int32_t taps = g->kh * g->kw;
    int32_t oy, ox, c, ky, kx;

    for (oy = J->oy0; oy < J->oy1; ++oy) {
        const int32_t iy0 = oy * g->sh - g->pt;
        const int32_t ky0 = iy0 < 0 ? -iy0 : 0;
        const int32_t ky1 = g->h - iy0 < g->kh ? g->h - iy0 : g->kh;
        int8_t *const out = tt_row(J->y, oy);
        for (ox = 0; ox < g->ow; ++ox) {
            const int32_t ix0 = ox * g->sw - g->pl;
            const int32_t kx0 = ix0 < 0 ? -ix0 : 0;
            const int32_t kx1 = g->w - ix0 < g->kw ? g->w - ix0 : g->kw;
            for (c = c0; c < g->cin; ++c) {
                int32_t acc = 0;
                for (ky = ky0; ky < ky1; ++ky) {
                    const int8_t *row = tt_row(J->x, iy0 + ky);
                    for (kx = kx0; kx < kx1; ++kx) {
                        acc += ((int32_t)row[(ix0 + kx) * g->cin + c] + q->in_offset) *
                               (int32_t)J->w[c * taps + ky * g->kw + kx];
                    }
                }
                if (J->b != NULL) { /* wraps as the reference's sum */
                    acc = (int32_t)((uint32_t)acc + (uint32_t)J->b[c]);
                }
                acc = tt_mbqm_double_rounding(acc, q->mult[c], q->shift[c]) + q->out_offset;
                out[ox * g->cin + c] = tt_sat8(acc, q->act_min, q->act_max);
            }
        }
    }
}

/* Geometries this kernel takes; anything else runs the reference kernel. */
static int dw_supported(const tt_conv_geom *g, const tt_q8_requant *q)
{
    return g->groups == g->cin && g->cin == g->cout && g->dh == 1 && g->dw == 1 &&
           g->kh >= 1 && g->kw >= 1 && g->kh <= DW_MAX_KH && g->kh * g->kw <= DW_MAX_TAPS &&
           g->sh >= 1 && g->sw >= 1 && q->in_offset >= -255 && q->in_offset <= 255;
}

/* Output rows [oy0, oy1) (rings as tt_conv2d_s8_row). */
TT_DW_INLINE void dw_rows(const tt_rows *y, const tt_rows *x, int32_t oy0, int32_t oy1,
                    const int8_t *w, const int32_t *b, const tt_conv_geom *g,
                    const tt_q8_requant *q, const int32_t *pack)
{
    dw_job J;
    int32_t c0, oxa, oxb;

#if TT_MVE /* Helium: a whole window in one to four VMLADAVs, any parameters */
    if (tt_q8_dw_mve_ok(g, q)) {
        tt_q8_dw_mve(y, x, oy0, oy1, w, b, g, q);
        return;
    }
#endif
    J.y = y;
    J.x = x;
    J.oy0 = oy0;
    J.oy1 = oy1;
    J.w = w;
    J.b = b;
    J.g = g;
    J.q = q;
    J.pack = pack;
    /* ox * sw - pl >= 0 and ox * sw - pl + kw <= w */
    oxa = (g->pl + g->sw - 1) / g->sw;
    oxb = g->w - g->kw + g->pl >= 0 ? (g->w - g->kw + g->pl) / g->sw + 1 : 0;
    J.oxa = oxa < g->ow ? oxa : g->ow;
    J.oxb = oxb < g->ow ? oxb : g->ow;
    J.pairs = J.oxb > J.oxa ? (J.oxb - J.oxa) / 2 : 0;
    if (g->kh != g->kw ||
        !((g->kw == 3 && g->sw <= 2) || (g->kw == 5 && g->sw == 1))) {
        J.pairs = 0;
    }
    if (dw_plane_ok(g, oy1 - oy0 > 1)) {
        uint32_t buf[DW_STRIP_WORDS];
        for (c0 = 0; (c0 = dw_plane_groups(&J, c0, buf)) + 4 <= g->cin; c0 += 4) {
            dw_group(&J, c0); /* a group the fast requantisation refuses */
        }
    } else if (dw_strip_ok(g, q, oy1 - oy0 > 1)) {
        uint32_t strip[DW_STRIP_WORDS];
        for (c0 = 0; c0 + 4 <= g->cin; c0 += 4) {
            dw_strip_group(&J, c0, strip);
        }
    } else {
        for (c0 = 0; c0 + 4 <= g->cin; c0 += 4) {
            dw_group(&J, c0);
        }
    }
    if (c0 < g->cin) {
        dw_tail(&J, c0);
    }
}

void tt_conv2d_s8_dw_pk_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                            const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q,
                            const int32_t *pack)
{
    if (!dw_supported(g, q)) {
        tt_conv2d_s8_row(y, x, oy, w, b, g, q);
        return;
    }
    dw_rows(y, x, oy, oy + 1, w, b, g, q, pack);
}

void tt_conv2d_s8_dw_pk(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                        const tt_conv_geom *g, const tt_q8_requant *q, const int32_t *pack)
{
    /* whole tensors are rings as tall as the tensor; x is only read */
    const tt_rows yr = {y, g->oh, g->ow * g->cout};
    const tt_rows xr = {(int8_t *)(uintptr_t)x, g->h, g->w * g->cin};

    if (!dw_supported(g, q)) {
        tt_conv2d_s8(y, x, w, b, g, q);
        return;
    }
    dw_rows(&yr, &xr, 0, g->oh, w, b, g, q, pack);
}

void tt_conv2d_s8_dw_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    tt_conv2d_s8_dw_pk_row(y, x, oy, w, b, g, q, NULL);
}

void tt_conv2d_s8_dw(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     const tt_conv_geom *g, const tt_q8_requant *q)
{
    tt_conv2d_s8_dw_pk(y, x, w, b, g, q, NULL);
}

int32_t tt_conv2d_s8_dw_pack_words(const tt_conv_geom *g)
{
    return g->cin / 4 * dw_pack_group_words(g);
}

void tt_conv2d_s8_dw_pack(int32_t *pack, const int8_t *w, const int32_t *b,
                          const tt_conv_geom *g, const tt_q8_requant *q)
{
    dw_job J;
    int32_t c0;

    memset(&J, 0, sizeof J);
    J.w = w;
    J.b = b;
    J.g = g;
    J.q = q;
    for (c0 = 0; c0 + 4 <= g->cin; c0 += 4, pack += dw_pack_group_words(g)) {
        dw_consts k;
        dw_setup(&k, (uint32_t *)(pack + DW_PACK_CONSTS), c0, &J);
        memcpy(pack, &k, sizeof k);
    }
}

/* ===================================== residual add ===================================== */

typedef struct {
    int32_t aoff, boff;    /* (input offset) << 21, or << 20 for a linear input */
    int32_t am, ac, ae;    /* input a: SMMLAR multiplier, rounding constant, shift */
    int32_t bm, bc, be;
    int32_t om, oc, oe;    /* output: oc includes out_offset << oe */
    uint32_t lo4, hi4;
    int32_t act_min, act_max;
} add_k;

/* Twice input x's rescaled value; lin: the multiplier is exactly 1/2 (m = 2^30, e = 0), so
 * the rescale is (x + off) << 19 with no rounding. */
TT_DW_INLINE int32_t add_in2(int32_t x, int32_t off, int32_t m, int32_t c, int32_t e,
                             int32_t lin)
{
    if (lin) {
        return (int32_t)((uint32_t)off + ((uint32_t)x << 20));
    } else {
        const int32_t t = (int32_t)((uint32_t)off + ((uint32_t)x << 21));
        return 2 * (dw_smmlar(t, m, c + (t >> 31)) >> e);
    }
}

TT_DW_INLINE int32_t add_elem(int32_t av, int32_t bv, const add_k *k, int32_t la, int32_t lb)
{
    const int32_t tot2 = add_in2(av, k->aoff, k->am, k->ac, k->ae, la) +
                         add_in2(bv, k->boff, k->bm, k->bc, k->be, lb);
    return dw_ssat8(dw_smmlar(tot2, k->om, k->oc + (tot2 >> 31)) >> k->oe);
}

TT_DW_INLINE void add_loop(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                           const add_k *k, int32_t la, int32_t lb)
{
    int8_t *const ye = y + (n & ~3);

    for (; y != ye; y += 4, a += 4, b += 4) {
        uint32_t r = (uint32_t)add_elem(a[0], b[0], k, la, lb);
        int32_t v = add_elem(a[1], b[1], k, la, lb);
        DW_INS8(r, v, 8);
        v = add_elem(a[2], b[2], k, la, lb);
        DW_INS8(r, v, 16);
        v = add_elem(a[3], b[3], k, la, lb);
        DW_INS8(r, v, 24);
        dw_store32(y, tt_clamp4_s8(r, k->lo4, k->hi4));
    }
    for (n &= 3; n > 0; --n) {
        *y++ = tt_sat8(add_elem(*a++, *b++, k, la, lb), k->act_min, k->act_max);
    }
}

#if defined(TT_DW_DSP)
/* add_loop(.., 1, 0) without a clamp beyond SSAT's: one element per pass (b rescaled: SMMLAR,
 * shift be; a linear; the sum rescaled), every constant and pointer in a register (14), the
 * index counting up from -n to 0 against end pointers. OUT_RQ is the output's shift and
 * saturation: one SSAT with the shift as its immediate (the loop instantiated per shift 1..22:
 * 14 instructions an element), or ASR by oe then SSAT (15); the 4-element pack spills (~21). */
#define ADD_LIN_LOOP(OUT_RQ)                                                               \
    __asm__ volatile("1:\n\t"                                                               \
                     "ldrsb %[u], [%[pb], %[i]]\n\t"                                        \
                     "add %[u], %[boff], %[u], lsl #21\n\t"                                  \
                     "add %[t], %[bc], %[u], asr #31\n\t"                                    \
                     "smmlar %[u], %[u], %[bm], %[t]\n\t"                                    \
                     "asr %[u], %[u], %[be]\n\t"                                             \
                     "ldrsb %[t], [%[pa], %[i]]\n\t"                                        \
                     "add %[t], %[aoff], %[t], lsl #20\n\t"                                  \
                     "add %[t], %[t], %[u], lsl #1\n\t"                                      \
                     "add %[u], %[oc], %[t], asr #31\n\t"                                    \
                     "smmlar %[t], %[t], %[om], %[u]\n\t" OUT_RQ                             \
                     "strb %[t], [%[py], %[i]]\n\t"                                         \
                     "adds %[i], %[i], #1\n\t"                                               \
                     "bne 1b"                                                                \
                     : [i] "+r"(i), [t] "=&r"(t), [u] "=&r"(u)                               \
                     : [pa] "r"(a + n), [pb] "r"(b + n), [py] "r"(y + n),                    \
                       [aoff] "r"(k->aoff), [boff] "r"(k->boff), [bc] "r"(k->bc),            \
                       [bm] "r"(k->bm), [be] "r"(k->be), [oc] "r"(k->oc), [om] "r"(k->om),   \
                       [oe] "r"(k->oe)                                                       \
                     : "cc", "memory")
#define ADD_LIN_CASE(E)                                                                    \
    case E:                                                                                \
        ADD_LIN_LOOP("ssat %[t], #8, %[t], asr #" #E "\n\t");                               \
        break;

TT_DW_INLINE void add_run_lin_gen(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                                  const add_k *k)
{
    int32_t i = -n, t, u;

    switch (k->oe) {
        TT_Q8_EACH_SHIFT(ADD_LIN_CASE)
    default:
        ADD_LIN_LOOP("asr %[t], %[t], %[oe]\n\tssat %[t], #8, %[t]\n\t");
        break;
    }
}
#undef ADD_LIN_CASE
#undef ADD_LIN_LOOP
#endif
TT_DW_NOINLINE void add_loop_lin_gen(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                                     const add_k *k)
{
#if defined(TT_DW_DSP)
    if (n > 0 && k->act_min == -128 && k->act_max == 127) {
        add_run_lin_gen(y, a, b, n, k);
        return;
    }
#endif
    add_loop(y, a, b, n, k, 1, 0);
}

TT_DW_NOINLINE void add_loop_gen_gen(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                                     const add_k *k)
{
    add_loop(y, a, b, n, k, 0, 0);
}

TT_DW_NOINLINE void add_loop_lin_lin(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                                     const add_k *k)
{
    add_loop(y, a, b, n, k, 1, 1);
}

/* The reference arithmetic (tt_q8_binary.c's add_one). */
static int8_t add_ref(int32_t a, int32_t b, const tt_q8_add *p)
{
    const int32_t sa = tt_mbqm_double_rounding((a + p->a_offset) * (1 << p->left_shift),
                                               p->a_mult, p->a_shift);
    const int32_t sb = tt_mbqm_double_rounding((b + p->b_offset) * (1 << p->left_shift),
                                               p->b_mult, p->b_shift);
    return tt_sat8(tt_mbqm_double_rounding(sa + sb, p->out_mult, p->out_shift) +
                       p->out_offset, p->act_min, p->act_max);
}

/* Input kind: 1 linear (m = 2^30, e = 0), 0 SMMLAR (m >= 0, e >= 1), -1 neither. */
static int add_kind(int32_t mult, int32_t shift)
{
    if (mult == (1 << 30) && shift == 0) {
        return 1;
    }
    return mult >= 0 && shift <= -1 && shift >= -31 ? 0 : -1;
}

static void add_in_setup(int32_t *off, int32_t *m, int32_t *c, int32_t *e, int32_t offset,
                         int32_t mult, int32_t shift, int kind)
{
    *off = (int32_t)((uint32_t)offset << (kind == 1 ? 20 : 21));
    *m = mult;
    *e = kind == 1 ? 0 : -shift;
    *c = kind == 1 ? 0 : (int32_t)((uint32_t)1 << (-shift - 1));
}

static void add_run(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                    const tt_q8_add *p)
{
    add_k k;
    int ka, kb;
    int32_t i;

#if TT_MVE
    /* Helium: sixteen elements a block, LiteRT's constants and more (tt_q8_add_mve.c) */
    if (tt_q8_add_mve(y, a, b, n, p)) {
        return;
    }
#endif
    ka = add_kind(p->a_mult, p->a_shift);
    kb = add_kind(p->b_mult, p->b_shift);
    /* Ranges: |x + off| <= 383, so (x + off) << 21 fits; a rescaled input is at most
     * 383 * 2^19 for any m < 2^31, twice their sum < 2^29.6; the output's SRDHM is below
     * 2^28.6 and |2^(e-1) + out_offset * 2^e| <= 129 * 2^22 for e <= 22: no SMMLAR wraps. */
    if (p->left_shift != 20 || p->a_offset < -255 || p->a_offset > 255 ||
        p->b_offset < -255 || p->b_offset > 255 || p->act_min < -128 || p->act_max > 127 ||
        p->act_min > p->act_max || p->out_offset < -128 || p->out_offset > 127 ||
        p->out_mult < 0 || p->out_shift > -1 || p->out_shift < -22 || ka < 0 || kb < 0) {
        for (i = 0; i < n; ++i) {
            y[i] = add_ref(a[i], b[i], p);
        }
        return;
    }
    add_in_setup(&k.aoff, &k.am, &k.ac, &k.ae, p->a_offset, p->a_mult, p->a_shift, ka);
    add_in_setup(&k.boff, &k.bm, &k.bc, &k.be, p->b_offset, p->b_mult, p->b_shift, kb);
    k.om = p->out_mult;
    k.oe = -p->out_shift;
    k.oc = (int32_t)((1u << (k.oe - 1)) + ((uint32_t)p->out_offset << k.oe));
    k.lo4 = dw_bcast8(p->act_min);
    k.hi4 = dw_bcast8(p->act_max);
    k.act_min = p->act_min;
    k.act_max = p->act_max;
    if (ka == 1 && kb == 1) {
        add_loop_lin_lin(y, a, b, n, &k);
    } else if (ka == 1) {
        add_loop_lin_gen(y, a, b, n, &k);
    } else if (kb == 1) { /* the sum is symmetric: swap the inputs */
        const add_k s = k;
        k.aoff = s.boff;
        k.boff = s.aoff;
        k.am = s.bm;
        k.bm = s.am;
        k.ac = s.bc;
        k.bc = s.ac;
        k.ae = s.be;
        k.be = s.ae;
        add_loop_lin_gen(y, b, a, n, &k);
    } else {
        add_loop_gen_gen(y, a, b, n, &k);
    }
}

void tt_add_s8_opt(int8_t *y, const int8_t *a, const int8_t *b, int32_t n,
                   const tt_q8_add *p)
{
    add_run(y, a, b, n, p);
}

void tt_add_s8_row_opt(const tt_rows *y, const tt_rows *a, const tt_rows *b, int32_t r,
                       const tt_q8_add *p)
{
    add_run(tt_row(y, r), tt_row(a, r), tt_row(b, r), y->row_bytes, p);
}
