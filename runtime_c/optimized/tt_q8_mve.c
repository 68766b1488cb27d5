/*
 * Helium (MVE) int8 forward kernels, see tt_q8_mve.h. Written with GCC's arm_mve.h
 * intrinsics; the file compiles to nothing on cores without MVE.
 *
 * The arithmetic, per output: acc = b + sum (x + in_offset) * w, exact modulo 2^32 as the
 * reference's int32 sum, computed as (b + in_offset * sum w) + sum x * w so that VMLADAV can
 * take sixteen raw int8 products at once; then tt_mbqm_double_rounding, the output offset and
 * the activation range on four pixels' accumulators of one channel at once (rq4), and one
 * scatter store of the four bytes (cout apart).
 */
#include "tt_q8_mve.h"

#if TT_MVE
#include <arm_mve.h>
#include <string.h>

/* One output channel's requantisation, for four pixels' accumulators at once:
 * tt_mbqm_double_rounding lane for lane, + out_offset, clamped to [lo, hi].
 *  - (uint32)a << left wraps as VSHL does;
 *  - tt_srdhm is VQRDMULH (same nudge, same saturation of INT32_MIN * INT32_MIN);
 *  - tt_rdbpot rounds half away from zero, VRSHL half up: one less on negative lanes when
 *    shifting right gives the same result (saturating, so INT32_MIN stays put: also right). */
typedef struct {
    int32_t mult, left, right; /* right: -(right shift), VRSHL's count */
    int32x4_t neg;             /* all ones when shifting right, else 0 */
    int32_t out_off;
    int32x4_t lo, hi;
} rq_chan;

static inline rq_chan rq_chan_of(const tt_q8_requant *q, int32_t oc)
{
    const int32_t sh = q->shift[oc];
    rq_chan r;
    r.mult = q->mult[oc];
    r.left = sh > 0 ? sh : 0;
    r.right = sh > 0 ? 0 : sh;
    r.neg = vdupq_n_s32(sh < 0 ? -1 : 0);
    r.out_off = q->out_offset;
    r.lo = vdupq_n_s32(q->act_min);
    r.hi = vdupq_n_s32(q->act_max);
    return r;
}

/* LEFT: 0 when the channel's multiplier is below one (no left shift), the usual case */
#define TT_MVE_INLINE inline __attribute__((always_inline))
static TT_MVE_INLINE int32x4_t rq4(int32x4_t a, const rq_chan *r, const int32_t left)
{
    if (left) {
        a = vshlq_r_s32(a, r->left);
    }
    a = vqrdmulhq_n_s32(a, r->mult);
    a = vqaddq_s32(a, vandq_s32(vshrq_n_s32(a, 31), r->neg));
    a = vaddq_n_s32(vrshlq_n_s32(a, r->right), r->out_off);
    return vminq_s32(vmaxq_s32(a, r->lo), r->hi);
}

/* sum of a row of n int8 weights */
static inline int32_t row_sum(const int8_t *w, int32_t n)
{
    int32_t s = 0, k;
    for (k = 0; k < n; k += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - k));
        s = vaddvaq_p_s8(s, vldrbq_z_s8(w + k, p), p);
    }
    return s;
}

/* the four accumulators as lanes */
static inline int32x4_t lanes4(int32_t a0, int32_t a1, int32_t a2, int32_t a3)
{
    return vsetq_lane_s32(a3, vsetq_lane_s32(a2, vsetq_lane_s32(a1, vdupq_n_s32(a0), 1), 2), 3);
}

/* cin <= 16: one chunk a pixel, the weight row held in a register for all pixels with zeros
 * beyond cin, so a pixel's 16-byte load may run into the next pixels: those loads go
 * unpredicated while they stay inside x, the last ones through a predicate (inactive lanes
 * load 0 and touch no memory). cin == 8: one load holds two pixels, whose sums are taken
 * against the row in the low and in the high half of a second register. */
static TT_MVE_INLINE void pw_short(int8_t *yp, const int8_t *xp, int32_t npx,
                                   const int8_t *wr, int32_t cin, int32_t cout, int32_t init,
                                   const rq_chan *r, uint32x4_t offs, const int32_t left)
{
    const mve_pred16_t pk = vctp8q((uint32_t)cin);
    const int8x16_t wv = vldrbq_z_s8(wr, pk);
    /* pixels whose 16-byte load stays inside x: (p + 1) * cin + 16 - cin <= npx * cin */
    const int32_t safe = npx - (16 + cin - 1) / cin + 1;
    int32_t p = 0;

    if (cin == 8) {
        int8_t hi[16] = {0};
        int8x16_t wh;
        memcpy(hi + 8, wr, 8);
        wh = vldrbq_s8(hi);
        for (; p + 4 <= npx; p += 4, xp += 32, yp += 4 * cout) {
            const int8x16_t x01 = vldrbq_s8(xp), x23 = vldrbq_s8(xp + 16);
            const int32_t a0 = vmladavq_s8(x01, wv), a1 = vmladavq_s8(x01, wh);
            const int32_t a2 = vmladavq_s8(x23, wv), a3 = vmladavq_s8(x23, wh);
            vstrbq_scatter_offset_s32(yp, offs,
                                      rq4(vaddq_n_s32(lanes4(a0, a1, a2, a3), init), r, left));
        }
    }
    for (; p + 4 <= safe; p += 4, xp += 4 * cin, yp += 4 * cout) {
        const int32_t a0 = vmladavq_s8(vldrbq_s8(xp), wv);
        const int32_t a1 = vmladavq_s8(vldrbq_s8(xp + cin), wv);
        const int32_t a2 = vmladavq_s8(vldrbq_s8(xp + 2 * cin), wv);
        const int32_t a3 = vmladavq_s8(vldrbq_s8(xp + 3 * cin), wv);
        vstrbq_scatter_offset_s32(yp, offs,
                                  rq4(vaddq_n_s32(lanes4(a0, a1, a2, a3), init), r, left));
    }
    for (; p < npx; ++p, xp += cin, yp += cout) {
        const int32_t a = vmladavaq_s8(init, vldrbq_z_s8(xp, pk), wv);
        vstrbq_p_s32(yp, rq4(vdupq_n_s32(a), r, left), vctp32q(1));
    }
}

/* Four pixels' sums (x0 .. x3: their rows) over a weight row: sixteen taps a VMLADAV, the
 * last cin % 16 (tail) against wt, the row's last weights with zeros past them. PRED: the tail
 * loads go through pk (inactive lanes load 0 and touch no memory), for the block whose
 * 16-byte tail loads would leave x; without it they may run into the next pixel's bytes,
 * which meet wt's zeros. */
static TT_MVE_INLINE int32x4_t pw_sums4(const int8_t *x0, const int8_t *x1, const int8_t *x2,
                                        const int8_t *x3, const int8_t *w, int32_t full,
                                        int32_t tail, mve_pred16_t pk, int8x16_t wt,
                                        int32_t init, const int PRED)
{
    int32_t a0 = init, a1 = init, a2 = init, a3 = init, k;

    for (k = 0; k < full; ++k, w += 16, x0 += 16, x1 += 16, x2 += 16, x3 += 16) {
        const int8x16_t wv = vldrbq_s8(w);
        a0 = vmladavaq_s8(a0, vldrbq_s8(x0), wv);
        a1 = vmladavaq_s8(a1, vldrbq_s8(x1), wv);
        a2 = vmladavaq_s8(a2, vldrbq_s8(x2), wv);
        a3 = vmladavaq_s8(a3, vldrbq_s8(x3), wv);
    }
    if (tail) {
        a0 = vmladavaq_s8(a0, PRED ? vldrbq_z_s8(x0, pk) : vldrbq_s8(x0), wt);
        a1 = vmladavaq_s8(a1, PRED ? vldrbq_z_s8(x1, pk) : vldrbq_s8(x1), wt);
        a2 = vmladavaq_s8(a2, PRED ? vldrbq_z_s8(x2, pk) : vldrbq_s8(x2), wt);
        a3 = vmladavaq_s8(a3, PRED ? vldrbq_z_s8(x3, pk) : vldrbq_s8(x3), wt);
    }
    return lanes4(a0, a1, a2, a3);
}

/* any cin: four pixels a pass */
static TT_MVE_INLINE void pw_long(int8_t *yp, const int8_t *xp, int32_t npx,
                                  const int8_t *wr, int32_t cin, int32_t cout, int32_t init,
                                  const rq_chan *r, uint32x4_t offs, const int32_t left)
{
    const int32_t full = cin >> 4, tail = cin & 15;
    const mve_pred16_t pk = vctp8q((uint32_t)tail);
    const int8x16_t wt = vldrbq_z_s8(wr + 16 * full, pk);
    int32_t p = 0;

    /* whole blocks of four whose last tail load stays inside x: no predicates */
    for (; p + 4 <= npx && (p + 4) * cin + 16 - tail <= npx * cin; p += 4, yp += 4 * cout) {
        const int8_t *const x0 = xp + p * cin;
        const int32x4_t acc = pw_sums4(x0, x0 + cin, x0 + 2 * cin, x0 + 3 * cin, wr, full, tail,
                                       pk, wt, init, 0);
        vstrbq_scatter_offset_s32(yp, offs, rq4(acc, r, left));
    }
    for (; p < npx; p += 4, yp += 4 * cout) {
        /* 1-3 pixels left: the spare lanes repeat the last pixel and are not stored */
        const int32_t n = npx - p < 4 ? npx - p : 4;
        const int8_t *const x0 = xp + p * cin;
        const int32x4_t acc = pw_sums4(x0, x0 + (n > 1 ? cin : 0), x0 + (n > 2 ? 2 * cin : 0),
                                       x0 + (n > 3 ? 3 * cin : 0), wr, full, tail, pk, wt, init,
                                       1);
        vstrbq_scatter_offset_p_s32(yp, offs, rq4(acc, r, left), vctp32q((uint32_t)n));
    }
}

void tt_q8_pw_mve(int8_t *y, const int8_t *x, int32_t npx, const int8_t *w, const int32_t *b,
                  int32_t cin, int32_t cout, const tt_q8_requant *q)
{
    /* lane i stores pixel i's output: cout bytes apart */
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)cout);
    const int32_t off = q->in_offset;
    int32_t oc;

    for (oc = 0; oc < cout; ++oc) {
        const int8_t *const wr = w + oc * cin;
        const rq_chan r = rq_chan_of(q, oc);
        const int32_t init = (int32_t)((uint32_t)off * (uint32_t)row_sum(wr, cin) +
                                       (uint32_t)(b != NULL ? b[oc] : 0));
        if (cin <= 16 && r.left) {
            pw_short(y + oc, x, npx, wr, cin, cout, init, &r, offs, 1);
        } else if (cin <= 16) {
            pw_short(y + oc, x, npx, wr, cin, cout, init, &r, offs, 0);
        } else if (r.left) {
            pw_long(y + oc, x, npx, wr, cin, cout, init, &r, offs, 1);
        } else {
            pw_long(y + oc, x, npx, wr, cin, cout, init, &r, offs, 0);
        }
    }
}

#endif
