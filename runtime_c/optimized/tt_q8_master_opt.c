/*
 * Optimised --rounding master forward (see tt_q8_master.c), bit-identical with
 * tt_conv2d_s8_master (pointwise geometries; the others call it) and tt_dense_s8_master.
 *
 * The master sum splits exactly: sum (x + off) * (256 w + s) = 256 * A + C with
 * A = sum (x + off) * w and C = sum (x + off) * s. Both fit an int32 for up to MS_KMAX inputs
 * per output (|x + off| <= 255, |w| <= 128, s <= 255), so each is a 16-bit dual
 * multiply-accumulate loop: 4 inputs per step, x + off formed in the lanes by SXTAB16, w
 * sign- and s zero-extended by SXTB16 / UXTB16 (bytes 0, 2 and, rotated, 1, 3), four SMLADs.
 * Only the combination 256 A + C (+ 256 b) needs 64 bits.
 */
#include "tt_kernels.h"

#include <stdint.h>
#include <string.h>

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif

#define MS_KMAX 32768 /* inputs per output: 255 * 255 * MS_KMAX < 2^31 */

#if defined(__ARM_FEATURE_DSP)
static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4); /* one LDR (unaligned allowed) */
    return v;
}

/* GCC's arm_acle.h has no rotated forms: one instruction each */
static inline int32_t sx_hi(uint32_t w)
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
    return r;
}
static inline int32_t ux_hi(uint32_t w)
{
    int32_t r;
    __asm__("uxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
    return r;
}
static inline int32_t sxa_hi(int32_t o, uint32_t x)
{
    int32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(o), "r"(x));
    return r;
}
#endif

#if defined(__GNUC__)
#define MS_INLINE static inline __attribute__((always_inline))
#else
#define MS_INLINE static inline
#endif

/* 256 * sum (x + off) * w + sum (x + off) * s over n inputs (n <= MS_KMAX) */
MS_INLINE int64_t master_dot(const int8_t *x, const int8_t *w, const uint8_t *s, int32_t n,
                             int32_t off)
{
    int32_t i = 0, a = 0, c = 0;
#if defined(__ARM_FEATURE_DSP)
    const int32_t off2 = (int32_t)(((uint32_t)off & 0xFFFFu) * 0x10001u); /* off in both lanes */

    for (; i + 4 <= n; i += 4) {
        const uint32_t xv = ld32(x + i), wv = ld32(w + i), sv = ld32(s + i);
        const int32_t xl = __sxtab16(off2, xv), xh = sxa_hi(off2, xv);
        a = __smlad(xl, __sxtb16(wv), a);
        a = __smlad(xh, sx_hi(wv), a);
        c = __smlad(xl, __uxtb16(sv), c);
        c = __smlad(xh, ux_hi(sv), c);
    }
#endif
    for (; i < n; ++i) {
        const int32_t xo = (int32_t)x[i] + off;
        a += xo * (int32_t)w[i];
        c += xo * (int32_t)s[i];
    }
    return (int64_t)a * 256 + c;
}

/* master_dot of two inputs x0, x1 against one weight row: each w and s word serves both */
MS_INLINE void master_dot2(const int8_t *x0, const int8_t *x1, const int8_t *w,
                           const uint8_t *s, int32_t n, int32_t off, int64_t acc[2])
{
    int32_t i = 0, a0 = 0, c0 = 0, a1 = 0, c1 = 0;
#if defined(__ARM_FEATURE_DSP)
    const int32_t off2 = (int32_t)(((uint32_t)off & 0xFFFFu) * 0x10001u);

    for (; i + 4 <= n; i += 4) {
        const uint32_t wv = ld32(w + i), sv = ld32(s + i);
        const int32_t wl = __sxtb16(wv), wh = sx_hi(wv), sl = __uxtb16(sv), sh = ux_hi(sv);
        const uint32_t u0 = ld32(x0 + i), u1 = ld32(x1 + i);
        const int32_t xl0 = __sxtab16(off2, u0), xh0 = sxa_hi(off2, u0);
        const int32_t xl1 = __sxtab16(off2, u1), xh1 = sxa_hi(off2, u1);
        a0 = __smlad(xh0, wh, __smlad(xl0, wl, a0));
        c0 = __smlad(xh0, sh, __smlad(xl0, sl, c0));
        a1 = __smlad(xh1, wh, __smlad(xl1, wl, a1));
        c1 = __smlad(xh1, sh, __smlad(xl1, sl, c1));
    }
#endif
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

/* output channel oc of a pointwise conv from its master sum (bias added here) */
MS_INLINE int8_t requant(int64_t acc, const int32_t *b, int32_t oc, const tt_q8_requant *q)
{
    int32_t v;

    if (b != NULL) {
        acc += (int64_t)b[oc] * 256;
    }
    v = tt_mbqm_double_rounding(tt_q8_master_round(acc), q->mult[oc], q->shift[oc]);
    return tt_sat8(v + q->out_offset, q->act_min, q->act_max);
}

void tt_conv2d_s8_master_opt(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                             const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q)
{
    const int32_t cin = g->cin, cout = g->cout;
    int32_t p, oc;

    if (g->kh != 1 || g->kw != 1 || g->sh != 1 || g->sw != 1 || g->pt != 0 || g->pl != 0 ||
        g->groups != 1 || g->oh != g->h || g->ow != g->w || cin > MS_KMAX) {
        tt_conv2d_s8_master(y, x, w, shadow, b, g, q);
        return;
    }
    for (p = 0; p + 2 <= g->h * g->w; p += 2) { /* two pixels share each weight word */
        for (oc = 0; oc < cout; ++oc) {
            int64_t acc[2];
            int32_t k;
            master_dot2(&x[p * cin], &x[(p + 1) * cin], &w[oc * cin], &shadow[oc * cin], cin,
                        q->in_offset, acc);
            for (k = 0; k < 2; ++k) {
                y[(p + k) * cout + oc] = requant(acc[k], b, oc, q);
            }
        }
    }
    for (; p < g->h * g->w; ++p) {
        for (oc = 0; oc < cout; ++oc) {
            y[p * cout + oc] = requant(master_dot(&x[p * cin], &w[oc * cin], &shadow[oc * cin],
                                                  cin, q->in_offset), b, oc, q);
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
        int64_t acc = master_dot(x, &w[o * in], &shadow[o * in], in, q->in_offset);
        int32_t v;
        if (b != NULL) {
            acc += (int64_t)b[o] * 256;
        }
        v = tt_mbqm(tt_q8_master_round(acc), q->mult[o], q->shift[o]);
        y[o] = tt_sat8(v + q->out_offset, q->act_min, q->act_max);
    }
}
