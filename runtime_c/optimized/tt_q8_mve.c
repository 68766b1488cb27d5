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
#include <stddef.h>
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

/* ===================================== depthwise ====================================== */
/* One channel at a time. Its input rows are copied into a column buffer, column after column,
 * each column's kh bytes together: buf[j * kh + slot] = x[iy][q0 + j] with slot = iy mod kh
 * (padding: the input zero point, so that x + in_offset is 0 there as in the reference). An
 * output's kh x kw window is then kw * kh consecutive bytes, which one VMLADAV (two for 5x5,
 * four for 7x7: sixteen bytes each) multiplies with the channel's weights in the same order
 * (zeros beyond them). The slots make the buffer a ring: when an output row's columns fit in
 * one buffer, the next output row only adds its new input rows (stride of them), the weights
 * rotated to the slots' order (kh rotations). Every pixel, edge or not, sums
 * b + in_offset * sum(w) + sum x * w; four pixels' sums are requantised together (rq4's
 * arithmetic) and scattered to their outputs (C bytes apart).
 *
 * The loops are inline assembly: GCC 12 spilled the requantisation constants and split the
 * gather loop's predicates (three times the instructions). GCC cannot allocate the output
 * loop's registers at -O0 or -Os (as the DSP kernels' TT_DW_DSP): those builds run its C
 * form, the same integers. */
#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define TT_DWM_ASM 1
#endif

#define DWM_BUF 1536 /* bytes of column buffer on the stack (the DSP kernels' strip size) */
#define DWM_SLACK 64 /* the last window's 16-byte loads may read past its taps (zero weights) */
#define DWM_NONE (-0x40000000) /* no input row in the ring yet */

int tt_q8_dw_mve_ok(const tt_conv_geom *g, const tt_q8_requant *q)
{
    /* the zero point must be an int8 (padding bytes), the window fit four VMLADAVs and one
     * output's columns the buffer; gather offsets are 16-bit (8 pixels of C bytes) */
    return g->kh * g->kw <= 64 && g->kh <= 8 &&
           -q->in_offset >= -128 && -q->in_offset <= 127 && 8 * g->cin <= 65535;
}

/* n columns of one input row into their slots: src steps 8 C bytes a gather of eight, dst
 * 8 kh; tail-predicated, so the last gather reads and writes only what is left */
static TT_MVE_INLINE void dwm_gather_row(uint8_t *dst, const uint8_t *src, int32_t n,
                                         int32_t c8, int32_t kh8, uint16x8_t so, uint16x8_t sd)
{
    uint16x8_t v;
    __asm__ volatile("dlstp.16 lr, %[n]\n"
                     "1:\n\t"
                     "vldrb.u16 %q[v], [%[s], %q[so]]\n\t"
                     "vstrb.16 %q[v], [%[d], %q[sd]]\n\t"
                     "add %[s], %[s], %[c8]\n\t"
                     "add %[d], %[d], %[kh8]\n\t"
                     "letp lr, 1b"
                     : [v] "=&w"(v), [s] "+r"(src), [d] "+r"(dst)
                     : [n] "r"(n), [so] "w"(so), [sd] "w"(sd), [c8] "r"(c8), [kh8] "r"(kh8)
                     : "lr", "memory");
}

/* n bytes of v from d (newlib's memset goes a byte at a time) */
static void dwm_set(int8_t *d, int8_t v, int32_t n)
{
    const int8x16_t vv = vdupq_n_s8(v);
    int32_t i;
    for (i = 0; i < n; i += 16) {
        vstrbq_p_s8(d + i, vv, vctp8q((uint32_t)(n - i)));
    }
}

/* The geometry of a block of output columns, shared by its channels and rows. */
typedef struct {
    int32_t kh, kw, K, C, s, ncols, q0;
    int32_t jlo, jhi; /* buffer columns inside the input (the others hold zp) */
    uint16x8_t so, sd;
    int8_t zp;
} dwm_geo;

/* input row `row` (NULL: a padding row) of channel c into its slot; the padding columns
 * hold zp already (tt_q8_dw_mve writes them once a block) */
static TT_MVE_INLINE void dwm_fill_row(int8_t *buf, const int8_t *row, int32_t c,
                                       int32_t slot, const dwm_geo *G)
{
    const int32_t n = G->jhi - G->jlo;
    uint8_t *const d = (uint8_t *)buf + G->jlo * G->kh + slot;

    if (n <= 0) {
        return;
    }
    if (row != NULL) {
        dwm_gather_row(d, (const uint8_t *)row + (G->q0 + G->jlo) * G->C + c, n, 8 * G->C,
                       8 * G->kh, G->so, G->sd);
    } else {
        const uint16x8_t zv = vdupq_n_u16((uint16_t)(uint8_t)G->zp);
        int32_t j;
        for (j = 0; j < n; j += 8) {
            vstrbq_scatter_offset_p_u16(d + j * G->kh, G->sd, zv, vctp16q((uint32_t)(n - j)));
        }
    }
}

/* Four outputs' sums go into v's lanes two at a time (VMOV's pair form: lanes 2 and 0, then
 * 3 and 1). Which of the pair's registers lands in the lower lane is the one thing here the
 * emulator alone vouches for, so the store offsets are put into their lanes by the same two
 * instructions (tt_mve_pair_offsets, dwm_pair01): each output meets its own offset either way.
 * Then the start value and rq4's arithmetic, specialised. R: a right shift (the usual case):
 * VQRDMULH, the saturating -1 on negative lanes, VRSHL by the negative count; L: a left
 * shift (or none) and VQRDMULH. */
#define DWM_RQ_R                                                                           \
    "vqrdmulh.s32 %q[v], %q[v], %[mult]\n\t"                                               \
    "vshr.s32 %q[x], %q[v], #31\n\t"                                                       \
    "vqadd.s32 %q[v], %q[v], %q[x]\n\t"                                                    \
    "vrshl.s32 %q[v], %[sh]\n\t"
#define DWM_RQ_L                                                                           \
    "vshl.s32 %q[v], %[sh]\n\t"                                                            \
    "vqrdmulh.s32 %q[v], %q[v], %[mult]\n\t"
#define DWM_CLAMP                                                                          \
    "vmax.s32 %q[v], %q[v], %q[lo]\n\t"                                                    \
    "vmin.s32 %q[v], %q[v], %q[hi]\n\t"
/* the range from memory (7x7: the four weight chunks leave no registers for it) */
#define DWM_CLAMP_MEM                                                                      \
    "vldrw.32 %q[x], [%[kp], #24]\n\t"                                                     \
    "vmax.s32 %q[v], %q[v], %q[x]\n\t"                                                     \
    "vldrw.32 %q[x], [%[kp], #40]\n\t"                                                     \
    "vmin.s32 %q[v], %q[v], %q[x]\n\t"
#define DWM_STORE "vstrb.32 %q[v], [%[y], %q[offs]]\n\tadd %[y], %[y], %[y4]\n\t"

/* output k of the block's four (window k * ST bytes on), chunk i into sum S */
#define DWM_LD(K, I) "vldrb.8 %q[x], [%[p], #(" #K "*%c[st]+" #I "*16)]\n\t"
#define DWM_DOT1(K, S) DWM_LD(K, 0) "vmladav.s8 %[" S "], %q[x], %q[w0]\n\t"
#define DWM_DOT2(K, S) DWM_DOT1(K, S) DWM_LD(K, 1) "vmladava.s8 %[" S "], %q[x], %q[w1]\n\t"
#define DWM_DOT4(K, S)                                                                     \
    DWM_DOT2(K, S) DWM_LD(K, 2) "vmladava.s8 %[" S "], %q[x], %q[w2]\n\t"                  \
    DWM_LD(K, 3) "vmladava.s8 %[" S "], %q[x], %q[w3]\n\t"
#define DWM_BODY(DOT, RQ, CLAMP, INIT, OO)                                                 \
    "dls lr, %[n]\n"                                                                       \
    "1:\n\t" DOT(0, "s0") DOT(2, "s1") "vmov %q[v][2], %q[v][0], %[s1], %[s0]\n\t"         \
    DOT(1, "s0") DOT(3, "s1") "vmov %q[v][3], %q[v][1], %[s1], %[s0]\n\t"                  \
    "add %[p], %[p], #(4*%c[st])\n\t" INIT RQ OO CLAMP DWM_STORE "le lr, 1b"
#define DWM_INIT "vadd.i32 %q[v], %q[v], %[init]\n\t"
#define DWM_OO "vadd.i32 %q[v], %q[v], %[oo]\n\t"
/* 7x7 and the plane path: the start value and the output offset from memory through s1
 * (free once the sums are in v; 7x7 the range too): too few registers otherwise (-Og) */
#define DWM_INIT_MEM "ldr %[s1], [%[kp]]\n\tvadd.i32 %q[v], %q[v], %[s1]\n\t"
#define DWM_OO_MEM "ldr %[s1], [%[kp], #12]\n\tvadd.i32 %q[v], %q[v], %[s1]\n\t"
#define DWM_OUT                                                                            \
    [v] "=&w"(v), [x] "=&w"(x), [s0] "=&Te"(s0), [s1] "=&Te"(s1), [p] "+r"(p), [y] "+r"(y)
#define DWM_IN                                                                             \
    [n] "r"(n4), [st] "i"(ST), [mult] "r"(k->mult), [sh] "r"(k->sh), [offs] "w"(k->poffs),  \
        [y4] "r"(k->y4)
#define DWM_LOHI [init] "r"(k->init), [oo] "r"(k->oo), [lo] "w"(k->lo), [hi] "w"(k->hi)

/* A channel's constants for the output loop. */
typedef struct {
    int32_t init, mult, sh, oo, y4, right; /* sh: the left shift, or -(the right shift) */
    int32x4_t lo, hi;
    uint32x4_t offs;  /* output i at i C */
    uint32x4_t poffs; /* the same through DWM_BODY's lane moves */
} dwm_k;

#if defined(TT_DWM_ASM)
/* DWM_INIT_MEM, DWM_OO_MEM and DWM_CLAMP_MEM's offsets */
typedef char dwm_k_offsets[offsetof(dwm_k, init) == 0 && offsetof(dwm_k, oo) == 12 &&
                                   offsetof(dwm_k, lo) == 24 && offsetof(dwm_k, hi) == 40
                               ? 1
                               : -1];

#endif

#if defined(TT_DWM_ASM)
/* n4 blocks of four outputs: windows ST bytes apart in the buffer from p, outputs from y
 * (C bytes apart); wv: the weights in buffer order, NCH chunks */
static TT_MVE_INLINE void dwm_blocks(int8_t *y, const int8_t *p, int32_t n4,
                                     const int8x16_t *wv, const dwm_k *k, const int32_t ST,
                                     const int NCH)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;

    if (NCH == 1) {
        const int8x16_t w0 = wv[0];
        if (k->right) {
            __asm__ volatile(DWM_BODY(DWM_DOT1, DWM_RQ_R, DWM_CLAMP, DWM_INIT, DWM_OO)
                             : DWM_OUT : DWM_IN, DWM_LOHI, [w0] "w"(w0) : "lr", "memory");
        } else {
            __asm__ volatile(DWM_BODY(DWM_DOT1, DWM_RQ_L, DWM_CLAMP, DWM_INIT, DWM_OO)
                             : DWM_OUT : DWM_IN, DWM_LOHI, [w0] "w"(w0) : "lr", "memory");
        }
    } else if (NCH == 2) {
        const int8x16_t w0 = wv[0], w1 = wv[1];
        if (k->right) {
            __asm__ volatile(DWM_BODY(DWM_DOT2, DWM_RQ_R, DWM_CLAMP, DWM_INIT, DWM_OO)
                             : DWM_OUT
                             : DWM_IN, DWM_LOHI, [w0] "w"(w0), [w1] "w"(w1)
                             : "lr", "memory");
        } else {
            __asm__ volatile(DWM_BODY(DWM_DOT2, DWM_RQ_L, DWM_CLAMP, DWM_INIT, DWM_OO)
                             : DWM_OUT
                             : DWM_IN, DWM_LOHI, [w0] "w"(w0), [w1] "w"(w1)
                             : "lr", "memory");
        }
    } else {
        const int8x16_t w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
        if (k->right) {
            __asm__ volatile(DWM_BODY(DWM_DOT4, DWM_RQ_R, DWM_CLAMP_MEM, DWM_INIT_MEM, DWM_OO_MEM)
                             : DWM_OUT
                             : DWM_IN, [kp] "r"(k), [w0] "w"(w0), [w1] "w"(w1),
                               [w2] "w"(w2), [w3] "w"(w3)
                             : "lr", "memory");
        } else {
            __asm__ volatile(DWM_BODY(DWM_DOT4, DWM_RQ_L, DWM_CLAMP_MEM, DWM_INIT_MEM, DWM_OO_MEM)
                             : DWM_OUT
                             : DWM_IN, [kp] "r"(k), [w0] "w"(w0), [w1] "w"(w1),
                               [w2] "w"(w2), [w3] "w"(w3)
                             : "lr", "memory");
        }
    }
}

#endif

/* the start value and DWM_BODY's requantisation, in C (the last outputs of a row) */
static inline int32x4_t dwm_rq(int32x4_t a, const dwm_k *k)
{
    a = vaddq_n_s32(a, k->init);
    if (k->right) {
        a = vqrdmulhq_n_s32(a, k->mult);
        a = vrshlq_n_s32(vqaddq_s32(a, vshrq_n_s32(a, 31)), k->right);
    } else {
        a = vqrdmulhq_n_s32(vshlq_r_s32(a, k->sh), k->mult);
    }
    return vminq_s32(vmaxq_s32(vaddq_n_s32(a, k->oo), k->lo), k->hi);
}

/* an output's sum over its window at bp (NCH sixteen-byte chunks) */
static inline int32_t dwm_dot(const int8_t *bp, const int8x16_t *wv, int32_t nch)
{
    int32_t a = 0, i;
    for (i = 0; i < nch; ++i) {
        a = vmladavaq_s8(a, vldrbq_s8(bp + 16 * i), wv[i]);
    }
    return a;
}

/* the last 1-3 outputs of a row (spare lanes repeat the last one and are not stored) */
static void dwm_rest(int8_t *y, const int8_t *bp, int32_t n, int32_t step,
                     const int8x16_t *wv, int32_t nch, const dwm_k *k)
{
    const int32_t a0 = dwm_dot(bp, wv, nch);
    const int32_t a1 = n > 1 ? dwm_dot(bp + step, wv, nch) : a0;
    const int32_t a2 = n > 2 ? dwm_dot(bp + 2 * step, wv, nch) : a1;
    vstrbq_scatter_offset_p_s32(y, k->offs, dwm_rq(lanes4(a0, a1, a2, a2), k),
                                vctp32q((uint32_t)n));
}

/* n4 blocks of four outputs, any window distance (kernels other than 3x3, 5x5, 7x7) */
static void dwm_rest4(int8_t *y, const int8_t *bp, int32_t n4, int32_t step,
                      const int8x16_t *wv, int32_t nch, const dwm_k *k)
{
    int32_t i;
    for (i = 0; i < n4; ++i, bp += 4 * step, y += 4 * k->offs[1]) {
        const int32_t a0 = dwm_dot(bp, wv, nch), a1 = dwm_dot(bp + step, wv, nch);
        const int32_t a2 = dwm_dot(bp + 2 * step, wv, nch);
        const int32_t a3 = dwm_dot(bp + 3 * step, wv, nch);
        vstrbq_scatter_offset_s32(y, k->offs, dwm_rq(lanes4(a0, a1, a2, a3), k));
    }
}

/* nb outputs of one channel from the buffer */
static void dwm_outputs(int8_t *y, const int8_t *buf, int32_t nb, const dwm_geo *G,
                        const int8x16_t *wv, int32_t nch, const dwm_k *k)
{
    const int32_t n4 = nb >> 2, step = G->s * G->kh;

    if (n4 > 0) {
#if defined(TT_DWM_ASM)
        switch (step * 4 + nch - 1) { /* the windows' distance is an immediate offset */
#define DWM_CASE(ST, NCH)                                                                  \
    case (ST) * 4 + (NCH) - 1:                                                             \
        dwm_blocks(y, buf, n4, wv, k, ST, NCH);                                            \
        break;
        DWM_CASE(3, 1) DWM_CASE(6, 1) DWM_CASE(5, 2) DWM_CASE(10, 2) DWM_CASE(7, 4)
        DWM_CASE(14, 4) DWM_CASE(1, 1) DWM_CASE(2, 1) DWM_CASE(4, 1) DWM_CASE(8, 1)
#undef DWM_CASE
        default:
            dwm_rest4(y, buf, n4, step, wv, nch, k);
        }
#else
        dwm_rest4(y, buf, n4, step, wv, nch, k);
#endif
    }
    if (nb & 3) {
        dwm_rest(y + 4 * n4 * G->C, buf + 4 * n4 * step, nb & 3, step, wv, nch, k);
    }
}

/* the weights of channel c in buffer order for rotation m (input row iy0 + ky in slot
 * (m + ky) mod kh): NCH chunks, zeros past the taps; returns their sum */
static int32_t dwm_weights(int8x16_t *wv, const int8_t *wc, const uint8_t *tbl, int32_t K,
                           int32_t nch)
{
    int32_t i, sum = 0;
    for (i = 0; i < nch; ++i) {
        const mve_pred16_t p = K > 16 * i ? vctp8q((uint32_t)(K - 16 * i)) : 0;
        wv[i] = vldrbq_gather_offset_z_s8(wc, vldrbq_u8(tbl + 16 * i), p);
        sum = vaddvaq_s8(sum, wv[i]);
    }
    return sum;
}

#if defined(TT_DWM_ASM)
/* ---- small whole maps (the plane path): a channel's whole padded input plane in the
 * buffer, column-major (buf[jx * Hp + jy], jx = ix + pl, jy = iy + pt; padding zp), filled
 * once per channel: every input byte is gathered once. An output's window is then one byte
 * gather through sixteen 8-bit offsets (kx * Hp + ky, the weights' own order), so up to 16
 * taps: 3x3 and the like. Outputs go four a block along the row, two gathers through two
 * offset vectors (a window and the next) per base step. */

#define DWM_PAIRS_12                                                                       \
    "vmov %q[v][2], %q[v][0], %[s1], %[s0]\n\t" /* outputs 0 and 1 (see dwm_pair01) */
#define DWM_PAIRS_34 "vmov %q[v][3], %q[v][1], %[s1], %[s0]\n\t" /* outputs 2 and 3 */
#define DWM_GDOT(S, O) "vldrb.u8 %q[x], [%[p], %q[" O "]]\n\tvmladav.s8 %[" S "], %q[x], %q[w0]\n\t"
#define DWM_PLANE_BODY(RQ)                                                                 \
    "dls lr, %[n]\n"                                                                       \
    "1:\n\t" DWM_GDOT("s0", "oa") DWM_GDOT("s1", "ob") DWM_PAIRS_12                        \
    "add %[p], %[p], %[st2]\n\t" DWM_GDOT("s0", "oa") DWM_GDOT("s1", "ob") DWM_PAIRS_34    \
    "add %[p], %[p], %[st2]\n\t" DWM_INIT_MEM RQ DWM_OO_MEM DWM_CLAMP DWM_STORE "le lr, 1b"

typedef struct {
    int32_t Hp, Wp, st; /* padded plane; st: a window to the next along the row (s Hp) */
    uint8x16_t oa, ob;  /* the window's offsets, and the next window's (K <= 16) */
    uint8x16_t oa1;     /* taps 16..31's offsets (K > 16) */
    uint32x4_t poffs;   /* dwm_pair01 */
    uint16x8_t so;      /* the fill's gather: eight input rows */
} dwm_plane;

/* Whole maps of ow % 4 == 0: every row in one loop, the row's blocks in the inner one (p
 * steps on by pfix at a row's end; y runs on). The constants from memory through the sum
 * registers, free once the sums are in v: the rows' counters leave no others (-Og). */
#define DWM_MAP_RQ_R                                                                       \
    "ldr %[s0], [%[kp], #4]\n\tvqrdmulh.s32 %q[v], %q[v], %[s0]\n\t"                      \
    "vshr.s32 %q[x], %q[v], #31\n\tvqadd.s32 %q[v], %q[v], %q[x]\n\t"                     \
    "ldr %[s0], [%[kp], #8]\n\tvrshl.s32 %q[v], %[s0]\n\t"
#define DWM_MAP_RQ_L                                                                       \
    "ldr %[s0], [%[kp], #8]\n\tvshl.s32 %q[v], %[s0]\n\t"                                  \
    "ldr %[s0], [%[kp], #4]\n\tvqrdmulh.s32 %q[v], %q[v], %[s0]\n\t"
#define DWM_MAP_BODY(RQ)                                                                   \
    "1:\n\tdls lr, %[n4]\n"                                                                \
    "2:\n\t" DWM_GDOT("s0", "oa") DWM_GDOT("s1", "ob") DWM_PAIRS_12                        \
    "add %[p], %[p], %[st2]\n\t" DWM_GDOT("s0", "oa") DWM_GDOT("s1", "ob") DWM_PAIRS_34    \
    "add %[p], %[p], %[st2]\n\t" DWM_INIT_MEM RQ DWM_OO_MEM DWM_CLAMP DWM_STORE             \
    "le lr, 2b\n\t"                                                                        \
    "add %[p], %[p], %[pfix]\n\tsubs %[rows], %[rows], #1\n\tbne 1b"
#define DWM_MAP_OPS                                                                        \
    : [v] "=&w"(v), [x] "=&w"(x), [s0] "=&Te"(s0), [s1] "=&Te"(s1), [p] "+r"(p),           \
      [y] "+r"(y), [rows] "+r"(rows)                                                       \
    : [n4] "r"(n4), [st2] "r"(st2), [pfix] "r"(pfix), [offs] "w"(P->poffs), [y4] "r"(k->y4), \
      [kp] "r"(k), [lo] "w"(k->lo), [hi] "w"(k->hi), [w0] "w"(w0), [oa] "w"(P->oa),        \
      [ob] "w"(P->ob)                                                                      \
    : "lr", "memory", "cc"

/* the whole map of one channel (ow % 4 == 0): outputs from y, windows from p */
static TT_MVE_INLINE void dwm_map_blocks(int8_t *y, const int8_t *p, int32_t rows,
                                         int32_t n4, int32_t sh, int8x16_t w0,
                                         const dwm_plane *P, const dwm_k *k)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;
    const int32_t st2 = 2 * P->st, pfix = sh - n4 * 2 * st2;
    if (k->right) {
        __asm__ volatile(DWM_MAP_BODY(DWM_MAP_RQ_R) DWM_MAP_OPS);
    } else {
        __asm__ volatile(DWM_MAP_BODY(DWM_MAP_RQ_L) DWM_MAP_OPS);
    }
}

/* outputs 0..3 at 0, C, 2 C, 3 C in the lanes DWM_PLANE_BODY's VMOVs put them */
static uint32x4_t dwm_pair01(int32_t C)
{
    uint32x4_t v = vdupq_n_u32(0);
    const int32_t o0 = 0, o1 = C, o2 = 2 * C, o3 = 3 * C;
    __asm__("vmov %q[v][2], %q[v][0], %[o1], %[o0]\n\t"
            "vmov %q[v][3], %q[v][1], %[o3], %[o2]"
            : [v] "+w"(v)
            : [o0] "r"(o0), [o1] "r"(o1), [o2] "r"(o2), [o3] "r"(o3));
    return v;
}


/* whole maps (the rings as tall as the tensors: rows row_bytes apart) that fit the buffer,
 * windows of up to 16 taps within the gathers' 8-bit offsets, the fill's 16-bit ones */
static int dwm_plane_ok(const tt_rows *y, const tt_rows *x, const tt_conv_geom *g,
                        int32_t oy0, int32_t oy1)
{
    const int32_t Hp = (g->oh - 1) * g->sh + g->kh, Wp = (g->ow - 1) * g->sw + g->kw;
    const int32_t K = g->kh * g->kw;
    return oy0 == 0 && oy1 == g->oh && x->rows >= g->h && y->rows >= g->oh && K <= 32 &&
           Hp * Wp <= DWM_BUF && 8 * x->row_bytes <= 65535 &&
           (g->kw - 1 + (K <= 16 ? g->sw : 0)) * Hp + g->kh - 1 <= 255;
}

/* The plane's columns: ncol columns of nrow input rows (rs bytes apart) from src (channel
 * c's first byte), each column's bytes together at dst, Hp apart: one 8-row gather and one
 * contiguous store per 8 bytes (a narrowing store with writeback: its base in r0-r7, "l"). */
static TT_MVE_INLINE void dwm_fill_plane(uint8_t *dst, const uint8_t *src, int32_t ncol,
                                         int32_t nrow, int32_t C, int32_t Hp, int32_t rs,
                                         uint16x8_t so)
{
    const uint8_t *sp;
    uint8_t *dp;
    uint16x8_t v;
    __asm__ volatile("1:\n\t"
                     "mov %[sp], %[src]\n\t"
                     "mov %[dp], %[dst]\n\t"
                     "dlstp.16 lr, %[nrow]\n"
                     "2:\n\t"
                     "vldrb.u16 %q[v], [%[sp], %q[so]]\n\t"
                     "vstrb.16 %q[v], [%[dp]], #8\n\t"
                     "add %[sp], %[sp], %[rs8]\n\t"
                     "letp lr, 2b\n\t"
                     "add %[src], %[src], %[C]\n\t"
                     "add %[dst], %[dst], %[Hp]\n\t"
                     "subs %[n], %[n], #1\n\t"
                     "bne 1b"
                     : [v] "=&w"(v), [sp] "=&r"(sp), [dp] "=&l"(dp), [src] "+r"(src),
                       [dst] "+r"(dst), [n] "+r"(ncol)
                     : [nrow] "r"(nrow), [so] "w"(so), [rs8] "r"(8 * rs), [C] "r"(C),
                       [Hp] "r"(Hp)
                     : "lr", "memory", "cc");
}

/* one output row's first n4 blocks of four (windows from p, outputs from y) */
static TT_MVE_INLINE void dwm_plane_blocks(int8_t *y, const int8_t *p, int32_t n4,
                                           int8x16_t w0, const dwm_plane *P, const dwm_k *k)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;
    const int32_t st2 = 2 * P->st;
    if (k->right) {
        __asm__ volatile(DWM_PLANE_BODY(DWM_RQ_R)
                         : DWM_OUT
                         : [n] "r"(n4), [st2] "r"(st2), [mult] "r"(k->mult), [sh] "r"(k->sh),
                           [offs] "w"(P->poffs), [y4] "r"(k->y4), [kp] "r"(k),
                           [lo] "w"(k->lo), [hi] "w"(k->hi), [w0] "w"(w0), [oa] "w"(P->oa),
                           [ob] "w"(P->ob)
                         : "lr", "memory");
    } else {
        __asm__ volatile(DWM_PLANE_BODY(DWM_RQ_L)
                         : DWM_OUT
                         : [n] "r"(n4), [st2] "r"(st2), [mult] "r"(k->mult), [sh] "r"(k->sh),
                           [offs] "w"(P->poffs), [y4] "r"(k->y4), [kp] "r"(k),
                           [lo] "w"(k->lo), [hi] "w"(k->hi), [w0] "w"(w0), [oa] "w"(P->oa),
                           [ob] "w"(P->ob)
                         : "lr", "memory");
    }
}

/* 17..32 taps (5x5): two gathers a window, one window per base step; the range from memory */
#define DWM_GDOT2(S)                                                                       \
    "vldrb.u8 %q[x], [%[p], %q[oa]]\n\tvmladav.s8 %[" S "], %q[x], %q[w0]\n\t"             \
    "vldrb.u8 %q[x], [%[p], %q[oa1]]\n\tvmladava.s8 %[" S "], %q[x], %q[w1]\n\t"           \
    "add %[p], %[p], %[st]\n\t"
#define DWM_PLANE2_BODY(RQ)                                                                \
    "dls lr, %[n]\n"                                                                       \
    "1:\n\t" DWM_GDOT2("s0") DWM_GDOT2("s1") DWM_PAIRS_12 DWM_GDOT2("s0") DWM_GDOT2("s1")  \
    DWM_PAIRS_34 DWM_INIT_MEM RQ DWM_OO_MEM DWM_CLAMP_MEM DWM_STORE "le lr, 1b"
#define DWM_PLANE2_OPS                                                                     \
    : DWM_OUT                                                                              \
    : [n] "r"(n4), [st] "r"(P->st), [mult] "r"(k->mult), [sh] "r"(k->sh),                  \
      [offs] "w"(P->poffs), [y4] "r"(k->y4), [kp] "r"(k), [w0] "w"(w0), [w1] "w"(w1),      \
      [oa] "w"(P->oa), [oa1] "w"(P->oa1)                                                   \
    : "lr", "memory"

static TT_MVE_INLINE void dwm_plane2_blocks(int8_t *y, const int8_t *p, int32_t n4,
                                            int8x16_t w0, int8x16_t w1, const dwm_plane *P,
                                            const dwm_k *k)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;
    if (k->right) {
        __asm__ volatile(DWM_PLANE2_BODY(DWM_RQ_R) DWM_PLANE2_OPS);
    } else {
        __asm__ volatile(DWM_PLANE2_BODY(DWM_RQ_L) DWM_PLANE2_OPS);
    }
}

/* channel c of the whole map, 17..32 taps (its weights w0, w1, its constants k) */
static void dwm_plane2_channel(const tt_rows *y, const tt_rows *x, int8x16_t w0, int8x16_t w1,
                               const tt_conv_geom *g, int8_t *buf, const dwm_plane *P,
                               const dwm_k *k, int32_t c)
{
    const int32_t C = g->cin, ow = g->ow, n4 = ow >> 2;
    const int32_t ncol = g->w < P->Wp - g->pl ? g->w : P->Wp - g->pl;
    const int32_t nrow = g->h < P->Hp - g->pt ? g->h : P->Hp - g->pt;
    int32_t oy, ox;

    if (ncol > 0 && nrow > 0) {
        dwm_fill_plane((uint8_t *)buf + g->pl * P->Hp + g->pt, (const uint8_t *)x->base + c,
                       ncol, nrow, C, P->Hp, x->row_bytes, P->so);
    }
    for (oy = 0; oy < g->oh; ++oy) {
        const int8_t *const p = buf + oy * g->sh;
        int8_t *const yr = y->base + oy * y->row_bytes + c;
        if (n4 > 0) {
            dwm_plane2_blocks(yr, p, n4, w0, w1, P, k);
        }
        for (ox = 4 * n4; ox < ow; ox += 4) { /* the last 1-3 outputs of the row */
            const int32_t n = ow - ox;
            int32_t a[3], j;
            for (j = 0; j < 3; ++j) {
                const int8_t *const q = p + (ox + (j < n ? j : n - 1)) * P->st;
                a[j] = vmladavaq_s8(vmladavq_s8(vldrbq_gather_offset_s8(q, P->oa), w0),
                                    vldrbq_gather_offset_s8(q, P->oa1), w1);
            }
            vstrbq_scatter_offset_p_s32(yr + ox * C, k->offs,
                                        dwm_rq(lanes4(a[0], a[1], a[2], a[2]), k),
                                        vctp32q((uint32_t)n));
        }
    }
}

/* channel c of the whole map (its weights w0, its constants k) */
static void dwm_plane_channel(const tt_rows *y, const tt_rows *x, int8x16_t w0,
                              const tt_conv_geom *g, int8_t *buf, const dwm_plane *P,
                              const dwm_k *k, int32_t c)
{
    const int32_t C = g->cin, ow = g->ow, n4 = ow >> 2;
    const int32_t ncol = g->w < P->Wp - g->pl ? g->w : P->Wp - g->pl;
    const int32_t nrow = g->h < P->Hp - g->pt ? g->h : P->Hp - g->pt;
    int32_t oy, ox;

    if (ncol > 0 && nrow > 0) {
        dwm_fill_plane((uint8_t *)buf + g->pl * P->Hp + g->pt, (const uint8_t *)x->base + c,
                       ncol, nrow, C, P->Hp, x->row_bytes, P->so);
    }
    if ((ow & 3) == 0) {
        dwm_map_blocks(y->base + c, buf, g->oh, n4, g->sh, w0, P, k);
        return;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        const int8_t *const p = buf + oy * g->sh;
        int8_t *const yr = y->base + oy * y->row_bytes + c;
        if (n4 > 0) {
            dwm_plane_blocks(yr, p, n4, w0, P, k);
        }
        for (ox = 4 * n4; ox < ow; ox += 4) { /* the last 1-3 outputs of the row */
            const int32_t n = ow - ox;
            const int32_t a0 = vmladavq_s8(vldrbq_gather_offset_s8(p + ox * P->st, P->oa), w0);
            const int32_t a1 =
                n > 1 ? vmladavq_s8(vldrbq_gather_offset_s8(p + (ox + 1) * P->st, P->oa), w0) : a0;
            const int32_t a2 =
                n > 2 ? vmladavq_s8(vldrbq_gather_offset_s8(p + (ox + 2) * P->st, P->oa), w0) : a1;
            vstrbq_scatter_offset_p_s32(yr + ox * C, k->offs, dwm_rq(lanes4(a0, a1, a2, a2), k),
                                        vctp32q((uint32_t)n));
        }
    }
}

/* the plane path's geometry; the padding bytes of the plane, once for all channels */
static void dwm_plane_init(dwm_plane *P, int8_t *buf, const tt_conv_geom *g, int8_t zp,
                           int32_t rs)
{
    const int32_t kh = g->kh, kw = g->kw;
    uint8_t oa[32], ob[16];
    int32_t t;

    P->Hp = (g->oh - 1) * g->sh + kh;
    P->Wp = (g->ow - 1) * g->sw + kw;
    P->st = g->sw * P->Hp;
    for (t = 0; t < 32; ++t) { /* tap t = ky kw + kx at kx Hp + ky (zero weights past K) */
        oa[t] = (uint8_t)(t < kh * kw ? (t % kw) * P->Hp + t / kw : 0);
    }
    for (t = 0; t < 16; ++t) {
        ob[t] = (uint8_t)(oa[t] + P->st); /* K <= 16 only: dwm_plane_ok */
    }
    P->oa = vldrbq_u8(oa);
    P->oa1 = vldrbq_u8(oa + 16);
    P->ob = vldrbq_u8(ob);
    P->poffs = dwm_pair01(g->cin);
    P->so = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)rs);
    dwm_set(buf, zp, P->Hp * P->Wp + DWM_SLACK);
}

#endif

/* channel c's weights (nrot rotations) and constants */
static TT_MVE_INLINE void dwm_channel(int8x16_t (*wrot)[4], dwm_k *k, const int8_t *w,
                                      const int32_t *b, const tt_q8_requant *q,
                                      const uint8_t (*tbl)[64], int32_t K, int32_t nch,
                                      int32_t nrot, int32_t c)
{
    const int32_t sum = dwm_weights(wrot[0], w + c * K, tbl[0], K, nch);
    const int32_t sh = q->shift[c];
    int32_t m;

    for (m = 1; m < nrot; ++m) {
        dwm_weights(wrot[m], w + c * K, tbl[m], K, nch);
    }
    k->init = (int32_t)((uint32_t)q->in_offset * (uint32_t)sum +
                        (uint32_t)(b != NULL ? b[c] : 0));
    k->mult = q->mult[c];
    k->right = sh < 0 ? sh : 0;
    k->sh = sh;
}

void tt_q8_dw_mve(const tt_rows *y, const tt_rows *x, int32_t oy0, int32_t oy1,
                  const int8_t *w, const int32_t *b, const tt_conv_geom *g,
                  const tt_q8_requant *q)
{
    const int32_t kh = g->kh, kw = g->kw, K = kh * kw, nch = K <= 16 ? 1 : K <= 32 ? 2 : 4;
    const int32_t s = g->sw, C = g->cin;
    const int32_t nbmax = ((DWM_BUF / kh) - kw) / s + 1;
    /* the ring: every output row's columns in one buffer, more than one row */
    const int ring = g->ow <= nbmax && oy1 - oy0 > 1;
    int32_t nrot = ring ? kh : 1;
    int8_t buf[DWM_BUF + DWM_SLACK] __attribute__((aligned(8)));
    uint8_t tbl[8][64];
    int8x16_t wrot[8][4];
    const int8_t *rows[8];
    dwm_geo G;
    dwm_k k;
    int32_t m, c, oy, ob0, ky;

#if defined(TT_DWM_ASM)
    if (dwm_plane_ok(y, x, g, oy0, oy1)) {
        nrot = 0; /* the plane path takes the weights in their own order */
    }
#endif
    for (m = 0; m < nrot; ++m) { /* buffer byte j * kh + slot from weight ky * kw + j, with
                                  * slot = (m + ky) mod kh; zeros past the taps */
        int32_t j;
        dwm_set((int8_t *)tbl[m], 0, 16 * nch);
        for (ky = 0; ky < kh; ++ky) {
            const int32_t slot = m + ky < kh ? m + ky : m + ky - kh;
            for (j = 0; j < kw; ++j) {
                tbl[m][j * kh + slot] = (uint8_t)(ky * kw + j);
            }
        }
    }
    G.kh = kh;
    G.kw = kw;
    G.K = K;
    G.C = C;
    G.s = s;
    G.zp = (int8_t)-q->in_offset;
    G.so = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)C);
    G.sd = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)kh);
    k.oo = q->out_offset;
    k.y4 = 4 * C;
    k.lo = vdupq_n_s32(q->act_min);
    k.hi = vdupq_n_s32(q->act_max);
    k.offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)C);
#if defined(TT_DWM_ASM)
    k.poffs = tt_mve_pair_offsets(C);
    if (nrot == 0) {
        const mve_pred16_t pk = vctp8q((uint32_t)K);
        dwm_plane P;
        dwm_plane_init(&P, buf, g, G.zp, x->row_bytes);
        for (c = 0; c < C; ++c) { /* the weights in their own order: no table */
            const int8x16_t w0 = vldrbq_z_s8(w + c * K, pk);
            const int8x16_t w1 = K > 16 ? vldrbq_z_s8(w + c * K + 16, vctp8q((uint32_t)(K - 16)))
                                        : vdupq_n_s8(0);
            const int32_t sh = q->shift[c];
            k.init = (int32_t)((uint32_t)q->in_offset *
                                   (uint32_t)vaddvaq_s8(vaddvq_s8(w0), w1) +
                               (uint32_t)(b != NULL ? b[c] : 0));
            k.mult = q->mult[c];
            k.right = sh < 0 ? sh : 0;
            k.sh = sh;
            if (K > 16) {
                dwm_plane2_channel(y, x, w0, w1, g, buf, &P, &k, c);
            } else {
                dwm_plane_channel(y, x, w0, g, buf, &P, &k, c);
            }
        }
        return;
    }
#endif
    for (ob0 = 0; ob0 < g->ow; ob0 += nbmax) {
        const int32_t nb = g->ow - ob0 < nbmax ? g->ow - ob0 : nbmax;
        G.q0 = ob0 * s - g->pl;
        G.ncols = (nb - 1) * s + kw;
        G.jlo = G.q0 < 0 ? (-G.q0 < G.ncols ? -G.q0 : G.ncols) : 0;
        G.jhi = g->w - G.q0 < G.ncols ? g->w - G.q0 : G.ncols;
        G.jhi = G.jhi > G.jlo ? G.jhi : G.jlo;
        /* the slack is read against zero weights: keep it defined */
        dwm_set(buf + G.ncols * kh, 0, DWM_SLACK);
        /* the padding columns, every slot: the rows' fills leave them alone */
        dwm_set(buf, G.zp, G.jlo * kh);
        dwm_set(buf + G.jhi * kh, G.zp, (G.ncols - G.jhi) * kh);
        if (ring) { /* a channel's rows in turn, each input row filled once */
            for (c = 0; c < C; ++c) {
                int32_t have = DWM_NONE, iy;
                dwm_channel(wrot, &k, w, b, q, (const uint8_t(*)[64])tbl, K, nch, nrot, c);
                for (oy = oy0; oy < oy1; ++oy) {
                    const int32_t iy0 = oy * g->sh - g->pt;
                    for (iy = have >= iy0 ? have + 1 : iy0; iy < iy0 + kh; ++iy) {
                        dwm_fill_row(buf, iy < 0 || iy >= g->h ? NULL : tt_row(x, iy), c,
                                     ((iy % kh) + kh) % kh, &G);
                    }
                    have = iy0 + kh - 1;
                    dwm_outputs(tt_row(y, oy) + c + ob0 * C, buf, nb, &G,
                                wrot[((iy0 % kh) + kh) % kh], nch, &k);
                }
            }
        } else { /* a row at a time, its channels in turn */
            for (oy = oy0; oy < oy1; ++oy) {
                int8_t *const yr = tt_row(y, oy) + ob0 * C;
                for (ky = 0; ky < kh; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky;
                    rows[ky] = iy < 0 || iy >= g->h ? NULL : tt_row(x, iy);
                }
                for (c = 0; c < C; ++c) {
                    dwm_channel(wrot, &k, w, b, q, (const uint8_t(*)[64])tbl, K, nch, 1, c);
                    for (ky = 0; ky < kh; ++ky) {
                        dwm_fill_row(buf, rows[ky], c, ky, &G);
                    }
                    dwm_outputs(yr + c, buf, nb, &G, wrot[0], nch, &k);
                }
            }
        }
    }
}

/* ---- pointwise blocks in assembly (after the depthwise's macros, which they share): four
 * pixels of one output channel, cin = 16 FULL + TAIL (TAIL 0 or 8; FULL 1..3), the weight
 * chunks held in registers; a pixel's chunks from t = p + k cin by immediate offsets, the 8
 * tail bytes by a whole 16-byte load against zero weights (blocks whose loads stay inside x);
 * the sums two at a time (DWM_BODY's pairing), the start value, output offset and range
 * from memory (dwm_k). GCC 12 spilled the pointers and constants of pw_long around every
 * block: 0.92 instructions per MAC at cin 24, 0.65 at 32. */
#if defined(TT_DWM_ASM)
#define PWA_LD(I) "vldrb.8 %q[x], [%[t], #(" #I "*16)]\n\t"
#define PWA_MLA(S, OP, W) OP " %[" S "], %q[x], %q[" W "]\n\t"
#define PWA_DOT1(S) PWA_LD(0) PWA_MLA(S, "vmladav.s8", "w0")
#define PWA_DOT2(S) PWA_DOT1(S) PWA_LD(1) PWA_MLA(S, "vmladava.s8", "w1")
#define PWA_DOT3(S) PWA_DOT2(S) PWA_LD(2) PWA_MLA(S, "vmladava.s8", "w2")
#define PWA_TAIL1(S) PWA_LD(1) PWA_MLA(S, "vmladava.s8", "wt")
#define PWA_TAIL2(S) PWA_LD(2) PWA_MLA(S, "vmladava.s8", "wt")
#define PWA_TAIL3(S) PWA_LD(3) PWA_MLA(S, "vmladava.s8", "wt")
#define PWA_NOTAIL(S) ""
#define PWA_BODY(DOT, TAIL, RQ, CLAMP)                                                     \
    "dls lr, %[n]\n"                                                                       \
    "1:\n\t"                                                                               \
    "mov %[t], %[p]\n\t" DOT("s0") TAIL("s0")                                              \
    "add %[t], %[p], %[cin], lsl #1\n\t" DOT("s1") TAIL("s1")                              \
    "vmov %q[v][2], %q[v][0], %[s1], %[s0]\n\t"                                            \
    "add %[t], %[p], %[cin]\n\t" DOT("s0") TAIL("s0")                                      \
    "add %[t], %[t], %[cin], lsl #1\n\t" DOT("s1") TAIL("s1")                              \
    "vmov %q[v][3], %q[v][1], %[s1], %[s0]\n\t"                                            \
    "add %[p], %[p], %[cin], lsl #2\n\t" DWM_INIT_MEM RQ DWM_OO_MEM CLAMP DWM_STORE        \
    "le lr, 1b"
#define PWA_OUT                                                                            \
    [v] "=&w"(v), [x] "=&w"(x), [s0] "=&Te"(s0), [s1] "=&Te"(s1), [t] "=&r"(t),            \
        [p] "+r"(p), [y] "+r"(y)
#define PWA_IN                                                                             \
    [n] "r"(n4), [cin] "r"(cin), [mult] "r"(k->mult), [sh] "r"(k->sh),                     \
        [offs] "w"(k->poffs), [y4] "r"(k->y4), [kp] "r"(k)
#define PWA_CASE(FULL, TAILM, CLAMP, WREGS)                                                \
    if (k->right) {                                                                        \
        __asm__ volatile(PWA_BODY(PWA_DOT##FULL, TAILM, DWM_RQ_R, CLAMP)                   \
                         : PWA_OUT : PWA_IN, WREGS : "lr", "memory");                      \
    } else {                                                                               \
        __asm__ volatile(PWA_BODY(PWA_DOT##FULL, TAILM, DWM_RQ_L, CLAMP)                   \
                         : PWA_OUT : PWA_IN, WREGS : "lr", "memory");                      \
    }

/* n4 blocks of four pixels from p (pixel rows cin bytes apart), outputs from y; w: the
 * weight row */
static TT_MVE_INLINE void pw_asm_blocks(int8_t *y, const int8_t *p, int32_t n4, int32_t cin,
                                        const int8_t *w, const dwm_k *k, const int32_t FULL,
                                        const int32_t TAIL)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;
    const int8_t *t;
    const int8x16_t w0 = vldrbq_s8(w);
    const int8x16_t w1 = FULL > 1 ? vldrbq_s8(w + 16) : w0;
    const int8x16_t w2 = FULL > 2 ? vldrbq_s8(w + 32) : w0;
    const int8x16_t wt = TAIL ? vldrbq_z_s8(w + 16 * FULL, vctp8q((uint32_t)TAIL)) : w0;

#define PWA_W1 [w0] "w"(w0), [lo] "w"(k->lo), [hi] "w"(k->hi)
#define PWA_W1T [w0] "w"(w0), [wt] "w"(wt), [lo] "w"(k->lo), [hi] "w"(k->hi)
#define PWA_W2 [w0] "w"(w0), [w1] "w"(w1), [lo] "w"(k->lo), [hi] "w"(k->hi)
#define PWA_W2T [w0] "w"(w0), [w1] "w"(w1), [wt] "w"(wt), [lo] "w"(k->lo), [hi] "w"(k->hi)
#define PWA_W3 [w0] "w"(w0), [w1] "w"(w1), [w2] "w"(w2)
#define PWA_W3T [w0] "w"(w0), [w1] "w"(w1), [w2] "w"(w2), [wt] "w"(wt)
    if (FULL == 1 && !TAIL) {
        PWA_CASE(1, PWA_NOTAIL, DWM_CLAMP, PWA_W1)
    } else if (FULL == 1) {
        PWA_CASE(1, PWA_TAIL1, DWM_CLAMP, PWA_W1T)
    } else if (FULL == 2 && !TAIL) {
        PWA_CASE(2, PWA_NOTAIL, DWM_CLAMP, PWA_W2)
    } else if (FULL == 2) {
        PWA_CASE(2, PWA_TAIL2, DWM_CLAMP, PWA_W2T)
    } else if (!TAIL) {
        PWA_CASE(3, PWA_NOTAIL, DWM_CLAMP_MEM, PWA_W3)
    } else {
        PWA_CASE(3, PWA_TAIL3, DWM_CLAMP_MEM, PWA_W3T)
    }
    (void)w1, (void)w2, (void)wt;
}

/* cin 8: one load holds two pixels, their sums against the row in the low and in the high
 * half of a second register (as pw_short); pairs (0, 1) and (2, 3) go into the lanes as
 * dwm_pair01 puts their offsets */
#define PWA8_BODY(RQ)                                                                      \
    "dls lr, %[n]\n"                                                                       \
    "1:\n\t"                                                                               \
    "vldrb.8 %q[x], [%[p]], #16\n\t"                                                      \
    "vmladav.s8 %[s0], %q[x], %q[wl]\n\tvmladav.s8 %[s1], %q[x], %q[wh]\n\t"               \
    "vmov %q[v][2], %q[v][0], %[s1], %[s0]\n\t"                                            \
    "vldrb.8 %q[x], [%[p]], #16\n\t"                                                      \
    "vmladav.s8 %[s0], %q[x], %q[wl]\n\tvmladav.s8 %[s1], %q[x], %q[wh]\n\t"               \
    "vmov %q[v][3], %q[v][1], %[s1], %[s0]\n\t" DWM_INIT RQ DWM_OO DWM_CLAMP DWM_STORE      \
    "le lr, 1b"
/* eleven general registers: the start value and output offset stay in registers */
#define PWA8_OPS                                                                           \
    : [v] "=&w"(v), [x] "=&w"(x), [s0] "=&Te"(s0), [s1] "=&Te"(s1), [p] "+r"(p),           \
      [y] "+r"(y)                                                                          \
    : [n] "r"(n4), [mult] "r"(k->mult), [sh] "r"(k->sh), [offs] "w"(k->poffs),             \
      [y4] "r"(k->y4), [init] "r"(k->init), [oo] "r"(k->oo), [wl] "w"(wl), [wh] "w"(wh),   \
      [lo] "w"(k->lo), [hi] "w"(k->hi)                                                     \
    : "lr", "memory"

static TT_MVE_INLINE void pw_asm8(int8_t *y, const int8_t *p, int32_t n4, const int8_t *w,
                                  const dwm_k *k)
{
    int32x4_t v;
    int8x16_t x;
    int32_t s0, s1;
    /* the row in the low half (a predicated load), and in the high half (a byte gather whose
     * lanes 8..15 read w[0..7], the others predicated off: zeros, no access) */
    const int8x16_t wl = vldrbq_z_s8(w, vctp8q(8));
    const uint8x16_t hi8 = vsubq_n_u8(vidupq_n_u8(0, 1), 8); /* lanes 8..15 read w[0..7] */
    const int8x16_t wh = vldrbq_gather_offset_z_s8(w, hi8, (mve_pred16_t)0xFF00);
    if (k->right) {
        __asm__ volatile(PWA8_BODY(DWM_RQ_R) PWA8_OPS);
    } else {
        __asm__ volatile(PWA8_BODY(DWM_RQ_L) PWA8_OPS);
    }
}

/* rows shorter than this keep the C blocks: the assembly's setup outweighs a few blocks
 * (8 pixels of cin 24: 1.93 instructions per MAC against 1.60) */
#define PWA_MIN_PX 16

/* The assembly blocks' share of one output channel: the whole blocks of four pixels whose
 * tail loads stay inside x (all of them without a tail); returns the pixels done. Not
 * inlined: its constants would crowd the C blocks' registers. */
static __attribute__((noinline)) int32_t pw_asm(int8_t *y, const int8_t *x, int32_t npx,
                                                int32_t cin, const int8_t *w, const dwm_k *k)
{
    const int32_t full = cin >> 4, tail = cin & 15;
    /* block p's last tail load ends at (p + 3) cin + 16 (full + 1) <= npx cin */
    int32_t n4 = npx >> 2;
    if (tail && full) { /* (cin 8 loads two whole pixels at a time) */
        const int32_t room = npx * cin - 16 * (full + 1) - 3 * cin; /* p * cin <= room */
        const int32_t last = room >= 0 ? room / cin : -1;           /* the largest p */
        const int32_t nb = last >= 0 ? last / 4 + 1 : 0;
        n4 = nb < n4 ? nb : n4;
    }
    if (n4 <= 0) {
        return 0;
    }
    switch (full * 16 + tail) {
    case 8:
        pw_asm8(y, x, n4, w, k);
        break;
    case 16: pw_asm_blocks(y, x, n4, cin, w, k, 1, 0); break;
    case 24: pw_asm_blocks(y, x, n4, cin, w, k, 1, 8); break;
    case 32: pw_asm_blocks(y, x, n4, cin, w, k, 2, 0); break;
    case 40: pw_asm_blocks(y, x, n4, cin, w, k, 2, 8); break;
    case 48: pw_asm_blocks(y, x, n4, cin, w, k, 3, 0); break;
    case 56: pw_asm_blocks(y, x, n4, cin, w, k, 3, 8); break;
    default: return 0;
    }
    return 4 * n4;
}
#endif

void tt_q8_pw_mve(int8_t *y, const int8_t *x, int32_t npx, const int8_t *w, const int32_t *b,
                  int32_t cin, int32_t cout, const tt_q8_requant *q)
{
    /* lane i stores pixel i's output: cout bytes apart */
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)cout);
    const int32_t off = q->in_offset;
    int32_t oc;

#if defined(TT_DWM_ASM)
    /* the assembly blocks' constants shared by the channels */
    const int asm_ok = cin >= 8 && cin <= 56 && (cin & 7) == 0 && npx >= PWA_MIN_PX;
    dwm_k k;
    if (asm_ok) {
        k.oo = q->out_offset;
        k.y4 = 4 * cout;
        k.lo = vdupq_n_s32(q->act_min);
        k.hi = vdupq_n_s32(q->act_max);
        k.poffs = cin == 8 ? dwm_pair01(cout) : tt_mve_pair_offsets(cout);
    }
#endif

    for (oc = 0; oc < cout; ++oc) {
        const int8_t *wr = w + oc * cin, *xp = x;
        const int32_t init = (int32_t)((uint32_t)off * (uint32_t)row_sum(wr, cin) +
                                       (uint32_t)(b != NULL ? b[oc] : 0));
        int8_t *yp = y + oc;
        int32_t n = npx;
#if defined(TT_DWM_ASM)
        if (asm_ok) { /* the assembly blocks first */
            const int32_t sh = q->shift[oc];
            int32_t done;
            k.init = init;
            k.mult = q->mult[oc];
            k.right = sh < 0 ? sh : 0;
            k.sh = sh;
            done = pw_asm(yp, xp, n, cin, wr, &k);
            xp += done * cin;
            yp += done * cout;
            n -= done;
        }
#endif
        if (n == 0) {
            continue;
        }
        const rq_chan r = rq_chan_of(q, oc);
        if (cin <= 16 && r.left) {
            pw_short(yp, xp, n, wr, cin, cout, init, &r, offs, 1);
        } else if (cin <= 16) {
            pw_short(yp, xp, n, wr, cin, cout, init, &r, offs, 0);
        } else if (r.left) {
            pw_long(yp, xp, n, wr, cin, cout, init, &r, offs, 1);
        } else {
            pw_long(yp, xp, n, wr, cin, cout, init, &r, offs, 0);
        }
    }
}

#endif
