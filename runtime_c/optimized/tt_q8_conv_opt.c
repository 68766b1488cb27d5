/*
 * Optimised int8 forward kernels: pointwise (1x1) and regular (groups == 1) convolution and
 * fully connected, bit-identical with tt_conv2d_s8 / tt_conv2d_s8_row / tt_dense_s8; and the
 * --rounding master forward of pointwise convs and dense layers (at the end of this file).
 *
 * Structure (the usual one of CMSIS-NN's s8 kernels, written independently):
 *   - input pixels (pointwise) or kh*kw*cin patches (regular conv) are converted once into a
 *     small int16 stack buffer holding 2 * (x + in_offset), each group of 4 inputs stored as
 *     the lane pairs (0,2), (1,3) so that one 32-bit load matches __sxtb16(w) /
 *     __sxtb16(ror(w, 8)) of 4 weight bytes (the weights can change between calls, so they
 *     are read as int8 every time);
 *   - 2 pixels x 2 output channels per block: each weight word and each buffer word feeds
 *     two __smlad (~1.1 instructions per MAC); cin 8 and 16 instead hold one channel's
 *     weights in registers and stream the pixels (cin 16 two pixels at a time in inline
 *     assembly, the weights read per group);
 *   - pointwise inputs too wide for the buffer, and regular-conv patches too wide (per
 *     kernel tap), are converted on the fly (__sxtab16 adds the offset).
 * The int32 sum is exact in any order, so only the requantisation needs care:
 *
 * Fast requantisation (conv). For e = -shift in [1, 22], mult >= 0 and |a| < 2^30, LiteRT's
 * double rounding r = RoundingDivideByPOT(SRDHM(a, mult), e) + out_offset equals, with
 * t = (a < 0) and exact 64-bit arithmetic,
 *     r = floor((2a * mult + 2^31 + (2^(e-1) - t + out_offset * 2^e) * 2^32) / 2^32) >> e
 * because SRDHM(a, m) = floor((a m + 2^30) / 2^31) for both signs (the nudge and truncation
 * combine), RoundingDivideByPOT(v, e) = floor((v + 2^(e-1) - (v < 0)) / 2^e), nested floors
 * merge, and v < 0 can be read as a < 0: for -2^30 <= a m < 0, v = 0 and both give 0.
 * The inner floor is one SMMLAR and 2a comes free from the doubled buffer. A dead channel
 * (mult 0, shift -1: tinytrain/quant/params.py) qualifies whatever its bias, which it never
 * adds (see slow_rq). When every channel of a call qualifies (checked per call) the
 * constants are derived inline per block; otherwise (shift >= 0, huge bias, ...) a slower
 * path decides per channel and uses the reference formula where needed. Parameters outside the kernels' exactness bounds
 * (non-int8 zero points, more than CV_KMAX taps) go to the reference kernels.
 */
#include "tt_kernels.h"
#include "tt_q8_lanes.h"
#include "tt_q8_mve.h"
#include "tt_q8_stem_mve.h"

#include <stdint.h>
#include <string.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif

#define CV_BUF 576     /* pointwise input buffer words (2 int16 lanes each): 2.25 KB */
#define CV_BUF_REG 512 /* regular-conv patch buffer words: 2 KB (a 3x3x3 stem: 36 px) */
#define CV_KMAX 16384  /* taps per output; keeps 2 * |sum| well inside int32 */
/* the inline-assembly loops: on the DSP extension when GCC optimises for speed (at -O0 r7 is
 * the frame pointer and -Os keeps other registers; those builds run the C loops) */
#if defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define CV_DSP_ASM 1
#endif
#define CV_ROWS 8      /* kernel rows whose input rows are looked up once per output row */

/* ---- 16-bit SIMD helpers: ACLE on the DSP extension, plain C with the same results ----
 * GCC 12's arm_acle.h lacks __ror and SMMLAR, and GCC neither folds a rotate into SXTB16
 * nor forms post-incremented LDRD / LDR in these loops, hence the one-instruction asm. */

static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4); /* one LDR (unaligned allowed) */
    return v;
}

static inline void st16(void *p, uint32_t v) /* the low half of v: one STRH */
{
    const uint16_t h = (uint16_t)v;
    memcpy(p, &h, 2);
}

#if defined(__ARM_FEATURE_DSP)
static inline int32_t sx_lo(uint32_t w) { return __sxtb16(w); } /* bytes 0, 2 */
static inline int32_t sx_hi(uint32_t w)                          /* bytes 1, 3 */
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
    return r;
}
static inline int32_t ux_lo(uint32_t w) { return (int32_t)__uxtb16(w); } /* unsigned */
static inline int32_t ux_hi(uint32_t w)
{
    int32_t r;
    __asm__("uxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
    return r;
}
static inline int32_t sxa_lo(int32_t o, uint32_t x) { return __sxtab16(o, x); }
static inline int32_t sxa_hi(int32_t o, uint32_t x)
{
    int32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(o), "r"(x));
    return r;
}
static inline int32_t dbl16(int32_t v) { return __sadd16(v, v); }
/* the low bytes of r0 .. r3 as the bytes of one word */
static inline uint32_t pack4(int32_t r0, int32_t r1, int32_t r2, int32_t r3)
{
    uint32_t lo = (uint32_t)r0, hi = (uint32_t)r2, v;
    __asm__("bfi %0, %1, #8, #8" : "+r"(lo) : "r"(r1));
    __asm__("bfi %0, %1, #8, #8" : "+r"(hi) : "r"(r3));
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(v) : "r"(lo), "r"(hi));
    return v;
}
static inline int32_t smlad(int32_t a, int32_t b, int32_t acc) { return __smlad(a, b, acc); }
static inline int32_t sat8(int32_t v) { return __ssat(v, 8); }
/* (c * 2^32 + a * b + 2^31) >> 32 */
static inline int32_t smmlar(int32_t a, int32_t b, int32_t c)
{
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
/* a = p[0], b = p[1], p += 2 words (p 4-byte aligned) */
#define LD2(p, a, b)                                                                      \
    __asm__("ldrd %0, %1, [%2], #8" : "=r"(a), "=r"(b), "+r"(p)                           \
            : "m"(*(const int32_t(*)[2])(p)))
/* u = the 4 bytes at p, p += 4 */
#define LDW(p, u) __asm__("ldr %0, [%1], #4" : "=r"(u), "+r"(p) : "m"(*(const int8_t(*)[4])(p)))
#else
static inline int32_t lane(int32_t v) { return (int32_t)(int16_t)(uint16_t)(uint32_t)v; }
static inline int32_t lanes(int32_t lo, int32_t hi)
{
    return (int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16));
}
static inline int32_t byte(uint32_t w, int32_t i)
{
    return (int32_t)(int8_t)(uint8_t)(w >> (8 * i));
}
static inline int32_t sx_lo(uint32_t w) { return lanes(byte(w, 0), byte(w, 2)); }
static inline int32_t sx_hi(uint32_t w) { return lanes(byte(w, 1), byte(w, 3)); }
static inline int32_t ux_lo(uint32_t w) { return lanes((w >> 0) & 255u, (w >> 16) & 255u); }
static inline int32_t ux_hi(uint32_t w) { return lanes((w >> 8) & 255u, (w >> 24) & 255u); }
static inline int32_t sxa_lo(int32_t o, uint32_t x)
{
    return lanes(lane(o) + byte(x, 0), lane(o >> 16) + byte(x, 2));
}
static inline int32_t sxa_hi(int32_t o, uint32_t x)
{
    return lanes(lane(o) + byte(x, 1), lane(o >> 16) + byte(x, 3));
}
static inline int32_t dbl16(int32_t v) { return lanes(2 * lane(v), 2 * lane(v >> 16)); }
static inline int32_t smlad(int32_t a, int32_t b, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(lane(a) * lane(b)) +
                     (uint32_t)(lane(a >> 16) * lane(b >> 16)));
}
static inline int32_t sat8(int32_t v) { return v < -128 ? -128 : (v > 127 ? 127 : v); }
static inline uint32_t pack4(int32_t r0, int32_t r1, int32_t r2, int32_t r3)
{
    return ((uint32_t)r0 & 255u) | ((uint32_t)r1 & 255u) << 8 | ((uint32_t)r2 & 255u) << 16 |
           (uint32_t)r3 << 24;
}
static inline int32_t smmlar(int32_t a, int32_t b, int32_t c)
{
    return (int32_t)(((int64_t)c * 4294967296LL + (int64_t)a * b + 2147483648LL) >> 32);
}
#define LD2(p, a, b) ((a) = (p)[0], (b) = (p)[1], (p) += 2)
#define LDW(p, u) ((u) = ld32(p), (p) += 4)
#endif

/* GCC's pre-allocation scheduler hoists loads and spills in the 14-register MAC loops */
#if defined(__GNUC__) && !defined(__clang__)
#define CV_HOT __attribute__((optimize("no-schedule-insns")))
#define CV_INLINE inline __attribute__((always_inline))
#define CV_NOINLINE __attribute__((noinline)) /* keeps its locals off the caller's frame */
#else
#define CV_HOT
#define CV_INLINE inline
#define CV_NOINLINE
#endif

/* ---- per-call context ---- */

typedef struct {
    const int8_t *w;
    const int32_t *b;
    const tt_q8_requant *q;
    int32_t cout, k; /* k: weight row length (taps per output) */
    int32_t kp;      /* buffer words per pixel pair: k rounded up to 4 */
    int32_t blim;    /* |bias| below this keeps |accumulator| < 2^30 */
    int32_t off2;    /* in_offset in both 16-bit lanes */
    int32_t k1;      /* 1 + 2 * out_offset: c = k1 * 2^(e-1) */
    int32_t lo, hi;  /* activation range */
    uint32_t lo4, hi4; /* the range byte-broadcast */
    int32_t clamp;   /* activation range narrower than int8 */
    int32_t fast;    /* every channel takes the fast requantisation */
    int32_t oc0, oc1; /* the channels the fast kernels run: all, or a run of fast pairs */
} cv_ctx;

/* Branch-free (ctx_init runs them for every channel on every row call); the sign bit of each
 * says "not fast". The multiplier: m < 0 (its own sign bit) or the shift outside [-22, -1]
 * (unsigned shift + 22 > 21); the bias: |b| >= blim (unsigned b + blim - 1 > 2 (blim - 1),
 * blim > 0), and only for m != 0 (slow_bias & -m keeps the sign bit for 0 < m). A dead
 * channel (m == 0, which the compiler gives shift -1) takes the fast path whatever its bias:
 * its start value wraps (bias_x), and rq_fast(a2, 0, k1, 1) = (k1 + t) >> 1 =
 * out_offset for either sign t, as the reference's SRDHM(a, 0) = 0 gives for any a. */
static inline uint32_t slow_rq(int32_t m, int32_t shift)
{
    return (uint32_t)m | (uint32_t)((uint32_t)shift + 22u > 21u) << 31;
}

static inline uint32_t slow_bias(int32_t b, int32_t blim)
{
    const uint32_t lim = (uint32_t)blim - 1u;
    return (uint32_t)((uint32_t)b + lim > 2u * lim) << 31;
}

static inline int32_t fast_channel(int32_t m, int32_t shift, int32_t b, int32_t blim)
{
    return !((slow_rq(m, shift) | (slow_bias(b, blim) & (0u - (uint32_t)m))) >> 31);
}

/* rq_wide's channels (a superset): m >= 0, a right shift of 1..31, |b| < blim (or m == 0) */
static inline int32_t wide_channel(int32_t m, int32_t shift, int32_t b, int32_t blim)
{
    const uint32_t rq = (uint32_t)m | (uint32_t)((uint32_t)shift + 31u > 30u) << 31;
    return !((rq | (slow_bias(b, blim) & (0u - (uint32_t)m))) >> 31);
}

/* 0: the parameters are outside what the fast kernels are exact for (use the reference) */
static int32_t ctx_init(cv_ctx *cx, const int8_t *w, const int32_t *b, int32_t cout, int32_t k,
                        const tt_q8_requant *q)
{
    const int32_t off = q->in_offset;
    int32_t oc;

    cx->w = w;
    cx->b = b;
    cx->q = q;
    cx->cout = cout;
    cx->oc0 = 0;
    cx->oc1 = cout;
    cx->k = k;
    cx->kp = (k + 3) & ~3;
    cx->off2 = (int32_t)(((uint32_t)off & 0xffffu) | ((uint32_t)off << 16));
    cx->k1 = 1 + 2 * q->out_offset;
    cx->lo = q->act_min;
    cx->hi = q->act_max;
    cx->clamp = q->act_min != -128 || q->act_max != 127;
    cx->lo4 = ((uint32_t)q->act_min & 255u) * 0x01010101u;
    cx->hi4 = ((uint32_t)q->act_max & 255u) * 0x01010101u;
    if (!(k >= 1 && k <= CV_KMAX && off >= -128 && off <= 128 && q->out_offset >= -128 &&
          q->out_offset <= 128 && q->act_min >= -128 && q->act_max <= 127 &&
          q->act_min <= q->act_max)) {
        return 0;
    }
    /* |x + in_offset| <= 256, |w| <= 128: |sum| <= k * 2^15 */
    cx->blim = (int32_t)((1 << 30) - k * 32768);
    { /* fast_channel of every channel: one loop with the bias, another without */
        uint32_t slow = 0;
        if (b != NULL) {
            for (oc = 0; oc < cout; ++oc) {
                const int32_t m = q->mult[oc];
                slow |= slow_rq(m, q->shift[oc]) |
                        (slow_bias(b[oc], cx->blim) & (0u - (uint32_t)m));
            }
        } else {
            for (oc = 0; oc < cout; ++oc) {
                slow |= slow_rq(q->mult[oc], q->shift[oc]);
            }
        }
        cx->fast = !(slow >> 31);
    }
    return 1;
}

/* ---- requantisation ---- */

/* fast path: a2 = 2 * (bias + sum), c = k1 * 2^(e-1) */
static inline int32_t rq_fast(int32_t a2, int32_t m, int32_t c, int32_t e)
{
    return sat8(smmlar(a2, m, c + (a2 >> 31)) >> e);
}

static inline int32_t fast_c(int32_t k1, int32_t e)
{
    return (int32_t)((uint32_t)k1 << (e - 1)); /* |k1| * 2^21 < 2^30 */
}

/* the fast path's start value of channel oc: `unit` times its bias (2 buffered, 1 on the
 * fly), wrapping: a dead channel's bias (m == 0) may be saturated and then wraps, which its
 * output (out_offset for either sign) does not see */
static inline int32_t bias_x(const int32_t *b, int32_t oc, uint32_t unit)
{
    return b != NULL ? (int32_t)((uint32_t)b[oc] * unit) : 0;
}

/* Right shifts 23..31 (near-dead channels of real-data weights: bench/real_weights.py) with
 * the output offset added after the shift: r = (SMMLAR(a2, m, 2^(e-1) - t) >> e) + out_offset,
 * the same floors as rq_fast without the offset's share of the constant, which is what
 * overflows past e = 22; SMMLAR's result is at most 2^(e-1) + 2^30 - 1 < 2^31 (|a2| < 2^31,
 * m < 2^31). One ADD more than rq_fast: only the per-pair fallback (any_pair, ws_any_ch)
 * uses it. a2 = 2 * (bias + sum), e in [1, 31]. */
static inline int32_t rq_wide(int32_t a2, int32_t m, int32_t e, const cv_ctx *cx)
{
    const int32_t c = (int32_t)(1u << (e - 1)) + (a2 >> 31);
    return tt_sat8((smmlar(a2, m, c) >> e) + cx->q->out_offset, cx->lo, cx->hi);
}

/* reference formula; a2 = 2 * sum (no bias) */
static CV_NOINLINE int32_t rq_slow(int32_t a2, const cv_ctx *cx, int32_t oc)
{
    const tt_q8_requant *q = cx->q;
    int32_t a = a2 >> 1;
    if (cx->b != NULL) {
        a = (int32_t)((uint32_t)a + (uint32_t)cx->b[oc]); /* wraps as the reference's sum */
    }
    a = tt_mbqm_double_rounding(a, q->mult[oc], q->shift[oc]);
    return tt_sat8((int32_t)((uint32_t)a + (uint32_t)q->out_offset), cx->lo, cx->hi);
}

/* general path, any channel: a2 = 2 * (init + sum) with init = the bias for fast and wide
 * channels (`unit` times: 2 buffered, 1 on the fly), 0 for the others and for dead ones
 * (m == 0: a saturated bias would wrap the general path's signed sums; it does not matter) */
static inline int32_t channel_init(const cv_ctx *cx, int32_t oc, int32_t unit)
{
    const int32_t b = cx->b != NULL ? cx->b[oc] : 0, m = cx->q->mult[oc];
    return m != 0 && wide_channel(m, cx->q->shift[oc], b, cx->blim) ? b * unit : 0;
}

static int32_t rq_any(int32_t a2, const cv_ctx *cx, int32_t oc)
{
    const tt_q8_requant *q = cx->q;
    const int32_t b = cx->b != NULL ? cx->b[oc] : 0;
    if (fast_channel(q->mult[oc], q->shift[oc], b, cx->blim)) {
        const int32_t e = -q->shift[oc];
        return tt_sat8(rq_fast(a2, q->mult[oc], fast_c(cx->k1, e), e), cx->lo, cx->hi);
    }
    if (wide_channel(q->mult[oc], q->shift[oc], b, cx->blim)) {
        return rq_wide(a2, q->mult[oc], -q->shift[oc], cx);
    }
    return rq_slow(a2, cx, oc);
}

/* channel oc's requantisation in the general path, decided once per call: kind 0 fast
 * (constants m, c, e), 1 wide (m, e), 2 the reference formula */
typedef struct {
    int32_t kind, m, c, e;
} cv_rq;

static cv_rq rq_kind(const cv_ctx *cx, int32_t oc)
{
    const tt_q8_requant *q = cx->q;
    const int32_t b = cx->b != NULL ? cx->b[oc] : 0, m = q->mult[oc], e = -q->shift[oc];
    cv_rq r = {2, m, 0, e};
    if (fast_channel(m, q->shift[oc], b, cx->blim)) {
        r.kind = 0;
        r.c = fast_c(cx->k1, e);
    } else if (wide_channel(m, q->shift[oc], b, cx->blim)) {
        r.kind = 1;
    }
    return r;
}

static inline int32_t rq_by(int32_t a2, const cv_rq *r, const cv_ctx *cx, int32_t oc)
{
    if (r->kind == 0) {
        return tt_sat8(rq_fast(a2, r->m, r->c, r->e), cx->lo, cx->hi);
    }
    return r->kind == 1 ? rq_wide(a2, r->m, r->e, cx) : rq_slow(a2, cx, oc);
}

/* channels oc and oc1 both take the fast requantisation (the per-pair test of a call that
 * is not all fast: cx->fast 0, run_buf / run_ws) */
static CV_INLINE int32_t pair_fast(const cv_ctx *cx, int32_t oc, int32_t oc1)
{
    const tt_q8_requant *q = cx->q;
    const int32_t b0 = cx->b != NULL ? cx->b[oc] : 0, b1 = cx->b != NULL ? cx->b[oc1] : 0;
    return fast_channel(q->mult[oc], q->shift[oc], b0, cx->blim) &&
           fast_channel(q->mult[oc1], q->shift[oc1], b1, cx->blim);
}

/* the last k % 4 bytes of a row, zero-extended, without reading outside the row */
static inline uint32_t tail_word(const int8_t *row, int32_t k)
{
    const int32_t r = k & 3;
    uint32_t v = 0;
    int32_t i;

    if (k >= 4) {
        return ld32(row + k - 4) >> (8 * (4 - r));
    }
    for (i = 0; i < r; ++i) {
        v |= (uint32_t)(uint8_t)row[i] << (8 * i);
    }
    return v;
}

/* ---- buffered input ----
 * A pixel's row holds, per group of 4 inputs, the words (x0, x2), (x1, x3) of int16 lanes
 * 2 * (x + in_offset). Pair layout: the rows of pixels 2i and 2i + 1 interleaved group by
 * group (4 words per group, kp words per pair) so one pointer walks both; row layout (the
 * narrow-input path): kp / 2 words per pixel. */

/* 4 input bytes at p (stepping past them) as the words 2 * (x + off) of lanes (0, 2), (1, 3)
 * in L, H */
#define CV_CONV4(p, L, H)                                                                  \
    "ldr %[" L "], [%[" p "]], #4\n\t"                                                     \
    "sxtab16 %[" H "], %[off2], %[" L "], ror #8\n\t"                                      \
    "sxtab16 %[" L "], %[off2], %[" L "]\n\t"                                              \
    "sadd16 %[" L "], %[" L "], %[" L "]\n\t"                                              \
    "sadd16 %[" H "], %[" H "], %[" H "]\n\t"

/* convert k int8 inputs into pixel slot d, its groups `stride` words apart */
static void convert_row(int32_t *d, const int8_t *x, int32_t k, int32_t off2, int32_t stride)
{
    const int8_t *const xe = x + (k & ~7);
    uint32_t xw;

#if defined(CV_DSP_ASM)
    if (stride == 2 && x != xe) { /* contiguous groups: 2 STRD per 8 inputs, 14 instructions
                                   * where GCC's loop takes 17 */
        uint32_t t0, t1, t2, t3;
        __asm__ volatile("1:\n\t" CV_CONV4("x", "t0", "t1") CV_CONV4("x", "t2", "t3")
                         "strd %[t0], %[t1], [%[d]], #8\n\t"
                         "strd %[t2], %[t3], [%[d]], #8\n\t"
                         "cmp %[x], %[xe]\n\t"
                         "bne 1b"
                         : [x] "+r"(x), [d] "+r"(d), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [t2] "=&r"(t2), [t3] "=&r"(t3)
                         : [xe] "r"(xe), [off2] "r"(off2)
                         : "cc", "memory");
    }
#endif

    while (x != xe) { /* two groups per iteration */
        const uint32_t x2 = ld32(x + 4);
        xw = ld32(x);
        x += 8;
        d[0] = dbl16(sxa_lo(off2, xw));
        d[1] = dbl16(sxa_hi(off2, xw));
        d[stride] = dbl16(sxa_lo(off2, x2));
        d[stride + 1] = dbl16(sxa_hi(off2, x2));
        d += 2 * stride;
    }
    if (k & 4) {
        xw = ld32(x);
        x += 4;
        d[0] = dbl16(sxa_lo(off2, xw));
        d[1] = dbl16(sxa_hi(off2, xw));
        d += stride;
    }
    if (k & 3) { /* padding lanes meet zero weights (tail_word) */
        xw = tail_word(x - (k & ~3), k);
        d[0] = dbl16(sxa_lo(off2, xw));
        d[1] = dbl16(sxa_hi(off2, xw));
    }
}

/* convert the k int8 inputs of two pixels into a block of the pair layout */
static void convert_pair(int32_t *d, const int8_t *x0, const int8_t *x1, int32_t k,
                         int32_t off2)
{
    const int8_t *const xe = x0 + (k & ~3);
    uint32_t u, v;

#if defined(CV_DSP_ASM)
    if (x0 != xe) { /* a group of both pixels: 2 STRD, 14 instructions where GCC's takes 17 */
        uint32_t t0, t1, t2, t3;
        __asm__ volatile("1:\n\t" CV_CONV4("a", "t0", "t1") CV_CONV4("b", "t2", "t3")
                         "strd %[t0], %[t1], [%[d]], #8\n\t"
                         "strd %[t2], %[t3], [%[d]], #8\n\t"
                         "cmp %[a], %[xe]\n\t"
                         "bne 1b"
                         : [a] "+r"(x0), [b] "+r"(x1), [d] "+r"(d), [t0] "=&r"(t0),
                           [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3)
                         : [xe] "r"(xe), [off2] "r"(off2)
                         : "cc", "memory");
    }
#endif

    while (x0 != xe) {
        LDW(x0, u);
        LDW(x1, v);
        d[0] = dbl16(sxa_lo(off2, u));
        d[1] = dbl16(sxa_hi(off2, u));
        d[2] = dbl16(sxa_lo(off2, v));
        d[3] = dbl16(sxa_hi(off2, v));
        d += 4;
    }
    if (k & 3) { /* padding lanes meet zero weights (tail_word) */
        u = tail_word(x0 - (k & ~3), k);
        v = tail_word(x1 - (k & ~3), k);
        d[0] = dbl16(sxa_lo(off2, u));
        d[1] = dbl16(sxa_hi(off2, u));
        d[2] = dbl16(sxa_lo(off2, v));
        d[3] = dbl16(sxa_hi(off2, v));
    }
}

/* slot of pixel i in the pair layout */
static inline int32_t *slot(int32_t *buf, int32_t i, int32_t kp)
{
    return buf + (i >> 1) * kp + (i & 1) * 2;
}

/* 2 pixels x 2 channels: a?? += the pair block at xp times weight rows w0 / w1 (k inputs;
 * nk > 0: k / 4 as a constant, the groups written out) */
#define CV_GROUP(load0, load1)                                                             \
    do {                                                                                  \
        load0;                                                                            \
        LD2(xp, x0l, x0h);                                                                \
        LD2(xp, x1l, x1h);                                                                \
        wl = sx_lo(u);                                                                    \
        wh = sx_hi(u);                                                                    \
        a00 = smlad(x0l, wl, a00);                                                        \
        a00 = smlad(x0h, wh, a00);                                                        \
        a10 = smlad(x1l, wl, a10);                                                        \
        a10 = smlad(x1h, wh, a10);                                                        \
        load1;                                                                            \
        wl = sx_lo(u);                                                                    \
        wh = sx_hi(u);                                                                    \
        a01 = smlad(x0l, wl, a01);                                                        \
        a01 = smlad(x0h, wh, a01);                                                        \
        a11 = smlad(x1l, wl, a11);                                                        \
        a11 = smlad(x1h, wh, a11);                                                        \
    } while (0)

#define CV_MAC2x2(xp, w0, w1, k, nk, tail)                                                 \
    do {                                                                                  \
        int32_t x0l, x0h, x1l, x1h, wl, wh;                                               \
        uint32_t u;                                                                       \
        if (nk > 0) { /* GCC -O2 does not unroll constant loops that grow the code */     \
            CV_GROUP(u = ld32(w0), u = ld32(w1));                                         \
            if (nk > 1) CV_GROUP(u = ld32(w0 + 4), u = ld32(w1 + 4));                     \
            if (nk > 2) CV_GROUP(u = ld32(w0 + 8), u = ld32(w1 + 8));                     \
            if (nk > 3) CV_GROUP(u = ld32(w0 + 12), u = ld32(w1 + 12));                   \
            if (nk > 4) CV_GROUP(u = ld32(w0 + 16), u = ld32(w1 + 16));                   \
            if (nk > 5) CV_GROUP(u = ld32(w0 + 20), u = ld32(w1 + 20));                   \
        } else {                                                                          \
            const int8_t *wa = (w0), *wb = (w1);                                          \
            const int32_t *const xe = xp + 4 * ((k) >> 3) * 2;                            \
            while (xp != xe) { /* two groups per iteration */                             \
                CV_GROUP(LDW(wa, u), LDW(wb, u));                                         \
                CV_GROUP(LDW(wa, u), LDW(wb, u));                                         \
            }                                                                             \
            if ((k) & 4) CV_GROUP(LDW(wa, u), LDW(wb, u));                                \
        }                                                                                 \
        if (tail) {                                                                       \
            LD2(xp, x0l, x0h);                                                            \
            LD2(xp, x1l, x1h);                                                            \
            u = tail_word(w0, k);                                                         \
            a00 = smlad(x0h, sx_hi(u), smlad(x0l, sx_lo(u), a00));                        \
            a10 = smlad(x1h, sx_hi(u), smlad(x1l, sx_lo(u), a10));                        \
            u = tail_word(w1, k);                                                         \
            a01 = smlad(x0h, sx_hi(u), smlad(x0l, sx_lo(u), a01));                        \
            a11 = smlad(x1h, sx_hi(u), smlad(x1l, sx_lo(u), a11));                        \
        }                                                                                 \
    } while (0)

/* ---- weights extended once per channel pair: each group of 4 inputs as the words (w0, w2),
 * (w1, w3) of both channels' rows (4 words), the last group's missing inputs 0; the block's
 * groups then cost 2 LDRD of inputs, 2 of weights and 8 SMLAD (12 instructions per 16 MACs,
 * 16 with int8 weights extended in every block) */
#define CV_WX 256 /* extended weight words on the stack: inputs up to 256 wide */

static void extend_pair(int32_t *wx, const int8_t *w0, const int8_t *w1, int32_t k)
{
    int32_t g = 0;
    uint32_t u, v;

#if defined(CV_DSP_ASM)
    if (k >= 8) { /* two groups an iteration, STRD pairs: 9 instructions a group, GCC's 12 */
        const int8_t *const e = w0 + (k & ~7);
        const int8_t *a = w0, *b = w1;
        int32_t t0, t1, t2, t3;
#define CV_EXT_G                                                                           \
    "ldr %[u], [%[a]], #4\n\t"                                                            \
    "ldr %[v], [%[b]], #4\n\t"                                                            \
    "sxtb16 %[t0], %[u]\n\t"                                                              \
    "sxtb16 %[t1], %[u], ror #8\n\t"                                                      \
    "sxtb16 %[t2], %[v]\n\t"                                                              \
    "sxtb16 %[t3], %[v], ror #8\n\t"                                                      \
    "strd %[t0], %[t1], [%[wx]], #8\n\t"                                                  \
    "strd %[t2], %[t3], [%[wx]], #8\n\t"
        __asm__ volatile("1:\n\t" CV_EXT_G CV_EXT_G
                         "cmp %[a], %[e]\n\t"
                         "bne 1b"
                         : [a] "+r"(a), [b] "+r"(b), [wx] "+r"(wx), [u] "=&r"(u), [v] "=&r"(v),
                           [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3)
                         : [e] "r"(e)
                         : "cc", "memory");
#undef CV_EXT_G
        g = k & ~7;
    }
#endif
    for (; g + 4 <= k; g += 4, wx += 4) {
        u = ld32(w0 + g);
        v = ld32(w1 + g);
        wx[0] = sx_lo(u);
        wx[1] = sx_hi(u);
        wx[2] = sx_lo(v);
        wx[3] = sx_hi(v);
    }
    if (k & 3) {
        u = tail_word(w0, k);
        v = tail_word(w1, k);
        wx[0] = sx_lo(u);
        wx[1] = sx_hi(u);
        wx[2] = sx_lo(v);
        wx[3] = sx_hi(v);
    }
}

#define CV_GROUPX                                                                          \
    do {                                                                                  \
        LD2(xp, x0l, x0h);                                                                \
        LD2(xp, x1l, x1h);                                                                \
        LD2(wp, wl, wh);                                                                  \
        a00 = smlad(x0l, wl, a00);                                                        \
        a00 = smlad(x0h, wh, a00);                                                        \
        a10 = smlad(x1l, wl, a10);                                                        \
        a10 = smlad(x1h, wh, a10);                                                        \
        LD2(wp, wl, wh);                                                                  \
        a01 = smlad(x0l, wl, a01);                                                        \
        a01 = smlad(x0h, wh, a01);                                                        \
        a11 = smlad(x1l, wl, a11);                                                        \
        a11 = smlad(x1h, wh, a11);                                                        \
    } while (0)

/* the block's ng groups (ng > 0 at compile time: written out) */
#define CV_MAC2x2_X(xp, wx, ng, nk)                                                        \
    do {                                                                                  \
        int32_t x0l, x0h, x1l, x1h, wl, wh;                                               \
        const int32_t *wp = (wx);                                                         \
        if (nk > 0) {                                                                     \
            CV_GROUPX;                                                                    \
            if (nk > 1) CV_GROUPX;                                                        \
            if (nk > 2) CV_GROUPX;                                                        \
            if (nk > 3) CV_GROUPX;                                                        \
            if (nk > 4) CV_GROUPX;                                                        \
            if (nk > 5) CV_GROUPX;                                                        \
            if (nk > 6) CV_GROUPX;                                                        \
        } else {                                                                          \
            const int32_t *const xe = xp + 4 * (ng);                                      \
            if ((ng) & 1) CV_GROUPX;                                                      \
            while (xp != xe) { /* two groups per iteration */                             \
                CV_GROUPX;                                                                \
                CV_GROUPX;                                                                \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* extending a channel pair's weights (~8 instructions per group) pays from 3 pixel pairs on */
#define CV_EXT_MIN_PX 6

/* General path, pair layout: channels oc, oc1 (oc1 == oc: a repeated channel) of npx pixels,
 * any requantisation; a call whose channels are not all fast sends the pairs the fast
 * requantisation refuses here, and the rest keep the fast kernels (per pair, not per call:
 * one dead or near-dead channel of real-data weights costs its pair, not the layer). */
static CV_HOT CV_NOINLINE void any_pair(int8_t *y, const int32_t *buf, int32_t npx,
                                        const cv_ctx *cx, int32_t oc, int32_t oc1)
{
    const int32_t cout = cx->cout, k = cx->k, kp = cx->kp;
    const int8_t *const w0 = cx->w + oc * k, *const w1 = cx->w + oc1 * k;
    const int32_t i0 = channel_init(cx, oc, 2), i1 = channel_init(cx, oc1, 2);
    const cv_rq r0 = rq_kind(cx, oc), r1 = rq_kind(cx, oc1);
    const int32_t ext = kp <= CV_WX && npx >= CV_EXT_MIN_PX; /* as run_fast's kernels */
    int32_t wx[CV_WX];
    int32_t p;

    if (ext) {
        extend_pair(wx, w0, w1, k);
    }
    for (p = 0; p < npx; p += 2) {
        const int32_t *xp = buf + (p >> 1) * kp;
        int8_t *const y0 = y + p * cout;
        int8_t *const y1 = p + 1 < npx ? y0 + cout : y0;
        int32_t a00 = i0, a01 = i1, a10 = i0, a11 = i1;
        if (ext) {
            CV_MAC2x2_X(xp, wx, kp >> 2, 0);
        } else {
            CV_MAC2x2(xp, w0, w1, k, 0, k & 3);
        }
        y0[oc] = (int8_t)rq_by(a00, &r0, cx, oc);
        y1[oc] = (int8_t)rq_by(a10, &r0, cx, oc);
        y0[oc1] = (int8_t)rq_by(a01, &r1, cx, oc1);
        y1[oc1] = (int8_t)rq_by(a11, &r1, cx, oc1);
    }
}

/* Requantise the 2 x 2 block (fast path) and store it at Y0 / Y1 (the two pixels' outputs of
 * channel oc) and d bytes on (channel oc1; d = 0 for a repeated channel). The constants m?,
 * c?, e? of the two channels are the caller's. */
#define CV_STORE_PAIR(Y0, Y1, d)                                                           \
    do {                                                                                  \
        int32_t r00 = rq_fast(a00, m0, c0, e0), r10 = rq_fast(a10, m0, c0, e0);           \
        int32_t r01 = rq_fast(a01, m1, c1, e1), r11 = rq_fast(a11, m1, c1, e1);           \
        if (clamp && (d)) { /* both pixels' two bytes at once, clamped as 4 lanes */      \
            const uint32_t v =                                                            \
                tt_clamp4_s8(pack4(r00, r01, r10, r11), cx->lo4, cx->hi4);                \
            st16((Y0), v);                                                                \
            st16((Y1), v >> 16);                                                          \
            break;                                                                        \
        }                                                                                 \
        if (clamp) {                                                                      \
            r00 = tt_sat8(r00, lo, hi);                                                   \
            r01 = tt_sat8(r01, lo, hi);                                                   \
            r10 = tt_sat8(r10, lo, hi);                                                   \
            r11 = tt_sat8(r11, lo, hi);                                                   \
        }                                                                                 \
        (Y0)[0] = (int8_t)r00;                                                            \
        (Y0)[d] = (int8_t)r01;                                                            \
        (Y1)[0] = (int8_t)r10;                                                            \
        (Y1)[d] = (int8_t)r11;                                                            \
    } while (0)

/* The same for channels oc / oc1 of the pixel rows y0 / y1, the constants read from the
 * parameters (oc1 == oc: a repeated channel, stored twice) */
#define CV_STORE_FAST(oc, oc1)                                                             \
    do {                                                                                  \
        const int32_t e0 = -shift[oc], e1 = -shift[oc1];                                  \
        const int32_t m0 = mult[oc], m1 = mult[oc1];                                      \
        const int32_t c0 = fast_c(k1, e0), c1 = fast_c(k1, e1);                           \
        CV_STORE_PAIR(y0 + (oc), y1 + (oc), (oc1) - (oc));                                \
    } while (0)

/* Fast path, pair layout: channel pairs outside, the pixel pairs of the buffer inside, so a
 * channel pair's requantisation constants and start values are derived once per buffer. */
static CV_INLINE void xs_buf(int8_t *y, const int32_t *buf, int32_t npx, const cv_ctx *cx,
                             int32_t nk, int32_t tail, int32_t clamp, int ext, int32_t *wx)
{
    const int32_t cout = cx->cout, k = cx->k, kp = cx->kp, k1 = cx->k1;
    const int32_t lo = cx->lo, hi = cx->hi;
    const int32_t *const mult = cx->q->mult, *const shift = cx->q->shift;
    const int32_t *const xend = buf + (npx >> 1) * kp; /* the whole pairs */
    int32_t oc;

    for (oc = cx->oc0; oc < cx->oc1; oc += 2) {
        const int32_t d = oc + 1 < cout ? 1 : 0, oc1 = oc + d;
        const int8_t *const w0 = cx->w + oc * k, *const w1 = w0 + d * k;
        const int32_t e0 = -shift[oc], e1 = -shift[oc1], m0 = mult[oc], m1 = mult[oc1];
        const int32_t c0 = fast_c(k1, e0), c1 = fast_c(k1, e1);
        const int32_t i0 = bias_x(cx->b, oc, 2), i1 = bias_x(cx->b, oc1, 2);
        const int32_t *xb = buf;
        int8_t *y0 = y + oc;
        if (ext) {
            extend_pair(wx, w0, w1, k);
        }
/* the pixel pair at xb into y0 and Y1 */
#define CV_XS_BLOCK(Y1)                                                                    \
    do {                                                                                  \
        int8_t *const y1 = (Y1);                                                          \
        const int32_t *xp = xb;                                                           \
        int32_t a00 = i0, a01 = i1, a10 = i0, a11 = i1;                                   \
        if (ext) {                                                                        \
            CV_MAC2x2_X(xp, wx, kp >> 2, nk);                                             \
        } else {                                                                          \
            CV_MAC2x2(xp, w0, w1, k, nk, tail);                                           \
        }                                                                                 \
        CV_STORE_PAIR(y0, y1, d);                                                         \
    } while (0)
        for (; xb != xend; xb += kp, y0 += 2 * cout) {
            CV_XS_BLOCK(y0 + cout);
        }
        if (npx & 1) { /* the last pixel, its partner slot a copy of it */
            CV_XS_BLOCK(y0);
        }
#undef CV_XS_BLOCK
    }
}

/* (the extended weights in a fixed array: a variable-length one costs GCC a frame pointer
 * and hides the frame from the stack estimate) */
#define CV_XS_FN(name, nk, tail, clamp, ext)                                               \
    static CV_HOT CV_NOINLINE void name(int8_t *y, const int32_t *buf, int32_t npx,        \
                                        const cv_ctx *cx)                                 \
    {                                                                                     \
        int32_t wx[ext ? CV_WX : 1];                                                      \
        xs_buf(y, buf, npx, cx, nk, tail, clamp, ext, wx);                                \
    }
CV_XS_FN(xs_gen, 0, cx->k & 3, 0, 0) /* int8 weights: inputs over CV_WX, or few pixels */
CV_XS_FN(xs_gen_c, 0, cx->k & 3, 1, 0)
CV_XS_FN(xs_genx, 0, 0, 0, 1) /* extended weights */
CV_XS_FN(xs_genx_c, 0, 0, 1, 1)
CV_XS_FN(xs_24x, 6, 0, 0, 1) /* cin 24 */
CV_XS_FN(xs_24x_c, 6, 0, 1, 1)
CV_XS_FN(xs_27x, 7, 0, 0, 1) /* the 3x3x3 stem (7 groups, the last one padded) */
CV_XS_FN(xs_27x_c, 7, 0, 1, 1)
#undef CV_XS_FN

/* The 3x3x3 stem's blocks in assembly (fast requantisation, no clamp, an even cout): 14
 * registers beside the loop's memory reads, which GCC 12 allocates when it optimises for
 * speed (-O0 and -Os keep xs_27x). GCC's xs_27x kept the requantisation constants, the output
 * stride and the loop's end on the stack: 126 instructions a block of 2 pixels x 2 channels
 * (108 MACs); here each is read once per block from a table: 115. */
#if defined(CV_DSP_ASM)
#define CV_STEM_ASM 1

/* a channel pair's constants, as the assembly loops read them (byte offsets in the comments) */
typedef struct {
    int32_t i0, i1; /* 0: start values, 2 * bias */
    int32_t m0, c0; /* 8: channel 0's multiplier and rounding constant */
    int32_t m1, c1; /* 16: channel 1's */
    int32_t e0, e1; /* 24: their right shifts */
} cv_pair_k;

/* the fast requantisation's constants of channels oc, oc + 1 */
static CV_INLINE void pair_consts(cv_pair_k *k, const cv_ctx *cx, int32_t oc)
{
    const int32_t *const mult = cx->q->mult, *const shift = cx->q->shift;

    k->i0 = bias_x(cx->b, oc, 2);
    k->i1 = bias_x(cx->b, oc + 1, 2);
    k->m0 = mult[oc];
    k->m1 = mult[oc + 1];
    k->e0 = -shift[oc];
    k->e1 = -shift[oc + 1];
    k->c0 = fast_c(cx->k1, k->e0);
    k->c1 = fast_c(cx->k1, k->e1);
}

typedef struct {
    cv_pair_k p;         /* 0 */
    int32_t ys;          /* 32: bytes from pixel 0's outputs to pixel 1's (0: a lone pixel) */
    const int32_t *xend; /* 36: the blocks' end in the buffer */
} cv_stem_k;

/* group g: the pixel pair's words (x0, x1 | x2, x3) times channel 0's (w0, w1), then
 * channel 1's; A00 / A01: where pixel 0's sums go on from (group 0: pixel 1's, which start
 * at the channels' start values) */
#define CV_ST_G(g, A00, A01)                                                               \
    "ldrd %[x0], %[x1], [%[xp], #" #g "*16]\n\t"                                           \
    "ldrd %[x2], %[x3], [%[xp], #" #g "*16+8]\n\t"                                         \
    "ldrd %[w0], %[w1], [%[wx], #" #g "*16]\n\t"                                           \
    "smlad %[a00], %[x0], %[w0], %[" A00 "]\n\t"                                           \
    "smlad %[a00], %[x1], %[w1], %[a00]\n\t"                                               \
    "smlad %[a10], %[x2], %[w0], %[a10]\n\t"                                               \
    "smlad %[a10], %[x3], %[w1], %[a10]\n\t"                                               \
    "ldrd %[w0], %[w1], [%[wx], #" #g "*16+8]\n\t"                                         \
    "smlad %[a01], %[x0], %[w0], %[" A01 "]\n\t"                                           \
    "smlad %[a01], %[x1], %[w1], %[a01]\n\t"                                               \
    "smlad %[a11], %[x2], %[w0], %[a11]\n\t"                                               \
    "smlad %[a11], %[x3], %[w1], %[a11]\n\t"
#define CV_ST_GN(g) CV_ST_G(g, "a00", "a01")
/* rq_fast of v: m in w0, c in w1, e in x0 */
#define CV_ST_RQ(v)                                                                        \
    "add %[x1], %[w1], %[" v "], asr #31\n\t"                                              \
    "smmlar %[" v "], %[" v "], %[w0], %[x1]\n\t"                                          \
    "asr %[" v "], %[" v "], %[x0]\n\t"                                                    \
    "ssat %[" v "], #8, %[" v "]\n\t"

/* the blocks from pair slot xp to k->xend into y (channels 0, 1 of pixel 0; ys on, pixel 1) */
static inline void stem_blocks(int8_t *y, const int32_t *xp, const int32_t *wx,
                               const cv_stem_k *k)
{
    int32_t a00, a01, a10, a11, x0, x1, x2, x3, w0, w1;
    __asm__ volatile("1:\n\t"
                     "ldrd %[a10], %[a11], [%[k]]\n\t"
                     CV_ST_G(0, "a10", "a11") CV_ST_GN(1) CV_ST_GN(2) CV_ST_GN(3) CV_ST_GN(4)
                     CV_ST_GN(5) CV_ST_GN(6)
                     "ldrd %[w0], %[w1], [%[k], #8]\n\t"
                     "ldr %[x0], [%[k], #24]\n\t"
                     CV_ST_RQ("a00") CV_ST_RQ("a10")
                     "ldrd %[w0], %[w1], [%[k], #16]\n\t"
                     "ldr %[x0], [%[k], #28]\n\t"
                     CV_ST_RQ("a01") CV_ST_RQ("a11")
                     "ldr %[x2], [%[k], #32]\n\t"
                     "bfi %[a00], %[a01], #8, #8\n\t" /* each pixel's two bytes: one STRH */
                     "strh %[a00], [%[y]]\n\t"
                     "bfi %[a10], %[a11], #8, #8\n\t"
                     "strh %[a10], [%[y], %[x2]]\n\t"
                     "add %[y], %[y], %[x2], lsl #1\n\t"
                     "add %[xp], %[xp], #7*16\n\t"
                     "ldr %[x0], [%[k], #36]\n\t"
                     "cmp %[xp], %[x0]\n\t"
                     "bne 1b"
                     : [a00] "=&r"(a00), [a01] "=&r"(a01), [a10] "=&r"(a10), [a11] "=&r"(a11),
                       [x0] "=&r"(x0), [x1] "=&r"(x1), [x2] "=&r"(x2), [x3] "=&r"(x3),
                       [w0] "=&r"(w0), [w1] "=&r"(w1), [xp] "+r"(xp), [y] "+r"(y)
                     : [wx] "r"(wx), [k] "r"(k)
                     : "cc", "memory");
}
#undef CV_ST_G
#undef CV_ST_GN
#undef CV_ST_RQ

static CV_NOINLINE void xs_27x_asm(int8_t *y, const int32_t *buf, int32_t npx,
                                   const cv_ctx *cx)
{
    int32_t wx[28];
    cv_stem_k k;
    const int32_t cout = cx->cout;
    const int32_t *const last = buf + (npx >> 1) * 28; /* the odd pixel's slot, if any */
    int32_t oc;

    for (oc = cx->oc0; oc < cx->oc1; oc += 2) {
        extend_pair(wx, cx->w + oc * 27, cx->w + (oc + 1) * 27, 27);
        pair_consts(&k.p, cx, oc);
        k.ys = cout;
        k.xend = last;
        if (buf != last) {
            stem_blocks(y + oc, buf, wx, &k);
        }
        if (npx & 1) { /* its partner slot repeats it: both stores land on its outputs */
            k.ys = 0;
            k.xend = last + 28;
            stem_blocks(y + (npx - 1) * cout + oc, last, wx, &k);
        }
    }
}

/* Pointwise blocks over extended weights in assembly (fast requantisation, no clamp, an even
 * cout, 3 or more groups). GCC's xs_genx keeps a frame pointer for its variable-length weight
 * array and spills the pair's constants around every block: ~67 instructions a block beside
 * its groups. Here the constants, the output pointer and the blocks' end come from a table
 * and everything else stays in 14 registers: ~37. */
typedef struct {
    cv_pair_k p;         /* 0 */
    int8_t *y;           /* 32: the next block's pixel 0, channel 0 output */
    int32_t ys;          /* 36: bytes from pixel 0's outputs to pixel 1's (0: a lone pixel) */
    const int32_t *xend; /* 40: the blocks' end in the buffer */
    const int32_t *wx;   /* 44: the pair's extended weights */
    int32_t span;        /* 48: bytes of a block's groups, 16 per group */
} cv_pw_k;

/* one group: the pixel pair's words (x0, x1 | x2, x3) times channel 0's (w0, w1), then
 * channel 1's; A00 / A01: where pixel 0's sums go on from (the first group: pixel 1's, which
 * hold the start values) */
#define CV_PW_G(A00, A01)                                                                  \
    "ldrd %[x0], %[x1], [%[xp]], #8\n\t"                                                    \
    "ldrd %[x2], %[x3], [%[xp]], #8\n\t"                                                    \
    "ldrd %[w0], %[w1], [%[wp]], #8\n\t"                                                    \
    "smlad %[a00], %[x0], %[w0], %[" A00 "]\n\t"                                           \
    "smlad %[a00], %[x1], %[w1], %[a00]\n\t"                                               \
    "smlad %[a10], %[x2], %[w0], %[a10]\n\t"                                               \
    "smlad %[a10], %[x3], %[w1], %[a10]\n\t"                                               \
    "ldrd %[w0], %[w1], [%[wp]], #8\n\t"                                                    \
    "smlad %[a01], %[x0], %[w0], %[" A01 "]\n\t"                                           \
    "smlad %[a01], %[x1], %[w1], %[a01]\n\t"                                               \
    "smlad %[a11], %[x2], %[w0], %[a11]\n\t"                                               \
    "smlad %[a11], %[x3], %[w1], %[a11]\n\t"
/* rq_fast of v: m in w0, c in w1, e in x0 */
#define CV_PW_RQ(v)                                                                        \
    "add %[x1], %[w1], %[" v "], asr #31\n\t"                                              \
    "smmlar %[" v "], %[" v "], %[w0], %[x1]\n\t"                                           \
    "asr %[" v "], %[" v "], %[x0]\n\t"                                                    \
    "ssat %[" v "], #8, %[" v "]\n\t"
/* the blocks from pair slot xp to k->xend; PEEL: the groups before the two-group loop (1 for
 * an odd group count, 2 for an even one), so the loop runs whole iterations */
#define CV_PW_BLOCKS(name, PEEL)                                                           \
    static inline void name(const int32_t *xp, cv_pw_k *k)                                \
    {                                                                                     \
        int32_t a00, a01, a10, a11, x0, x1, x2, x3, w0, w1;                               \
        const int32_t *wp, *xe;                                                           \
        __asm__ volatile("1:\n\t"                                                         \
                         "ldr %[xe], [%[k], #48]\n\t"                                      \
                         "ldr %[wp], [%[k], #44]\n\t"                                      \
                         "ldrd %[a10], %[a11], [%[k]]\n\t"                                 \
                         "add %[xe], %[xe], %[xp]\n\t"                                     \
                         CV_PW_G("a10", "a11") PEEL                                       \
                         "2:\n\t"                                                         \
                         CV_PW_G("a00", "a01") CV_PW_G("a00", "a01")                      \
                         "cmp %[xp], %[xe]\n\t"                                            \
                         "bne 2b\n\t"                                                      \
                         "ldrd %[w0], %[w1], [%[k], #8]\n\t"                               \
                         "ldr %[x0], [%[k], #24]\n\t"                                      \
                         CV_PW_RQ("a00") CV_PW_RQ("a10")                                  \
                         "ldrd %[w0], %[w1], [%[k], #16]\n\t"                              \
                         "ldr %[x0], [%[k], #28]\n\t"                                      \
                         CV_PW_RQ("a01") CV_PW_RQ("a11")                                  \
                         "ldrd %[x2], %[x3], [%[k], #32]\n\t"                              \
                         "bfi %[a00], %[a01], #8, #8\n\t" /* a pixel's two bytes */       \
                         "strh %[a00], [%[x2]]\n\t"                                        \
                         "bfi %[a10], %[a11], #8, #8\n\t"                                  \
                         "strh %[a10], [%[x2], %[x3]]\n\t"                                 \
                         "add %[x2], %[x2], %[x3], lsl #1\n\t"                             \
                         "str %[x2], [%[k], #32]\n\t"                                      \
                         "ldr %[x0], [%[k], #40]\n\t"                                      \
                         "cmp %[xp], %[x0]\n\t"                                            \
                         "bne 1b"                                                         \
                         : [a00] "=&r"(a00), [a01] "=&r"(a01), [a10] "=&r"(a10),          \
                           [a11] "=&r"(a11), [x0] "=&r"(x0), [x1] "=&r"(x1),              \
                           [x2] "=&r"(x2), [x3] "=&r"(x3), [w0] "=&r"(w0), [w1] "=&r"(w1), \
                           [wp] "=&r"(wp), [xe] "=&r"(xe), [xp] "+r"(xp)                  \
                         : [k] "r"(k)                                                     \
                         : "cc", "memory");                                               \
    }
CV_PW_BLOCKS(pw_blocks_odd, "")
CV_PW_BLOCKS(pw_blocks_even, CV_PW_G("a00", "a01"))
#undef CV_PW_BLOCKS

/* (direct calls: the stack estimate follows them) */
static inline void pw_blocks(const int32_t *xp, cv_pw_k *k, int32_t odd)
{
    if (odd) {
        pw_blocks_odd(xp, k);
    } else {
        pw_blocks_even(xp, k);
    }
}
#undef CV_PW_G
#undef CV_PW_RQ

static CV_NOINLINE void xs_ext_asm(int8_t *y, const int32_t *buf, int32_t npx,
                                   const cv_ctx *cx)
{
    int32_t wx[CV_WX];
    cv_pw_k k;
    const int32_t cout = cx->cout, kk = cx->k, kp = cx->kp;
    const int32_t *const last = buf + (npx >> 1) * kp; /* the odd pixel's slot, if any */
    const int32_t odd = (kp >> 2) & 1; /* the group count */
    int32_t oc;

    k.wx = wx;
    k.span = 4 * kp;
    for (oc = cx->oc0; oc < cx->oc1; oc += 2) {
        extend_pair(wx, cx->w + oc * kk, cx->w + (oc + 1) * kk, kk);
        pair_consts(&k.p, cx, oc);
        k.y = y + oc;
        k.ys = cout;
        k.xend = last;
        if (buf != last) {
            pw_blocks(buf, &k, odd);
        }
        if (npx & 1) { /* its partner slot repeats it: both stores land on its outputs */
            k.y = y + (npx - 1) * cout + oc;
            k.ys = 0;
            k.xend = last + kp;
            pw_blocks(last, &k, odd);
        }
    }
}
#endif

/* xs_ext_asm's cases: fast requantisation (checked before), no clamp, an even cout, 3 groups
 * or more (cin 24's unrolled C blocks take 116 instructions, the assembly 109) */
#if defined(CV_STEM_ASM)
#define CV_EXT_ASM_TAKES(cx) (!(cx)->clamp && !((cx)->cout & 1) && (cx)->kp >= 12)
#else
#define CV_EXT_ASM_TAKES(cx) 0
#endif

/* y (npx pixels x cout) from npx inputs in the pair layout. The kernels are called directly,
 * never through (c ? f : g)(...): GCC's call graph, and so the build's stack estimate, only
 * follows direct calls (an indirect one counts as a small leaf). */
static void run_fast(int8_t *y, const int32_t *buf, int32_t npx, const cv_ctx *cx)
{
    if (cx->kp > CV_WX || npx < CV_EXT_MIN_PX) {
        if (cx->clamp) {
            xs_gen_c(y, buf, npx, cx);
        } else {
            xs_gen(y, buf, npx, cx);
        }
    } else if (cx->k == 24 && !CV_EXT_ASM_TAKES(cx)) {
        if (cx->clamp) {
            xs_24x_c(y, buf, npx, cx);
        } else {
            xs_24x(y, buf, npx, cx);
        }
    } else if (cx->k == 27) {
#if defined(CV_STEM_ASM)
        if (!cx->clamp && !(cx->cout & 1)) {
            xs_27x_asm(y, buf, npx, cx);
            return;
        }
#endif
        if (cx->clamp) {
            xs_27x_c(y, buf, npx, cx);
        } else {
            xs_27x(y, buf, npx, cx);
        }
    } else {
#if defined(CV_STEM_ASM)
        if (CV_EXT_ASM_TAKES(cx)) {
            xs_ext_asm(y, buf, npx, cx);
            return;
        }
#endif
        if (cx->clamp) {
            xs_genx_c(y, buf, npx, cx);
        } else {
            xs_genx(y, buf, npx, cx);
        }
    }
}

/* the first channel (step 1) or channel pair (step 2) from oc on that the fast requantisation
 * refuses, or cout */
static int32_t next_slow(const cv_ctx *cx, int32_t oc, int32_t step)
{
    for (; oc < cx->cout; oc += step) {
        if (!pair_fast(cx, oc, oc + step - 1 < cx->cout ? oc + step - 1 : oc)) break;
    }
    return oc;
}

/* y from the pair layout: a call whose channels are not all fast runs the fast kernels over
 * each run of fast channel pairs and the general path (any_pair) over the other pairs, so
 * one dead or near-dead channel of real-data weights costs its pair, not the layer; the
 * common call (all fast) pays nothing for it */
static void run_buf(int8_t *y, const int32_t *buf, int32_t npx, const cv_ctx *cx)
{
    cv_ctx r;
    int32_t oc, e;

    if (cx->fast) {
        run_fast(y, buf, npx, cx);
        return;
    }
    r = *cx;
    for (oc = 0; oc < cx->cout; oc = e + 2) {
        e = next_slow(cx, oc, 2);
        if (e > oc) {
            r.oc0 = oc;
            r.oc1 = e;
            run_fast(y, buf, npx, &r);
        }
        if (e < cx->cout) {
            any_pair(y, buf, npx, cx, e, e + 1 < cx->cout ? e + 1 : e);
        }
    }
}

/* ---- narrow inputs (cin 8, 16): one output channel at a time, its k / 4 weight groups
 * held converted in registers across the pixels; row layout ---- */

/* The DSP pixel-pair loops below take 14 registers (cin 8 also reads its end from the
 * stack): GCC 12 allocates them when it optimises for speed; -O0 (r7 the frame pointer) and
 * -Os keep C. */
#if defined(CV_DSP_ASM)
#define CV_WS_ASM 1

/* group g (4 inputs) of pixels A (at xp) and B (PB bytes on): its weight words from wv, the
 * sums a and b going on from AA and AB */
#define CV_WS_G(g, PB, AA, AB)                                                            \
    "ldrd %[w0], %[w1], [%[wv], #(" #g ")*8]\n\t"                                          \
    "ldrd %[x0], %[x1], [%[xp], #(" #g ")*8]\n\t"                                          \
    "smlad %[a], %[x0], %[w0], %[" AA "]\n\t"                                              \
    "smlad %[a], %[x1], %[w1], %[a]\n\t"                                                   \
    "ldrd %[x0], %[x1], [%[xp], #(" #g ")*8+" #PB "]\n\t"                                  \
    "smlad %[b], %[x0], %[w0], %[" AB "]\n\t"                                              \
    "smlad %[b], %[x1], %[w1], %[b]\n\t"
/* rq_fast of v with the right shift E as SSAT's immediate: the loops below are instantiated
 * per shift (1..22, all the fast path allows), which saves the ASR and its register */
#define CV_WS_RQ(v, E)                                                                     \
    "add %[x0], %[c], %[" v "], asr #31\n\t"                                               \
    "smmlar %[" v "], %[" v "], %[m], %[x0]\n\t"                                           \
    "ssat %[" v "], #8, %[" v "], asr #" #E "\n\t"
/* cin 16, pixel pairs from xp to xe2 (32 bytes per pixel): y[0], y[cout] = channel oc of
 * both (rq_fast, no clamp), y stepping by 2 cout. GCC's one-pixel loop kept the sum's start,
 * two weight words and the requantisation constants on the stack (26 instructions an
 * output); this reads the weights per group from wv, keeping everything else in registers,
 * and shares them between the two pixels: 20. */
#define CV_WS_16                                                                           \
    CV_WS_G(0, 32, "init", "init") CV_WS_G(1, 32, "a", "b") CV_WS_G(2, 32, "a", "b")     \
        CV_WS_G(3, 32, "a", "b")
#define CV_WS16_PAIRS(E)                                                                   \
    case E:                                                                                \
        __asm__ volatile("1:\n\t" CV_WS_16 CV_WS_RQ("a", E) CV_WS_RQ("b", E)               \
                         "strb %[a], [%[y]]\n\t"                                             \
                         "strb %[b], [%[y], %[cout]]\n\t"                                    \
                         "add %[y], %[y], %[cout], lsl #1\n\t"                               \
                         "add %[xp], %[xp], #64\n\t"                                         \
                         "cmp %[xp], %[xe]\n\t"                                              \
                         "bne 1b"                                                            \
                         : [xp] "+r"(xp), [y] "+r"(y), [a] "=&r"(a_), [b] "=&r"(b_),          \
                           [x0] "=&r"(x0_), [x1] "=&r"(x1_), [w0] "=&r"(w0_),                \
                           [w1] "=&r"(w1_)                                                   \
                         : [wv] "r"(wv), [init] "r"(init), [m] "r"(m), [c] "r"(c),           \
                           [cout] "r"(cout), [xe] "r"(xe2)                                    \
                         : "cc", "memory");                                                  \
        break;

/* one pixel pair of cin 8 (32 bytes from xp, stepping past them) into y[0], y[cout] */
#define CV_WS8_PAIR(E)                                                                     \
    "ldrd %[x0], %[x1], [%[xp]], #32\n\t"                                                   \
    "smlad %[a], %[x0], %[w0l], %[init]\n\t"                                                \
    "smlad %[a], %[x1], %[w0h], %[a]\n\t"                                                   \
    "ldrd %[x0], %[x1], [%[xp], #-24]\n\t"                                                  \
    "smlad %[a], %[x0], %[w1l], %[a]\n\t"                                                   \
    "smlad %[a], %[x1], %[w1h], %[a]\n\t"                                                   \
    "ldrd %[x0], %[x1], [%[xp], #-16]\n\t"                                                  \
    "smlad %[b], %[x0], %[w0l], %[init]\n\t"                                                \
    "smlad %[b], %[x1], %[w0h], %[b]\n\t"                                                   \
    "ldrd %[x0], %[x1], [%[xp], #-8]\n\t"                                                   \
    "smlad %[b], %[x0], %[w1l], %[b]\n\t"                                                   \
    "smlad %[b], %[x1], %[w1h], %[b]\n\t"                                                   \
    CV_WS_RQ("a", E) CV_WS_RQ("b", E)                                                       \
    "strb %[a], [%[y]]\n\t"                                                                  \
    "strb %[b], [%[y], %[cout]]\n\t"                                                         \
    "add %[y], %[y], %[cout], lsl #1\n\t"
/* cin 8, pixel quads from xp to xe4: the weights, start value, m, c and cout in registers,
 * nothing read from the stack but the loop's end: 45 instructions per 4 pixels where GCC's
 * C loop, short of registers, takes 56 (two pairs an iteration: one loop test for both) */
#define CV_WS8_QUADS(E)                                                                    \
    case E:                                                                                \
        __asm__ volatile("1:\n\t" CV_WS8_PAIR(E) CV_WS8_PAIR(E)                             \
                         "ldr %[x0], %[xe]\n\t"                                              \
                         "cmp %[xp], %[x0]\n\t"                                              \
                         "bne 1b"                                                            \
                         : [xp] "+r"(xp), [y] "+r"(y), [a] "=&r"(a_), [b] "=&r"(b_),          \
                           [x0] "=&r"(x0_), [x1] "=&r"(x1_)                                  \
                         : [w0l] "r"(w0l), [w0h] "r"(w0h), [w1l] "r"(w1l), [w1h] "r"(w1h),   \
                           [init] "r"(init), [m] "r"(m), [c] "r"(c), [cout] "r"(cout),       \
                           [xe] "m"(xe4)                                                     \
                         : "cc", "memory");                                                  \
        break;
#endif

static CV_INLINE void ws_channel(int8_t *y, const int32_t *xp, int32_t npx, const int8_t *w,
                                 const cv_ctx *cx, int32_t oc, int32_t nk, int mode)
{
    const int32_t cout = cx->cout;
    const int32_t *const xe = xp + npx * 2 * nk;
    int32_t init, m = 0, c = 0, e = 0, lo = cx->lo, hi = cx->hi;
    int32_t w0l, w0h, w1l, w1h, w2l = 0, w2h = 0, w3l = 0, w3h = 0, x0, x1;
    uint32_t u;

    cv_rq r = {2, 0, 0, 0};
    if (mode == 2) {
        init = channel_init(cx, oc, 2);
        r = rq_kind(cx, oc); /* decided once for the channel */
    } else {
        init = bias_x(cx->b, oc, 2);
        m = cx->q->mult[oc];
        e = -cx->q->shift[oc];
        c = fast_c(cx->k1, e);
    }
    u = ld32(w);
    w0l = sx_lo(u);
    w0h = sx_hi(u);
    u = ld32(w + 4);
    w1l = sx_lo(u);
    w1h = sx_hi(u);
    if (nk > 2) {
        u = ld32(w + 8);
        w2l = sx_lo(u);
        w2h = sx_hi(u);
        u = ld32(w + 12);
        w3l = sx_lo(u);
        w3h = sx_hi(u);
    }
#if defined(CV_WS_ASM)
    if (nk == 4 && mode == 0 && npx >= 2) { /* cin 16: pixel pairs, then the odd one below */
        const int32_t *const xe2 = xp + (npx & ~1) * 2 * nk;
        const int32_t wv[8] = {w0l, w0h, w1l, w1h, w2l, w2h, w3l, w3h};
        int32_t a_, b_, x0_, x1_, w0_, w1_;
        switch (e) { /* rq_fast's shift, 1..22 on this path (fast_channel) */
            TT_Q8_EACH_SHIFT(CV_WS16_PAIRS)
        default:
            break; /* (not reached) the C loop below takes them */
        }
        if (xp == xe2) {
            npx &= 1;
        }
    }
    if (nk == 2 && mode == 0 && npx >= 4) { /* cin 8: pixel quads, the rest below */
        const int32_t *const xe4 = xp + (npx & ~3) * 2 * nk;
        int32_t a_, b_, x0_, x1_;
        switch (e) { /* rq_fast's shift, 1..22 on this path (fast_channel) */
            TT_Q8_EACH_SHIFT(CV_WS8_QUADS)
        default:
            break; /* (not reached) the C loop below takes them */
        }
        if (xp == xe4) {
            npx &= 3;
        }
    }
#endif
    if (nk == 2 && mode != 2) { /* cin 8: two pixels per pass (one loop test, one y step) */
        const int32_t *const xe2 = xp + (npx & ~1) * 2 * nk;
        while (xp != xe2) {
            int32_t a, b;
            LD2(xp, x0, x1);
            a = smlad(x1, w0h, smlad(x0, w0l, init));
            LD2(xp, x0, x1);
            a = smlad(x1, w1h, smlad(x0, w1l, a));
            LD2(xp, x0, x1);
            b = smlad(x1, w0h, smlad(x0, w0l, init));
            LD2(xp, x0, x1);
            b = smlad(x1, w1h, smlad(x0, w1l, b));
            a = rq_fast(a, m, c, e);
            b = rq_fast(b, m, c, e);
            if (mode == 1) {
                a = tt_sat8(a, lo, hi);
                b = tt_sat8(b, lo, hi);
            }
            y[0] = (int8_t)a;
            y[cout] = (int8_t)b;
            y += 2 * cout;
        }
    }
    while (xp != xe) {
        int32_t a;
        LD2(xp, x0, x1);
        a = smlad(x1, w0h, smlad(x0, w0l, init));
        LD2(xp, x0, x1);
        a = smlad(x1, w1h, smlad(x0, w1l, a));
        if (nk > 2) {
            LD2(xp, x0, x1);
            a = smlad(x1, w2h, smlad(x0, w2l, a));
            LD2(xp, x0, x1);
            a = smlad(x1, w3h, smlad(x0, w3l, a));
        }
        if (mode == 2) {
            a = rq_by(a, &r, cx, oc);
        } else {
            a = rq_fast(a, m, c, e);
            if (mode == 1) a = tt_sat8(a, lo, hi);
        }
        *y = (int8_t)a;
        y += cout;
    }
}

/* a channel the fast requantisation refuses (general path, any requantisation) */
static CV_HOT CV_NOINLINE void ws_any_ch(int8_t *y, const int32_t *buf, int32_t npx,
                                        const cv_ctx *cx, int32_t oc)
{
    if (cx->k == 8) {
        ws_channel(y + oc, buf, npx, cx->w + oc * 8, cx, oc, 2, 2);
    } else {
        ws_channel(y + oc, buf, npx, cx->w + oc * 16, cx, oc, 4, 2);
    }
}

/* channels cx->oc0 .. cx->oc1 - 1 (run_ws) */
#define CV_WS_FN(name, nk, mode)                                                           \
    static CV_HOT CV_NOINLINE void name(int8_t *y, const int32_t *buf, int32_t npx,        \
                                        const cv_ctx *cx)                                 \
    {                                                                                     \
        const int32_t oc1 = cx->oc1;                                                      \
        int32_t oc;                                                                       \
        for (oc = cx->oc0; oc < oc1; ++oc) {                                              \
            ws_channel(y + oc, buf, npx, cx->w + oc * cx->k, cx, oc, nk, mode);           \
        }                                                                                 \
    }
CV_WS_FN(ws_8, 2, 0)
CV_WS_FN(ws_8_c, 2, 1)
CV_WS_FN(ws_16, 4, 0)
CV_WS_FN(ws_16_c, 4, 1)
#undef CV_WS_FN

/* y (npx pixels x cout) from npx inputs of k = 8 or 16 in the row layout, channels
 * cx->oc0 .. cx->oc1 - 1 */
static void run_ws_fast(int8_t *y, const int32_t *buf, int32_t npx, const cv_ctx *cx)
{
    if (cx->k == 8) {
        if (cx->clamp) {
            ws_8_c(y, buf, npx, cx);
        } else {
            ws_8(y, buf, npx, cx);
        }
    } else {
        if (cx->clamp) {
            ws_16_c(y, buf, npx, cx);
        } else {
            ws_16(y, buf, npx, cx);
        }
    }
}

/* all channels: as run_buf, runs of fast channels and the others one by one (ws_any_ch) */
static void run_ws(int8_t *y, const int32_t *buf, int32_t npx, const cv_ctx *cx)
{
    cv_ctx r;
    int32_t oc, e;

    if (cx->fast) {
        run_ws_fast(y, buf, npx, cx);
        return;
    }
    r = *cx;
    for (oc = 0; oc < cx->cout; oc = e + 1) {
        e = next_slow(cx, oc, 1);
        if (e > oc) {
            r.oc0 = oc;
            r.oc1 = e;
            run_ws_fast(y, buf, npx, &r);
        }
        if (e < cx->cout) {
            ws_any_ch(y, buf, npx, cx, e);
        }
    }
}

/* ---- input converted on the fly (too wide for the buffer) ---- */

/* 2 pixels x 2 channels of int8 rows x0 / x0 + dx and w0 / w0 + dw (k inputs). Register
 * offsets instead of two more pointers keep the loop within the 14 registers (dx and dw
 * are one register when the caller passes the same variable). */
#define CV_MAC2x2_FLY(x0, dx, w0, dw, k, off2)                                         \
    do {                                                                               \
        const int8_t *xa = (x0), *wa = (w0);                                           \
        const int8_t *const xe = xa + ((k) & ~3);                                      \
        while (xa != xe) {                                                             \
            uint32_t cv_p, cv_r, cv_u;                                                 \
            int32_t x0l, x0h, x1l, x1h, wl, wh;                                        \
            cv_r = ld32(xa + (dx));                                                    \
            LDW(xa, cv_p);                                                             \
            x0l = sxa_lo(off2, cv_p);                                                  \
            x0h = sxa_hi(off2, cv_p);                                                  \
            x1l = sxa_lo(off2, cv_r);                                                  \
            x1h = sxa_hi(off2, cv_r);                                                  \
            cv_u = ld32(wa + (dw));                                                    \
            wl = sx_lo(cv_u);                                                          \
            wh = sx_hi(cv_u);                                                          \
            a01 = smlad(x0l, wl, a01);                                                 \
            a01 = smlad(x0h, wh, a01);                                                 \
            a11 = smlad(x1l, wl, a11);                                                 \
            a11 = smlad(x1h, wh, a11);                                                 \
            LDW(wa, cv_u);                                                             \
            wl = sx_lo(cv_u);                                                          \
            wh = sx_hi(cv_u);                                                          \
            a00 = smlad(x0l, wl, a00);                                                 \
            a00 = smlad(x0h, wh, a00);                                                 \
            a10 = smlad(x1l, wl, a10);                                                 \
            a10 = smlad(x1h, wh, a10);                                                 \
        }                                                                              \
        if ((k) & 3) {                                                                 \
            const uint32_t cv_p = tail_word(x0, k), cv_r = tail_word((x0) + (dx), k);  \
            const uint32_t cv_u = tail_word(w0, k), cv_v = tail_word((w0) + (dw), k);  \
            const int32_t x0l = sxa_lo(off2, cv_p), x0h = sxa_hi(off2, cv_p);          \
            const int32_t x1l = sxa_lo(off2, cv_r), x1h = sxa_hi(off2, cv_r);          \
            a00 = smlad(x0l, sx_lo(cv_u), smlad(x0h, sx_hi(cv_u), a00));               \
            a10 = smlad(x1l, sx_lo(cv_u), smlad(x1h, sx_hi(cv_u), a10));               \
            a01 = smlad(x0l, sx_lo(cv_v), smlad(x0h, sx_hi(cv_v), a01));               \
            a11 = smlad(x1l, sx_lo(cv_v), smlad(x1h, sx_hi(cv_v), a11));               \
        }                                                                                 \
    } while (0)

/* pointwise, input rows of cin bytes read directly; mode 2: general path */
static CV_INLINE void fly_pw(int8_t *y, const int8_t *x, int32_t npx, const cv_ctx *cx,
                             int mode)
{
    const int32_t cout = cx->cout, k = cx->k, k1 = cx->k1, off2 = cx->off2;
    const int32_t lo = cx->lo, hi = cx->hi, clamp = mode == 1;
    const int32_t *const mult = cx->q->mult, *const shift = cx->q->shift;
    int32_t p, oc;

    for (p = 0; p < npx; p += 2) {
        const int8_t *const x0 = x + p * k;
        const int8_t *const x1 = p + 1 < npx ? x0 + k : x0;
        int8_t *const y0 = y + p * cout;
        int8_t *const y1 = p + 1 < npx ? y0 + cout : y0;
        const int8_t *w0 = cx->w;
        for (oc = 0; oc < cout; oc += 2) {
            const int32_t oc1 = oc + 1 < cout ? oc + 1 : oc;
            const int8_t *const w1 = w0 + (oc1 - oc) * k;
            /* per pair: a call not all fast takes the general path for the pairs it needs */
            const int any = mode == 2 || (!cx->fast && !pair_fast(cx, oc, oc1));
            int32_t a00, a01, a10, a11;
            if (any) {
                a00 = channel_init(cx, oc, 1);
                a01 = channel_init(cx, oc1, 1);
            } else {
                a00 = bias_x(cx->b, oc, 1);
                a01 = bias_x(cx->b, oc1, 1);
            }
            a10 = a00;
            a11 = a01;
            if (x1 != x0 && w1 != w0) {
                CV_MAC2x2_FLY(x0, k, w0, k, k, off2);
            } else { /* a repeated pixel or channel */
                CV_MAC2x2_FLY(x0, x1 - x0, w0, w1 - w0, k, off2);
            }
            a00 = (int32_t)((uint32_t)a00 * 2u); /* |init + sum| < 2^30 (or a dead channel) */
            a01 = (int32_t)((uint32_t)a01 * 2u);
            a10 = (int32_t)((uint32_t)a10 * 2u);
            a11 = (int32_t)((uint32_t)a11 * 2u);
            if (any) {
                y0[oc] = (int8_t)rq_any(a00, cx, oc);
                y1[oc] = (int8_t)rq_any(a10, cx, oc);
                y0[oc1] = (int8_t)rq_any(a01, cx, oc1);
                y1[oc1] = (int8_t)rq_any(a11, cx, oc1);
            } else {
                CV_STORE_FAST(oc, oc1);
            }
            w0 = w1 + k;
        }
    }
}

#define CV_FLY_FN(name, mode)                                                              \
    static CV_HOT CV_NOINLINE void name(int8_t *y, const int8_t *x, int32_t npx,           \
                                        const cv_ctx *cx)                                 \
    {                                                                                     \
        fly_pw(y, x, npx, cx, mode);                                                      \
    }
CV_FLY_FN(fly_fast, 0)
CV_FLY_FN(fly_fast_c, 1)
#undef CV_FLY_FN

/* ---- pointwise ---- */

static void pw_pixels(int8_t *y, const int8_t *x, int32_t npx, const int8_t *w,
                      const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    int32_t buf[CV_BUF];
    cv_ctx cx;
    int32_t chunk, p, i;

#if TT_MVE /* Helium: sixteen MACs an instruction, any parameters */
    tt_q8_pw_mve(y, x, npx, w, b, g->cin, g->cout, q);
    return;
#endif
    if (!ctx_init(&cx, w, b, g->cout, g->cin, q)) {
        const tt_conv_geom g1 = {1, npx, g->cin, 1, npx, g->cout, 1, 1, 1, 1, 0, 0, 1, 1, 1};
        tt_conv2d_s8(y, x, w, b, &g1, q);
        return;
    }
    if (cx.k == 8 || cx.k == 16) { /* row layout, weights held in registers */
        chunk = CV_BUF / (cx.kp / 2);
        for (p = 0; p < npx; p += chunk) {
            const int32_t n = npx - p < chunk ? npx - p : chunk;
            /* k % 4 == 0: the row layout of n pixels is one run of groups */
            convert_row(buf, x + p * cx.k, n * cx.k, cx.off2, 2);
            run_ws(y + p * cx.cout, buf, n, &cx);
        }
        return;
    }
    chunk = 2 * (CV_BUF / cx.kp); /* pixels: whole pairs */
    if (chunk == 0) {
        if (cx.clamp) {
            fly_fast_c(y, x, npx, &cx);
        } else {
            fly_fast(y, x, npx, &cx);
        }
        return;
    }
    for (p = 0; p < npx; p += chunk) {
        const int32_t n = npx - p < chunk ? npx - p : chunk;
        for (i = 0; i < n; i += 2) { /* an odd pixel's partner slot repeats it */
            const int8_t *const x0 = x + (p + i) * cx.k;
            convert_pair(buf + (i >> 1) * cx.kp, x0, i + 1 < n ? x0 + cx.k : x0, cx.k,
                         cx.off2);
        }
        run_buf(y + p * cx.cout, buf, n, &cx);
    }
}

void tt_conv2d_s8_pw(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     const tt_conv_geom *g, const tt_q8_requant *q)
{
    pw_pixels(y, x, g->h * g->w, w, b, g, q);
}

void tt_conv2d_s8_pw_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    pw_pixels(tt_row(y, oy), tt_row(x, oy), g->w, w, b, g, q);
}

/* ---- regular convolution ---- */

/* input row under output row oy at kernel row ky, or NULL in the padding */
static const int8_t *in_row(const tt_rows *x, int32_t oy, int32_t ky, const tt_conv_geom *g)
{
    const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
    return (iy < 0 || iy >= g->h) ? NULL : tt_row(x, iy);
}

static inline void copy_bytes(int8_t *d, const int8_t *s, int32_t n)
{
    int32_t i;
    for (i = 0; i + 4 <= n; i += 4) memcpy(d + i, s + i, 4); /* LDR / STR */
    for (; i < n; ++i) d[i] = s[i];
}

/* gather the kh*kw*cin patch of output pixel (oy, ox) as bytes; padding taps read as the
 * zero point (-in_offset), so they add (zp + in_offset) * w = 0 like the reference's skip.
 * rows[ky]: the input rows (NULL: padding), or rows == NULL to look them up here. */
static CV_NOINLINE void gather(int8_t *d, const int8_t *const *rows, const tt_rows *x,
                               int32_t oy, int32_t ox, const tt_conv_geom *g, int8_t zp)
{
    const int32_t cin = g->cin, ix0 = ox * g->sw - g->pl;
    const int32_t span = g->kw * cin; /* one kernel row of the patch */
    const int32_t inside = g->dw == 1 && ix0 >= 0 && ix0 + g->kw <= g->w;
    int32_t ky, kx, i;

    for (ky = 0; ky < g->kh; ++ky, d += span) {
        const int8_t *row = rows != NULL ? rows[ky] : in_row(x, oy, ky, g);
        if (row == NULL) {
            for (i = 0; i < span; ++i) d[i] = zp;
        } else if (inside) { /* the kernel row is contiguous in the input row */
            copy_bytes(d, row + ix0 * cin, span);
        } else {
            for (kx = 0; kx < g->kw; ++kx) {
                const int32_t ix = ix0 + kx * g->dw;
                if (ix < 0 || ix >= g->w) {
                    for (i = 0; i < cin; ++i) d[kx * cin + i] = zp;
                } else {
                    copy_bytes(d + kx * cin, row + ix * cin, cin);
                }
            }
        }
    }
}

/* a 3x3x3 patch (three 9-byte spans at rows[ky] + at) into pixel slot d of the pair
 * layout, loaded straight from the rows: the 4-input groups that straddle two spans are
 * assembled from a byte / halfword of one and the start of the next */
static inline void stem_patch(int32_t *d, const int8_t *const *rows, int32_t at, int32_t off2)
{
    const int8_t *const s0 = rows[0] + at, *const s1 = rows[1] + at, *const s2 = rows[2] + at;
    uint16_t h;
    uint32_t g;

#define CV_STEM_GROUP(j, word)                                                             \
    g = (word);                                                                           \
    d[4 * (j)] = dbl16(sxa_lo(off2, g));                                                  \
    d[4 * (j) + 1] = dbl16(sxa_hi(off2, g))
    CV_STEM_GROUP(0, ld32(s0));
    CV_STEM_GROUP(1, ld32(s0 + 4));
    CV_STEM_GROUP(2, (uint8_t)s0[8] | ld32(s1) << 8);
    CV_STEM_GROUP(3, ld32(s1 + 3));
    memcpy(&h, s1 + 7, 2);
    CV_STEM_GROUP(4, h | ld32(s2) << 16);
    CV_STEM_GROUP(5, ld32(s2 + 2));
    CV_STEM_GROUP(6, ld32(s2 + 5) >> 8); /* inputs 24..26, zero-extended (tail_word) */
#undef CV_STEM_GROUP
}

/* fallback for patches wider than the buffer: per tap, on the fly, 2 pixels x 2 channels */
static CV_NOINLINE void reg_fly(int8_t *out, const tt_rows *x, int32_t oy,
                                const tt_conv_geom *g, const cv_ctx *cx)
{
    const int32_t cout = cx->cout, cin = g->cin, off2 = cx->off2;
    int32_t oc, ox, ky, kx;

    for (oc = 0; oc < cout; oc += 2) {
        const int32_t oc1 = oc + 1 < cout ? oc + 1 : oc;
        const int32_t i0 = channel_init(cx, oc, 1), i1 = channel_init(cx, oc1, 1);
        for (ox = 0; ox < g->ow; ox += 2) {
            const int32_t n1 = ox + 1 < g->ow;
            int8_t *const y0 = out + ox * cout;
            int8_t *const y1 = n1 ? y0 + cout : y0;
            int32_t s00 = i0, s01 = i1, s10 = i0, s11 = i1;
            for (ky = 0; ky < g->kh; ++ky) {
                const int8_t *row = in_row(x, oy, ky, g);
                if (row == NULL) continue;
                for (kx = 0; kx < g->kw; ++kx) {
                    const int32_t ix0 = ox * g->sw - g->pl + kx * g->dw;
                    const int32_t ix1 = ix0 + g->sw;
                    const int32_t v0 = ix0 >= 0 && ix0 < g->w;
                    const int32_t v1 = n1 && ix1 >= 0 && ix1 < g->w;
                    const int8_t *const w0 = cx->w + oc * cx->k + (ky * g->kw + kx) * cin;
                    const int8_t *const w1 = w0 + (oc1 - oc) * cx->k;
                    int32_t a00 = 0, a01 = 0, a10 = 0, a11 = 0;
                    if (!v0 && !v1) continue;
                    /* a missing pixel repeats the valid one; its sums are dropped */
                    CV_MAC2x2_FLY(row + (v0 ? ix0 : ix1) * cin,
                                  (v0 && v1 ? ix1 - ix0 : 0) * cin, w0, w1 - w0, cin, off2);
                    if (v0) {
                        s00 += a00;
                        s01 += a01;
                    }
                    if (v1) {
                        s10 += a10;
                        s11 += a11;
                    }
                }
            }
            if (!n1) { /* y1 == y0: store the same values twice */
                s10 = s00;
                s11 = s01;
            }
            y0[oc] = (int8_t)rq_any(2 * s00, cx, oc);
            y1[oc] = (int8_t)rq_any(2 * s10, cx, oc);
            y0[oc1] = (int8_t)rq_any(2 * s01, cx, oc1);
            y1[oc1] = (int8_t)rq_any(2 * s11, cx, oc1);
        }
    }
}

/* the buffered path of a regular-conv row (its own frame: the buffer only when used) */
static CV_NOINLINE void reg_buf(int8_t *out, const tt_rows *x, int32_t oy,
                                const tt_conv_geom *g, const cv_ctx *cx, int32_t chunk)
{
    int32_t buf[CV_BUF_REG];
    const int8_t *rows[CV_ROWS];
    int8_t *const stage = (int8_t *)(buf + chunk / 2 * cx->kp);
    const int8_t zp = (int8_t)(-cx->q->in_offset);
    const int32_t span = g->kw * g->cin, kp = cx->kp;
    const int32_t stem = g->kh == 3 && g->kw == 3 && g->cin == 3;
    /* output columns whose taps all lie inside the input row (dilation 1) */
    const int32_t lo = (g->pl + g->sw - 1) / g->sw;
    const int32_t hi =
        g->dw == 1 && g->w - g->kw + g->pl >= 0 ? (g->w - g->kw + g->pl) / g->sw : -1;
    int32_t ox, i, full = g->kh <= CV_ROWS;

    for (i = 0; i < g->kh && i < CV_ROWS; ++i) {
        rows[i] = in_row(x, oy, i, g);
        full = full && rows[i] != NULL;
    }
    for (ox = 0; ox < g->ow; ox += chunk) {
        const int32_t n = g->ow - ox < chunk ? g->ow - ox : chunk;
        for (i = 0; i < n; ++i) {
            const int32_t c = ox + i;
            if (full && c >= lo && c <= hi) { /* kh contiguous spans */
                const int32_t at = (c * g->sw - g->pl) * g->cin;
                int32_t ky;
                if (stem) { /* 3x3x3: written out, converted straight away */
                    stem_patch(slot(buf, i, kp), rows, at, cx->off2);
                    continue;
                }
                for (ky = 0; ky < g->kh; ++ky) {
                    copy_bytes(stage + ky * span, rows[ky] + at, span);
                }
            } else {
                gather(stage, g->kh <= CV_ROWS ? rows : NULL, x, oy, c, g, zp);
            }
            convert_row(slot(buf, i, kp), stage, cx->k, cx->off2, 4);
        }
        if (n & 1) { /* the odd pixel's partner slot repeats it */
            int32_t *const d = slot(buf, n, kp);
            for (i = 0; i < kp; i += 4) {
                d[i] = d[i - 2];
                d[i + 1] = d[i - 1];
            }
        }
        run_buf(out + ox * cx->cout, buf, n, cx);
    }
}

void tt_conv2d_s8_reg_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                          const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    cv_ctx cx;
    int32_t chunk;

#if TT_MVE /* Helium: the 3x3x3 stem, two VMLADAVs an output (0.28 instructions per MAC) */
    if (tt_q8_stem_mve_ok(g, q)) {
        tt_q8_stem_mve(y, x, oy, oy + 1, w, b, g, q);
        return;
    }
#endif
    if (!ctx_init(&cx, w, b, g->cout, g->kh * g->kw * g->cin, q)) {
        tt_conv2d_s8_row(y, x, oy, w, b, g, q);
        return;
    }
    /* pairs of kp-word pixel blocks, then one staged byte patch (kp / 4 words) */
    chunk = 2 * ((CV_BUF_REG - cx.kp / 4) / cx.kp);
    if (chunk == 0) {
        reg_fly(tt_row(y, oy), x, oy, g, &cx);
    } else {
        reg_buf(tt_row(y, oy), x, oy, g, &cx, chunk);
    }
}

void tt_conv2d_s8_reg(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                      const tt_conv_geom *g, const tt_q8_requant *q)
{
    /* a whole tensor is a ring as tall as the tensor; x is only read */
    const tt_rows yr = {y, g->oh, g->ow * g->cout};
    const tt_rows xr = {(int8_t *)(uintptr_t)x, g->h, g->w * g->cin};
    int32_t oy;

#if TT_MVE /* the stem's weights prepared once for all rows */
    if (tt_q8_stem_mve_ok(g, q)) {
        tt_q8_stem_mve(&yr, &xr, 0, g->oh, w, b, g, q);
        return;
    }
#endif
    for (oy = 0; oy < g->oh; ++oy) {
        tt_conv2d_s8_reg_row(&yr, &xr, oy, w, b, g, q);
    }
}

/* ---- fully connected (single rounding, tt_mbqm) ---- */

void tt_dense_s8_opt(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                     int32_t in, int32_t out, const tt_q8_requant *q)
{
    const int32_t off = q->in_offset;
    const int32_t off2 = (int32_t)(((uint32_t)off & 0xffffu) | ((uint32_t)off << 16));
    int32_t o, c;

    if (in < 1 || in > CV_KMAX || off < -128 || off > 128) {
        tt_dense_s8(y, x, w, b, in, out, q);
        return;
    }
    for (o = 0; o < out; o += 2) {
        const int32_t o1 = o + 1 < out ? o + 1 : o;
        const int8_t *const w0 = w + o * in, *const w1 = w + o1 * in;
        int32_t a00 = 0, a01 = 0, a10 = 0, a11 = 0, acc[2];
        /* one pixel: the second pixel slot repeats it, its sums are dropped */
        CV_MAC2x2_FLY(x, 0, w0, w1 - w0, in, off2);
        (void)a10;
        (void)a11;
        acc[0] = a00;
        acc[1] = a01;
        for (c = 0; c <= o1 - o; ++c) {
            int32_t a = acc[c];
            if (b != NULL) a = (int32_t)((uint32_t)a + (uint32_t)b[o + c]);
            a = tt_mbqm(a, q->mult[o + c], q->shift[o + c]);
            y[o + c] = tt_sat8((int32_t)((uint32_t)a + (uint32_t)q->out_offset), q->act_min,
                               q->act_max);
        }
    }
}

/* ---- --rounding master (tt_q8_master.c): pointwise and fully connected ----
 * The master sum splits exactly: sum (x + off) * (256 w + s) = 256 * A + C with
 * A = sum (x + off) * w and C = sum (x + off) * s. Both fit an int32 for up to MS_KMAX inputs
 * per output (|x + off| <= 255, |w| <= 128, s <= 255), so each is a dual 16-bit MAC loop: x + off
 * formed in the lanes (sxa), w sign- and s zero-extended (sx, ux), four SMLADs per 4 inputs.
 * Only the combination 256 A + C (+ 256 b) needs 64 bits. */
#define MS_KMAX 32768 /* inputs per output: 255 * 255 * MS_KMAX < 2^31 */

/* 256 * sum (x_k + off) * w + sum (x_k + off) * s for the `np` (1 or 2) inputs x_k, one
 * weight row: each w and s word serves both */
static CV_INLINE void master_dots(const int8_t *x0, const int8_t *x1, int32_t np,
                                  const int8_t *w, const uint8_t *s, int32_t n, int32_t off,
                                  int64_t acc[2])
{
    const int32_t off2 = (int32_t)(((uint32_t)off & 0xffffu) | ((uint32_t)off << 16));
    int32_t i = 0, a0 = 0, c0 = 0, a1 = 0, c1 = 0;

    for (; i + 4 <= n; i += 4) {
        const uint32_t wv = ld32(w + i), sv = ld32(s + i), u0 = ld32(x0 + i);
        const int32_t wl = sx_lo(wv), wh = sx_hi(wv), sl = ux_lo(sv), sh = ux_hi(sv);
        const int32_t xl0 = sxa_lo(off2, u0), xh0 = sxa_hi(off2, u0);
        a0 = smlad(xh0, wh, smlad(xl0, wl, a0));
        c0 = smlad(xh0, sh, smlad(xl0, sl, c0));
        if (np == 2) {
            const uint32_t u1 = ld32(x1 + i);
            const int32_t xl1 = sxa_lo(off2, u1), xh1 = sxa_hi(off2, u1);
            a1 = smlad(xh1, wh, smlad(xl1, wl, a1));
            c1 = smlad(xh1, sh, smlad(xl1, sl, c1));
        }
    }
    for (; i < n; ++i) {
        const int32_t w_ = (int32_t)w[i], s_ = (int32_t)s[i];
        const int32_t xo0 = (int32_t)x0[i] + off, xo1 = (int32_t)x1[i] + off;
        a0 += xo0 * w_;
        c0 += xo0 * s_;
        a1 += xo1 * w_;
        c1 += xo1 * s_;
    }
    acc[0] = (int64_t)a0 * 256 + c0;
    acc[1] = (int64_t)a1 * 256 + c1;
}

/* output channel oc from its master sum (bias added here), rounded once or twice as the
 * reference dense / conv kernel does */
static CV_INLINE int8_t master_out(int64_t acc, const int32_t *b, int32_t oc,
                                   const tt_q8_requant *q, int twice)
{
    int32_t v;

    if (b != NULL) {
        acc += (int64_t)b[oc] * 256;
    }
    v = tt_q8_master_round(acc);
    v = twice ? tt_mbqm_double_rounding(v, q->mult[oc], q->shift[oc])
              : tt_mbqm(v, q->mult[oc], q->shift[oc]);
    return tt_sat8(v + q->out_offset, q->act_min, q->act_max);
}

void tt_conv2d_s8_master_opt(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                             const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    const int32_t cin = g->cin, cout = g->cout, n = g->h * g->w;
    int32_t p, oc, k;

    if (g->kh != 1 || g->kw != 1 || g->sh != 1 || g->sw != 1 || g->pt != 0 || g->pl != 0 ||
        g->groups != 1 || g->oh != g->h || g->ow != g->w || cin > MS_KMAX) {
        tt_conv2d_s8_master(y, x, w, shadow, b, g, q);
        return;
    }
    for (p = 0; p < n; p += 2) { /* two pixels per weight row, the last may be alone */
        const int8_t *const x0 = &x[p * cin];
        for (oc = 0; oc < cout; ++oc) {
            int64_t acc[2];
            if (p + 1 < n) { /* np a constant in each call: the inlined loop has no test */
                master_dots(x0, x0 + cin, 2, &w[oc * cin], &shadow[oc * cin], cin,
                            q->in_offset, acc);
            } else {
                master_dots(x0, x0, 1, &w[oc * cin], &shadow[oc * cin], cin, q->in_offset, acc);
            }
            for (k = 0; k < 2 && p + k < n; ++k) {
                y[(p + k) * cout + oc] = master_out(acc[k], b, oc, q, 1);
            }
        }
    }
}

void tt_dense_s8_master_opt(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                            const int32_t *b, int32_t in, int32_t out, const tt_q8_requant *q)
{
    int32_t o;

    if (in > MS_KMAX) {
        tt_dense_s8_master(y, x, w, shadow, b, in, out, q);
        return;
    }
    for (o = 0; o < out; ++o) {
        int64_t acc[2];
        master_dots(x, x, 1, &w[o * in], &shadow[o * in], in, q->in_offset, acc);
        y[o] = master_out(acc[0], b, o, q, 0);
    }
}
