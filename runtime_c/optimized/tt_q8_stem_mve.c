/*
 * Helium (MVE) int8 3x3x3 stem conv, see tt_q8_stem_mve.h.
 *
 * Layout. An output row's three input rows go into a column buffer, each input column's
 * 3 rows x 3 channels together: buf[j * 9 + ky * 3 + c] = x[iy0 + ky][(q0 + j) * 3 + c], with
 * the input zero point for padding (rows or columns outside the input), so that x + in_offset
 * is 0 there as in the reference. An output's 3x3x3 window is then 27 consecutive bytes
 * (columns s apart for stride s: 9 s bytes from one output to the next), which two VMLADAVs
 * (sixteen bytes each) multiply with the channel's weights in the same (kx, ky, c) order, with
 * zeros past the 27th (the second chunk's last 5 bytes belong to the next window, or to the
 * zeroed slack past the buffer's last column). Every output, edge or not, sums
 * b + in_offset * sum(w) + sum x * w (exact modulo 2^32, as the reference's int32 sum).
 *
 * Blocks of four outputs of two channels: each 16-byte load of the buffer feeds both channels'
 * VMLADAVs; the eight sums go into two vectors (one a channel) and are requantised as
 * gemmlowp's double rounding lane for lane (VQRDMULH, a saturating -1 on negative lanes when
 * shifting right, VRSHL), then narrowed with saturation into one vector of the eight outputs
 * (the two channels' lanes interleaved) and stored by one scatter. With a right shift (every
 * real layer's case) the narrowing to 16 bits can come before the output offset: the shifted
 * value is below 2^30 in magnitude, and past the int16 range both it and it + out_offset
 * saturate the int8 output alike. The loop is inline assembly (GCC 12 spilled the constants);
 * -O0, -Og... builds without it, channels with a left or no shift, an odd channel and a row's
 * last 1-3 outputs run the C form (rq4's arithmetic in 32 bits), the same integers.
 */
#include "tt_q8_stem_mve.h"

#if TT_MVE
#include <arm_mve.h>
#include <stddef.h>

#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define TT_STEM_ASM 1
#endif

#define STEM_INLINE inline __attribute__((always_inline))
#define STEM_BUF 1536  /* column buffer bytes on the stack: 170 columns (84 outputs at stride 2) */
#define STEM_SLACK 32  /* zeroed bytes past the last column: its window's second chunk reads 5 */
#define STEM_GC 16     /* channels whose weights are prepared at once */

/* buffer order t = kx * 9 + ky * 3 + c from the weights' (ky * 3 + kx) * 3 + c */
static const uint8_t stem_wtbl[32] = {
    0, 1, 2, 9, 10, 11, 18, 19, 20, 3, 4, 5, 12, 13, 14, 21,
    22, 23, 6, 7, 8, 15, 16, 17, 24, 25, 26, 0, 0, 0, 0, 0,
};

/* byte i of an input row's run into its column's slot: (i / 3) * 9 + i % 3, 48 bytes */
static const uint8_t stem_ftbl[48] = {
    0, 1, 2, 9, 10, 11, 18, 19, 20, 27, 28, 29, 36, 37, 38, 45,
    46, 47, 54, 55, 56, 63, 64, 65, 72, 73, 74, 81, 82, 83, 90, 91,
    92, 99, 100, 101, 108, 109, 110, 117, 118, 119, 126, 127, 128, 135, 136, 137,
};

typedef struct {
    int8x16_t w0, w1; /* a channel's weights in buffer order, zeros past the 27th */
} stem_w;

typedef struct {
    int32_t init, mult, shift; /* init: b + in_offset * sum(w), wrapping */
} stem_c;

int tt_q8_stem_mve_ok(const tt_conv_geom *g, const tt_q8_requant *q)
{
    return g->kh == 3 && g->kw == 3 && g->cin == 3 && g->groups == 1 && g->dh == 1 &&
           g->dw == 1 && g->sw >= 1 && g->sw <= 64 && g->sh >= 1 && -q->in_offset >= -128 &&
           -q->in_offset <= 127 && q->act_min >= -128 && q->act_max <= 127 &&
           q->act_min <= q->act_max;
}

/* channels c0 .. c0 + nc - 1: weights in buffer order and constants */
static void stem_prep(stem_w *wv, stem_c *cc, const int8_t *w, const int32_t *b,
                      const tt_q8_requant *q, int32_t c0, int32_t nc)
{
    const uint8x16_t t0 = vldrbq_u8(stem_wtbl), t1 = vldrbq_u8(stem_wtbl + 16);
    const mve_pred16_t p1 = vctp8q(11);
    int32_t i;

    for (i = 0; i < nc; ++i) {
        const int32_t oc = c0 + i;
        const int8_t *const wc = w + oc * 27;
        const int8x16_t w0 = vldrbq_gather_offset_s8(wc, t0);
        const int8x16_t w1 = vldrbq_gather_offset_z_s8(wc, t1, p1);
        const int32_t sum = vaddvaq_s8(vaddvq_s8(w0), w1);
        wv[i].w0 = w0;
        wv[i].w1 = w1;
        cc[i].init = (int32_t)((uint32_t)q->in_offset * (uint32_t)sum +
                               (uint32_t)(b != NULL ? b[oc] : 0));
        cc[i].mult = q->mult[oc];
        cc[i].shift = q->shift[oc];
    }
}

/* n bytes of an input row (src; NULL: a padding row, the zero point) into their columns'
 * slots from d: 48 bytes (16 columns) three scatters, the rest predicated */
static void stem_fill(int8_t *d, const int8_t *src, int32_t n, const uint8x16_t *fo, int8_t zp)
{
    const int8x16_t z = vdupq_n_s8(zp);
    int32_t i = 0, k;

    if (src != NULL) {
        for (; i + 48 <= n; i += 48, d += 144) {
            vstrbq_scatter_offset_s8(d, fo[0], vldrbq_s8(src + i));
            vstrbq_scatter_offset_s8(d, fo[1], vldrbq_s8(src + i + 16));
            vstrbq_scatter_offset_s8(d, fo[2], vldrbq_s8(src + i + 32));
        }
        for (k = 0; i + 16 * k < n; ++k) {
            const mve_pred16_t p = vctp8q((uint32_t)(n - i - 16 * k));
            vstrbq_scatter_offset_p_s8(d, fo[k], vldrbq_z_s8(src + i + 16 * k, p), p);
        }
    } else {
        for (; i + 48 <= n; i += 48, d += 144) {
            vstrbq_scatter_offset_s8(d, fo[0], z);
            vstrbq_scatter_offset_s8(d, fo[1], z);
            vstrbq_scatter_offset_s8(d, fo[2], z);
        }
        for (k = 0; i + 16 * k < n; ++k) {
            vstrbq_scatter_offset_p_s8(d, fo[k], z, vctp8q((uint32_t)(n - i - 16 * k)));
        }
    }
}

/* n bytes of v from d (a few columns of padding: newlib's memset goes byte by byte) */
static void stem_set(int8_t *d, int8_t v, int32_t n)
{
    const int8x16_t z = vdupq_n_s8(v);
    int32_t i;

    for (i = 0; i < n; i += 16) {
        vstrbq_p_s8(d + i, z, vctp8q((uint32_t)(n - i)));
    }
}

/* ---- C form: one channel, four outputs at a time ---- */

static STEM_INLINE int32_t stem_dot(const int8_t *p, const stem_w *w)
{
    return vmladavaq_s8(vmladavq_s8(vldrbq_s8(p), w->w0), vldrbq_s8(p + 16), w->w1);
}

static STEM_INLINE int32x4_t stem_lanes(int32_t a0, int32_t a1, int32_t a2, int32_t a3)
{
    return vsetq_lane_s32(a3, vsetq_lane_s32(a2, vsetq_lane_s32(a1, vdupq_n_s32(a0), 1), 2), 3);
}

/* tt_mbqm_double_rounding of init + a lane for lane, + out_offset, clamped: a left shift
 * wraps as the reference's (uint32) << does, VQRDMULH is tt_srdhm, and VRSHL (ties up) after
 * a saturating -1 on negative lanes is tt_rdbpot (ties away from zero) */
static STEM_INLINE int32x4_t stem_rq(int32x4_t a, const stem_c *c, const tt_q8_requant *q)
{
    const int32_t sh = c->shift;
    a = vaddq_n_s32(a, c->init);
    if (sh > 0) {
        a = vshlq_r_s32(a, sh);
    }
    a = vqrdmulhq_n_s32(a, c->mult);
    if (sh < 0) {
        a = vrshlq_n_s32(vqaddq_s32(a, vshrq_n_s32(a, 31)), sh);
    }
    a = vaddq_n_s32(a, q->out_offset);
    return vminq_s32(vmaxq_s32(a, vdupq_n_s32(q->act_min)), vdupq_n_s32(q->act_max));
}

/* outputs [i0, nb) of one channel (y: output 0's byte of the channel), windows st bytes apart
 * from buf; spare lanes of the last block repeat its last output and are not stored */
static void stem_chan(int8_t *y, const int8_t *buf, int32_t i0, int32_t nb, int32_t st,
                      const stem_w *w, const stem_c *c, const tt_q8_requant *q, int32_t cout)
{
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)cout);
    int32_t i;

    for (i = i0; i < nb; i += 4) {
        const int32_t n = nb - i < 4 ? nb - i : 4;
        const int8_t *const p = buf + i * st;
        const int32_t a0 = stem_dot(p, w);
        const int32_t a1 = n > 1 ? stem_dot(p + st, w) : a0;
        const int32_t a2 = n > 2 ? stem_dot(p + 2 * st, w) : a1;
        const int32_t a3 = n > 3 ? stem_dot(p + 3 * st, w) : a2;
        vstrbq_scatter_offset_p_s32(y + i * cout, offs,
                                    stem_rq(stem_lanes(a0, a1, a2, a3), c, q),
                                    vctp32q((uint32_t)n));
    }
}

/* ---- assembly: two channels (A, B), blocks of four outputs ---- */

#if defined(TT_STEM_ASM)
typedef struct {
    int32_t sh0, sh1; /* 0: the pair's shifts (negative: VRSHL's right shift) */
    int32_t y4;       /* 8: output bytes from one block to the next (4 cout) */
    int32_t n4;       /* 12: blocks */
    int8x16_t lo, hi; /* 16, 32: the activation range, byte-broadcast */
    uint16x8_t offs;  /* 48: the eight outputs' offsets, in STEM_BODY's lane order */
} stem_k;

typedef char stem_k_offsets[offsetof(stem_k, y4) == 8 && offsetof(stem_k, n4) == 12 &&
                                    offsetof(stem_k, lo) == 16 && offsetof(stem_k, hi) == 32
                                ? 1
                                : -1];

/* Output K of the block (window K * ST bytes on): chunk 0 into sums SA / SB (channels A, B),
 * chunk 1 added; one load feeds both channels */
#define STEM_DOT(K, SA, SB)                                                                \
    "vldrb.8 %q[x], [%[p], #(" #K "*%c[st])]\n\t"                                          \
    "vmladav.s8 %[" SA "], %q[x], %q[a0]\n\t"                                              \
    "vmladav.s8 %[" SB "], %q[x], %q[b0]\n\t"                                              \
    "vldrb.8 %q[x], [%[p], #(" #K "*%c[st]+16)]\n\t"                                       \
    "vmladava.s8 %[" SA "], %q[x], %q[a1]\n\t"                                             \
    "vmladava.s8 %[" SB "], %q[x], %q[b1]\n\t"
/* the activation range on the narrowed bytes */
#define STEM_CLAMP                                                                         \
    "vldrw.32 %q[x], [%[k], #16]\n\t"                                                      \
    "vmax.s8 %q[va], %q[va], %q[x]\n\t"                                                    \
    "vldrw.32 %q[x], [%[k], #32]\n\t"                                                      \
    "vmin.s8 %q[va], %q[va], %q[x]\n\t"
/* Outputs 0 and 2's sums go into lanes 0 and 2 (VMOV's pair form), 1 and 3's into 1 and 3;
 * which of a pair's registers lands in the lower lane only the emulator vouches for, so the
 * store offsets went through the same instructions (stem_offsets): each output meets its own
 * offset either way. Then the start value, VQRDMULH, the -1 on negative lanes, VRSHL, the
 * saturating narrowings (A's lanes to the even halfwords, B's to the odd), the output
 * offset in 16 bits (see the top of the file), int8, and one scatter of the eight bytes. */
#define STEM_BODY(CLAMP)                                                                   \
    "ldr %[s0], [%[k], #12]\n\t"                                                           \
    "dls lr, %[s0]\n"                                                                      \
    "1:\n\t" STEM_DOT(0, "s0", "s1") STEM_DOT(2, "s2", "s3")                               \
    "vmov %q[va][2], %q[va][0], %[s2], %[s0]\n\t"                                          \
    "vmov %q[vb][2], %q[vb][0], %[s3], %[s1]\n\t" STEM_DOT(1, "s0", "s1")                  \
    STEM_DOT(3, "s2", "s3")                                                                \
    "vmov %q[va][3], %q[va][1], %[s2], %[s0]\n\t"                                          \
    "vmov %q[vb][3], %q[vb][1], %[s3], %[s1]\n\t"                                          \
    "add %[p], %[p], #(4*%c[st])\n\t"                                                      \
    "vadd.i32 %q[va], %q[va], %[i0]\n\t"                                                   \
    "vadd.i32 %q[vb], %q[vb], %[i1]\n\t"                                                   \
    "vqrdmulh.s32 %q[va], %q[va], %[m0]\n\t"                                               \
    "vqrdmulh.s32 %q[vb], %q[vb], %[m1]\n\t"                                               \
    "ldrd %[s0], %[s1], [%[k]]\n\t"                                                        \
    "vshr.s32 %q[x], %q[va], #31\n\t"                                                      \
    "vqadd.s32 %q[va], %q[va], %q[x]\n\t"                                                  \
    "vshr.s32 %q[x], %q[vb], #31\n\t"                                                      \
    "vqadd.s32 %q[vb], %q[vb], %q[x]\n\t"                                                  \
    "vrshl.s32 %q[va], %[s0]\n\t"                                                          \
    "vrshl.s32 %q[vb], %[s1]\n\t"                                                          \
    "vqmovnb.s32 %q[va], %q[va]\n\t"                                                       \
    "vqmovnt.s32 %q[va], %q[vb]\n\t"                                                       \
    "vqadd.s16 %q[va], %q[va], %[oo]\n\t"                                                  \
    "vqmovnb.s16 %q[va], %q[va]\n\t" CLAMP                                                 \
    "ldr %[s0], [%[k], #8]\n\t"                                                            \
    "vstrb.16 %q[va], [%[y], %q[offs]]\n\t"                                                \
    "add %[y], %[y], %[s0]\n\t"                                                            \
    "le lr, 1b"
#define STEM_OUT                                                                           \
    [x] "=&w"(x), [va] "=&w"(va), [vb] "=&w"(vb), [s0] "=&Te"(s0), [s1] "=&Te"(s1),        \
        [s2] "=&Te"(s2), [s3] "=&Te"(s3), [p] "+r"(p), [y] "+r"(y)
#define STEM_IN                                                                            \
    [st] "i"(ST), [k] "r"(k), [a0] "w"(a0), [a1] "w"(a1), [b0] "w"(b0), [b1] "w"(b1),      \
        [offs] "w"(offs), [i0] "r"(ca->init), [i1] "r"(cb->init), [m0] "r"(ca->mult),      \
        [m1] "r"(cb->mult), [oo] "r"(oo)

/* k->n4 blocks of four outputs of channels A and B (both shifting right): windows ST bytes
 * apart from p, outputs from y (B's one byte on, block after block k->y4 bytes on) */
static STEM_INLINE void stem_pair(int8_t *y, const int8_t *p, const stem_w *wa,
                                  const stem_w *wb, const stem_c *ca, const stem_c *cb,
                                  int32_t oo, const stem_k *k, const int32_t ST,
                                  const int CLAMP)
{
    const int8x16_t a0 = wa->w0, a1 = wa->w1, b0 = wb->w0, b1 = wb->w1;
    const uint16x8_t offs = k->offs;
    int8x16_t x;
    int32x4_t va, vb;
    int32_t s0, s1, s2, s3;

    if (CLAMP) {
        __asm__ volatile(STEM_BODY(STEM_CLAMP) : STEM_OUT : STEM_IN : "lr", "memory");
    } else {
        __asm__ volatile(STEM_BODY("") : STEM_OUT : STEM_IN : "lr", "memory");
    }
}

/* outputs 0..3 of channel A at 0, C, 2 C, 3 C and B's one byte on, in the halfword lanes
 * STEM_BODY's VMOVs and narrowings put them */
static uint16x8_t stem_offsets(int32_t C)
{
    const uint32x4_t v = tt_mve_pair_offsets(C);
    return vmovntq_u32(vmovnbq_u32(vdupq_n_u16(0), v), vaddq_n_u32(v, 1));
}

/* the four variants as functions of their own (inlined into the row loop, GCC finds no
 * registers for the loop's operands) */
#define STEM_PAIR_FN(ST, CL)                                                               \
    static __attribute__((noinline)) void stem_pair_##ST##_##CL(                           \
        int8_t *y, const int8_t *p, const stem_w *wa, const stem_w *wb, const stem_c *ca,  \
        const stem_c *cb, int32_t oo, const stem_k *k)                                    \
    {                                                                                     \
        stem_pair(y, p, wa, wb, ca, cb, oo, k, ST, CL);                                   \
    }
STEM_PAIR_FN(9, 0)
STEM_PAIR_FN(9, 1)
STEM_PAIR_FN(18, 0)
STEM_PAIR_FN(18, 1)
#undef STEM_PAIR_FN
#define STEM_PAIR(ST, CL)                                                                  \
    stem_pair_##ST##_##CL(y + i, buf, &wv[i], &wv[i + 1], &cc[i], &cc[i + 1], oo, k)
#endif

/* one output row's nb outputs of channels 0 .. nc - 1 of the prepared ones (y: output 0,
 * channel 0); k: NULL when the assembly does not apply to this call */
static void stem_row(int8_t *y, const int8_t *buf, int32_t nb, int32_t st, const stem_w *wv,
                     const stem_c *cc, int32_t nc, const tt_q8_requant *q, int32_t cout,
                     void *kv)
{
    int32_t i, done;

    for (i = 0; i < nc; i += 2) {
        done = 0;
#if defined(TT_STEM_ASM)
        if (kv != NULL && i + 1 < nc && cc[i].shift < 0 && cc[i + 1].shift < 0) {
            stem_k *const k = (stem_k *)kv;
            const int32_t oo = q->out_offset;
            const int clamp = q->act_min > -128 || q->act_max < 127;
            k->sh0 = cc[i].shift;
            k->sh1 = cc[i + 1].shift;
            if (st == 18) {
                if (clamp) {
                    STEM_PAIR(18, 1);
                } else {
                    STEM_PAIR(18, 0);
                }
            } else if (clamp) {
                STEM_PAIR(9, 1);
            } else {
                STEM_PAIR(9, 0);
            }
            done = 4 * k->n4;
        }
#else
        (void)kv;
#endif
        if (done < nb) {
            stem_chan(y + i, buf, done, nb, st, &wv[i], &cc[i], q, cout);
            if (i + 1 < nc) {
                stem_chan(y + i + 1, buf, done, nb, st, &wv[i + 1], &cc[i + 1], q, cout);
            }
        }
    }
}

void tt_q8_stem_mve(const tt_rows *y, const tt_rows *x, int32_t oy0, int32_t oy1,
                    const int8_t *w, const int32_t *b, const tt_conv_geom *g,
                    const tt_q8_requant *q)
{
    const int32_t cout = g->cout, s = g->sw, st = 9 * s;
    const int32_t nbmax = (STEM_BUF / 9 - 3) / s + 1;
    const int8_t zp = (int8_t)-q->in_offset;
    int8_t buf[STEM_BUF + STEM_SLACK] __attribute__((aligned(8)));
    stem_w wv[STEM_GC];
    stem_c cc[STEM_GC];
    uint8x16_t fo[3];
    void *kv = NULL;
    int32_t c0, ob0, oy, ky;
#if defined(TT_STEM_ASM)
    stem_k k;
    /* the 16-bit output offset (see the top), windows 9 or 18 bytes apart (immediates) */
    const int asm_ok = (st == 9 || st == 18) && q->out_offset >= -32639 &&
                       q->out_offset <= 32639;
    if (asm_ok) {
        k.y4 = 4 * cout;
        k.lo = vdupq_n_s8((int8_t)q->act_min);
        k.hi = vdupq_n_s8((int8_t)q->act_max);
        k.offs = stem_offsets(cout);
    }
#endif

    fo[0] = vldrbq_u8(stem_ftbl);
    fo[1] = vldrbq_u8(stem_ftbl + 16);
    fo[2] = vldrbq_u8(stem_ftbl + 32);
    for (c0 = 0; c0 < cout; c0 += STEM_GC) {
        const int32_t nc = cout - c0 < STEM_GC ? cout - c0 : STEM_GC;
        stem_prep(wv, cc, w, b, q, c0, nc);
        for (ob0 = 0; ob0 < g->ow; ob0 += nbmax) {
            const int32_t nb = g->ow - ob0 < nbmax ? g->ow - ob0 : nbmax;
            const int32_t q0 = ob0 * s - g->pl, ncols = (nb - 1) * s + 3;
            /* buffer columns inside the input: [jlo, jhi); the others hold the zero point */
            const int32_t jlo = q0 < 0 ? (-q0 < ncols ? -q0 : ncols) : 0;
            int32_t jhi = g->w - q0 < ncols ? g->w - q0 : ncols;
            jhi = jhi > jlo ? jhi : jlo;
            stem_set(buf, zp, jlo * 9);
            stem_set(buf + jhi * 9, zp, (ncols - jhi) * 9);
            stem_set(buf + ncols * 9, 0, STEM_SLACK);
#if defined(TT_STEM_ASM)
            if (asm_ok && nb >= 4) {
                k.n4 = nb >> 2;
                kv = &k;
            } else {
                kv = NULL;
            }
#endif
            for (oy = oy0; oy < oy1; ++oy) {
                for (ky = 0; ky < 3; ++ky) {
                    const int32_t iy = oy * g->sh - g->pt + ky;
                    const int8_t *const row =
                        iy < 0 || iy >= g->h ? NULL : tt_row(x, iy) + (q0 + jlo) * 3;
                    stem_fill(buf + jlo * 9 + 3 * ky, row, 3 * (jhi - jlo), fo, zp);
                }
                stem_row(tt_row(y, oy) + ob0 * cout + c0, buf, nb, st, wv, cc, nc, q, cout,
                         kv);
            }
        }
    }
}

#endif
