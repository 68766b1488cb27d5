/*
 * Helium (MVE) kernels for the fp32 backward of int8 layers, see tt_f32_mve.h: the 1x1 input
 * gradient's source and sinks, the 1x1 weight gradient's sums (from float x, and four rows
 * from int8 x) and a weight row's stochastic rounding.
 *
 * Bit-identical with the kernels of tt_f32_bwd_opt.c they stand in for (which run on the host
 * and the other cores): every float is the same product, added in the same order, each lane
 * an output of its own. Helium's float multiply-accumulate (VFMA) rounds once where the
 * reference rounds the product and the sum. So a MAC (MV_MAC) is VMUL then VADD, two
 * instructions per four MACs, unless the build fuses the 1x1 sums (TT_F32_FMA, see
 * tt_reference.h: the boards with Helium's float lanes do): then it is one VFMA, and a host
 * build made with the same option (tt_f32_fma.c's fmaf loops) agrees bit for bit.
 */
#include "tt_f32_mve.h"

#if TT_MVE_F32
#include <arm_mve.h>
#include <string.h>

#define SRC_OB 64 /* outputs per weight chunk of the source (4 x 64 floats on the stack) */

/* a + v * r in the lanes (r a core register), and two of them sharing v (T, T0, T1: vector
 * temporaries, unused when fused); mv_mac the same for the C loops */
#if TT_F32_FMA
#define MV_MAC(A, T, V, R) "vfma.f32 %q[" A "], %q[" V "], %[" R "]\n\t"
#define MV_MAC2(A0, A1, T0, T1, V, R0, R1) MV_MAC(A0, T0, V, R0) MV_MAC(A1, T1, V, R1)
static inline float32x4_t mv_mac(float32x4_t a, float32x4_t v, float r)
{
    return vfmaq_n_f32(a, v, r);
}
#else
#define MV_MAC(A, T, V, R)                                                                   \
    "vmul.f32 %q[" T "], %q[" V "], %[" R "]\n\tvadd.f32 %q[" A "], %q[" A "], %q[" T "]\n\t"
#define MV_MAC2(A0, A1, T0, T1, V, R0, R1)                                                   \
    "vmul.f32 %q[" T0 "], %q[" V "], %[" R0 "]\n\tvmul.f32 %q[" T1 "], %q[" V "], %[" R1 "]\n\t" \
    "vadd.f32 %q[" A0 "], %q[" A0 "], %q[" T0 "]\n\tvadd.f32 %q[" A1 "], %q[" A1 "], %q[" T1 "]\n\t"
static inline float32x4_t mv_mac(float32x4_t a, float32x4_t v, float r)
{
    return vaddq_f32(a, vmulq_n_f32(v, r));
}
#endif

/* ---- the source: planes c0 + j (j < cnt <= 4, ps floats apart) of a 1x1 conv's input
 * gradient, plane[p] = sum over o ascending of dy[p, o] * (w_scale[o] * w[o, c0 + j]), from
 * 0 (tt_cs_pw_input_s8_opt's arithmetic). Lanes are four pixels, their dy gathered (cout
 * floats apart); an output's weights are scalars. Four planes: one gather feeds the four
 * planes' sums of four pixels; one plane: two gathers (eight pixels) its one weight. */

/* four planes (wq[4 o + j]), pixels p .. p + 3 (lanes px) */
static void src_four(float *const *pl, int32_t p, const float *d, const float *wq, int32_t nb,
                     uint32x4_t offs, mve_pred16_t px, int full, int first)
{
    float32x4_t a0, a1, a2, a3;
    int32_t o;

    if (first) {
        a0 = a1 = a2 = a3 = vdupq_n_f32(0.0f);
    } else {
        a0 = vldrwq_z_f32(pl[0] + p, px), a1 = vldrwq_z_f32(pl[1] + p, px);
        a2 = vldrwq_z_f32(pl[2] + p, px), a3 = vldrwq_z_f32(pl[3] + p, px);
    }
    if (full && nb > 0) {
        /* per output: one gather through the four pixels' addresses (advanced by a float on
         * the way), the four weights in two LDRDs, four MV_MACs: 12 instructions per 16
         * MACs, 8 fused (GCC splits the LDRDs and keeps the gather's address apart) */
        uint32x4_t ad = vaddq_n_u32(vshlq_n_u32(offs, 2), (uint32_t)(uintptr_t)d - 4u);
        float32x4_t dv, t0, t1;
        uint32_t w0, w1;
        __asm__ volatile("dls lr, %[n]\n"
                         "1:\n\t"
                         "vldrw.u32 %q[dv], [%q[ad], #4]!\n\t"
                         "ldrd %[w0], %[w1], [%[wq]], #8\n\t"
                         MV_MAC2("a0", "a1", "t0", "t1", "dv", "w0", "w1")
                         "ldrd %[w0], %[w1], [%[wq]], #8\n\t"
                         MV_MAC2("a2", "a3", "t0", "t1", "dv", "w0", "w1")
                         "le lr, 1b"
                         : [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3),
                           [ad] "+w"(ad), [dv] "=&w"(dv), [t0] "=&w"(t0), [t1] "=&w"(t1),
                           [w0] "=&r"(w0), [w1] "=&r"(w1), [wq] "+r"(wq)
                         : [n] "r"(nb)
                         : "lr", "memory");
    } else {
        for (o = 0; o < nb; ++o, ++d, wq += 4) {
            const float32x4_t dv = vldrwq_gather_shifted_offset_z_f32(d, offs, px);
            a0 = mv_mac(a0, dv, wq[0]);
            a1 = mv_mac(a1, dv, wq[1]);
            a2 = mv_mac(a2, dv, wq[2]);
            a3 = mv_mac(a3, dv, wq[3]);
        }
    }
    vstrwq_p_f32(pl[0] + p, a0, px), vstrwq_p_f32(pl[1] + p, a1, px);
    vstrwq_p_f32(pl[2] + p, a2, px), vstrwq_p_f32(pl[3] + p, a3, px);
}

/* plane j (wq[4 o + j]), pixels p .. p + 7, all present: two gathers a weight */
static void src_one8(float *pl, const float *d, const float *wq, int32_t nb, int32_t cout,
                     uint32x4_t offs, int first)
{
    const float *const d1 = d + 4 * cout;
    float32x4_t a0 = first ? vdupq_n_f32(0.0f) : vldrwq_f32(pl);
    float32x4_t a1 = first ? vdupq_n_f32(0.0f) : vldrwq_f32(pl + 4);
    int32_t o;

    for (o = 0; o < nb; ++o, wq += 4) {
        const float w = wq[0];
        a0 = mv_mac(a0, vldrwq_gather_shifted_offset_f32(d + o, offs), w);
        a1 = mv_mac(a1, vldrwq_gather_shifted_offset_f32(d1 + o, offs), w);
    }
    vstrwq_f32(pl, a0), vstrwq_f32(pl + 4, a1);
}

/* plane j, pixels p .. p + 3 (lanes px) */
static void src_one4(float *pl, const float *d, const float *wq, int32_t nb, uint32x4_t offs,
                     mve_pred16_t px, int first)
{
    float32x4_t a0 = first ? vdupq_n_f32(0.0f) : vldrwq_z_f32(pl, px);
    int32_t o;

    for (o = 0; o < nb; ++o, wq += 4) {
        a0 = mv_mac(a0, vldrwq_gather_shifted_offset_z_f32(d + o, offs, px), wq[0]);
    }
    vstrwq_p_f32(pl, a0, px);
}

void tt_cs_pw_input_s8_mve(float *planes, int32_t ps, const float *dy, const int8_t *w,
                           const float *w_scale, int32_t n, int32_t cout, int32_t cin,
                           int32_t c0, int32_t cnt)
{
    float wq[4 * SRC_OB]; /* wq[4 o + j] = w_scale[o] * (float)w[o, c0 + j] */
    float *const pl[4] = {planes, planes + ps, planes + 2 * ps, planes + 3 * ps};
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)cout);
    const mve_pred16_t chans = vctp32q((uint32_t)cnt);
    int32_t o0, o, p, j;

    for (o0 = 0; o0 < cout; o0 += SRC_OB) {
        const int32_t nb = cout - o0 < SRC_OB ? cout - o0 : SRC_OB;
        o = 0;
        if (cnt == 4) { /* four outputs a pass, their scales in two LDRDs */
            const int8_t *r = &w[o0 * cin + c0];
            const float *sc = &w_scale[o0];
            for (; o + 4 <= nb; o += 4, r += 4 * cin, sc += 4) {
                const float s0 = sc[0], s1 = sc[1], s2 = sc[2], s3 = sc[3];
                vstrwq_f32(&wq[4 * o], vmulq_n_f32(vcvtq_f32_s32(vldrbq_s32(r)), s0));
                vstrwq_f32(&wq[4 * o + 4], vmulq_n_f32(vcvtq_f32_s32(vldrbq_s32(r + cin)), s1));
                vstrwq_f32(&wq[4 * o + 8],
                           vmulq_n_f32(vcvtq_f32_s32(vldrbq_s32(r + 2 * cin)), s2));
                vstrwq_f32(&wq[4 * o + 12],
                           vmulq_n_f32(vcvtq_f32_s32(vldrbq_s32(r + 3 * cin)), s3));
            }
        }
        for (; o < nb; ++o) { /* (float)w is exact; the product rounds as the scalar's */
            const int32x4_t v = vldrbq_z_s32(&w[(o0 + o) * cin + c0], chans);
            vstrwq_f32(&wq[4 * o], vmulq_n_f32(vcvtq_f32_s32(v), w_scale[o0 + o]));
        }
        if (cnt == 4) {
            for (p = 0; p < n; p += 4) {
                src_four(pl, p, &dy[p * cout + o0], wq, nb, offs, vctp32q((uint32_t)(n - p)),
                         n - p >= 4, o0 == 0);
            }
            continue;
        }
        for (j = 0; j < cnt; ++j) { /* planes on their own: the same sums */
            for (p = 0; p + 8 <= n; p += 8) {
                src_one8(pl[j] + p, &dy[p * cout + o0], wq + j, nb, cout, offs, o0 == 0);
            }
            for (; p < n; p += 4) {
                src_one4(pl[j] + p, &dy[p * cout + o0], wq + j, nb, offs,
                         vctp32q((uint32_t)(n - p)), o0 == 0);
            }
        }
    }
}

/* ---- the sinks: dx[p, j] += d_i(p) * (float)w[c0 + i, j], i = 0 .. cnt - 1 in order,
 * d_i(p) = dy[i * ds + p] * w_scale[c0 + i] (tt_cs_pw_input_add_s8(_g)_opt's arithmetic,
 * contiguous outputs). Lanes are four outputs j; the weight vectors stay in registers while
 * the pixels stream past. Four channels: each block of four dx loaded and stored once for
 * the four; one channel: up to 24 columns a pixel. Two or three channels go one at a time,
 * which adds to every element in the same order. */
#define SINK_PX 64 /* pixels per pass: their d_i, 4 x 64 floats on the stack */

/* four channels, columns j .. j + 3 (lanes cols), pixels p < np: dd[4 p + i] */
static void sink_four(float *dx, int32_t dx_c, const float *dd, const int8_t *row, int32_t k,
                      int32_t np, mve_pred16_t cols, int full)
{
    const float32x4_t w0 = vcvtq_f32_s32(vldrbq_z_s32(row, cols));
    const float32x4_t w1 = vcvtq_f32_s32(vldrbq_z_s32(row + k, cols));
    const float32x4_t w2 = vcvtq_f32_s32(vldrbq_z_s32(row + 2 * k, cols));
    const float32x4_t w3 = vcvtq_f32_s32(vldrbq_z_s32(row + 3 * k, cols));
    int32_t p;

    if (full && np > 0) {
        /* per pixel: the block of dx, its four d in two LDRDs, four MV_MACs in channel
         * order, the store: 14 instructions per 16 MACs, 10 fused */
        float32x4_t v, t;
        uint32_t d0, d1;
        __asm__ volatile("dls lr, %[n]\n"
                         "1:\n\t"
                         "vldrw.u32 %q[v], [%[o]]\n\t"
                         "ldrd %[d0], %[d1], [%[dd]], #8\n\t"
                         MV_MAC("v", "t", "w0", "d0") MV_MAC("v", "t", "w1", "d1")
                         "ldrd %[d0], %[d1], [%[dd]], #8\n\t"
                         MV_MAC("v", "t", "w2", "d0") MV_MAC("v", "t", "w3", "d1")
                         "vstrw.32 %q[v], [%[o]]\n\t"
                         "add %[o], %[o], %[step]\n\t"
                         "le lr, 1b"
                         : [v] "=&w"(v), [t] "=&w"(t), [d0] "=&r"(d0), [d1] "=&r"(d1),
                           [o] "+r"(dx), [dd] "+r"(dd)
                         : [w0] "w"(w0), [w1] "w"(w1), [w2] "w"(w2), [w3] "w"(w3),
                           [step] "r"(4 * dx_c), [n] "r"(np)
                         : "lr", "memory");
        return;
    }
    for (p = 0; p < np; ++p, dx += dx_c, dd += 4) {
        float32x4_t v = vldrwq_z_f32(dx, cols);
        v = mv_mac(v, w0, dd[0]);
        v = mv_mac(v, w1, dd[1]);
        v = mv_mac(v, w2, dd[2]);
        v = mv_mac(v, w3, dd[3]);
        vstrwq_p_f32(dx, v, cols);
    }
}

/* one channel (dd[p], contiguous), columns j .. j + 3 (lanes cols; `full`: all four) */
static void sink_one4(float *dx, int32_t dx_c, const float *dd, const int8_t *row, int32_t np,
                      mve_pred16_t cols, int full)
{
    const float32x4_t w0 = vcvtq_f32_s32(vldrbq_z_s32(row, cols));
    int32_t p;

    if (full) {
        for (p = 0; p < np; ++p, dx += dx_c) {
            vstrwq_f32(dx, mv_mac(vldrwq_f32(dx), w0, dd[p]));
        }
        return;
    }
    for (p = 0; p < np; ++p, dx += dx_c) {
        vstrwq_p_f32(dx, mv_mac(vldrwq_z_f32(dx, cols), w0, dd[p]), cols);
    }
}

#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
/* one channel, m = 1 .. 6 whole column vectors j .. j + 4 m - 1: their weights stay in
 * registers (with the two temporaries, all eight Q registers at m = 6), per pixel its d
 * (LDR with writeback), per vector load / MV_MAC / store, the step to the next pixel's row
 * and the LE: 4 m + 3 instructions per 4 m MACs, 3 m + 3 fused (27 per 24 at m = 6, where
 * the C loops of eight columns took 13 per 8 with a call per 8 columns) */
#define SK_V(W, OFF)                                                                         \
    "vldrw.u32 %q[v], [%[o], #" OFF "]\n\t" MV_MAC("v", "t", W, "d")                         \
    "vstrw.32 %q[v], [%[o], #" OFF "]\n\t"
#define SK_LOOP(BODY)                                                                        \
    "dls lr, %[n]\n"                                                                         \
    "1:\n\t"                                                                                 \
    "ldr %[d], [%[dd]], #4\n\t" BODY "add %[o], %[o], %[step]\n\t"                           \
    "le lr, 1b"
#define SK_OUT [v] "=&w"(v), [t] "=&w"(t), [d] "=&r"(d), [o] "+r"(dx), [dd] "+r"(dd)
#define SK_IN [step] "r"(4 * dx_c), [n] "r"(np)
#define SK_W(i) vcvtq_f32_s32(vldrbq_s32(row + 4 * (i)))

static void sink_one_regs(float *dx, int32_t dx_c, const float *dd, const int8_t *row,
                          int32_t np, int32_t m)
{
    float32x4_t v, t;
    uint32_t d;

    switch (m) {
    case 6:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0") SK_V("w1", "16") SK_V("w2", "32")
                                     SK_V("w3", "48") SK_V("w4", "64") SK_V("w5", "80"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0)), [w1] "w"(SK_W(1)), [w2] "w"(SK_W(2)),
                           [w3] "w"(SK_W(3)), [w4] "w"(SK_W(4)), [w5] "w"(SK_W(5))
                         : "lr", "memory");
        break;
    case 5:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0") SK_V("w1", "16") SK_V("w2", "32")
                                     SK_V("w3", "48") SK_V("w4", "64"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0)), [w1] "w"(SK_W(1)), [w2] "w"(SK_W(2)),
                           [w3] "w"(SK_W(3)), [w4] "w"(SK_W(4))
                         : "lr", "memory");
        break;
    case 4:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0") SK_V("w1", "16") SK_V("w2", "32")
                                     SK_V("w3", "48"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0)), [w1] "w"(SK_W(1)), [w2] "w"(SK_W(2)),
                           [w3] "w"(SK_W(3))
                         : "lr", "memory");
        break;
    case 3:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0") SK_V("w1", "16") SK_V("w2", "32"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0)), [w1] "w"(SK_W(1)), [w2] "w"(SK_W(2))
                         : "lr", "memory");
        break;
    case 2:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0") SK_V("w1", "16"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0)), [w1] "w"(SK_W(1))
                         : "lr", "memory");
        break;
    default:
        __asm__ volatile(SK_LOOP(SK_V("w0", "0"))
                         : SK_OUT
                         : SK_IN, [w0] "w"(SK_W(0))
                         : "lr", "memory");
        break;
    }
}
#undef SK_V
#undef SK_LOOP
#undef SK_OUT
#undef SK_IN
#undef SK_W
#endif

/* one channel's sink into the np pixels' rows, k columns (dd[p] contiguous) */
static void sink_one(float *dx, int32_t dx_c, const float *dd, const int8_t *row, int32_t np,
                     int32_t k)
{
    int32_t j = 0;

#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
    while (np > 0 && j + 4 <= k) {
        const int32_t m = (k - j) / 4 < 6 ? (k - j) / 4 : 6;
        sink_one_regs(dx + j, dx_c, dd, row + j, np, m);
        j += 4 * m;
    }
#endif
    for (; j < k; j += 4) {
        sink_one4(dx + j, dx_c, dd, row + j, np, vctp32q((uint32_t)(k - j)), k - j >= 4);
    }
}

void tt_cs_pw_input_add_s8_mve(float *dx, const float *dy, int32_t ds, const int8_t *w,
                               const float *w_scale, int32_t n, int32_t dx_c, int32_t k,
                               int32_t c0, int32_t cnt)
{
    /* four channels: dd[4 p + i] = dy[i * ds + p] * w_scale[c0 + i]; fewer: channel i's at
     * dd[i * SINK_PX + p] */
    float dd[4 * SINK_PX];
    int32_t p0, p, i, j;

    for (p0 = 0; p0 < n; p0 += SINK_PX) {
        const int32_t np = n - p0 < SINK_PX ? n - p0 : SINK_PX;
        float *const o = dx + p0 * dx_c;
        if (cnt == 4) { /* the products as the scalar code forms them, interleaved by VST4 */
            const float s0 = w_scale[c0], s1 = w_scale[c0 + 1], s2 = w_scale[c0 + 2];
            const float s3 = w_scale[c0 + 3];
            const float *const y = dy + p0;
            for (p = 0; p + 4 <= np; p += 4) {
                float32x4x4_t q;
                q.val[0] = vmulq_n_f32(vldrwq_f32(y + p), s0);
                q.val[1] = vmulq_n_f32(vldrwq_f32(y + ds + p), s1);
                q.val[2] = vmulq_n_f32(vldrwq_f32(y + 2 * ds + p), s2);
                q.val[3] = vmulq_n_f32(vldrwq_f32(y + 3 * ds + p), s3);
                vst4q_f32(&dd[4 * p], q);
            }
            for (; p < np; ++p) {
                dd[4 * p] = y[p] * s0, dd[4 * p + 1] = y[ds + p] * s1;
                dd[4 * p + 2] = y[2 * ds + p] * s2, dd[4 * p + 3] = y[3 * ds + p] * s3;
            }
            for (j = 0; j < k; j += 4) {
                sink_four(o + j, dx_c, dd, &w[c0 * k + j], k, np,
                          vctp32q((uint32_t)(k - j)), k - j >= 4);
            }
            continue;
        }
        for (i = 0; i < cnt; ++i) { /* one at a time: the same order for every element */
            const float s = w_scale[c0 + i];
            float *const di = dd + i * SINK_PX;
            const float *const y = dy + i * ds + p0;
            for (p = 0; p + 4 <= np; p += 4) {
                vstrwq_f32(di + p, vmulq_n_f32(vldrwq_f32(y + p), s));
            }
            if (p < np) { /* the last 1..3 pixels */
                const mve_pred16_t m = vctp32q((uint32_t)(np - p));
                vstrwq_p_f32(di + p, vmulq_n_f32(vldrwq_z_f32(y + p, m), s), m);
            }
            sink_one(o, dx_c, di, &w[(c0 + i) * k], np, k);
        }
    }
}
#endif

#if TT_MVE_F32
/* ---- the 1x1 weight gradient from float x (pw_wgrad_f32): acc[j] = sum over p < n of
 * dy[p] * x[p * k + j], p ascending, from +0. Lanes are four columns j; a block of W = 16,
 * 8 or 4 columns keeps its sums in registers for the whole pixel loop, two pixels an
 * iteration (their dy in one LDRD). Per pixel and four columns: the load and MV_MAC; per
 * pixel the step to the next row of x (an ADD, or the first load's writeback when the block
 * is the whole row): 28 instructions per 32 MACs at W = 16, 20 fused. */
#define WG_LD(T, OFF) "vldrw.u32 %q[" T "], [%[x], #" OFF "]\n\t"
#define WG_MA(T, A, R) MV_MAC(A, T, T, R)
/* one pixel's W columns with dy in core register R; FIRST loads the first vector (and
 * steps x when the rows are contiguous), STEP steps x otherwise */
#define WG_PIX16(R, FIRST, O1, O2, O3, STEP)                                               \
    FIRST WG_LD("t1", O1) WG_MA("t0", "a0", R) WG_MA("t1", "a1", R) WG_LD("t0", O2)         \
        WG_LD("t1", O3) WG_MA("t0", "a2", R) WG_MA("t1", "a3", R) STEP
#define WG_PIX8(R, FIRST, O1, STEP) FIRST WG_LD("t1", O1) WG_MA("t0", "a0", R) WG_MA("t1", "a1", R) STEP
#define WG_PIX4(R, FIRST, STEP) FIRST WG_MA("t0", "a0", R) STEP
#define WG_ADD "add %[x], %[x], %[st]\n\t"
#define WG_FIRST "vldrw.u32 %q[t0], [%[x]]\n\t"
#define WG_FIRST_WB(B) "vldrw.u32 %q[t0], [%[x]], #" B "\n\t"
#define WG_LOOP(PAIR, ONE)                                                                   \
    "wls lr, %[np], 2f\n"                                                                    \
    "1:\n\t"                                                                                 \
    "ldrd %[r0], %[r1], [%[d]], #8\n\t" PAIR                                                  \
    "le lr, 1b\n"                                                                            \
    "2:\n\t"                                                                                 \
    "cbz %[odd], 3f\n\t"                                                                     \
    "ldr %[r0], [%[d]]\n\t" ONE                                                               \
    "3:"
#define WG_OUT                                                                               \
    [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3), [t0] "=&w"(t0),              \
        [t1] "=&w"(t1), [r0] "=&r"(r0), [r1] "=&r"(r1), [x] "+r"(x), [d] "+r"(dy)
#define WG_IN [np] "r"(n >> 1), [odd] "l"(n & 1), [st] "r"(4 * k)

static void wg_block(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                     int32_t w)
{
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0, t0, t1;
    uint32_t r0, r1;

    if (w == 16 && k == 16) {
        __asm__ volatile(WG_LOOP(WG_PIX16("r0", WG_FIRST_WB("64"), "-48", "-32", "-16", "")
                                     WG_PIX16("r1", WG_FIRST_WB("64"), "-48", "-32", "-16", ""),
                                 WG_PIX16("r0", WG_FIRST, "16", "32", "48", ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    } else if (w == 16) {
        __asm__ volatile(WG_LOOP(WG_PIX16("r0", WG_FIRST, "16", "32", "48", WG_ADD)
                                     WG_PIX16("r1", WG_FIRST, "16", "32", "48", WG_ADD),
                                 WG_PIX16("r0", WG_FIRST, "16", "32", "48", ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    } else if (w == 8 && k == 8) {
        __asm__ volatile(WG_LOOP(WG_PIX8("r0", WG_FIRST_WB("32"), "-16", "")
                                     WG_PIX8("r1", WG_FIRST_WB("32"), "-16", ""),
                                 WG_PIX8("r0", WG_FIRST, "16", ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    } else if (w == 8) {
        __asm__ volatile(WG_LOOP(WG_PIX8("r0", WG_FIRST, "16", WG_ADD)
                                     WG_PIX8("r1", WG_FIRST, "16", WG_ADD),
                                 WG_PIX8("r0", WG_FIRST, "16", ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    } else if (k == 4) {
        __asm__ volatile(WG_LOOP(WG_PIX4("r0", WG_FIRST_WB("16"), "")
                                     WG_PIX4("r1", WG_FIRST_WB("16"), ""),
                                 WG_PIX4("r0", WG_FIRST, ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    } else {
        __asm__ volatile(WG_LOOP(WG_PIX4("r0", WG_FIRST, WG_ADD) WG_PIX4("r1", WG_FIRST, WG_ADD),
                                 WG_PIX4("r0", WG_FIRST, ""))
                         : WG_OUT : WG_IN : "lr", "memory");
    }
    vstrwq_f32(acc, a0);
    if (w >= 8) {
        vstrwq_f32(acc + 4, a1);
    }
    if (w == 16) {
        vstrwq_f32(acc + 8, a2), vstrwq_f32(acc + 12, a3);
    }
}

void tt_cs_pw_wgrad_f32_mve(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                            int32_t nb)
{
    int32_t j = 0, p;

    for (; j + 16 <= nb; j += 16) {
        wg_block(&acc[j], dy, &x[j], n, k, 16);
    }
    if (j + 8 <= nb) {
        wg_block(&acc[j], dy, &x[j], n, k, 8);
        j += 8;
    }
    if (j + 4 <= nb) {
        wg_block(&acc[j], dy, &x[j], n, k, 4);
        j += 4;
    }
    if (j < nb) { /* the last 1..3 columns: predicated lanes */
        const mve_pred16_t cols = vctp32q((uint32_t)(nb - j));
        float32x4_t a = vdupq_n_f32(0.0f);
        for (p = 0; p < n; ++p) {
            a = mv_mac(a, vldrwq_z_f32(&x[p * k + j], cols), dy[p]);
        }
        vstrwq_p_f32(&acc[j], a, cols);
    }
}
#endif

#if TT_MVE_F32
/* ---- four weight rows' gradients from int8 x (pw_wgrad4_s8): acc[i * as + j] = sum over
 * p < n of dy_i[p] * (float)(x[p * k + j] - x_zp), dy_i = dy + i * ds, p ascending, from +0.
 * Lanes are four columns j, one vector of sums per row; each x vector converted once (VLDRB,
 * VADD of -zp, VCVT) feeds the four rows. Two pixels an iteration, each row's two dy in one
 * LDRD: 29 instructions per 32 MACs, 21 fused. */
#define W4_ROW(D, A)                                                                         \
    "ldrd %[r0], %[r1], [%[" D "]], #8\n\t" MV_MAC(A, "t", "x0", "r0") MV_MAC(A, "t", "x1", "r1")
#define W4_ROW1(D, A)                                                                        \
    "ldr %[r0], [%[" D "]]\n\t" MV_MAC(A, "t", "x0", "r0")

static void w4_block(float *acc, int32_t as, const float *dy, int32_t ds, const int8_t *x,
                     int32_t nz, int32_t n, int32_t k)
{
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0, x0, x1, t;
    const float *d0 = dy, *d1 = dy + ds, *d2 = dy + 2 * ds, *d3 = dy + 3 * ds;
    uint32_t r0, r1;

    const int32_t np = n >> 1, odd = n & 1; /* (from memory: 10 core registers at -O0) */

    __asm__ volatile("ldr %[r0], %[np]\n\t"
                     "wls lr, %[r0], 2f\n"
                     "1:\n\t"
                     "vldrb.s32 %q[x0], [%[x]]\n\t"
                     "add %[x], %[x], %[k]\n\t"
                     "vldrb.s32 %q[x1], [%[x]]\n\t"
                     "add %[x], %[x], %[k]\n\t"
                     "vadd.i32 %q[x0], %q[x0], %[nz]\n\t"
                     "vadd.i32 %q[x1], %q[x1], %[nz]\n\t"
                     "vcvt.f32.s32 %q[x0], %q[x0]\n\t"
                     "vcvt.f32.s32 %q[x1], %q[x1]\n\t"
                     W4_ROW("d0", "a0") W4_ROW("d1", "a1") W4_ROW("d2", "a2") W4_ROW("d3", "a3")
                     "le lr, 1b\n"
                     "2:\n\t"
                     "ldr %[r0], %[odd]\n\t"
                     "cmp %[r0], #0\n\t"
                     "beq 3f\n\t"
                     "vldrb.s32 %q[x0], [%[x]]\n\t"
                     "vadd.i32 %q[x0], %q[x0], %[nz]\n\t"
                     "vcvt.f32.s32 %q[x0], %q[x0]\n\t"
                     W4_ROW1("d0", "a0") W4_ROW1("d1", "a1") W4_ROW1("d2", "a2") W4_ROW1("d3", "a3")
                     "3:"
                     : [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3),
                       [x0] "=&w"(x0), [x1] "=&w"(x1), [t] "=&w"(t), [r0] "=&r"(r0),
                       [r1] "=&r"(r1), [x] "+r"(x), [d0] "+r"(d0), [d1] "+r"(d1), [d2] "+r"(d2),
                       [d3] "+r"(d3)
                     : [np] "m"(np), [odd] "m"(odd), [k] "r"(k), [nz] "r"(nz)
                     : "lr", "memory");
    vstrwq_f32(acc, a0), vstrwq_f32(acc + as, a1);
    vstrwq_f32(acc + 2 * as, a2), vstrwq_f32(acc + 3 * as, a3);
}

void tt_cs_pw_wgrad4_s8_mve(float *acc, int32_t as, const float *dy, int32_t ds,
                            const int8_t *x, int32_t x_zp, int32_t n, int32_t k, int32_t nb)
{
    int32_t i, j = 0, p;

    for (; j + 4 <= nb; j += 4) {
        w4_block(&acc[j], as, dy, ds, &x[j], -x_zp, n, k);
    }
    if (j < nb) { /* the last 1..3 columns: predicated lanes, a row at a time */
        const mve_pred16_t cols = vctp32q((uint32_t)(nb - j));
        for (i = 0; i < 4; ++i) {
            const float *const d = dy + i * ds;
            float32x4_t a = vdupq_n_f32(0.0f);
            for (p = 0; p < n; ++p) {
                const int32x4_t v = vsubq_n_s32(vldrbq_z_s32(&x[p * k + j], cols), x_zp);
                a = mv_mac(a, vcvtq_f32_s32(v), d[p]);
            }
            vstrwq_p_f32(&acc[i * as + j], a, cols);
        }
    }
}
#endif

#if TT_MVE_F32
/* one row's sums from int8 x (pw_wgrad_s8): acc[j] = sum over p < n of dy[p] *
 * (float)(x[p * k + j] - x_zp), p ascending, from +0; four columns a lane vector (the last
 * 1..3 predicated) */
void tt_cs_pw_wgrad_s8_mve(float *acc, const float *dy, const int8_t *x, int32_t x_zp,
                           int32_t n, int32_t k, int32_t nb)
{
    int32_t j, p;

    for (j = 0; j < nb; j += 4) {
        const mve_pred16_t cols = vctp32q((uint32_t)(nb - j));
        float32x4_t a = vdupq_n_f32(0.0f);
        for (p = 0; p < n; ++p) {
            const int32x4_t v = vsubq_n_s32(vldrbq_z_s32(&x[p * k + j], cols), x_zp);
            a = mv_mac(a, vcvtq_f32_s32(v), dy[p]);
        }
        vstrwq_p_f32(&acc[j], a, cols);
    }
}
#endif

#if TT_MVE_F32
/* ---- a weight row's stochastic rounding (cs_sr_row): row[j] = tt_sr_s8(row[j],
 * acc[j] * x_scale * s, key, idx0 + j), j < n, the bytes of the scalar loop. Lanes are four
 * elements: the hash on their indices' products (stepped, as the scalar's), its top 24 bits
 * to a float by one fixed-point VCVT (exact), delta = (acc * x_scale) * s + u rounded as
 * there, VCVTM's floor saturates (NaN -> 0) as the scalar's, and row - floor saturating then
 * clamped to [-127, 127] is the scalar's SSAT / clamp for every floor. A tail-predicated loop
 * takes the last 1..3 elements: 23 instructions per 4 weights. */
void tt_cs_sr_row_s8_mve(int8_t *row, const float *acc, float x_scale, float s, uint32_t key,
                         uint32_t idx0, int32_t n)
{
    uint32x4_t hm = vmulq_n_u32(vaddq_n_u32(vidupq_n_u32(0, 1), idx0), 0x85EBCA6Bu);
    const uint32x4_t kq = vdupq_n_u32(key);
    const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
    uint32x4_t h, t;
    float32x4_t a;
    uint32_t xs, sb;

    if (n <= 0) {
        return;
    }
    memcpy(&xs, &x_scale, 4), memcpy(&sb, &s, 4);
    __asm__ volatile("ldr lr, %[n]\n\t" /* (from memory: 7 core registers at -O0) */
                     "dlstp.32 lr, lr\n"
                     "1:\n\t"
                     "veor %q[h], %q[hm], %q[kq]\n\t"
                     "vadd.i32 %q[hm], %q[hm], %[c4]\n\t"
                     "vshr.u32 %q[t], %q[h], #16\n\t"
                     "veor %q[h], %q[h], %q[t]\n\t"
                     "vmul.i32 %q[h], %q[h], %[c1]\n\t"
                     "vshr.u32 %q[t], %q[h], #13\n\t"
                     "veor %q[h], %q[h], %q[t]\n\t"
                     "vmul.i32 %q[h], %q[h], %[c2]\n\t"
                     "vshr.u32 %q[t], %q[h], #16\n\t"
                     "veor %q[h], %q[h], %q[t]\n\t"
                     "vshr.u32 %q[h], %q[h], #8\n\t"
                     "vcvt.f32.u32 %q[h], %q[h], #24\n\t"
                     "vldrw.u32 %q[a], [%[acc]], #16\n\t"
                     "vmul.f32 %q[a], %q[a], %[xs]\n\t"
                     "vmul.f32 %q[a], %q[a], %[s]\n\t"
                     "vadd.f32 %q[a], %q[a], %q[h]\n\t"
                     "vcvtm.s32.f32 %q[a], %q[a]\n\t"
                     "vldrb.s32 %q[t], [%[row]]\n\t"
                     "vqsub.s32 %q[t], %q[t], %q[a]\n\t"
                     "vmax.s32 %q[t], %q[t], %q[lo]\n\t"
                     "vmin.s32 %q[t], %q[t], %q[hi]\n\t"
                     "vstrb.32 %q[t], [%[row]], #4\n\t"
                     "letp lr, 1b"
                     : [hm] "+w"(hm), [h] "=&w"(h), [t] "=&w"(t), [a] "=&w"(a), [acc] "+r"(acc),
                       [row] "+r"(row)
                     : [n] "m"(n), [kq] "w"(kq), [lo] "w"(lo), [hi] "w"(hi),
                       [c1] "r"(0x85EBCA6Bu), [c2] "r"(0xC2B2AE35u), [c4] "r"(4u * 0x85EBCA6Bu),
                       [xs] "r"(xs), [s] "r"(sb)
                     : "lr", "memory");
}
#endif

#if TT_MVE_F32
/* ---- the depthwise input gradient of one channel, 3x3 at stride 1 on planes 4 or 8 wide
 * (as dw_input_small): the reference's d = dy * sc (fp32 weights: dy itself) in a
 * zero-padded plane P with a fixed row pitch (8 floats for w = 4, 12 for w = 8), then
 * dx[iy, ix] = sum over u, t < 3 of P[(iy + u) * pitch + ix + t] * w[8 - 3 u - t] (the
 * kernel reversed), (u, t) ascending from +0: the reference's terms in its order, the
 * padding's 0 * w (+-0, the weights finite) changing no sum. Lanes are four dx of a row.
 * Four lane vectors (two rows of 8, four of 4) share each weight, every load at a constant
 * offset from one base (inline asm): per tap one LDR and four load / VMUL / VADD, 13
 * instructions per 16 MACs with the padding's, where the FPU rows took 79 per 72. */
#define DWI_P 200 /* the padded plane, floats on the stack (8x8: 10 rows of 12, 4x4: 6 of 8) */

/* one lane vector: dx[iy, ix .. ix + 3] from P's rows iy .. iy + 2 (b: P + iy * pitch + ix) */
static void dwi_one(float *o, const float *b, int32_t pitch, const float *wf)
{
    float32x4_t a = vdupq_n_f32(0.0f);
    int32_t u, t;

    for (u = 0; u < 3; ++u) {
        for (t = 0; t < 3; ++t) {
            a = vaddq_f32(a, vmulq_n_f32(vldrwq_f32(b + u * pitch + t), wf[8 - 3 * u - t]));
        }
    }
    vstrwq_f32(o, a);
}

#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
/* tap (U, T) of the four vectors at byte offsets O0..O3 from b, the pitch PB bytes */
#define DWI_V(X, A, U, T, PB, O)                                                              \
    "vldrw.u32 %q[" X "], [%[b], #(" #U "*" PB "+" #T "*4+" O ")]\n\t"                      \
    "vmul.f32 %q[" X "], %q[" X "], %[wt]\n\t"                                               \
    "vadd.f32 %q[" A "], %q[" A "], %q[" X "]\n\t"
#define DWI_T(U, T, PB, O0, O1, O2, O3)                                                      \
    "ldr %[wt], [%[wf], #(32-" #U "*12-" #T "*4)]\n\t" DWI_V("x0", "a0", U, T, PB, O0)          \
        DWI_V("x1", "a1", U, T, PB, O1) DWI_V("x0", "a2", U, T, PB, O2)                       \
            DWI_V("x1", "a3", U, T, PB, O3)
#define DWI_R(U, PB, O0, O1, O2, O3)                                                         \
    DWI_T(U, 0, PB, O0, O1, O2, O3) DWI_T(U, 1, PB, O0, O1, O2, O3)                           \
        DWI_T(U, 2, PB, O0, O1, O2, O3)
#define DWI_ASM(PB, O0, O1, O2, O3)                                                          \
    __asm__("vmov.i32 %q[a0], #0\n\tvmov.i32 %q[a1], #0\n\t"                                  \
            "vmov.i32 %q[a2], #0\n\tvmov.i32 %q[a3], #0\n\t" DWI_R(0, PB, O0, O1, O2, O3)     \
                DWI_R(1, PB, O0, O1, O2, O3) DWI_R(2, PB, O0, O1, O2, O3)                     \
            : [a0] "=&w"(a0), [a1] "=&w"(a1), [a2] "=&w"(a2), [a3] "=&w"(a3),                 \
              [x0] "=&w"(x0), [x1] "=&w"(x1), [wt] "=&r"(wt)                                  \
            : [b] "r"(b), [wf] "r"(wf), "m"(*(const float(*)[DWI_P])P),                       \
              "m"(*(const float(*)[9])wf))
#endif

int tt_cs_dw_input_mve(float *dx, const float *dy, const int8_t *wq, const float *wfl, float sc,
                       const tt_conv_geom *g)
{
    const int32_t h = g->h, w = g->w, pitch = w == 4 ? 8 : 12;
    const int32_t r0 = 2 - g->pt, q0 = 2 - g->pl;
    int32_t oh = g->oh < h + 2 - r0 ? g->oh : h + 2 - r0;
    const int32_t ow = g->ow < w + 2 - q0 ? g->ow : w + 2 - q0;
    float P[DWI_P], wc[12];
    const float *wf = wfl;
    int32_t i, oy, ox, iy = 0;

    if (g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 || g->kh != 3 || g->kw != 3 ||
        !(w == 4 || w == 8) || h <= 0 || r0 < 0 || q0 < 0 || (h + 2) * pitch > DWI_P) {
        return 0;
    }
    if (wq != NULL) { /* int8 weights as floats (exact) */
        vstrwq_f32(wc, vcvtq_f32_s32(vldrbq_s32(wq)));
        vstrwq_f32(wc + 4, vcvtq_f32_s32(vldrbq_s32(wq + 4)));
        wc[8] = (float)wq[8];
        wf = wc;
    } else {
        for (i = 0; i < 9; ++i) {
            if (!(wfl[i] - wfl[i] == 0.0f)) { /* inf or NaN: 0 * w would add a NaN */
                return 0;
            }
        }
    }
    for (i = 0; i < (h + 2) * pitch; i += 4) {
        vstrwq_f32(&P[i], vdupq_n_f32(0.0f));
    }
    if (ow == w && g->ow == w) { /* "same" pads: whole rows of d, 4 a VMUL (or a copy) */
        const float *d = dy;
        float *pr = &P[r0 * pitch + q0];
        for (oy = 0; oy < oh && wq != NULL; ++oy, d += w, pr += pitch) {
            vstrwq_f32(pr, vmulq_n_f32(vldrwq_f32(d), sc));
            if (w == 8) {
                vstrwq_f32(pr + 4, vmulq_n_f32(vldrwq_f32(d + 4), sc));
            }
        }
        for (oy = 0; oy < oh && wq == NULL; ++oy, d += w, pr += pitch) {
            vstrwq_f32(pr, vldrwq_f32(d));
            if (w == 8) {
                vstrwq_f32(pr + 4, vldrwq_f32(d + 4));
            }
        }
        oh = 0;
    }
    for (oy = 0; oy < oh; ++oy) { /* the rows and columns that meet dx */
        const float *const d = &dy[oy * g->ow];
        float *const pr = &P[(oy + r0) * pitch + q0];
        for (ox = 0; ox < ow; ox += 4) {
            const mve_pred16_t m = vctp32q((uint32_t)(ow - ox));
            const float32x4_t dv = vldrwq_z_f32(&d[ox], m);
            vstrwq_p_f32(&pr[ox], wq != NULL ? vmulq_n_f32(dv, sc) : dv, m);
        }
    }
#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
    {
        float32x4_t a0, a1, a2, a3, x0, x1;
        uint32_t wt;
        if (w == 8) {
            for (; iy + 2 <= h; iy += 2) { /* rows iy, iy + 1: vectors at 0, 4, 12, 16 */
                const float *const b = &P[iy * 12];
                float *const o = &dx[iy * 8];
                DWI_ASM("48", "0", "16", "48", "64");
                vstrwq_f32(o, a0), vstrwq_f32(o + 4, a1);
                vstrwq_f32(o + 8, a2), vstrwq_f32(o + 12, a3);
            }
        } else {
            for (; iy + 4 <= h; iy += 4) { /* rows iy .. iy + 3 */
                const float *const b = &P[iy * 8];
                float *const o = &dx[iy * 4];
                DWI_ASM("32", "0", "32", "64", "96");
                vstrwq_f32(o, a0), vstrwq_f32(o + 4, a1);
                vstrwq_f32(o + 8, a2), vstrwq_f32(o + 12, a3);
            }
        }
    }
#endif
    for (; iy < h; ++iy) {
        for (ox = 0; ox < w; ox += 4) {
            dwi_one(&dx[iy * w + ox], &P[iy * pitch + ox], pitch, wf);
        }
    }
    return 1;
}
#undef DWI_P
#undef DWI_V
#undef DWI_T
#undef DWI_R
#undef DWI_ASM
#endif
