/*
 * Optimised channel-streamed backward kernels: the tt_cs_* sub-ops of tt_channel_stream.c
 * (read its header), same signatures and preconditions, faster on Cortex-M4F/M7.
 *
 * Where the reference spends its ~14 instructions per MAC: every MAC reloads its weight,
 * converts it from int8 (sxtb + vmov + vcvt), recomputes an index and, in the sinks, loads and
 * stores its output. Here each weight is converted once per call and kept in a register,
 * pixels or channels are blocked so a loaded value feeds several MACs, and on the FPU a MAC is
 * one VMLA, with VLDM / VSTM moving 8 floats per instruction. GCC never emits VMLA under
 * -ffp-contract=off, so it comes from inline asm: it is not fused (product and sum each
 * rounded, as `acc + a * b`), so it is the reference's arithmetic. The host path (#else) runs
 * the same loops with `acc + a * b`: host and twins agree bit for bit.
 *
 * Every kernel adds each float in the reference's order and is bit-identical to it, except
 * tt_cs_pw_input_s8_opt: dy * (w_scale[o] * w[o, c]) instead of (dy * w_scale[o]) * w[o, c],
 * same summation order, so its results differ by rounding only. The depthwise kernels pad with
 * zeros (see there) and run the reference for shapes beyond their stack buffers. The 1x1
 * weight gradient from int8 x stays near 4 instructions per MAC: each x element is used once
 * per call, so its conversion to float (sxtab + vmov + vcvt) cannot be shared.
 */
#include "tt_f32_fma.h"
#include "tt_f32_mask_mve.h"
#include "tt_f32_mve.h"
#include "tt_kernels.h"
#include "tt_q8_round.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4)
#define CS_VFP 1 /* single-precision VFP: VMLA / VLDM / VSTM through inline asm */
#else
#define CS_VFP 0
#endif

#define CS_INLINE static inline __attribute__((always_inline))

#define CS_OB 128   /* weight column chunk of the 1x1 source (floats on the stack) */

/* acc + a * b, rounded twice (VMLA on the FPU) */
CS_INLINE float cs_mla(float acc, float a, float b)
{
#if CS_VFP
    __asm__("vmla.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
#else
    return acc + a * b;
#endif
}

typedef struct {
    float v[8];
} cs_w8;

CS_INLINE cs_w8 cs_load8(const float *p)
{
    cs_w8 w;
    w.v[0] = p[0], w.v[1] = p[1], w.v[2] = p[2], w.v[3] = p[3];
    w.v[4] = p[4], w.v[5] = p[5], w.v[6] = p[6], w.v[7] = p[7];
    return w;
}

CS_INLINE cs_w8 cs_load8_s8(const int8_t *p)
{
    cs_w8 w;
    w.v[0] = (float)p[0], w.v[1] = (float)p[1], w.v[2] = (float)p[2], w.v[3] = (float)p[3];
    w.v[4] = (float)p[4], w.v[5] = (float)p[5], w.v[6] = (float)p[6], w.v[7] = (float)p[7];
    return w;
}

#if CS_VFP
#define CS_MLA8(a, r0, r1, r2, r3, r4, r5, r6, r7)                                            \
    "vmla.f32 " a ", " r0 "\n\tvmla.f32 " a ", " r1 "\n\tvmla.f32 " a ", " r2                   \
    "\n\tvmla.f32 " a ", " r3 "\n\tvmla.f32 " a ", " r4 "\n\tvmla.f32 " a ", " r5               \
    "\n\tvmla.f32 " a ", " r6 "\n\tvmla.f32 " a ", " r7 "\n\t"
#define CS_W8IN(w)                                                                            \
    [w0] "t"(w.v[0]), [w1] "t"(w.v[1]), [w2] "t"(w.v[2]), [w3] "t"(w.v[3]), [w4] "t"(w.v[4]), \
        [w5] "t"(w.v[5]), [w6] "t"(w.v[6]), [w7] "t"(w.v[7])
#endif

/* two dot products of 8 in order, interleaved: a0 += x0[.] * w, a1 += x1[.] * w */
CS_INLINE void cs_dot8x2(float *a0, float *a1, const float *x0, const float *x1, cs_w8 w)
{
#if CS_VFP
    float b0 = *a0, b1 = *a1;
    __asm__("vldmia %[x0], {s0-s7}\n\t"
            "vldmia %[x1], {s8-s15}\n\t"
            "vmla.f32 %[b0], s0, %[w0]\n\tvmla.f32 %[b1], s8, %[w0]\n\t"
            "vmla.f32 %[b0], s1, %[w1]\n\tvmla.f32 %[b1], s9, %[w1]\n\t"
            "vmla.f32 %[b0], s2, %[w2]\n\tvmla.f32 %[b1], s10, %[w2]\n\t"
            "vmla.f32 %[b0], s3, %[w3]\n\tvmla.f32 %[b1], s11, %[w3]\n\t"
            "vmla.f32 %[b0], s4, %[w4]\n\tvmla.f32 %[b1], s12, %[w4]\n\t"
            "vmla.f32 %[b0], s5, %[w5]\n\tvmla.f32 %[b1], s13, %[w5]\n\t"
            "vmla.f32 %[b0], s6, %[w6]\n\tvmla.f32 %[b1], s14, %[w6]\n\t"
            "vmla.f32 %[b0], s7, %[w7]\n\tvmla.f32 %[b1], s15, %[w7]"
            : [b0] "+t"(b0), [b1] "+t"(b1)
            : [x0] "r"(x0), [x1] "r"(x1), "m"(*(const float(*)[8])x0),
              "m"(*(const float(*)[8])x1), CS_W8IN(w)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12",
              "s13", "s14", "s15");
    *a0 = b0, *a1 = b1;
#else
    int32_t i;
    float b0 = *a0, b1 = *a1;
    for (i = 0; i < 8; ++i) {
        b0 = b0 + x0[i] * w.v[i];
        b1 = b1 + x1[i] * w.v[i];
    }
    *a0 = b0, *a1 = b1;
#endif
}

/* a += x[.] * w in order */
CS_INLINE float cs_dot8(float a, const float *x, cs_w8 w)
{
#if CS_VFP
    __asm__("vldmia %[x], {s0-s7}\n\t" CS_MLA8("%[a]", "s0, %[w0]", "s1, %[w1]", "s2, %[w2]",
                                               "s3, %[w3]", "s4, %[w4]", "s5, %[w5]",
                                               "s6, %[w6]", "s7, %[w7]")
            : [a] "+t"(a)
            : [x] "r"(x), "m"(*(const float(*)[8])x), CS_W8IN(w)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7");
    return a;
#else
    int32_t i;
    for (i = 0; i < 8; ++i) {
        a = a + x[i] * w.v[i];
    }
    return a;
#endif
}

/* o[i] += d * w[i], i < 8 */
CS_INLINE void cs_axpy8(float *o, float d, cs_w8 w)
{
#if CS_VFP
    __asm__("vldmia %[o], {s0-s7}\n\t"
            "vmla.f32 s0, %[d], %[w0]\n\tvmla.f32 s1, %[d], %[w1]\n\t"
            "vmla.f32 s2, %[d], %[w2]\n\tvmla.f32 s3, %[d], %[w3]\n\t"
            "vmla.f32 s4, %[d], %[w4]\n\tvmla.f32 s5, %[d], %[w5]\n\t"
            "vmla.f32 s6, %[d], %[w6]\n\tvmla.f32 s7, %[d], %[w7]\n\t"
            "vstmia %[o], {s0-s7}"
            : "+m"(*(float(*)[8])o)
            : [o] "r"(o), [d] "t"(d), CS_W8IN(w)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7");
#else
    int32_t i;
    for (i = 0; i < 8; ++i) {
        o[i] = o[i] + d * w.v[i];
    }
#endif
}

/* o[i] += d * w[i], i < R (1..7, a constant once inlined): the last columns of a sink row,
 * one VLDM / VSTM of the R outputs */
#if CS_VFP
#define CS_AX(i) "vmla.f32 s" #i ", %[d], %[w" #i "]\n\t"
#define CS_AXPYN(R, REGS, MLAS)                                                               \
    case R:                                                                                   \
        __asm__("vldmia %[o], {" REGS "}\n\t" MLAS "vstmia %[o], {" REGS "}"                 \
                : "+m"(*(float(*)[R])o)                                                       \
                : [o] "r"(o), [d] "t"(d), CS_W8IN(w)                                          \
                : "s0", "s1", "s2", "s3", "s4", "s5", "s6");                                  \
        break;
#endif
CS_INLINE void cs_axpyn(float *o, float d, cs_w8 w, const int R)
{
#if CS_VFP
    switch (R) {
        CS_AXPYN(1, "s0", CS_AX(0))
        CS_AXPYN(2, "s0-s1", CS_AX(0) CS_AX(1))
        CS_AXPYN(3, "s0-s2", CS_AX(0) CS_AX(1) CS_AX(2))
        CS_AXPYN(4, "s0-s3", CS_AX(0) CS_AX(1) CS_AX(2) CS_AX(3))
        CS_AXPYN(5, "s0-s4", CS_AX(0) CS_AX(1) CS_AX(2) CS_AX(3) CS_AX(4))
        CS_AXPYN(6, "s0-s5", CS_AX(0) CS_AX(1) CS_AX(2) CS_AX(3) CS_AX(4) CS_AX(5))
        CS_AXPYN(7, "s0-s6", CS_AX(0) CS_AX(1) CS_AX(2) CS_AX(3) CS_AX(4) CS_AX(5) CS_AX(6))
    default:
        break;
    }
#else
    int32_t i;
    for (i = 0; i < R; ++i) {
        o[i] = o[i] + d * w.v[i];
    }
#endif
}
#if CS_VFP
#undef CS_AXPYN
#undef CS_AX
#endif

/* a[i] += d * x[i], i < 8: the portable path of pw_wgrad_f32 (on the FPU its assembly
 * blocks keep the sums in registers) */
CS_INLINE void cs_acc8(cs_w8 *a, float d, const float *x)
{
    int32_t i;
    for (i = 0; i < 8; ++i) {
        a->v[i] = a->v[i] + d * x[i];
    }
}

/* a[i] += d * (float)(x[i] - zp), i < 4 (nz = -zp; the difference is exact in int32) */
CS_INLINE void cs_acc4_s8(float *a0, float *a1, float *a2, float *a3, float d, const int8_t *x,
                          int32_t nz)
{
#if CS_VFP
    uint32_t v, t0, t1, t2, t3;
    float b0 = *a0, b1 = *a1, b2 = *a2, b3 = *a3;
    memcpy(&v, x, 4); /* one LDR: unaligned loads are fine on the M4/M7 */
    /* SXTAB sign-extends a byte and adds -zp; VMOV moves two core registers at once */
    __asm__("sxtab %[t0], %[nz], %[v]\n\t"
            "sxtab %[t1], %[nz], %[v], ror #8\n\t"
            "sxtab %[t2], %[nz], %[v], ror #16\n\t"
            "sxtab %[t3], %[nz], %[v], ror #24\n\t"
            "vmov s0, s1, %[t0], %[t1]\n\t"
            "vmov s2, s3, %[t2], %[t3]\n\t"
            "vcvt.f32.s32 s0, s0\n\tvcvt.f32.s32 s1, s1\n\t"
            "vcvt.f32.s32 s2, s2\n\tvcvt.f32.s32 s3, s3\n\t"
            "vmla.f32 %[b0], %[d], s0\n\tvmla.f32 %[b1], %[d], s1\n\t"
            "vmla.f32 %[b2], %[d], s2\n\tvmla.f32 %[b3], %[d], s3"
            : [b0] "+t"(b0), [b1] "+t"(b1), [b2] "+t"(b2), [b3] "+t"(b3), [t0] "=&r"(t0),
              [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3)
            : [v] "r"(v), [nz] "r"(nz), [d] "t"(d)
            : "s0", "s1", "s2", "s3");
    *a0 = b0, *a1 = b1, *a2 = b2, *a3 = b3;
#else
    *a0 = *a0 + d * (float)(nz + (int32_t)x[0]);
    *a1 = *a1 + d * (float)(nz + (int32_t)x[1]);
    *a2 = *a2 + d * (float)(nz + (int32_t)x[2]);
    *a3 = *a3 + d * (float)(nz + (int32_t)x[3]);
#endif
}

/* sum of v[0..n) in order, starting from 0.0f */
CS_INLINE float cs_sum(const float *v, int32_t n)
{
    float a = 0.0f;
    int32_t p = 0;

#if CS_VFP
    for (; p + 8 <= n; p += 8) {
        __asm__("vldmia %[x], {s0-s7}\n\t"
                "vadd.f32 %[a], %[a], s0\n\tvadd.f32 %[a], %[a], s1\n\t"
                "vadd.f32 %[a], %[a], s2\n\tvadd.f32 %[a], %[a], s3\n\t"
                "vadd.f32 %[a], %[a], s4\n\tvadd.f32 %[a], %[a], s5\n\t"
                "vadd.f32 %[a], %[a], s6\n\tvadd.f32 %[a], %[a], s7"
                : [a] "+t"(a)
                : [x] "r"(&v[p]), "m"(*(const float(*)[8]) & v[p])
                : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7");
    }
#else
    for (; p + 4 <= n; p += 4) {
        a += v[p];
        a += v[p + 1];
        a += v[p + 2];
        a += v[p + 3];
    }
#endif
    for (; p < n; ++p) {
        a += v[p];
    }
    return a;
}

/* a0 += x0[.] * w[.], a1 += x1[.] * w[.] over 8 floats, in order; x0, x1, w step past them */
CS_INLINE void cs_dot8x2w(float *a0, float *a1, const float **x0, const float **x1,
                          const float **w)
{
#if CS_VFP
    float b0 = *a0, b1 = *a1;
    __asm__("vldmia %[w]!, {s16-s23}\n\t"
            "vldmia %[x0]!, {s0-s7}\n\t"
            "vldmia %[x1]!, {s8-s15}\n\t"
            "vmla.f32 %[b0], s0, s16\n\tvmla.f32 %[b1], s8, s16\n\t"
            "vmla.f32 %[b0], s1, s17\n\tvmla.f32 %[b1], s9, s17\n\t"
            "vmla.f32 %[b0], s2, s18\n\tvmla.f32 %[b1], s10, s18\n\t"
            "vmla.f32 %[b0], s3, s19\n\tvmla.f32 %[b1], s11, s19\n\t"
            "vmla.f32 %[b0], s4, s20\n\tvmla.f32 %[b1], s12, s20\n\t"
            "vmla.f32 %[b0], s5, s21\n\tvmla.f32 %[b1], s13, s21\n\t"
            "vmla.f32 %[b0], s6, s22\n\tvmla.f32 %[b1], s14, s22\n\t"
            "vmla.f32 %[b0], s7, s23\n\tvmla.f32 %[b1], s15, s23"
            : [b0] "+t"(b0), [b1] "+t"(b1), [x0] "+r"(*x0), [x1] "+r"(*x1), [w] "+r"(*w)
            : "m"(**(const float(*)[8]) * x0), "m"(**(const float(*)[8]) * x1),
              "m"(**(const float(*)[8]) * w)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12",
              "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23");
    *a0 = b0, *a1 = b1;
#else
    int32_t i;
    float b0 = *a0, b1 = *a1;
    for (i = 0; i < 8; ++i) {
        b0 = b0 + (*x0)[i] * (*w)[i];
        b1 = b1 + (*x1)[i] * (*w)[i];
    }
    *a0 = b0, *a1 = b1;
    *x0 += 8, *x1 += 8, *w += 8;
#endif
}

/* ---- the source: channel c of a 1x1 conv's input gradient ----
 * plane[p] (+)= sum over o < nb of dy[p * cout + o] * wc[o], o ascending (dy offset to the
 * chunk; `first`: the plane starts at 0). Narrow chunks (nb < CS_PIX_OUTER) keep 8 weights
 * in registers and stream the pixels past them, two at a time (each pair's sums reloaded per
 * 8 weights); wider ones take two pixels at a time through the whole chunk, weights and dy
 * 8 floats per VLDM, the sums in registers. */
#define CS_PIX_OUTER 24 /* measured: pixel pairs outside win from 24 outputs on */

static void pw_src_narrow(float *plane, const float *dy, const float *wc, int32_t n,
                          int32_t cout, int32_t nb)
{
    int32_t o = 0, p;

    for (; o + 8 <= nb; o += 8) {
        const cs_w8 w = cs_load8(&wc[o]);
        for (p = 0; p + 2 <= n; p += 2) {
            float a0 = plane[p], a1 = plane[p + 1];
            cs_dot8x2(&a0, &a1, &dy[p * cout + o], &dy[(p + 1) * cout + o], w);
            plane[p] = a0, plane[p + 1] = a1;
        }
        if (p < n) {
            plane[p] = cs_dot8(plane[p], &dy[p * cout + o], w);
        }
    }
    for (; o < nb; ++o) {
        const float w = wc[o];
        for (p = 0; p < n; ++p) {
            plane[p] = cs_mla(plane[p], dy[p * cout + o], w);
        }
    }
}

static void pw_src(float *plane, const float *dy, const float *wc, int32_t n, int32_t cout,
                   int32_t nb, int first)
{
    const int32_t n8 = nb & ~7;
    int32_t o, p;

    if (nb < CS_PIX_OUTER) {
        if (first) {
            memset(plane, 0, sizeof(float) * (size_t)n);
        }
        pw_src_narrow(plane, dy, wc, n, cout, nb);
        return;
    }
    for (p = 0; p + 2 <= n; p += 2) {
        const float *x0 = &dy[p * cout], *x1 = x0 + cout, *w = wc;
        const float *const we = wc + n8;
        float a0 = first ? 0.0f : plane[p], a1 = first ? 0.0f : plane[p + 1];
        while (w != we) {
            cs_dot8x2w(&a0, &a1, &x0, &x1, &w);
        }
        for (o = n8; o < nb; ++o) {
            a0 = cs_mla(a0, dy[p * cout + o], wc[o]);
            a1 = cs_mla(a1, dy[(p + 1) * cout + o], wc[o]);
        }
        plane[p] = a0, plane[p + 1] = a1;
    }
    if (p < n) {
        float a = first ? 0.0f : plane[p];
        for (o = 0; o < n8; o += 8) {
            a = cs_dot8(a, &dy[p * cout + o], cs_load8(&wc[o]));
        }
        for (; o < nb; ++o) {
            a = cs_mla(a, dy[p * cout + o], wc[o]);
        }
        plane[p] = a;
    }
}

/* wc[o] = scale[o] * (float)w[o * cin], o < nb: column c of an int8 weight, scaled */
static void pw_column_s8(float *wc, const int8_t *w, const float *scale, int32_t cin,
                         int32_t nb)
{
    int32_t o = 0;

#if CS_VFP
    for (; o + 4 <= nb; o += 4, w += 4 * cin) { /* 4 per VLDM of scales and VSTM */
        const int32_t v0 = w[0], v1 = w[cin], v2 = w[2 * cin], v3 = w[3 * cin];
        __asm__("vmov s0, s1, %[v0], %[v1]\n\tvmov s2, s3, %[v2], %[v3]\n\t"
                "vcvt.f32.s32 s0, s0\n\tvcvt.f32.s32 s1, s1\n\t"
                "vcvt.f32.s32 s2, s2\n\tvcvt.f32.s32 s3, s3\n\t"
                "vldmia %[s], {s4-s7}\n\t"
                "vmul.f32 s0, s4, s0\n\tvmul.f32 s1, s5, s1\n\t"
                "vmul.f32 s2, s6, s2\n\tvmul.f32 s3, s7, s3\n\t"
                "vstmia %[d], {s0-s3}"
                : "=m"(*(float(*)[4]) & wc[o])
                : [v0] "r"(v0), [v1] "r"(v1), [v2] "r"(v2), [v3] "r"(v3), [s] "r"(&scale[o]),
                  [d] "r"(&wc[o]), "m"(*(const float(*)[4]) & scale[o])
                : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7");
    }
#endif
    for (; o < nb; ++o, w += cin) {
        wc[o] = scale[o] * (float)w[0];
    }
}

void tt_cs_pw_input_s8_opt(float *plane, const float *dy, const int8_t *w, const float *w_scale,
                           int32_t n, int32_t cout, int32_t cin, int32_t c)
{
    float wc[CS_OB];
    int32_t o0;

#if TT_MVE_F32 /* Helium: four pixels a lane vector, the same sums */
    tt_cs_pw_input_s8_mve(plane, 0, dy, w, w_scale, n, cout, cin, c, 1);
    return;
#elif TT_F32_FMA /* a fused build elsewhere: the same sums in C */
    tt_cs_pw_input_s8_fma(plane, 0, dy, w, w_scale, n, cout, cin, c, 1);
    return;
#endif
    for (o0 = 0; o0 < cout; o0 += CS_OB) {
        const int32_t nb = cout - o0 < CS_OB ? cout - o0 : CS_OB;
        pw_column_s8(wc, &w[o0 * cin + c], &w_scale[o0], cin, nb);
        pw_src(plane, &dy[o0], wc, n, cout, nb, o0 == 0);
    }
}

/* ---- the source for 4 channels at once (tt_cs_pw_input_s8_g): each dy load feeds four
 * channels' sums, and one 32-bit load gathers the four channels' weights of an output ----
 * Column chunk: wq[4 o + j] = scale[o] * (float)w[o, c0 + j], the same products
 * tt_cs_pw_input_s8_opt forms, so each plane gets its bits (o ascending per element). */

/* wq[4 o + j] for o < nb from the 4 weight bytes at w + o * cin */
static void pw_column4_s8(float *wq, const int8_t *w, const float *scale, int32_t cin,
                          int32_t nb)
{
    int32_t o;

    for (o = 0; o < nb; ++o, w += cin, wq += 4) {
        uint32_t v;
        memcpy(&v, w, 4); /* one LDR: unaligned loads are fine on the M4/M7 */
#if CS_VFP && defined(__ARM_FEATURE_DSP)
        {
            uint32_t t0, t1, t2, t3;
            __asm__("sxtb %[t0], %[v]\n\tsxtb %[t1], %[v], ror #8\n\t"
                    "sxtb %[t2], %[v], ror #16\n\tasr %[t3], %[v], #24\n\t"
                    "vmov s0, s1, %[t0], %[t1]\n\tvmov s2, s3, %[t2], %[t3]\n\t"
                    "vcvt.f32.s32 s0, s0\n\tvcvt.f32.s32 s1, s1\n\t"
                    "vcvt.f32.s32 s2, s2\n\tvcvt.f32.s32 s3, s3\n\t"
                    "vldr s4, %[s]\n\t"
                    "vmul.f32 s0, s4, s0\n\tvmul.f32 s1, s4, s1\n\t"
                    "vmul.f32 s2, s4, s2\n\tvmul.f32 s3, s4, s3\n\t"
                    "vstmia %[d], {s0-s3}"
                    : "=m"(*(float(*)[4])wq), [t0] "=&r"(t0), [t1] "=&r"(t1),
                      [t2] "=&r"(t2), [t3] "=&r"(t3)
                    : [v] "r"(v), [s] "m"(scale[o]), [d] "r"(wq)
                    : "s0", "s1", "s2", "s3", "s4");
        }
#else
        wq[0] = scale[o] * (float)(int8_t)(v & 0xFFu);
        wq[1] = scale[o] * (float)(int8_t)((v >> 8) & 0xFFu);
        wq[2] = scale[o] * (float)(int8_t)((v >> 16) & 0xFFu);
        wq[3] = scale[o] * (float)(int8_t)(v >> 24);
#endif
    }
}

#if CS_VFP
static const float cs_zero8[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}; /* VLDM */
#endif

/* one pixel's element of planes j < 4 (ps floats apart) at pl: (+)= sum over o0 <= o < nb of
 * d[o] * wq[4 o + j], o ascending; `first`: from 0 */
static void pw_src4_pixel(float *pl, int32_t ps, const float *d, const float *wq, int32_t o0,
                          int32_t nb, int first)
{
    int32_t j, o;

    for (j = 0; j < 4; ++j) {
        float a = first ? 0.0f : pl[j * ps];
        for (o = o0; o < nb; ++o) {
            a = cs_mla(a, d[o], wq[4 * o + j]);
        }
        pl[j * ps] = a;
    }
}

/* planes j < 4 (ps floats apart), pixels p, p + 1: (+)= sum over o < nb of dy[., o] * wq[4 o
 * + j], o ascending; `first`: from 0. nb8 = nb rounded down to 8 (the tail in C). */
static void pw_src4_pair(float *pl, int32_t ps, const float *d0, const float *d1,
                         const float *wq, int32_t nb, int first)
{
    int32_t o;

#if CS_VFP && defined(__OPTIMIZE__) /* at -O0 the asm runs out of registers */
    const int32_t nb8 = nb & ~7;
    if (nb8 > 0) {
        const float *wp = wq, *const we = wq + 4 * nb8, *a = d0, *b = d1;
        const int32_t ps4 = 4 * ps; /* bytes between the planes */
        const float *t;
/* outputs o + k, o + k + 1 (dy in s(k), s(k+1) and s(8+k), s(9+k)), weights of 2 outputs */
#define CS_SRC4_2(k0, k1, k8, k9)                                                           \
    "vldmia %[w]!, {s16-s23}\n\t"                                                          \
    "vmla.f32 s24, s" #k0 ", s16\n\tvmla.f32 s25, s" #k8 ", s16\n\t"                        \
    "vmla.f32 s26, s" #k0 ", s17\n\tvmla.f32 s27, s" #k8 ", s17\n\t"                        \
    "vmla.f32 s28, s" #k0 ", s18\n\tvmla.f32 s29, s" #k8 ", s18\n\t"                        \
    "vmla.f32 s30, s" #k0 ", s19\n\tvmla.f32 s31, s" #k8 ", s19\n\t"                        \
    "vmla.f32 s24, s" #k1 ", s20\n\tvmla.f32 s25, s" #k9 ", s20\n\t"                        \
    "vmla.f32 s26, s" #k1 ", s21\n\tvmla.f32 s27, s" #k9 ", s21\n\t"                        \
    "vmla.f32 s28, s" #k1 ", s22\n\tvmla.f32 s29, s" #k9 ", s22\n\t"                        \
    "vmla.f32 s30, s" #k1 ", s23\n\tvmla.f32 s31, s" #k9 ", s23\n\t"
        /* the sums start from the planes, or from zeros when `first` (one asm: the compiler
         * puts nothing between the loads, the loop and the stores) */
        __asm__ volatile("cmp %[f], #0\n\t"
                         "bne 2f\n\t"
                         "mov %[t], %[pl]\n\t"
                         "vldmia %[t], {s24-s25}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vldmia %[t], {s26-s27}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vldmia %[t], {s28-s29}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vldmia %[t], {s30-s31}\n\t"
                         "b 1f\n\t"
                         "2:\n\t"
                         "vldmia %[z], {s24-s31}\n\t"
                         "1:\n\t"
                         "vldmia %[a]!, {s0-s7}\n\t"
                         "vldmia %[b]!, {s8-s15}\n\t"
                         CS_SRC4_2(0, 1, 8, 9) CS_SRC4_2(2, 3, 10, 11)
                         CS_SRC4_2(4, 5, 12, 13) CS_SRC4_2(6, 7, 14, 15)
                         "cmp %[w], %[we]\n\t"
                         "bne 1b\n\t"
                         "mov %[t], %[pl]\n\t"
                         "vstmia %[t], {s24-s25}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vstmia %[t], {s26-s27}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vstmia %[t], {s28-s29}\n\tadd %[t], %[t], %[ps4]\n\t"
                         "vstmia %[t], {s30-s31}"
                         : [a] "+r"(a), [b] "+r"(b), [w] "+r"(wp), [t] "=&r"(t)
                         : [we] "r"(we), [pl] "r"(pl), [ps4] "r"(ps4), [f] "r"(first),
                           [z] "r"(cs_zero8)
                         : "cc", "memory", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8",
                           "s9", "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18",
                           "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28",
                           "s29", "s30", "s31");
#undef CS_SRC4_2
        first = 0;
    }
    o = nb8;
#else
    o = 0;
#endif
    if (o < nb) { /* the outputs past the last 8 */
        pw_src4_pixel(pl, ps, d0, wq, o, nb, first);
        pw_src4_pixel(pl + 1, ps, d1, wq, o, nb, first);
    }
}

void tt_cs_pw_input_s8_g_opt(float *planes, int32_t ps, const float *dy, const int8_t *w,
                             const float *w_scale, int32_t n, int32_t cout, int32_t cin,
                             int32_t c0, int32_t cnt)
{
    float wq[4 * CS_OB];
    int32_t o0, p, i;

#if TT_MVE_F32 /* Helium: four pixels a lane vector, the group's four planes at once */
    tt_cs_pw_input_s8_mve(planes, ps, dy, w, w_scale, n, cout, cin, c0, cnt < 4 ? cnt : 4);
    if (cnt > 4) {
        tt_cs_pw_input_s8_g_opt(planes + 4 * ps, ps, dy, w, w_scale, n, cout, cin, c0 + 4,
                                cnt - 4);
    }
    return;
#elif TT_F32_FMA
    tt_cs_pw_input_s8_fma(planes, ps, dy, w, w_scale, n, cout, cin, c0, cnt);
    return;
#endif
    /* a short group, or outputs too few for pixel pairs through the columns (the one-channel
     * kernel streams the pixels past weights held in registers there): channel by channel */
    if (cnt != 4 || c0 + 4 > cin || cout < CS_PIX_OUTER) {
        for (i = 0; i < cnt; ++i) {
            tt_cs_pw_input_s8_opt(planes + i * ps, dy, w, w_scale, n, cout, cin, c0 + i);
        }
        return;
    }
    for (o0 = 0; o0 < cout; o0 += CS_OB) {
        const int32_t nb = cout - o0 < CS_OB ? cout - o0 : CS_OB;
        pw_column4_s8(wq, &w[o0 * cin + c0], &w_scale[o0], cin, nb);
        for (p = 0; p + 2 <= n; p += 2) {
            pw_src4_pair(planes + p, ps, &dy[p * cout + o0], &dy[(p + 1) * cout + o0], wq, nb,
                         o0 == 0);
        }
        if (p < n) { /* an odd last pixel */
            pw_src4_pixel(planes + p, ps, &dy[p * cout + o0], wq, 0, nb, o0 == 0);
        }
    }
}

void tt_cs_pw_input_f32_opt(float *plane, const float *dy, const float *w, int32_t n,
                            int32_t cout, int32_t cin, int32_t c)
{
    float wc[CS_OB];
    int32_t o0, o;

    for (o0 = 0; o0 < cout; o0 += CS_OB) {
        const int32_t nb = cout - o0 < CS_OB ? cout - o0 : CS_OB;
        for (o = 0; o < nb; ++o) {
            wc[o] = w[(o0 + o) * cin + c];
        }
        pw_src(plane, &dy[o0], wc, n, cout, nb, o0 == 0);
    }
}

/* ---- the sinks: dx[p, idx[j]] += d(p) * w[j]; d = dy * scale when `scaled` ---- */
CS_INLINE float sink_d(const float *dy, int32_t p, float sc, int scaled)
{
    return scaled ? dy[p] * sc : dy[p];
}

/* o[p * dx_c + i] += d(p) * w[i], i < R (1..7) */
CS_INLINE void sink_cols(float *o, const float *dy, cs_w8 w, float sc, int scaled, int32_t n,
                         int32_t dx_c, const int R)
{
    int32_t p;

    for (p = 0; p < n; ++p) {
        cs_axpyn(&o[p * dx_c], sink_d(dy, p, sc, scaled), w, R);
    }
}

CS_INLINE void pw_sink(float *dx, const float *dy, const float *wf, const int8_t *wq, float sc,
                       int scaled, int32_t n, int32_t dx_c, const int32_t *idx, int32_t k)
{
    int32_t j = 0, p;

    if (idx == NULL) {
        /* 16, 8, then the last 1..7 contiguous outputs per pixel, weights in registers */
        for (; j + 16 <= k; j += 16) {
            const cs_w8 w0 = wq != NULL ? cs_load8_s8(&wq[j]) : cs_load8(&wf[j]);
            const cs_w8 w1 = wq != NULL ? cs_load8_s8(&wq[j + 8]) : cs_load8(&wf[j + 8]);
            for (p = 0; p < n; ++p) {
                const float d = sink_d(dy, p, sc, scaled);
                cs_axpy8(&dx[p * dx_c + j], d, w0);
                cs_axpy8(&dx[p * dx_c + j + 8], d, w1);
            }
        }
        for (; j + 8 <= k; j += 8) {
            const cs_w8 w0 = wq != NULL ? cs_load8_s8(&wq[j]) : cs_load8(&wf[j]);
            for (p = 0; p < n; ++p) {
                cs_axpy8(&dx[p * dx_c + j], sink_d(dy, p, sc, scaled), w0);
            }
        }
        if (j < k) { /* the last 1..7 columns: d once per pixel, their weights in registers */
            cs_w8 wt = {{0.0f}};
            int32_t i;
            for (i = 0; i < k - j; ++i) {
                wt.v[i] = wq != NULL ? (float)wq[j + i] : wf[j + i];
            }
            switch (k - j) {
            case 1: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 1); break;
            case 2: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 2); break;
            case 3: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 3); break;
            case 4: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 4); break;
            case 5: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 5); break;
            case 6: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 6); break;
            default: sink_cols(&dx[j], dy, wt, sc, scaled, n, dx_c, 7); break;
            }
            return;
        }
    } else {
        /* scattered outputs: 4 channels per pass, their offsets in registers */
        for (; j + 4 <= k; j += 4) {
            const int32_t i0 = idx[j], i1 = idx[j + 1], i2 = idx[j + 2], i3 = idx[j + 3];
            const float w0 = wq != NULL ? (float)wq[j] : wf[j];
            const float w1 = wq != NULL ? (float)wq[j + 1] : wf[j + 1];
            const float w2 = wq != NULL ? (float)wq[j + 2] : wf[j + 2];
            const float w3 = wq != NULL ? (float)wq[j + 3] : wf[j + 3];
            for (p = 0; p < n; ++p) {
                float *o = &dx[p * dx_c];
                const float d = sink_d(dy, p, sc, scaled);
                o[i0] = cs_mla(o[i0], d, w0);
                o[i1] = cs_mla(o[i1], d, w1);
                o[i2] = cs_mla(o[i2], d, w2);
                o[i3] = cs_mla(o[i3], d, w3);
            }
        }
    }
    for (; j < k; ++j) {
        const int32_t i = tt_channel(idx, j);
        const float w = wq != NULL ? (float)wq[j] : wf[j];
        for (p = 0; p < n; ++p) {
            float *o = &dx[p * dx_c + i];
            *o = cs_mla(*o, sink_d(dy, p, sc, scaled), w);
        }
    }
}

void tt_cs_pw_input_add_s8_opt(float *dx, const float *dy, const int8_t *w,
                               const float *w_scale, int32_t n, int32_t dx_c,
                               const int32_t *idx, int32_t k, int32_t c)
{
#if TT_MVE_F32 /* Helium: four outputs a lane vector */
    if (idx == NULL) {
        tt_cs_pw_input_add_s8_mve(dx, dy, 0, w, w_scale, n, dx_c, k, c, 1);
        return;
    }
#endif
#if TT_F32_FMA /* a fused build: scattered outputs (and contiguous ones without Helium) take
                  * the reference, whose tt_cs_fmac is these sums' fused arithmetic */
    tt_cs_pw_input_add_s8(dx, dy, w, w_scale, n, dx_c, idx, k, c);
    return;
#endif
    pw_sink(dx, dy, NULL, &w[c * k], w_scale[c], 1, n, dx_c, idx, k);
}

void tt_cs_pw_input_add_f32_opt(float *dx, const float *dy, const float *w, int32_t n,
                                int32_t dx_c, const int32_t *idx, int32_t k, int32_t c)
{
    pw_sink(dx, dy, &w[c * k], NULL, 1.0f, 0, n, dx_c, idx, k);
}

/* ---- 4 channels' sinks at once (tt_cs_pw_input_add_s8_g): each dx element loaded and
 * stored once for the four, its four adds in increasing c as four calls make them. Per
 * pixel: the four d = dy * scale, then per 4 outputs one VLDM of dx, one of the 16 weights
 * (converted once per pass into wb: [column block][channel][4]), 16 VMLA and one VSTM. */
#define CS_GK 32 /* weight-row columns per grouped-sink pass (4 x CS_GK floats on the stack) */

#if CS_VFP
#define CS_SINK_BLOCK(o0, o1, o2, o3)                                                         \
    "vmla.f32 " o0 ", %[d0], s8\n\tvmla.f32 " o1 ", %[d0], s9\n\t"                           \
    "vmla.f32 " o2 ", %[d0], s10\n\tvmla.f32 " o3 ", %[d0], s11\n\t"                         \
    "vmla.f32 " o0 ", %[d1], s12\n\tvmla.f32 " o1 ", %[d1], s13\n\t"                         \
    "vmla.f32 " o2 ", %[d1], s14\n\tvmla.f32 " o3 ", %[d1], s15\n\t"                         \
    "vmla.f32 " o0 ", %[d2], s16\n\tvmla.f32 " o1 ", %[d2], s17\n\t"                         \
    "vmla.f32 " o2 ", %[d2], s18\n\tvmla.f32 " o3 ", %[d2], s19\n\t"                         \
    "vmla.f32 " o0 ", %[d3], s20\n\tvmla.f32 " o1 ", %[d3], s21\n\t"                         \
    "vmla.f32 " o2 ", %[d3], s22\n\tvmla.f32 " o3 ", %[d3], s23\n\t"
#endif

/* o[jj] += d_i * w_i[jj] for i = 0..3 in order, jj < 4 * nblk (nblk 1 or 2; wb: 16 weights
 * per block of 4 outputs) */
CS_INLINE void cs_sink4(float *o, const float *wb, int32_t nblk, float d0, float d1, float d2,
                        float d3)
{
#if CS_VFP
    if (nblk == 2) {
        __asm__("vldmia %[o], {s0-s7}\n\t"
                "vldmia %[w]!, {s8-s23}\n\t" CS_SINK_BLOCK("s0", "s1", "s2", "s3")
                "vldmia %[w], {s8-s23}\n\t" CS_SINK_BLOCK("s4", "s5", "s6", "s7")
                "vstmia %[o], {s0-s7}"
                : "+m"(*(float(*)[8])o), [w] "+r"(wb)
                : [o] "r"(o), "m"(*(const float(*)[32])wb), [d0] "t"(d0), [d1] "t"(d1),
                  [d2] "t"(d2), [d3] "t"(d3)
                : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",
                  "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22",
                  "s23");
        return;
    }
    __asm__("vldmia %[o], {s0-s3}\n\t"
            "vldmia %[w], {s8-s23}\n\t" CS_SINK_BLOCK("s0", "s1", "s2", "s3")
            "vstmia %[o], {s0-s3}"
            : "+m"(*(float(*)[4])o)
            : [o] "r"(o), [w] "r"(wb), "m"(*(const float(*)[16])wb), [d0] "t"(d0),
              [d1] "t"(d1), [d2] "t"(d2), [d3] "t"(d3)
            : "s0", "s1", "s2", "s3", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15",
              "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23");
#else
    const float d[4] = {d0, d1, d2, d3};
    int32_t i, jj;
    for (jj = 0; jj < 4 * nblk; ++jj) {
        float v = o[jj];
        for (i = 0; i < 4; ++i) {
            v = v + d[i] * wb[16 * (jj / 4) + 4 * i + jj % 4];
        }
        o[jj] = v;
    }
#endif
}

void tt_cs_pw_input_add_s8_g_opt(float *dx, const float *dy, int32_t ds, const int8_t *w,
                                 const float *w_scale, int32_t n, int32_t dx_c,
                                 const int32_t *idx, int32_t k, int32_t c0, int32_t cnt)
{
    float wb[4 * CS_GK];
    const int8_t *const row = &w[c0 * k];
    int32_t i, j0, j, p;

#if TT_MVE_F32 /* Helium: four outputs a lane vector, each dx block once for four channels */
    if (idx == NULL) {
        for (i = 0; i < cnt; i += 4) {
            tt_cs_pw_input_add_s8_mve(dx, dy + i * ds, ds, w, w_scale, n, dx_c, k, c0 + i,
                                      cnt - i < 4 ? cnt - i : 4);
        }
        return;
    }
#endif
#if TT_F32_FMA
    tt_cs_pw_input_add_s8_g(dx, dy, ds, w, w_scale, n, dx_c, idx, k, c0, cnt);
    return;
#endif
    if (cnt != 4 || idx != NULL) { /* scattered or a last, partial group: a channel at a time */
        for (i = 0; i < cnt; ++i) {
            tt_cs_pw_input_add_s8_opt(dx, dy + i * ds, w, w_scale, n, dx_c, idx, k, c0 + i);
        }
        return;
    }
    {
        const float s0 = w_scale[c0], s1 = w_scale[c0 + 1], s2 = w_scale[c0 + 2];
        const float s3 = w_scale[c0 + 3];
        for (j0 = 0; j0 < k; j0 += CS_GK) {
            const int32_t nb = k - j0 < CS_GK ? k - j0 : CS_GK, n4 = nb & ~3;
            for (j = 0; j < n4; j += 4) {
                for (i = 0; i < 4; ++i) { /* 4 weights per load */
                    float *const q = &wb[4 * j + 4 * i];
                    uint32_t v;
                    memcpy(&v, &row[i * k + j0 + j], sizeof v);
                    q[0] = (float)(int8_t)v;
                    q[1] = (float)(int8_t)(v >> 8);
                    q[2] = (float)(int8_t)(v >> 16);
                    q[3] = (float)(int8_t)(v >> 24);
                }
            }
            for (p = 0; p < n; ++p) {
                const float d0 = dy[p] * s0, d1 = dy[ds + p] * s1;
                const float d2 = dy[2 * ds + p] * s2, d3 = dy[3 * ds + p] * s3;
                float *const o = &dx[p * dx_c + j0];
                for (j = 0; j + 8 <= n4; j += 8) {
                    cs_sink4(&o[j], &wb[4 * j], 2, d0, d1, d2, d3);
                }
                if (j < n4) {
                    cs_sink4(&o[j], &wb[4 * j], 1, d0, d1, d2, d3);
                    j += 4;
                }
                for (; j < nb; ++j) { /* the last columns, in channel order */
                    float v = o[j];
                    v = cs_mla(v, d0, (float)row[j0 + j]);
                    v = cs_mla(v, d1, (float)row[k + j0 + j]);
                    v = cs_mla(v, d2, (float)row[2 * k + j0 + j]);
                    o[j] = cs_mla(v, d3, (float)row[3 * k + j0 + j]);
                }
            }
        }
    }
}

#define CS_MASTER_ROW 64 /* --rounding master: weight row values converted per pass */

/* the same sink reading the 16-bit master 256 w + s (tt_q8_master.c): its row as floats,
 * exact (16 significant bits), CS_MASTER_ROW at a time; each dx element still gets d * w */
void tt_cs_pw_input_add_s8_master_opt(float *dx, const float *dy, const int8_t *w,
                                      const uint8_t *shadow, const float *w_scale, int32_t n,
                                      int32_t dx_c, const int32_t *idx, int32_t k, int32_t c)
{
    float row[CS_MASTER_ROW];
    int32_t j0, j;

    for (j0 = 0; j0 < k; j0 += CS_MASTER_ROW) {
        const int32_t m = k - j0 < CS_MASTER_ROW ? k - j0 : CS_MASTER_ROW;
        for (j = 0; j < m; ++j) {
            const int32_t i = c * k + j0 + j;
            row[j] = (float)((int32_t)w[i] * 256 + (int32_t)shadow[i]) * (1.0f / 256.0f);
        }
        pw_sink(idx != NULL ? dx : dx + j0, dy, row, NULL, w_scale[c], 1, n, dx_c,
                idx != NULL ? idx + j0 : NULL, m);
    }
}

/* ---- 1x1 weight row c: acc[j] = sum over p of dy[p] * x[p, j], p ascending per j ----
 * (the reference's order for each element: p is the outer loop here, j blocks inner) */
static void pw_wgrad_s8(float *acc, const float *dy, const int8_t *x, int32_t x_zp, int32_t n,
                        int32_t k, int32_t nb)
{
    const int32_t nz = -x_zp;
    int32_t p, j = 0;

#if TT_MVE_F32 /* Helium: four columns a lane vector, the same sums */
    tt_cs_pw_wgrad_s8_mve(acc, dy, x, x_zp, n, k, nb);
    return;
#elif TT_F32_FMA /* a fused build elsewhere: the same sums in C */
    tt_cs_pw_wgrad_s8_fma(acc, 0, dy, 0, x, x_zp, n, k, nb, 1);
    return;
#endif
    for (; j + 16 <= nb; j += 16) {
        cs_w8 a = {{0.0f}}, b = {{0.0f}};
        for (p = 0; p < n; ++p) {
            const int8_t *xp = &x[p * k + j];
            const float d = dy[p];
            cs_acc4_s8(&a.v[0], &a.v[1], &a.v[2], &a.v[3], d, xp, nz);
            cs_acc4_s8(&a.v[4], &a.v[5], &a.v[6], &a.v[7], d, xp + 4, nz);
            cs_acc4_s8(&b.v[0], &b.v[1], &b.v[2], &b.v[3], d, xp + 8, nz);
            cs_acc4_s8(&b.v[4], &b.v[5], &b.v[6], &b.v[7], d, xp + 12, nz);
        }
        memcpy(&acc[j], a.v, sizeof a.v);
        memcpy(&acc[j + 8], b.v, sizeof b.v);
    }
    for (; j + 8 <= nb; j += 8) {
        cs_w8 a = {{0.0f}};
        for (p = 0; p < n; ++p) {
            const int8_t *xp = &x[p * k + j];
            const float d = dy[p];
            cs_acc4_s8(&a.v[0], &a.v[1], &a.v[2], &a.v[3], d, xp, nz);
            cs_acc4_s8(&a.v[4], &a.v[5], &a.v[6], &a.v[7], d, xp + 4, nz);
        }
        memcpy(&acc[j], a.v, sizeof a.v);
    }
    for (; j + 4 <= nb; j += 4) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (p = 0; p < n; ++p) {
            cs_acc4_s8(&a0, &a1, &a2, &a3, dy[p], &x[p * k + j], nz);
        }
        acc[j] = a0, acc[j + 1] = a1, acc[j + 2] = a2, acc[j + 3] = a3;
    }
    for (; j < nb; ++j) {
        float a = 0.0f;
        for (p = 0; p < n; ++p) {
            a = cs_mla(a, dy[p], (float)((int32_t)x[p * k + j] - x_zp));
        }
        acc[j] = a;
    }
}

#define CS_JB 32  /* weight-row elements per 4-row gradient pass (4 CS_JB sums on the stack) */
#define CS_JB1 64 /* the same for one row: fewer passes, each with its calls and setup */

/* row[j] = tt_sr_s8(row[j], acc[j] * x_scale * s, key, idx0 + j) for j < n: the same bits,
 * with the hash's first product stepped instead of multiplied, and on the FPU the uniform's
 * (h >> 8) * 2^-24 one fixed-point VCVT (exact: 24 bits).
 * Pairs in assembly (CS_SR_PAIRS): two hashes interleaved, one VLDM / VMOV per pair, and the
 * weights as two 16-bit lanes, so the subtraction, the clamp to [-128, 127] (SSAT16) and the
 * raise of -128 to -127 (SSUB16 sets GE where v >= -127, SEL keeps v there) cover both. The
 * floor: VCVTM on FPv5; on FPv4 VCVTR with FPSCR's rounding mode set to minus infinity around
 * the pair (nothing else runs in that mode), 4 instructions where truncate-and-step takes 9. */
#if CS_VFP && defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__)
#define CS_SR_PAIRS 1
#define CS_SR_PAIR_BODY(FLOOR)                                                              \
    "1:\n\t"                                                                                \
    "vldmia %[a]!, {s14-s15}\n\t"                                                           \
    "eor %[h0], %[key], %[hm]\n\tadd %[hm], %[hm], %[c1]\n\t"                               \
    "eor %[h1], %[key], %[hm]\n\tadd %[hm], %[hm], %[c1]\n\t"                               \
    "eor %[h0], %[h0], %[h0], lsr #16\n\teor %[h1], %[h1], %[h1], lsr #16\n\t"               \
    "mul %[h0], %[h0], %[c1]\n\tmul %[h1], %[h1], %[c1]\n\t"                                 \
    "eor %[h0], %[h0], %[h0], lsr #13\n\teor %[h1], %[h1], %[h1], lsr #13\n\t"               \
    "mul %[h0], %[h0], %[c2]\n\tmul %[h1], %[h1], %[c2]\n\t"                                 \
    "eor %[h0], %[h0], %[h0], lsr #16\n\teor %[h1], %[h1], %[h1], lsr #16\n\t"               \
    "lsr %[h0], %[h0], #8\n\tlsr %[h1], %[h1], #8\n\t"                                       \
    "vmov s12, s13, %[h0], %[h1]\n\t"                                                       \
    "vcvt.f32.u32 s12, s12, #24\n\tvcvt.f32.u32 s13, s13, #24\n\t"                           \
    "vmul.f32 s14, s14, %[xs]\n\tvmul.f32 s15, s15, %[xs]\n\t"                               \
    "vmul.f32 s14, s14, %[s]\n\tvmul.f32 s15, s15, %[s]\n\t"                                 \
    "vadd.f32 s14, s14, s12\n\tvadd.f32 s15, s15, s13\n\t" FLOOR                             \
    "vmov %[h0], %[h1], s14, s15\n\t"                                                       \
    "ssat %[h0], #10, %[h0]\n\tssat %[h1], #10, %[h1]\n\t"                                   \
    "pkhbt %[h0], %[h0], %[h1], lsl #16\n\t"                                                \
    "ldrh %[h1], [%[r]]\n\torr %[h1], %[h1], %[h1], lsl #8\n\tsxtb16 %[h1], %[h1]\n\t"       \
    "ssub16 %[h1], %[h1], %[h0]\n\tssat16 %[h1], #8, %[h1]\n\t"                               \
    "ssub16 %[h0], %[h1], %[m]\n\tsel %[h1], %[h1], %[m]\n\t"                                 \
    "uxtb16 %[h1], %[h1]\n\torr %[h1], %[h1], %[h1], lsr #8\n\t"                              \
    "strh %[h1], [%[r]], #2\n\t"                                                            \
    "cmp %[r], %[e]\n\tbne 1b"
#define CS_SR_PAIR_OUT                                                                      \
    [h0] "=&r"(h0), [h1] "=&r"(h1), [hm] "+r"(hm), [r] "+r"(row), [a] "+r"(acc)
#define CS_SR_PAIR_IN                                                                       \
    [key] "r"(key), [c1] "r"(0x85EBCA6Bu), [c2] "r"(0xC2B2AE35u), [e] "r"(end),             \
        [m] "r"(0xFF81FF81u), [xs] "t"(x_scale), [s] "t"(s)
#define CS_SR_PAIR_CLOBBER "s12", "s13", "s14", "s15", "cc", "memory"
#endif

static void cs_sr_row(int8_t *row, const float *acc, float x_scale, float s, uint32_t key,
                      uint32_t idx0, int32_t n)
{
#if TT_MVE_F32 /* Helium: four weights a lane vector, the same bytes */
    tt_cs_sr_row_s8_mve(row, acc, x_scale, s, key, idx0, n);
#elif CS_VFP && defined(__ARM_FEATURE_DSP)
    uint32_t hm = idx0 * 0x85EBCA6Bu;
    int32_t j = 0;

#if defined(CS_SR_PAIRS)
    if (n >= 2) {
        const int8_t *const end = row + (n & ~1);
        uint32_t h0, h1;
#if defined(TT_SR_VCVTM)
        __asm__ volatile(CS_SR_PAIR_BODY("vcvtm.s32.f32 s14, s14\n\tvcvtm.s32.f32 s15, s15\n\t")
                         : CS_SR_PAIR_OUT
                         : CS_SR_PAIR_IN
                         : CS_SR_PAIR_CLOBBER);
#else
        uint32_t fn, fm;
        /* FPSCR read, its RMode set to RM (toward minus infinity) in a copy, and restored,
         * all inside the block: flags the compiler left in FPSCR come back as they were */
        __asm__ volatile("vmrs %[fn], fpscr\n\t"
                         "bic %[fm], %[fn], #0xC00000\n\t"
                         "orr %[fm], %[fm], #0x800000\n"
                         CS_SR_PAIR_BODY("vmsr fpscr, %[fm]\n\tvcvtr.s32.f32 s14, s14\n\t"
                                         "vcvtr.s32.f32 s15, s15\n\tvmsr fpscr, %[fn]\n\t")
                         : CS_SR_PAIR_OUT, [fn] "=&r"(fn), [fm] "=&r"(fm)
                         : CS_SR_PAIR_IN
                         : CS_SR_PAIR_CLOBBER);
#endif
        j = n & ~1;
        row -= j, acc -= j; /* the C loop below indexes from the row's start */
    }
#endif
    for (; j < n; ++j, hm += 0x85EBCA6Bu) {
        uint32_t h = key ^ hm;
        float u;
        int32_t v;
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        __asm__("vmov %0, %1\n\tvcvt.f32.u32 %0, %0, #24" : "=t"(u) : "r"(h >> 8));
        v = (int32_t)row[j] - tt_sr_floor_sat(acc[j] * x_scale * s + u);
        /* clamp to [-127, 127]: SSAT to int8, then -128 -> -127 */
        __asm__("ssat %0, #8, %0\n\tcmn %0, #128\n\tit eq\n\tmvneq %0, #126" : "+r"(v) : : "cc");
        row[j] = (int8_t)v;
    }
#else
    int32_t j;

    for (j = 0; j < n; ++j) {
        row[j] = tt_sr_s8(row[j], acc[j] * x_scale * s, key, idx0 + (uint32_t)j);
    }
#endif
}

/* row c's elements j0 .. j0 + nb - 1 updated from their gradients acc (x's real scale not yet
 * applied), as tt_cs_pw_weight_sgd_s8 does */
static void pw_update_s8(int8_t *w, uint8_t *shadow, const float *acc, float x_scale,
                         int32_t j0, int32_t nb, int32_t k, int32_t w_cin, const int32_t *idx,
                         int32_t c, const float *step, const tt_q8_update *u)
{
    const float s = tt_q8_lr_step(step, c, u); /* hoisted: one multiply per row */
    int32_t j;

    if (u->mode == TT_Q8_STOCHASTIC) { /* the rounding inline, its key hoisted */
        const uint32_t key = tt_sr_key(u->salt, u->step);
        if (idx == NULL) { /* the row's elements j0.. in order (packed or whole) */
            int8_t *const row = &w[(u->packed ? c * k : c * w_cin) + j0];
            cs_sr_row(row, acc, x_scale, s, key, (uint32_t)(c * w_cin + j0), nb);
            return;
        }
        for (j = 0; j < nb; ++j) {
            const int32_t ci = tt_channel(idx, j0 + j);
            int8_t *const p = &w[u->packed ? c * k + j0 + j : c * w_cin + ci];
            *p = tt_sr_s8(*p, acc[j] * x_scale * s, key, (uint32_t)(c * w_cin + ci));
        }
        return;
    }
    for (j = 0; j < nb; ++j) {
        const int32_t si = c * k + j0 + j;
        const int32_t wi = c * w_cin + tt_channel(idx, j0 + j);
        const int32_t at = u->packed ? si : wi;
        w[at] = tt_q8_step_s8(w[at], shadow != NULL ? &shadow[si] : NULL, acc[j] * x_scale * s,
                              u, (uint32_t)wi);
    }
}

/* ---- a fully connected int8 layer's weight update (tt_dense_weight_sgd_s8): row o's delta
 * is (dy[o] * xs[j]) * step, xs[j] = (x[j] - zp) * x_scale, which is cs_sr_row's
 * (acc[j] * x_scale) * s with xs as acc and dy[o] as the scale (a product's operands commute
 * bit for bit). Stochastic rounding of whole or packed rows runs so; a shadow or an index
 * takes the reference (the heads sparse updates train are stochastic and whole). ---- */
void tt_dense_weight_sgd_s8_opt(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                float x_scale, int32_t x_zp, int32_t k, int32_t out,
                                int32_t w_in, const int32_t *idx, const float *step,
                                const tt_q8_update *u)
{
    float xs[CS_JB1];
    uint32_t key;
    int32_t j0, j, o;

    if (u->mode != TT_Q8_STOCHASTIC || idx != NULL) {
        tt_dense_weight_sgd_s8(w, shadow, dy, x, x_scale, x_zp, k, out, w_in, idx, step, u);
        return;
    }
    key = tt_sr_key(u->salt, u->step);
    for (j0 = 0; j0 < k; j0 += CS_JB1) {
        const int32_t nb = k - j0 < CS_JB1 ? k - j0 : CS_JB1;
        for (j = 0; j < nb; ++j) {
            xs[j] = (float)((int32_t)x[j0 + j] - x_zp) * x_scale;
        }
        for (o = 0; o < out; ++o) {
            cs_sr_row(&w[(u->packed ? o * k : o * w_in) + j0], xs, dy[o],
                      tt_q8_lr_step(step, o, u), key, (uint32_t)(o * w_in + j0), nb);
        }
    }
}

void tt_cs_pw_weight_sgd_s8_opt(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                float x_scale, int32_t x_zp, int32_t n, int32_t k, int32_t w_cin,
                                const int32_t *idx, int32_t c, const float *step,
                                const tt_q8_update *u)
{
    float acc[CS_JB1];
    int32_t j0;

    for (j0 = 0; j0 < k; j0 += CS_JB1) {
        const int32_t nb = k - j0 < CS_JB1 ? k - j0 : CS_JB1;
        pw_wgrad_s8(acc, dy, &x[j0], x_zp, n, k, nb);
        pw_update_s8(w, shadow, acc, x_scale, j0, nb, k, w_cin, idx, c, step, u);
    }
}

/* ---- 4 rows at once (tt_cs_pw_weight_sgd_s8_g): each x element converted once for the
 * four channels whose planes the region kept, 16 VMLA per 4 converted elements instead of 4.
 * acc[i * CS_JB + j] = sum over p of dy_i[p] * x[p, j], p ascending, as pw_wgrad_s8. The
 * pixel loop's 12 core registers cannot be allocated at -O0 (r7 is the frame pointer there):
 * that build runs the portable loop, with the same sums. */
#if CS_VFP && defined(__OPTIMIZE__)
#define CS_G4_ASM 1
/* channel i's 4 sums s(A0..A3) += s(D) * x in s(X0..X3) */
#define CS_G4_ROW(D, X0, X1, X2, X3, A0, A1, A2, A3)                                         \
    "vmla.f32 s" #A0 ", s" #D ", s" #X0 "\n\tvmla.f32 s" #A1 ", s" #D ", s" #X1 "\n\t"           \
    "vmla.f32 s" #A2 ", s" #D ", s" #X2 "\n\tvmla.f32 s" #A3 ", s" #D ", s" #X3 "\n\t"
/* the 4 bytes of word V, each + nz, into s(S0..S3) (not yet converted to float) */
#define CS_G4_XCVT(V, S0, S1, S2, S3)                                                        \
    "sxtab %[t0], %[nz], %[" V "]\n\tsxtab %[t1], %[nz], %[" V "], ror #8\n\t"                 \
    "vmov s" #S0 ", s" #S1 ", %[t0], %[t1]\n\t"                                               \
    "sxtab %[t0], %[nz], %[" V "], ror #16\n\tsxtab %[t1], %[nz], %[" V "], ror #24\n\t"       \
    "vmov s" #S2 ", s" #S3 ", %[t0], %[t1]\n\t"
/* one pixel: 4 dy (s4-s7, each plane's pointer stepped), 4 x converted (s0-s3), 16 VMLA into
 * s16-s31 (channel i, column j in s(16 + 4i + j)) */
#define CS_G4_PIXEL                                                                         \
    "ldr %[v], [%[xp]]\n\tadd %[xp], %[xp], %[k]\n\t"                                       \
    "vldmia %[d0]!, {s4}\n\tvldmia %[d1]!, {s5}\n\tvldmia %[d2]!, {s6}\n\tvldmia %[d3]!, {s7}\n\t" \
    CS_G4_XCVT("v", 0, 1, 2, 3)                                                             \
    "vcvt.f32.s32 s0, s0\n\tvcvt.f32.s32 s1, s1\n\tvcvt.f32.s32 s2, s2\n\tvcvt.f32.s32 s3, s3\n\t" \
    CS_G4_ROW(4, 0, 1, 2, 3, 16, 17, 18, 19) CS_G4_ROW(5, 0, 1, 2, 3, 20, 21, 22, 23)         \
    CS_G4_ROW(6, 0, 1, 2, 3, 24, 25, 26, 27) CS_G4_ROW(7, 0, 1, 2, 3, 28, 29, 30, 31)
/* two pixels: both pixels' dy of each plane in one VLDM (s8-s15: plane i's in s(8 + 2i),
 * s(9 + 2i)), x converted into s0-s3 and s4-s7, then the first pixel's 16 VMLA and the
 * second's: 61 instructions per 32 MACs where two CS_G4_PIXEL take 68 */
#define CS_G4_PAIR                                                                          \
    "ldr %[v], [%[xp]]\n\tldr %[u], [%[xp], %[k]]\n\tadd %[xp], %[xp], %[k], lsl #1\n\t"      \
    "vldmia %[d0]!, {s8-s9}\n\tvldmia %[d1]!, {s10-s11}\n\t"                                 \
    "vldmia %[d2]!, {s12-s13}\n\tvldmia %[d3]!, {s14-s15}\n\t"                               \
    CS_G4_XCVT("v", 0, 1, 2, 3) CS_G4_XCVT("u", 4, 5, 6, 7)                                   \
    "vcvt.f32.s32 s0, s0\n\tvcvt.f32.s32 s1, s1\n\tvcvt.f32.s32 s2, s2\n\tvcvt.f32.s32 s3, s3\n\t" \
    "vcvt.f32.s32 s4, s4\n\tvcvt.f32.s32 s5, s5\n\tvcvt.f32.s32 s6, s6\n\tvcvt.f32.s32 s7, s7\n\t" \
    CS_G4_ROW(8, 0, 1, 2, 3, 16, 17, 18, 19) CS_G4_ROW(10, 0, 1, 2, 3, 20, 21, 22, 23)        \
    CS_G4_ROW(12, 0, 1, 2, 3, 24, 25, 26, 27) CS_G4_ROW(14, 0, 1, 2, 3, 28, 29, 30, 31)       \
    CS_G4_ROW(9, 4, 5, 6, 7, 16, 17, 18, 19) CS_G4_ROW(11, 4, 5, 6, 7, 20, 21, 22, 23)        \
    CS_G4_ROW(13, 4, 5, 6, 7, 24, 25, 26, 27) CS_G4_ROW(15, 4, 5, 6, 7, 28, 29, 30, 31)
#endif

static void pw_wgrad4_s8(float *acc, const float *dy, int32_t ds, const int8_t *x, int32_t x_zp,
                         int32_t n, int32_t k, int32_t nb)
{
    const int32_t nz = -x_zp;
    int32_t i, j = 0, p;

#if TT_MVE_F32 /* Helium: four columns a lane vector, each x vector converted once for 4 rows */
    tt_cs_pw_wgrad4_s8_mve(acc, CS_JB, dy, ds, x, x_zp, n, k, nb);
    return;
#elif TT_F32_FMA
    tt_cs_pw_wgrad_s8_fma(acc, CS_JB, dy, ds, x, x_zp, n, k, nb, 4);
    return;
#endif
#if defined(CS_G4_ASM)
    for (; j + 4 <= nb && n > 0; j += 4) {
        const float *d0 = dy, *d1 = dy + ds, *d2 = dy + 2 * ds, *d3 = dy + 3 * ds;
        const int8_t *xp = &x[j];
        int32_t cnt = n;
        float *const ap = &acc[j];
        uint32_t v, u, t0, t1;
        /* the whole pixel loop in one block: its 16 accumulators never leave s16-s31; pixel
         * pairs while two are left (cnt counts down from n - 2), then a last odd one */
        __asm__ volatile("movs %[t0], #0\n\t" /* +0.0f in every accumulator */
                         "vmov s16, s17, %[t0], %[t0]\n\tvmov s18, s19, %[t0], %[t0]\n\t"
                         "vmov s20, s21, %[t0], %[t0]\n\tvmov s22, s23, %[t0], %[t0]\n\t"
                         "vmov s24, s25, %[t0], %[t0]\n\tvmov s26, s27, %[t0], %[t0]\n\t"
                         "vmov s28, s29, %[t0], %[t0]\n\tvmov s30, s31, %[t0], %[t0]\n\t"
                         "subs %[cnt], %[cnt], #2\n\t"
                         "blt 2f\n"
                         "1:\n\t" CS_G4_PAIR
                         "subs %[cnt], %[cnt], #2\n\t"
                         "bge 1b\n"
                         "2:\n\t"
                         "cmn %[cnt], #1\n\t" /* n odd: one pixel left */
                         "bne 3f\n\t" CS_G4_PIXEL
                         "3:\n\t"
                         "ldr %[t1], %[a]\n\t" /* (from memory: 13 registers at -O1) */
                         "vstmia %[t1], {s16-s19}\n\t"
                         "add %[t0], %[t1], %[r1]\n\tvstmia %[t0], {s20-s23}\n\t"
                         "add %[t0], %[t1], %[r2]\n\tvstmia %[t0], {s24-s27}\n\t"
                         "add %[t0], %[t1], %[r3]\n\tvstmia %[t0], {s28-s31}"
                         : [v] "=&r"(v), [u] "=&r"(u), [t0] "=&r"(t0), [t1] "=&r"(t1),
                           [xp] "+r"(xp), [d0] "+r"(d0), [d1] "+r"(d1), [d2] "+r"(d2),
                           [d3] "+r"(d3), [cnt] "+r"(cnt)
                         : [k] "r"(k), [nz] "r"(nz), [a] "m"(ap),
                           [r1] "I"(4 * CS_JB), [r2] "I"(8 * CS_JB), [r3] "I"(12 * CS_JB)
                         : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10",
                           "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18",
                           "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28",
                           "s29", "s30", "s31", "cc", "memory");
    }
#endif
    for (; j < nb; ++j) { /* the columns left (and the portable path): a channel at a time */
        for (i = 0; i < 4; ++i) {
            const float *d = dy + i * ds;
            float a = 0.0f;
            for (p = 0; p < n; ++p) {
                a = cs_mla(a, d[p], (float)((int32_t)x[p * k + j] + nz));
            }
            acc[i * CS_JB + j] = a;
        }
    }
}

void tt_cs_pw_weight_sgd_s8_g_opt(int8_t *w, uint8_t *shadow, const float *dy, int32_t ds,
                                  const int8_t *x, float x_scale, int32_t x_zp, int32_t n,
                                  int32_t k, int32_t w_cin, const int32_t *idx, int32_t c0,
                                  int32_t cnt, const float *step, const tt_q8_update *u)
{
    float acc[4 * CS_JB];
    int32_t i, j0;

    if (cnt != 4) { /* a last, partial group: a row at a time */
        for (i = 0; i < cnt; ++i) {
            tt_cs_pw_weight_sgd_s8_opt(w, shadow, dy + i * ds, x, x_scale, x_zp, n, k, w_cin,
                                       idx, c0 + i, step, u);
        }
        return;
    }
    for (j0 = 0; j0 < k; j0 += CS_JB) {
        const int32_t nb = k - j0 < CS_JB ? k - j0 : CS_JB;
        pw_wgrad4_s8(acc, dy, ds, &x[j0], x_zp, n, k, nb);
        for (i = 0; i < 4; ++i) {
            pw_update_s8(w, shadow, &acc[i * CS_JB], x_scale, j0, nb, k, w_cin, idx, c0 + i,
                         step, u);
        }
    }
}

#if CS_VFP
/* acc[j] = sum over p < n of dy[p] * x[p * k + j], j < W (16, 8, 4, 3, 2, 1), p ascending, from
 * +0 as the reference: the W sums stay in s16.. for the whole pixel loop, two pixels per
 * iteration (one VLDM of their dy), 8 x per VLDM; the zeros come in and the sums go out by one
 * VLDM / VSTM. 41 instructions per 32 MACs at W = 16, against 22 per 16 a pixel at a time. */
#define CS_WG_MLA8(D, A0, A1, A2, A3, A4, A5, A6, A7)                                        \
    "vmla.f32 s" #A0 ", s" D ", s0\n\tvmla.f32 s" #A1 ", s" D ", s1\n\t"                     \
    "vmla.f32 s" #A2 ", s" D ", s2\n\tvmla.f32 s" #A3 ", s" D ", s3\n\t"                     \
    "vmla.f32 s" #A4 ", s" D ", s4\n\tvmla.f32 s" #A5 ", s" D ", s5\n\t"                     \
    "vmla.f32 s" #A6 ", s" D ", s6\n\tvmla.f32 s" #A7 ", s" D ", s7\n\t"
#define CS_WG_MLA4(D)                                                                       \
    "vmla.f32 s16, s" D ", s0\n\tvmla.f32 s17, s" D ", s1\n\t"                               \
    "vmla.f32 s18, s" D ", s2\n\tvmla.f32 s19, s" D ", s3\n\t"
/* one pixel's W columns with dy in s(D); x steps to the next pixel's */
#define CS_WG_PIX16(D)                                                                      \
    "vldmia %[x]!, {s0-s7}\n\t" CS_WG_MLA8(D, 16, 17, 18, 19, 20, 21, 22, 23)                \
    "vldmia %[x], {s0-s7}\n\t" CS_WG_MLA8(D, 24, 25, 26, 27, 28, 29, 30, 31)                 \
    "add %[x], %[x], %[st]\n\t"
#define CS_WG_PIX8(D)                                                                       \
    "vldmia %[x], {s0-s7}\n\t" CS_WG_MLA8(D, 16, 17, 18, 19, 20, 21, 22, 23)                 \
    "add %[x], %[x], %[st]\n\t"
#define CS_WG_PIX4(D) "vldmia %[x], {s0-s3}\n\t" CS_WG_MLA4(D) "add %[x], %[x], %[st]\n\t"
#define CS_WG_PIX3(D)                                                                       \
    "vldmia %[x], {s0-s2}\n\tvmla.f32 s16, s" D ", s0\n\tvmla.f32 s17, s" D ", s1\n\t"        \
    "vmla.f32 s18, s" D ", s2\n\tadd %[x], %[x], %[st]\n\t"
#define CS_WG_PIX2(D)                                                                       \
    "vldmia %[x], {s0-s1}\n\tvmla.f32 s16, s" D ", s0\n\tvmla.f32 s17, s" D ", s1\n\t"        \
    "add %[x], %[x], %[st]\n\t"
#define CS_WG_PIX1(D) "vldmia %[x], {s0}\n\tvmla.f32 s16, s" D ", s0\n\tadd %[x], %[x], %[st]\n\t"
#define CS_WG_LOOP(W, PIX, REGS)                                                            \
    static void cs_wgrad##W(float *acc, const float *dy, const float *x, int32_t n,         \
                            int32_t k)                                                      \
    {                                                                                       \
        const float *const de = dy + (n & ~1);                                              \
        const int32_t st = 4 * k - (W == 16 ? 32 : 0); /* bytes to the next pixel's x */    \
        __asm__ volatile("vldmia %[z], {" REGS "}\n\t"                                      \
                         "cmp %[d], %[de]\n\t"                                              \
                         "beq 2f\n"                                                         \
                         "1:\n\t"                                                           \
                         "vldmia %[d]!, {s8-s9}\n\t" PIX("8") PIX("9")                      \
                         "cmp %[d], %[de]\n\t"                                              \
                         "bne 1b\n"                                                         \
                         "2:\n\t"                                                           \
                         "tst %[n], #1\n\t"                                                 \
                         "beq 3f\n\t"                                                       \
                         "vldmia %[d]!, {s8}\n\t" PIX("8")                                  \
                         "3:\n\t"                                                           \
                         "vstmia %[a], {" REGS "}"                                          \
                         : [d] "+r"(dy), [x] "+r"(x)                                        \
                         : [de] "r"(de), [st] "r"(st), [n] "r"(n), [a] "r"(acc),            \
                           [z] "r"(cs_zero16)                                               \
                         : "cc", "memory", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",   \
                           "s8", "s9", "s16", "s17", "s18", "s19", "s20", "s21", "s22",     \
                           "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31");  \
    }
static const float cs_zero16[16] = {0.0f}; /* VLDM */
CS_WG_LOOP(16, CS_WG_PIX16, "s16-s31")
CS_WG_LOOP(8, CS_WG_PIX8, "s16-s23")
CS_WG_LOOP(4, CS_WG_PIX4, "s16-s19")
CS_WG_LOOP(3, CS_WG_PIX3, "s16-s18")
CS_WG_LOOP(2, CS_WG_PIX2, "s16-s17")
CS_WG_LOOP(1, CS_WG_PIX1, "s16")
#endif

static void pw_wgrad_f32(float *acc, const float *dy, const float *x, int32_t n, int32_t k,
                         int32_t nb)
{
    int32_t p, j = 0;

#if TT_MVE_F32 /* Helium: four columns a lane vector, the same sums */
    tt_cs_pw_wgrad_f32_mve(acc, dy, x, n, k, nb);
    return;
#elif TT_F32_FMA
    tt_cs_pw_wgrad_f32_fma(acc, dy, x, n, k, nb);
    return;
#endif
#if CS_VFP
    for (; j + 16 <= nb; j += 16) {
        cs_wgrad16(&acc[j], dy, &x[j], n, k);
    }
    if (j + 8 <= nb) {
        cs_wgrad8(&acc[j], dy, &x[j], n, k);
        j += 8;
    }
    if (j + 4 <= nb) {
        cs_wgrad4(&acc[j], dy, &x[j], n, k);
        j += 4;
    }
    switch (nb - j) { /* the last 1..3 columns */
    case 3:
        cs_wgrad3(&acc[j], dy, &x[j], n, k);
        return;
    case 2:
        cs_wgrad2(&acc[j], dy, &x[j], n, k);
        return;
    case 1:
        cs_wgrad1(&acc[j], dy, &x[j], n, k);
        return;
    default:
        break;
    }
#else
    for (; j + 8 <= nb; j += 8) {
        cs_w8 a = {{0.0f}};
        for (p = 0; p < n; ++p) {
            cs_acc8(&a, dy[p], &x[p * k + j]);
        }
        memcpy(&acc[j], a.v, sizeof a.v);
    }
#endif
    for (; j < nb; ++j) {
        float a = 0.0f;
        for (p = 0; p < n; ++p) {
            a = cs_mla(a, dy[p], x[p * k + j]);
        }
        acc[j] = a;
    }
}

void tt_cs_x_float_s8_opt(float *xf, const int8_t *x, int32_t n, int32_t x_zp)
{
    const int32_t nz = -x_zp;
    int32_t i = 0;

    for (; i + 4 <= n; i += 4) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        cs_acc4_s8(&a0, &a1, &a2, &a3, 1.0f, &x[i], nz); /* 0 + 1 * v: v exactly */
        xf[i] = a0, xf[i + 1] = a1, xf[i + 2] = a2, xf[i + 3] = a3;
    }
    for (; i < n; ++i) {
        xf[i] = (float)((int32_t)x[i] - x_zp);
    }
}

/* x already converted: 8 elements per VLDM and 8 VMLA per pixel, no per-use conversion */
void tt_cs_pw_weight_sgd_s8f_opt(int8_t *w, uint8_t *shadow, const float *dy, const float *xf,
                                 float x_scale, int32_t n, int32_t k, int32_t w_cin,
                                 const int32_t *idx, int32_t c, const float *step,
                                 const tt_q8_update *u)
{
    float acc[CS_JB1];
    int32_t j0;

    for (j0 = 0; j0 < k; j0 += CS_JB1) {
        const int32_t nb = k - j0 < CS_JB1 ? k - j0 : CS_JB1;
        pw_wgrad_f32(acc, dy, &xf[j0], n, k, nb);
        pw_update_s8(w, shadow, acc, x_scale, j0, nb, k, w_cin, idx, c, step, u);
    }
}

void tt_cs_pw_weight_sgd_f32_opt(float *w, float *m, const float *dy, const float *x, int32_t n,
                                 int32_t k, int32_t w_cin, const int32_t *idx, int32_t c,
                                 float lr, float momentum, float wd)
{
    float acc[CS_JB1];
    int32_t j0, j;

    for (j0 = 0; j0 < k; j0 += CS_JB1) {
        const int32_t nb = k - j0 < CS_JB1 ? k - j0 : CS_JB1;
        pw_wgrad_f32(acc, dy, &x[j0], n, k, nb);
        for (j = 0; j < nb; ++j) {
            float *wp = &w[c * w_cin + tt_channel(idx, j0 + j)];
            *wp = tt_sgd_elem(*wp, acc[j], m != NULL ? &m[c * k + j0 + j] : NULL, lr, momentum,
                              wd);
        }
    }
}

/* ---- bias of channel c (the sum in the reference's order) ---- */
void tt_cs_bias_sgd_s32_opt(int32_t *b, const float *dy, int32_t n, int32_t c, const float *step,
                            const tt_q8_update *u)
{
    const float d = cs_sum(dy, n) * tt_q8_lr_step(step, c, u);
    b[c] = u->mode == TT_Q8_STOCHASTIC ? tt_sr_s32(b[c], d, tt_sr_key(u->salt, u->step),
                                                   (uint32_t)c)
                                       : tt_q8_step_s32(b[c], d, u, (uint32_t)c);
}

void tt_cs_bias_sgd_f32_opt(float *b, float *m, const float *dy, int32_t n, int32_t c, float lr,
                            float momentum, float wd)
{
    b[c] = tt_sgd_elem(b[c], 0.0f + cs_sum(dy, n), m != NULL ? &m[c] : NULL, lr, momentum, wd);
}

/* ---- elementwise masks of channel c: 4 pixels per pass, each element's bits moved as an
 * integer (or zeroed) by a conditional instruction rather than a branch. out may be in (a
 * mask may write over its input's slot): each element is read before it is written. ---- */
CS_INLINE uint32_t cs_bits(const float *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

CS_INLINE void cs_put(float *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* out[p] = in[p] where bit B of mask byte mp[p * st] is set, else +0, for p < n & ~3: the bit
 * as an all-ones / all-zeros word (one SBFX: B is a constant), 4 elements per pass */
#if defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__)
#define CS_MASK_HALF(B)                                                                    \
    "ldrb %[m0], [%[mp]]\n\tldrb %[m1], [%[mp], %[st]]\n\tadd %[mp], %[mp], %[st], lsl #1\n\t" \
    "sbfx %[m0], %[m0], #" #B ", #1\n\tsbfx %[m1], %[m1], #" #B ", #1\n\t"                 \
    "ldrd %[v0], %[v1], [%[in]], #8\n\tand %[v0], %[v0], %[m0]\n\tand %[v1], %[v1], %[m1]\n\t" \
    "strd %[v0], %[v1], [%[out]], #8\n\t"
#define CS_MASK_BIT(B)                                                                     \
    static void cs_mask_bit##B(float *out, const float *in, const uint8_t *mp, int32_t st,  \
                               int32_t n)                                                  \
    {                                                                                      \
        const uint8_t *const me = mp + (n & ~3) * st;                                      \
        uint32_t m0, m1, v0, v1;                                                           \
        if (mp == me) {                                                                    \
            return;                                                                        \
        }                                                                                  \
        __asm__ volatile("1:\n\t" CS_MASK_HALF(B) CS_MASK_HALF(B)                          \
                         "cmp %[mp], %[me]\n\tbne 1b"                                      \
                         : [m0] "=&r"(m0), [m1] "=&r"(m1), [v0] "=&r"(v0), [v1] "=&r"(v1),  \
                           [mp] "+r"(mp), [in] "+r"(in), [out] "+r"(out)                    \
                         : [st] "r"(st), [me] "r"(me)                                      \
                         : "cc", "memory");                                                \
    }
#else
#define CS_MASK_BIT(B)                                                                     \
    static void cs_mask_bit##B(float *out, const float *in, const uint8_t *mp, int32_t st,  \
                               int32_t n)                                                  \
    {                                                                                      \
        int32_t p;                                                                         \
        for (p = 0; p < (n & ~3); ++p) {                                                   \
            cs_put(&out[p], cs_bits(&in[p]) & (uint32_t)((int32_t)((uint32_t)mp[p * st]    \
                                                                    << (31 - B)) >> 31));  \
        }                                                                                  \
    }
#endif
CS_MASK_BIT(0)
CS_MASK_BIT(1)
CS_MASK_BIT(2)
CS_MASK_BIT(3)
CS_MASK_BIT(4)
CS_MASK_BIT(5)
CS_MASK_BIT(6)
CS_MASK_BIT(7)
#undef CS_MASK_BIT
#undef CS_MASK_HALF

void tt_cs_mask_opt(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                    int32_t c)
{
    static void (*const by_bit[8])(float *, const float *, const uint8_t *, int32_t, int32_t) = {
        cs_mask_bit0, cs_mask_bit1, cs_mask_bit2, cs_mask_bit3,
        cs_mask_bit4, cs_mask_bit5, cs_mask_bit6, cs_mask_bit7};
    int32_t p = 0;

    if ((ch & 7) == 0) {
        /* the bit sits at the same position of every pixel's byte */
#if TT_MVE_F32 /* Helium: four pixels a lane vector, every pixel (a jump: the same arguments) */
        tt_cs_mask_mve(out, in, mask, n, ch, c);
        return;
#endif
        by_bit[c & 7](out, in, &mask[c >> 3], ch >> 3, n);
        p = n & ~3;
    }
    for (; p < n; ++p) {
        const int32_t i = p * ch + c;
        cs_put(&out[p], ((mask[i >> 3] >> (i & 7)) & 1u) ? cs_bits(&in[p]) : 0u);
    }
}

void tt_cs_q8_clamp_opt(float *out, const float *in, const int8_t *y, int32_t n, int32_t ch,
                        int32_t c, int32_t lo, int32_t hi)
{
    /* lo < v < hi as one unsigned compare, v - (lo + 1) < hi - lo - 1 (no wrap: v is int8) */
    const uint32_t base = (uint32_t)lo + 1u;
    const uint32_t range = (uint32_t)hi - (uint32_t)lo - 1u;
    const int8_t *yp = &y[c];
    int32_t p = 0;

    if ((int64_t)hi - (int64_t)lo <= 1) {
        memset(out, 0, sizeof(float) * (size_t)n); /* nothing lies strictly between */
        return;
    }
    for (; p + 4 <= n; p += 4) {
        const int32_t q = p * ch;
        uint32_t v0 = cs_bits(&in[p]), v1 = cs_bits(&in[p + 1]);
        uint32_t v2 = cs_bits(&in[p + 2]), v3 = cs_bits(&in[p + 3]);
        v0 = ((uint32_t)(int32_t)yp[q] - base) < range ? v0 : 0u;
        v1 = ((uint32_t)(int32_t)yp[q + ch] - base) < range ? v1 : 0u;
        v2 = ((uint32_t)(int32_t)yp[q + 2 * ch] - base) < range ? v2 : 0u;
        v3 = ((uint32_t)(int32_t)yp[q + 3 * ch] - base) < range ? v3 : 0u;
        cs_put(&out[p], v0);
        cs_put(&out[p + 1], v1);
        cs_put(&out[p + 2], v2);
        cs_put(&out[p + 3], v3);
    }
    for (; p < n; ++p) {
        const uint32_t v = cs_bits(&in[p]);
        cs_put(&out[p], ((uint32_t)(int32_t)yp[p * ch] - base) < range ? v : 0u);
    }
}

void tt_cs_clip_f32_opt(float *out, const float *in, const float *x, int32_t n, int32_t ch,
                        int32_t c, float lo, float hi)
{
    const float *xp = &x[c];
    int32_t p = 0;

    for (; p + 4 <= n; p += 4) {
        const int32_t q = p * ch;
        const float x0 = xp[q], x1 = xp[q + ch], x2 = xp[q + 2 * ch], x3 = xp[q + 3 * ch];
        uint32_t v0 = cs_bits(&in[p]), v1 = cs_bits(&in[p + 1]);
        uint32_t v2 = cs_bits(&in[p + 2]), v3 = cs_bits(&in[p + 3]);
        v0 = (x0 > lo && x0 < hi) ? v0 : 0u;
        v1 = (x1 > lo && x1 < hi) ? v1 : 0u;
        v2 = (x2 > lo && x2 < hi) ? v2 : 0u;
        v3 = (x3 > lo && x3 < hi) ? v3 : 0u;
        cs_put(&out[p], v0);
        cs_put(&out[p + 1], v1);
        cs_put(&out[p + 2], v2);
        cs_put(&out[p + 3], v3);
    }
    for (; p < n; ++p) {
        const float v = xp[p * ch];
        cs_put(&out[p], (v > lo && v < hi) ? cs_bits(&in[p]) : 0u);
    }
}

/* ---- depthwise conv (channel multiplier 1) ----
 * Both gradients walk plane rows and read each row from a buffer padded with zeros, so every
 * tap of every element lies inside it and the inner loops test no bounds. A padding tap adds
 * a zero product to an accumulator that starts at +0.0f, so it is never -0 and x + (+-0) == x:
 * the sums stay exactly the reference's as long as the factor that meets the zeros is finite
 * (0 * inf is NaN). The kernels check that, and run the reference otherwise (and for column
 * dilation, or rows / kernels wider than the buffers). Small planes (8x8, 4x4: most of a
 * sparse update's backward) are padded whole, so an element or weight sums all its taps in
 * registers without a per-row setup. The loops are compiled for kernel widths 3, 5, 7 and
 * column strides 1, 2 (and once generic). */
#define CS_KW 8                     /* widest kernel row of the fast paths */
#define CS_KK 49                    /* largest kh * kw of the fast paths */
#define CS_ROW 80                   /* widest plane row of the fast paths (64 in the networks) */
#define CS_PAD (CS_ROW + 2 * CS_KW) /* a row and its zero margins */
#define CS_CLS 4                    /* largest column stride of the input gradient's fast path */
#define CS_PLANE 196                /* a small plane and its zero margins (8x8, 7x7) */

CS_INLINE int cs_finite(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    return (b & 0x7f800000u) != 0x7f800000u;
}

/* out[j * S] += sum over t < T of e[j + t] * wr[t], t ascending, for j < cnt */
CS_INLINE void dwi_run(float *out, const float *e, const float *wr, int32_t cnt, const int T,
                       const int S)
{
    float wt[CS_KW], v[CS_KW + 3];
    int32_t j = 0, t;

#pragma GCC unroll 8
    for (t = 0; t < T; ++t) {
        wt[t] = wr[t];
    }
    for (; j + 4 <= cnt; j += 4) {
        float *o = &out[j * S];
        float a0 = o[0], a1 = o[S], a2 = o[2 * S], a3 = o[3 * S];
#pragma GCC unroll 11
        for (t = 0; t < T + 3; ++t) {
            v[t] = e[j + t];
        }
#pragma GCC unroll 8
        for (t = 0; t < T; ++t) {
            a0 = cs_mla(a0, v[t], wt[t]);
            a1 = cs_mla(a1, v[t + 1], wt[t]);
            a2 = cs_mla(a2, v[t + 2], wt[t]);
            a3 = cs_mla(a3, v[t + 3], wt[t]);
        }
        o[0] = a0, o[S] = a1, o[2 * S] = a2, o[3 * S] = a3;
    }
    for (; j < cnt; ++j) {
        float a = out[j * S];
#pragma GCC unroll 8
        for (t = 0; t < T; ++t) {
            a = cs_mla(a, e[j + t], wt[t]);
        }
        out[j * S] = a;
    }
}

/* dwi_run with T and S known only at run time */
static void dwi_any(float *out, const float *e, const float *wr, int32_t cnt, int32_t T,
                    int32_t S)
{
    int32_t j, t;

    for (j = 0; j < cnt; ++j) {
        float a = out[j * S];
        for (t = 0; t < T; ++t) {
            a = cs_mla(a, e[j + t], wr[t]);
        }
        out[j * S] = a;
    }
}

/* A dx row gains dy row oy through weight row ky. Its elements with (ix + pl) % S == r form
 * class r, which meets only the taps kx = r (mod S): kxs, kxs - S, ... (T = (K - 1 - r) / S
 * + 1 of them), at dy columns oxs + j, oxs + j + 1, ... for its j-th element: each element
 * loads once, adds its taps in ascending ox (the reference's loop order) and stores. */
typedef struct {
    int32_t ix0, oxs, cnt, off;
} dwi_class;

/* K, S: compile-time kernel width and column stride, or 0 (g's, at run time) */
CS_INLINE void dwi_plane(float *dx, const float *dy, const float *wr, const dwi_class *cl,
                         float *e, int scaled, float sc, const tt_conv_geom *g, const int K,
                         const int S)
{
    int32_t oy, ox, ky, r;

    for (oy = 0; oy < g->oh; ++oy) {
        const float *d = &dy[oy * g->ow];
        if (scaled) {
            for (ox = 0; ox < g->ow; ++ox) {
                e[ox] = d[ox] * sc; /* the reference's d, once per dy element */
            }
        } else {
            for (ox = 0; ox < g->ow; ++ox) {
                e[ox] = d[ox];
            }
        }
        for (ky = 0; ky < g->kh; ++ky) {
            const int32_t iy = oy * g->sh - g->pt + ky * g->dh;
            if (iy < 0 || iy >= g->h) {
                continue;
            }
            if (K == 0) {
                for (r = 0; r < g->sw && r < g->kw; ++r) {
                    dwi_any(&dx[iy * g->w + cl[r].ix0], &e[cl[r].oxs],
                            &wr[ky * g->kw + cl[r].off], cl[r].cnt, (g->kw - 1 - r) / g->sw + 1,
                            g->sw);
                }
                continue;
            }
            /* the specialised strides are 1 and 2: one or two classes */
            dwi_run(&dx[iy * g->w + cl[0].ix0], &e[cl[0].oxs], &wr[ky * K + cl[0].off],
                    cl[0].cnt, (K - 1) / S + 1, S);
            if (S == 2) {
                dwi_run(&dx[iy * g->w + cl[1].ix0], &e[cl[1].oxs], &wr[ky * K + cl[1].off],
                        cl[1].cnt, (K - 2) / S + 1, S);
            }
        }
    }
}

/* the padded row buffer and the loops compiled per shape */
CS_INLINE void dwi_planes(float *dx, const float *dy, const float *wr, const dwi_class *cl,
                          int32_t padl, int32_t len, int scaled, float sc, const tt_conv_geom *g)
{
    const int32_t K = g->kw, S = g->sw;
    float dp[CS_PAD];

    memset(dp, 0, sizeof(float) * (size_t)len);
    memset(dx, 0, sizeof(float) * (size_t)(g->h * g->w));
    if (K == 3 && S == 1) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 3, 1);
    } else if (K == 5 && S == 1) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 5, 1);
    } else if (K == 7 && S == 1) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 7, 1);
    } else if (K == 3 && S == 2) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 3, 2);
    } else if (K == 5 && S == 2) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 5, 2);
    } else if (K == 7 && S == 2) {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 7, 2);
    } else {
        dwi_plane(dx, dy, wr, cl, &dp[padl], scaled, sc, g, 0, 0);
    }
}

/* 1 if done, 0 if the reference must run; weights wq (int8) or wfl (fp32) */
static __attribute__((noinline)) int dw_input_fast(float *dx, const float *dy,
                                                   const int8_t *wq, const float *wfl, float sc,
                                                   const tt_conv_geom *g)
{
    const int32_t S = g->sw, K = g->kw, W = g->w, OW = g->ow;
    dwi_class cl[CS_CLS];
    float wr[CS_KK];
    int32_t padl = 0, padr = 0, off = 0, r, t, ky;

    if (g->dw != 1 || S < 1 || S > CS_CLS || g->sh < 1 || K > CS_KW || g->kh * K > CS_KK ||
        OW > CS_ROW) {
        return 0;
    }
    for (r = 0; r < S && r < K; ++r) {
        const int32_t kxs = r + (K - 1 - r) / S * S; /* the class's largest tap */
        const int32_t T = (K - 1 - r) / S + 1;
        const int32_t ix0 = ((r - g->pl) % S + S) % S; /* its first dx column */
        const int32_t oxs = (ix0 + g->pl - kxs) / S;   /* exact: ix0 + pl = kxs (mod S) */
        const int32_t cnt = ix0 < W ? (W - ix0 + S - 1) / S : 0;
        if (cnt > 0) {
            padl = -oxs > padl ? -oxs : padl;
            padr = oxs + cnt + T - 1 - OW > padr ? oxs + cnt + T - 1 - OW : padr;
        }
        cl[r].ix0 = cnt > 0 ? ix0 : 0, cl[r].oxs = cnt > 0 ? oxs : 0; /* empty: in bounds */
        cl[r].cnt = cnt, cl[r].off = off;
        for (ky = 0; ky < g->kh; ++ky) {
            for (t = 0; t < T; ++t) {
                const int32_t at = ky * K + kxs - S * t;
                const float v = wq != NULL ? (float)wq[at] : wfl[at];
                if (!cs_finite(v)) {
                    return 0;
                }
                wr[ky * K + off + t] = v;
            }
        }
        off += T;
    }
    if (padl + OW + padr > CS_PAD) {
        return 0;
    }
    dwi_planes(dx, dy, wr, cl, padl, padl + OW + padr, wq != NULL, sc, g);
    return 1;
}

/* Small planes, unit strides and dilations: each dx element gathers all its taps in a
 * register, ky then kx descending (oy then ox ascending: the reference's order), from the
 * scaled dy plane padded with zeros: P[(oy + K - 1 - pt) * pw + ox + K - 1 - pl]. So dx row
 * iy, column ix, tap (ky, K - 1 - t) reads P[(iy + K - 1 - ky) * pw + ix + t]. 4 columns at
 * a time, the first term added to +0.0f as in the reference. */
#if CS_VFP
/* One kernel row of a KxK gather over a whole dx row of N (4 or 8) columns: the row's
 * N + K - 1 inputs (s0..) and K weights (s16.., tap order) each in one VLDM, then sum i
 * += input i + t times weight t, t ascending (register names spelled out: the assembler
 * takes no arithmetic on them; the sums stay in s24.. across the rows) */
/* tap t of sums 0..3 (_4) or 0..7 (_8) */
#define CS_T0_4 "vmla.f32 %[a0], s0, s16\n\tvmla.f32 %[a1], s1, s16\n\tvmla.f32 %[a2], s2, s16\n\tvmla.f32 %[a3], s3, s16\n\t"
#define CS_T0_8 CS_T0_4 "vmla.f32 %[a4], s4, s16\n\tvmla.f32 %[a5], s5, s16\n\tvmla.f32 %[a6], s6, s16\n\tvmla.f32 %[a7], s7, s16\n\t"
#define CS_T1_4 "vmla.f32 %[a0], s1, s17\n\tvmla.f32 %[a1], s2, s17\n\tvmla.f32 %[a2], s3, s17\n\tvmla.f32 %[a3], s4, s17\n\t"
#define CS_T1_8 CS_T1_4 "vmla.f32 %[a4], s5, s17\n\tvmla.f32 %[a5], s6, s17\n\tvmla.f32 %[a6], s7, s17\n\tvmla.f32 %[a7], s8, s17\n\t"
#define CS_T2_4 "vmla.f32 %[a0], s2, s18\n\tvmla.f32 %[a1], s3, s18\n\tvmla.f32 %[a2], s4, s18\n\tvmla.f32 %[a3], s5, s18\n\t"
#define CS_T2_8 CS_T2_4 "vmla.f32 %[a4], s6, s18\n\tvmla.f32 %[a5], s7, s18\n\tvmla.f32 %[a6], s8, s18\n\tvmla.f32 %[a7], s9, s18\n\t"
#define CS_T3_4 "vmla.f32 %[a0], s3, s19\n\tvmla.f32 %[a1], s4, s19\n\tvmla.f32 %[a2], s5, s19\n\tvmla.f32 %[a3], s6, s19\n\t"
#define CS_T3_8 CS_T3_4 "vmla.f32 %[a4], s7, s19\n\tvmla.f32 %[a5], s8, s19\n\tvmla.f32 %[a6], s9, s19\n\tvmla.f32 %[a7], s10, s19\n\t"
#define CS_T4_4 "vmla.f32 %[a0], s4, s20\n\tvmla.f32 %[a1], s5, s20\n\tvmla.f32 %[a2], s6, s20\n\tvmla.f32 %[a3], s7, s20\n\t"
#define CS_T4_8 CS_T4_4 "vmla.f32 %[a4], s8, s20\n\tvmla.f32 %[a5], s9, s20\n\tvmla.f32 %[a6], s10, s20\n\tvmla.f32 %[a7], s11, s20\n\t"
#define CS_T5_4 "vmla.f32 %[a0], s5, s21\n\tvmla.f32 %[a1], s6, s21\n\tvmla.f32 %[a2], s7, s21\n\tvmla.f32 %[a3], s8, s21\n\t"
#define CS_T5_8 CS_T5_4 "vmla.f32 %[a4], s9, s21\n\tvmla.f32 %[a5], s10, s21\n\tvmla.f32 %[a6], s11, s21\n\tvmla.f32 %[a7], s12, s21\n\t"
#define CS_T6_4 "vmla.f32 %[a0], s6, s22\n\tvmla.f32 %[a1], s7, s22\n\tvmla.f32 %[a2], s8, s22\n\tvmla.f32 %[a3], s9, s22\n\t"
#define CS_T6_8 CS_T6_4 "vmla.f32 %[a4], s10, s22\n\tvmla.f32 %[a5], s11, s22\n\tvmla.f32 %[a6], s12, s22\n\tvmla.f32 %[a7], s13, s22\n\t"
#define CS_MLA_3x4 CS_T0_4 CS_T1_4 CS_T2_4
#define CS_MLA_5x4 CS_MLA_3x4 CS_T3_4 CS_T4_4
#define CS_MLA_7x4 CS_MLA_5x4 CS_T5_4 CS_T6_4
#define CS_MLA_3x8 CS_T0_8 CS_T1_8 CS_T2_8
#define CS_MLA_5x8 CS_MLA_3x8 CS_T3_8 CS_T4_8
#define CS_MLA_7x8 CS_MLA_5x8 CS_T5_8 CS_T6_8

/* 3x3: the three kernel rows in one block (VLDM of the 9 weights once, the sums in
 * s24.. from a VLDM of zeros to one VSTM): kernel row r reads P row e<r>, weights
 * s10 + 3 r + t */
#define CS_G4_0 "vldmia %[e0], {s0-s5}\n\t" \
    "vmla.f32 s24, s0, s10\n\tvmla.f32 s25, s1, s10\n\t" \
    "vmla.f32 s26, s2, s10\n\tvmla.f32 s27, s3, s10\n\t" \
    "vmla.f32 s24, s1, s11\n\tvmla.f32 s25, s2, s11\n\t" \
    "vmla.f32 s26, s3, s11\n\tvmla.f32 s27, s4, s11\n\t" \
    "vmla.f32 s24, s2, s12\n\tvmla.f32 s25, s3, s12\n\t" \
    "vmla.f32 s26, s4, s12\n\tvmla.f32 s27, s5, s12\n\t"
#define CS_G4_1 "vldmia %[e1], {s0-s5}\n\t" \
    "vmla.f32 s24, s0, s13\n\tvmla.f32 s25, s1, s13\n\t" \
    "vmla.f32 s26, s2, s13\n\tvmla.f32 s27, s3, s13\n\t" \
    "vmla.f32 s24, s1, s14\n\tvmla.f32 s25, s2, s14\n\t" \
    "vmla.f32 s26, s3, s14\n\tvmla.f32 s27, s4, s14\n\t" \
    "vmla.f32 s24, s2, s15\n\tvmla.f32 s25, s3, s15\n\t" \
    "vmla.f32 s26, s4, s15\n\tvmla.f32 s27, s5, s15\n\t"
#define CS_G4_2 "vldmia %[e2], {s0-s5}\n\t" \
    "vmla.f32 s24, s0, s16\n\tvmla.f32 s25, s1, s16\n\t" \
    "vmla.f32 s26, s2, s16\n\tvmla.f32 s27, s3, s16\n\t" \
    "vmla.f32 s24, s1, s17\n\tvmla.f32 s25, s2, s17\n\t" \
    "vmla.f32 s26, s3, s17\n\tvmla.f32 s27, s4, s17\n\t" \
    "vmla.f32 s24, s2, s18\n\tvmla.f32 s25, s3, s18\n\t" \
    "vmla.f32 s26, s4, s18\n\tvmla.f32 s27, s5, s18\n\t"
#define CS_G8_0 "vldmia %[e0], {s0-s9}\n\t" \
    "vmla.f32 s24, s0, s10\n\tvmla.f32 s25, s1, s10\n\t" \
    "vmla.f32 s26, s2, s10\n\tvmla.f32 s27, s3, s10\n\t" \
    "vmla.f32 s28, s4, s10\n\tvmla.f32 s29, s5, s10\n\t" \
    "vmla.f32 s30, s6, s10\n\tvmla.f32 s31, s7, s10\n\t" \
    "vmla.f32 s24, s1, s11\n\tvmla.f32 s25, s2, s11\n\t" \
    "vmla.f32 s26, s3, s11\n\tvmla.f32 s27, s4, s11\n\t" \
    "vmla.f32 s28, s5, s11\n\tvmla.f32 s29, s6, s11\n\t" \
    "vmla.f32 s30, s7, s11\n\tvmla.f32 s31, s8, s11\n\t" \
    "vmla.f32 s24, s2, s12\n\tvmla.f32 s25, s3, s12\n\t" \
    "vmla.f32 s26, s4, s12\n\tvmla.f32 s27, s5, s12\n\t" \
    "vmla.f32 s28, s6, s12\n\tvmla.f32 s29, s7, s12\n\t" \
    "vmla.f32 s30, s8, s12\n\tvmla.f32 s31, s9, s12\n\t"
#define CS_G8_1 "vldmia %[e1], {s0-s9}\n\t" \
    "vmla.f32 s24, s0, s13\n\tvmla.f32 s25, s1, s13\n\t" \
    "vmla.f32 s26, s2, s13\n\tvmla.f32 s27, s3, s13\n\t" \
    "vmla.f32 s28, s4, s13\n\tvmla.f32 s29, s5, s13\n\t" \
    "vmla.f32 s30, s6, s13\n\tvmla.f32 s31, s7, s13\n\t" \
    "vmla.f32 s24, s1, s14\n\tvmla.f32 s25, s2, s14\n\t" \
    "vmla.f32 s26, s3, s14\n\tvmla.f32 s27, s4, s14\n\t" \
    "vmla.f32 s28, s5, s14\n\tvmla.f32 s29, s6, s14\n\t" \
    "vmla.f32 s30, s7, s14\n\tvmla.f32 s31, s8, s14\n\t" \
    "vmla.f32 s24, s2, s15\n\tvmla.f32 s25, s3, s15\n\t" \
    "vmla.f32 s26, s4, s15\n\tvmla.f32 s27, s5, s15\n\t" \
    "vmla.f32 s28, s6, s15\n\tvmla.f32 s29, s7, s15\n\t" \
    "vmla.f32 s30, s8, s15\n\tvmla.f32 s31, s9, s15\n\t"
#define CS_G8_2 "vldmia %[e2], {s0-s9}\n\t" \
    "vmla.f32 s24, s0, s16\n\tvmla.f32 s25, s1, s16\n\t" \
    "vmla.f32 s26, s2, s16\n\tvmla.f32 s27, s3, s16\n\t" \
    "vmla.f32 s28, s4, s16\n\tvmla.f32 s29, s5, s16\n\t" \
    "vmla.f32 s30, s6, s16\n\tvmla.f32 s31, s7, s16\n\t" \
    "vmla.f32 s24, s1, s17\n\tvmla.f32 s25, s2, s17\n\t" \
    "vmla.f32 s26, s3, s17\n\tvmla.f32 s27, s4, s17\n\t" \
    "vmla.f32 s28, s5, s17\n\tvmla.f32 s29, s6, s17\n\t" \
    "vmla.f32 s30, s7, s17\n\tvmla.f32 s31, s8, s17\n\t" \
    "vmla.f32 s24, s2, s18\n\tvmla.f32 s25, s3, s18\n\t" \
    "vmla.f32 s26, s4, s18\n\tvmla.f32 s27, s5, s18\n\t" \
    "vmla.f32 s28, s6, s18\n\tvmla.f32 s29, s7, s18\n\t" \
    "vmla.f32 s30, s8, s18\n\tvmla.f32 s31, s9, s18\n\t"
#define CS_GATHER3_ROW(N, ACC)                                                              \
    __asm__("vldmia %[w], {s10-s18}\n\t"                                                     \
            "vldmia %[z], {s24-s" #ACC "}\n\t"                                               \
            CS_G##N##_0 CS_G##N##_1 CS_G##N##_2                                              \
            "vstmia %[o], {s24-s" #ACC "}"                                                   \
            : "=m"(*(float(*)[N])o)                                                          \
            : [e0] "r"(e), [e1] "r"(e + pw), [e2] "r"(e + 2 * pw), [w] "r"(wr),              \
              [z] "r"(cs_zero8), [o] "r"(o), "m"(*(const float(*)[3 * CS_ROW3])e),           \
              "m"(*(const float(*)[9])wr), "m"(cs_zero8)                                     \
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",       \
              "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s24", "s25", "s26", "s27",   \
              "s28", "s29", "s30", "s31")
#define CS_ROW3 12 /* floats of a padded 8-wide row under a 3x3 kernel (10, rounded up) */

#define CS_ACC4 [a0] "+t"(a0), [a1] "+t"(a1), [a2] "+t"(a2), [a3] "+t"(a3)
#define CS_ACC8 CS_ACC4, [a4] "+t"(a4), [a5] "+t"(a5), [a6] "+t"(a6), [a7] "+t"(a7)
#define CS_GROW(K, N, LAST)                                                                 \
    __asm__("vldmia %[e], {s0-s" #LAST "}\n\t"                                             \
            "vldmia %[w]!, {s16-s22}\n\t" CS_MLA_##K##x##N                                 \
            : CS_ACC##N, [w] "+r"(w_)                                                        \
            : [e] "r"(e), "m"(*(const float(*)[N + K - 1])e), "m"(*(const float(*)[7])w_)   \
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",       \
              "s12", "s13", "s16", "s17", "s18", "s19", "s20", "s21", "s22")
#endif

CS_INLINE void dwi_gather(float *dx, const float *P, int32_t pw, const float *wf, int32_t h,
                          int32_t w, const int K)
{
    float v[CS_KW + 3];
    int32_t iy, ix, ky, t;

#if CS_VFP
    if (w == 4 || w == 8) { /* whole rows in registers, the sums pinned to s24.. */
        float wr[CS_KK + 7]; /* each row's VLDM reads 7 weights: K used, the rest padding */
        for (t = 0; t < K * K; ++t) {
            wr[t] = wf[K * K - 1 - t];
        }
        for (; t < K * K + 7; ++t) {
            wr[t] = 0.0f;
        }
        for (iy = 0; iy < h && K == 3; ++iy) { /* one block per row */
            const float *const e = &P[iy * pw];
            float *const o = &dx[iy * w];
            if (w == 8) {
                CS_GATHER3_ROW(8, 31);
            } else {
                CS_GATHER3_ROW(4, 27);
            }
        }
        for (iy = 0; iy < h && K != 3; ++iy) {
            register float a0 __asm__("s24") = 0.0f, a1 __asm__("s25") = 0.0f;
            register float a2 __asm__("s26") = 0.0f, a3 __asm__("s27") = 0.0f;
            register float a4 __asm__("s28") = 0.0f, a5 __asm__("s29") = 0.0f;
            register float a6 __asm__("s30") = 0.0f, a7 __asm__("s31") = 0.0f;
            const float *w_ = wr;
            float *const o = &dx[iy * w];
            for (ky = 0; ky < K; ++ky) { /* P row iy + ky meets kernel row K - 1 - ky */
                const float *const e = &P[(iy + ky) * pw];
                if (K == 3) {
                    if (w == 8) CS_GROW(3, 8, 9); else CS_GROW(3, 4, 5);
                } else if (K == 5) {
                    if (w == 8) CS_GROW(5, 8, 11); else CS_GROW(5, 4, 7);
                } else {
                    if (w == 8) CS_GROW(7, 8, 13); else CS_GROW(7, 4, 9);
                }
                w_ += K - 7; /* the VLDM stepped 7 */
            }
            o[0] = a0, o[1] = a1, o[2] = a2, o[3] = a3;
            if (w == 8) {
                o[4] = a4, o[5] = a5, o[6] = a6, o[7] = a7;
            }
        }
        return;
    }
#endif
    for (iy = 0; iy < h; ++iy) {
        for (ix = 0; ix + 4 <= w; ix += 4) {
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma GCC unroll 8
            for (ky = K - 1; ky >= 0; --ky) {
                const float *e = &P[(iy + K - 1 - ky) * pw + ix];
#pragma GCC unroll 11
                for (t = 0; t < K + 3; ++t) {
                    v[t] = e[t];
                }
#pragma GCC unroll 8
                for (t = 0; t < K; ++t) {
                    const float wt = wf[ky * K + K - 1 - t];
                    a0 = cs_mla(a0, v[t], wt);
                    a1 = cs_mla(a1, v[t + 1], wt);
                    a2 = cs_mla(a2, v[t + 2], wt);
                    a3 = cs_mla(a3, v[t + 3], wt);
                }
            }
            dx[iy * w + ix] = a0, dx[iy * w + ix + 1] = a1;
            dx[iy * w + ix + 2] = a2, dx[iy * w + ix + 3] = a3;
        }
        for (; ix < w; ++ix) {
            float a = 0.0f;
            for (ky = K - 1; ky >= 0; --ky) {
                for (t = 0; t < K; ++t) {
                    a = cs_mla(a, P[(iy + K - 1 - ky) * pw + ix + t], wf[ky * K + K - 1 - t]);
                }
            }
            dx[iy * w + ix] = a;
        }
    }
}

/* 1 if done, 0 if not a small plane (the weights are not finite, or the kernel is not 3x3 or,
 * on planes 4 or 8 wide, 5x5 or 7x7: wider kernels elsewhere gain nothing here) */
static __attribute__((noinline)) int dw_input_small(float *dx, const float *dy,
                                                    const int8_t *wq, const float *wfl,
                                                    float sc, const tt_conv_geom *g)
{
    const int32_t K = g->kw, ph = g->h + K - 1, pw = g->w + K - 1;
    const int32_t r0 = K - 1 - g->pt, q0 = K - 1 - g->pl;
    const int32_t oh = g->oh < ph - r0 ? g->oh : ph - r0, ow = g->ow < pw - q0 ? g->ow : pw - q0;
    const int rows = g->w == 4 || g->w == 8; /* whole rows in registers (dwi_gather) */
    float P[CS_PLANE], wf[CS_KK];
    uint32_t bad = 0;
    int32_t oy, ox, i;

    if (g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 || g->kh != K ||
        !(K == 3 || (CS_VFP && rows && (K == 5 || K == 7))) || r0 < 0 || q0 < 0 ||
        ph * pw > CS_PLANE) {
        return 0;
    }
    for (i = 0; i < K * K; ++i) {
        wf[i] = wq != NULL ? (float)wq[i] : wfl[i];
        bad |= !cs_finite(wf[i]);
    }
    if (bad) {
        return 0;
    }
    memset(P, 0, sizeof(float) * (size_t)(ph * pw));
    for (oy = 0; oy < oh; ++oy) { /* the rows and columns that meet dx */
        const float *d = &dy[oy * g->ow];
        float *pr = &P[(oy + r0) * pw + q0];
        if (wq != NULL) {
            ox = 0;
#if CS_VFP
            for (; ox + 4 <= ow; ox += 4) { /* the reference's d, 4 per VLDM / VSTM */
                __asm__("vldmia %[d], {s0-s3}\n\t"
                        "vmul.f32 s0, s0, %[sc]\n\tvmul.f32 s1, s1, %[sc]\n\t"
                        "vmul.f32 s2, s2, %[sc]\n\tvmul.f32 s3, s3, %[sc]\n\t"
                        "vstmia %[o], {s0-s3}"
                        : "=m"(*(float(*)[4]) & pr[ox])
                        : [d] "r"(&d[ox]), [o] "r"(&pr[ox]), [sc] "t"(sc),
                          "m"(*(const float(*)[4]) & d[ox])
                        : "s0", "s1", "s2", "s3");
            }
#endif
            for (; ox < ow; ++ox) {
                pr[ox] = d[ox] * sc; /* the reference's d */
            }
        } else {
            for (ox = 0; ox < ow; ++ox) {
                pr[ox] = d[ox];
            }
        }
    }
    if (K == 3) {
        dwi_gather(dx, P, pw, wf, g->h, g->w, 3);
    } else if (K == 5) {
        dwi_gather(dx, P, pw, wf, g->h, g->w, 5);
    } else {
        dwi_gather(dx, P, pw, wf, g->h, g->w, 7);
    }
    return 1;
}

/* ---- 4x4 planes, stride 1, 3x3 / 5x5 / 7x7 kernels: only the taps that meet the plane ----
 * A 4x4 plane's elements see 4 to 9 of a 3x3 kernel's taps, 9 to 16 of a 5x5's and 16 of a
 * 7x7's 49, so the padded gather (dw_input_small) spends most of its multiply-accumulates on
 * padding there. This one adds, for each dx element, the products it really has, in the
 * raster order in which the reference scatters them: the reference's sums, with no padding
 * terms at all (so no finiteness condition either). The same for 8x8 planes under 5x5 and
 * 7x7 kernels (dwg_row8: 28 % and 38 % of their taps are padding) and under stride-2
 * kernels (dwg_row8s2), which the padded gathers do not take. Measured: generic
 * tap-by-tap loops cost more in index arithmetic than the padding they skip; these have
 * every (row, column) pair's validity fixed at compile time. */
/* the reference's d = dy * sc (sc = 1: fp32 weights) and the weights as floats */
static void dwg_setup(float *d, float *wf, const float *dy, const int8_t *wq, const float *wfl,
                      float sc, int32_t nd, int32_t taps)
{
    int32_t i;
    if (wq == NULL) {
        memcpy(d, dy, sizeof(float) * (size_t)nd);
        memcpy(wf, wfl, sizeof(float) * (size_t)taps);
        return;
    }
    for (i = 0; i < nd; ++i) {
        d[i] = dy[i] * sc;
    }
    for (i = 0; i + 4 <= taps; i += 4) { /* 4 weights per load */
        uint32_t v;
        memcpy(&v, &wq[i], sizeof v);
        wf[i] = (float)(int8_t)v;
        wf[i + 1] = (float)(int8_t)(v >> 8);
        wf[i + 2] = (float)(int8_t)(v >> 16);
        wf[i + 3] = (float)(int8_t)(v >> 24);
    }
    for (; i < taps; ++i) {
        wf[i] = (float)wq[i];
    }
}

/* dx row iy of a 4x4 plane, kernel K = 2P + 1 (pads P): a_ix += d[oy][ox] * w[iy - oy + P][ix -
 * ox + P] over the oy rows that reach iy, then ox, ascending; |ix - ox| <= P is known at
 * compile time, so each row block is straight-line code */
#define DWG_T(a, ix, ox) ((ix) - (ox) <= P && (ox) - (ix) <= P ? cs_mla(a, d##ox, W(ix - ox)) : (a))
CS_INLINE void dwg_row4(float *dx, const float *d, const float *wf, int32_t iy, const int P)
{
    const int32_t K = 2 * P + 1;
    const int32_t oy0 = iy - P > 0 ? iy - P : 0, oy1 = iy + P < 3 ? iy + P : 3;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int32_t oy;

    for (oy = oy0; oy <= oy1; ++oy) {
        const float *const wr = &wf[(iy - oy + P) * K + P]; /* wr[ix - ox] */
        const float d0 = d[4 * oy], d1 = d[4 * oy + 1], d2 = d[4 * oy + 2], d3 = d[4 * oy + 3];
#define W(k) wr[k]
        a0 = DWG_T(DWG_T(DWG_T(DWG_T(a0, 0, 0), 0, 1), 0, 2), 0, 3);
        a1 = DWG_T(DWG_T(DWG_T(DWG_T(a1, 1, 0), 1, 1), 1, 2), 1, 3);
        a2 = DWG_T(DWG_T(DWG_T(DWG_T(a2, 2, 0), 2, 1), 2, 2), 2, 3);
        a3 = DWG_T(DWG_T(DWG_T(DWG_T(a3, 3, 0), 3, 1), 3, 2), 3, 3);
#undef W
    }
    dx[4 * iy] = a0, dx[4 * iy + 1] = a1, dx[4 * iy + 2] = a2, dx[4 * iy + 3] = a3;
}
#undef DWG_T

/* dx row iy of an 8x8 plane, stride 1, kernel K = 2P + 1 (pads P): a_ix += d[oy][ox] *
 * w[iy - oy + P][ix - ox + P] over the oy rows that reach iy, then ox, ascending */
#define DWG_U(a, ix, ox) ((ix) - (ox) <= P && (ox) - (ix) <= P ? cs_mla(a, d##ox, wr[(ix) - (ox)]) : (a))
#define DWG_U8(a, ix)                                                                      \
    DWG_U(DWG_U(DWG_U(DWG_U(DWG_U(DWG_U(DWG_U(DWG_U(a, ix, 0), ix, 1), ix, 2), ix, 3), ix, 4), \
                      ix, 5), ix, 6), ix, 7)
CS_INLINE void dwg_row8(float *dx, const float *d, const float *wf, int32_t iy, const int P)
{
    const int32_t K = 2 * P + 1;
    const int32_t oy0 = iy - P > 0 ? iy - P : 0, oy1 = iy + P < 7 ? iy + P : 7;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f;
    float a7 = 0.0f;
    int32_t oy;

    for (oy = oy0; oy <= oy1; ++oy) {
        const float *const wr = &wf[(iy - oy + P) * K + P]; /* wr[ix - ox] */
        const float *const dr = &d[8 * oy];
        const float d0 = dr[0], d1 = dr[1], d2 = dr[2], d3 = dr[3];
        const float d4 = dr[4], d5 = dr[5], d6 = dr[6], d7 = dr[7];
        a0 = DWG_U8(a0, 0);
        a1 = DWG_U8(a1, 1);
        a2 = DWG_U8(a2, 2);
        a3 = DWG_U8(a3, 3);
        a4 = DWG_U8(a4, 4);
        a5 = DWG_U8(a5, 5);
        a6 = DWG_U8(a6, 6);
        a7 = DWG_U8(a7, 7);
    }
    dx[8 * iy] = a0, dx[8 * iy + 1] = a1, dx[8 * iy + 2] = a2, dx[8 * iy + 3] = a3;
    dx[8 * iy + 4] = a4, dx[8 * iy + 5] = a5, dx[8 * iy + 6] = a6, dx[8 * iy + 7] = a7;
}
#undef DWG_U8
#undef DWG_U

/* dx row iy of an 8x8 plane under a stride-2 kernel K = 2P + 1 (pads P) from a 4x4 dy:
 * a_ix += d[oy][ox] * w[iy + P - 2 oy][ix + P - 2 ox] over the oy rows that reach iy, then
 * ox, ascending (validity of each (ix, ox) known at compile time) */
#define DWG_S(a, ix, ox) \
    ((ix) + P - 2 * (ox) >= 0 && (ix) + P - 2 * (ox) < K ? cs_mla(a, d##ox, wr[(ix) - 2 * (ox)]) : (a))
#define DWG_S4(a, ix) DWG_S(DWG_S(DWG_S(DWG_S(a, ix, 0), ix, 1), ix, 2), ix, 3)
CS_INLINE void dwg_row8s2(float *dx, const float *d, const float *wf, int32_t iy, const int P)
{
    const int32_t K = 2 * P + 1, t = iy + P - K + 1;
    const int32_t oy0 = t > 0 ? (t + 1) / 2 : 0;
    const int32_t oy1 = (iy + P) / 2 < 3 ? (iy + P) / 2 : 3;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f;
    float a7 = 0.0f;
    int32_t oy;

    for (oy = oy0; oy <= oy1; ++oy) {
        const float *const wr = &wf[(iy + P - 2 * oy) * K + P]; /* wr[ix - 2 ox] */
        const float d0 = d[4 * oy], d1 = d[4 * oy + 1], d2 = d[4 * oy + 2], d3 = d[4 * oy + 3];
        a0 = DWG_S4(a0, 0);
        a1 = DWG_S4(a1, 1);
        a2 = DWG_S4(a2, 2);
        a3 = DWG_S4(a3, 3);
        a4 = DWG_S4(a4, 4);
        a5 = DWG_S4(a5, 5);
        a6 = DWG_S4(a6, 6);
        a7 = DWG_S4(a7, 7);
    }
    dx[8 * iy] = a0, dx[8 * iy + 1] = a1, dx[8 * iy + 2] = a2, dx[8 * iy + 3] = a3;
    dx[8 * iy + 4] = a4, dx[8 * iy + 5] = a5, dx[8 * iy + 6] = a6, dx[8 * iy + 7] = a7;
}
#undef DWG_S4
#undef DWG_S

/* one of the gathers above on a geometry dwg_small checked: each loop over the rows with
 * its kernel size a constant */
static __attribute__((noinline)) void dwg_run(float *dx, const float *dy, const int8_t *wq,
                                              const float *wfl, float sc,
                                              const tt_conv_geom *g)
{
    float d[64], wf[CS_KK];
    int32_t iy;

    dwg_setup(d, wf, dy, wq, wfl, sc, g->oh * g->ow, g->kh * g->kw);
#define DWG_LOOP(ROW, H, P)                                                                \
    for (iy = 0; iy < (H); ++iy) {                                                         \
        ROW(dx, d, wf, iy, P);                                                             \
    }                                                                                      \
    break
    switch ((g->h == 4 ? 0 : g->sh == 2 ? 4 : 8) + g->kh / 2) {
    case 1: DWG_LOOP(dwg_row4, 4, 1);
    case 2: DWG_LOOP(dwg_row4, 4, 2);
    case 3: DWG_LOOP(dwg_row4, 4, 3);
    case 5: DWG_LOOP(dwg_row8s2, 8, 1);
    case 6: DWG_LOOP(dwg_row8s2, 8, 2);
    case 7: DWG_LOOP(dwg_row8s2, 8, 3);
    case 10: DWG_LOOP(dwg_row8, 8, 2);
    default: DWG_LOOP(dwg_row8, 8, 3);
    }
#undef DWG_LOOP
}

/* the tap-by-tap gathers above, for the geometries they take (else 0): "same" pads, no
 * dilation, 4x4 at stride 1 (3x3 to 7x7), 8x8 at stride 1 (5x5, 7x7; 3x3 stays with the
 * padded row gathers, CS_GATHER3_ROW, measured as fast) or 2 (to a 4x4 dy) */
CS_INLINE int dwg_small(float *dx, const float *dy, const int8_t *wq, const float *wfl, float sc,
                        const tt_conv_geom *g)
{
    const int32_t K = g->kh, s = g->sh;
    if (g->w != g->h || g->kw != K || g->dh != 1 || g->dw != 1 || g->pt != K / 2 ||
        g->pl != K / 2 || g->sw != s || !(K == 3 || K == 5 || K == 7) ||
        g->ow != g->oh || g->oh != (g->h - 1) / s + 1 ||
        !((g->h == 4 && s == 1) || (g->h == 8 && (s == 2 || K > 3)))) {
        return 0;
    }
    dwg_run(dx, dy, wq, wfl, sc, g);
    return 1;
}

void tt_cs_dw_input_s8_opt(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                           const tt_conv_geom *g, int32_t c)
{
    const int8_t *wc = &w[c * g->kh * g->kw];

#if TT_MVE_F32 /* Helium: small planes at stride 1, four dx a lane vector, the same sums */
    if (tt_cs_dw_input_mve(dx, dy, wc, NULL, w_scale[c], g)) {
        return;
    }
#endif
    if (!dwg_small(dx, dy, wc, NULL, w_scale[c], g) &&
        !dw_input_small(dx, dy, wc, NULL, w_scale[c], g) &&
        !dw_input_fast(dx, dy, wc, NULL, w_scale[c], g)) {
        tt_cs_dw_input_s8(dx, dy, w, w_scale, g, c);
    }
}

void tt_cs_dw_input_f32_opt(float *dx, const float *dy, const float *w, const tt_conv_geom *g,
                            int32_t c)
{
    const float *wc = &w[c * g->kh * g->kw];

#if TT_MVE_F32 /* Helium: small planes at stride 1, four dx a lane vector, the same sums */
    if (tt_cs_dw_input_mve(dx, dy, NULL, wc, 1.0f, g)) {
        return;
    }
#endif
    if (!dwg_small(dx, dy, NULL, wc, 1.0f, g) &&
        !dw_input_small(dx, dy, NULL, wc, 1.0f, g) && !dw_input_fast(dx, dy, NULL, wc, 1.0f, g)) {
        tt_cs_dw_input_f32(dx, dy, w, g, c);
    }
}

/* weight gradient, one tap row ky: acc[kx] += sum over r < rows, ox < ow of d[r * ds + ox] *
 * xp[r * xs + ox * S + kx], (r, ox) ascending (xp: padded x rows from column -pl) */
CS_INLINE void dww_rows(float *acc, const float *d, int32_t ds, const float *xp, int32_t xs,
                        int32_t ow, int32_t rows, const int K, const int S)
{
    float a[CS_KW], v[3 * CS_CLS + CS_KW];
    int32_t r, ox, kx, i;

#pragma GCC unroll 8
    for (kx = 0; kx < K; ++kx) {
        a[kx] = acc[kx];
    }
    for (r = 0; r < rows; ++r) {
        const float *dr = &d[r * ds], *xr = &xp[r * xs];
        for (ox = 0; ox + 4 <= ow; ox += 4) {
#pragma GCC unroll 16
            for (i = 0; i < 3 * S + K; ++i) {
                v[i] = xr[ox * S + i];
            }
#pragma GCC unroll 4
            for (i = 0; i < 4; ++i) {
                const float dv = dr[ox + i];
#pragma GCC unroll 8
                for (kx = 0; kx < K; ++kx) {
                    a[kx] = cs_mla(a[kx], dv, v[i * S + kx]);
                }
            }
        }
        for (; ox < ow; ++ox) {
            const float dv = dr[ox];
#pragma GCC unroll 8
            for (kx = 0; kx < K; ++kx) {
                a[kx] = cs_mla(a[kx], dv, xr[ox * S + kx]);
            }
        }
    }
#pragma GCC unroll 8
    for (kx = 0; kx < K; ++kx) {
        acc[kx] = a[kx];
    }
}

/* dww_rows with K and S known only at run time */
static void dww_any(float *acc, const float *d, int32_t ds, const float *xp, int32_t xs,
                    int32_t ow, int32_t rows, int32_t K, int32_t S)
{
    int32_t r, ox, kx;

    for (r = 0; r < rows; ++r) {
        for (ox = 0; ox < ow; ++ox) {
            for (kx = 0; kx < K; ++kx) {
                acc[kx] = cs_mla(acc[kx], d[r * ds + ox], xp[r * xs + ox * S + kx]);
            }
        }
    }
}

/* xr[ix] = channel c of x row iy, as the reference reads it: (float)(x - zp) or the float
 * (at = the row's first element); 4 columns per pass */
static void dww_load_row(float *xr, const int8_t *xq, const float *xf, int32_t x_zp,
                         int32_t at, int32_t w, int32_t cin)
{
    int32_t ix = 0;

    if (xq != NULL) {
        const int8_t *q = &xq[at];
        for (; ix + 4 <= w; ix += 4) {
            const int32_t v0 = q[ix * cin], v1 = q[(ix + 1) * cin];
            const int32_t v2 = q[(ix + 2) * cin], v3 = q[(ix + 3) * cin];
            xr[ix] = (float)(v0 - x_zp);
            xr[ix + 1] = (float)(v1 - x_zp);
            xr[ix + 2] = (float)(v2 - x_zp);
            xr[ix + 3] = (float)(v3 - x_zp);
        }
        for (; ix < w; ++ix) {
            xr[ix] = (float)((int32_t)q[ix * cin] - x_zp);
        }
    } else {
        const float *q = &xf[at];
        for (; ix + 4 <= w; ix += 4) {
            const float v0 = q[ix * cin], v1 = q[(ix + 1) * cin];
            const float v2 = q[(ix + 2) * cin], v3 = q[(ix + 3) * cin];
            xr[ix] = v0, xr[ix + 1] = v1, xr[ix + 2] = v2, xr[ix + 3] = v3;
        }
        for (; ix < w; ++ix) {
            xr[ix] = q[ix * cin];
        }
    }
}

/* acc (kh * kw) = channel c's weight gradient, each element summed over ascending (oy, ox).
 * Walking x rows iy upwards and, for each, the tap rows ky that meet it (oy = (iy + pt -
 * ky * dh) / sh) keeps that order for every element and converts each x row once. K, S:
 * compile-time kernel width and column stride, or 0 (g's, at run time). */
CS_INLINE void dww_plane(float *acc, const float *dy, const int8_t *xq, const float *xf,
                         int32_t x_zp, float *xp, const tt_conv_geom *g, int32_t c,
                         const int K, const int S)
{
    const int unit = g->sh == 1 && g->dh == 1;
    int32_t iy, ky, k0, k1;

    for (iy = 0; iy < g->h; ++iy) {
        int loaded = 0;
        /* unit row stride and dilation: ky meets dy row iy + pt - ky, in range for k0..k1 */
        k0 = unit && iy + g->pt - g->oh + 1 > 0 ? iy + g->pt - g->oh + 1 : 0;
        k1 = unit && iy + g->pt < g->kh - 1 ? iy + g->pt : g->kh - 1;
        for (ky = k0; ky <= k1; ++ky) {
            const int32_t num = iy + g->pt - ky * g->dh;
            if (!unit && (num < 0 || num % g->sh != 0 || num / g->sh >= g->oh)) {
                continue;
            }
            if (!loaded) {
                dww_load_row(&xp[g->pl], xq, xf, x_zp, iy * g->w * g->cin + c, g->w, g->cin);
                loaded = 1;
            }
            if (K == 0) {
                dww_any(&acc[ky * g->kw], &dy[(unit ? num : num / g->sh) * g->ow], 0, xp, 0,
                        g->ow, 1, g->kw, g->sw);
            } else {
                dww_rows(&acc[ky * K], &dy[(unit ? num : num / g->sh) * g->ow], 0, xp, 0,
                         g->ow, 1, K, S);
            }
        }
    }
}

/* one tap row of a 3x3: (a0, a1, a2) += sum over ox of d[ox] * xr[ox + (0, 1, 2)] */
CS_INLINE void dww3_row(float *a0, float *a1, float *a2, const float *d, const float *xr,
                        int32_t ow)
{
    float b0 = *a0, b1 = *a1, b2 = *a2;
    int32_t ox = 0;

    for (; ox + 4 <= ow; ox += 4) {
        const float v0 = xr[ox], v1 = xr[ox + 1], v2 = xr[ox + 2], v3 = xr[ox + 3];
        const float v4 = xr[ox + 4], v5 = xr[ox + 5];
        const float e0 = d[ox], e1 = d[ox + 1], e2 = d[ox + 2], e3 = d[ox + 3];
        b0 = cs_mla(b0, e0, v0), b1 = cs_mla(b1, e0, v1), b2 = cs_mla(b2, e0, v2);
        b0 = cs_mla(b0, e1, v1), b1 = cs_mla(b1, e1, v2), b2 = cs_mla(b2, e1, v3);
        b0 = cs_mla(b0, e2, v2), b1 = cs_mla(b1, e2, v3), b2 = cs_mla(b2, e2, v4);
        b0 = cs_mla(b0, e3, v3), b1 = cs_mla(b1, e3, v4), b2 = cs_mla(b2, e3, v5);
    }
    for (; ox < ow; ++ox) {
        b0 = cs_mla(b0, d[ox], xr[ox]);
        b1 = cs_mla(b1, d[ox], xr[ox + 1]);
        b2 = cs_mla(b2, d[ox], xr[ox + 2]);
    }
    *a0 = b0, *a1 = b1, *a2 = b2;
}

/* 3x3 with unit strides and dilations (most blocks): the nine accumulators stay in registers
 * over the plane, and an x row meets its three dy rows iy + pt - ky in one pass */
CS_INLINE void dww_k3s1(float *acc, const float *dy, const int8_t *xq, const float *xf,
                        int32_t x_zp, float *xp, const tt_conv_geom *g, int32_t c)
{
    const int32_t ow = g->ow;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f;
    float a7 = 0.0f, a8 = 0.0f;
    int32_t iy, ox;

    for (iy = 0; iy < g->h; ++iy) {
        const int32_t o0 = iy + g->pt; /* the dy row of ky = 0; ky meets o0 - ky */
        const int k0 = o0 - (g->oh - 1) <= 0 ? 1 : 0, k1 = o0 - 1 >= 0 && o0 - 1 < g->oh;
        const int k2 = o0 - 2 >= 0 && o0 - 2 < g->oh;
        const float *d0 = k0 ? &dy[o0 * ow] : dy, *d1 = k1 ? &dy[(o0 - 1) * ow] : dy;
        const float *d2 = k2 ? &dy[(o0 - 2) * ow] : dy;
        if (!(k0 || k1 || k2)) {
            continue;
        }
        dww_load_row(&xp[g->pl], xq, xf, x_zp, iy * g->w * g->cin + c, g->w, g->cin);
        if (k0 && k1 && k2) {
            for (ox = 0; ox + 4 <= ow; ox += 4) {
                const float *xr = &xp[ox];
                const float v0 = xr[0], v1 = xr[1], v2 = xr[2], v3 = xr[3], v4 = xr[4];
                const float v5 = xr[5];
                float e, f, h;
#define CS_K3_STEP(i, u0, u1, u2)                                                             \
    e = d0[ox + i], f = d1[ox + i], h = d2[ox + i];                                           \
    a0 = cs_mla(a0, e, u0), a1 = cs_mla(a1, e, u1), a2 = cs_mla(a2, e, u2);                   \
    a3 = cs_mla(a3, f, u0), a4 = cs_mla(a4, f, u1), a5 = cs_mla(a5, f, u2);                   \
    a6 = cs_mla(a6, h, u0), a7 = cs_mla(a7, h, u1), a8 = cs_mla(a8, h, u2)
                CS_K3_STEP(0, v0, v1, v2);
                CS_K3_STEP(1, v1, v2, v3);
                CS_K3_STEP(2, v2, v3, v4);
                CS_K3_STEP(3, v3, v4, v5);
#undef CS_K3_STEP
            }
            for (; ox < ow; ++ox) {
                const float e = d0[ox], f = d1[ox], h = d2[ox];
                a0 = cs_mla(a0, e, xp[ox]), a1 = cs_mla(a1, e, xp[ox + 1]);
                a2 = cs_mla(a2, e, xp[ox + 2]);
                a3 = cs_mla(a3, f, xp[ox]), a4 = cs_mla(a4, f, xp[ox + 1]);
                a5 = cs_mla(a5, f, xp[ox + 2]);
                a6 = cs_mla(a6, h, xp[ox]), a7 = cs_mla(a7, h, xp[ox + 1]);
                a8 = cs_mla(a8, h, xp[ox + 2]);
            }
            continue;
        }
        if (k0) {
            dww3_row(&a0, &a1, &a2, d0, xp, ow);
        }
        if (k1) {
            dww3_row(&a3, &a4, &a5, d1, xp, ow);
        }
        if (k2) {
            dww3_row(&a6, &a7, &a8, d2, xp, ow);
        }
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5;
    acc[6] = a6, acc[7] = a7, acc[8] = a8;
}

static void dww_planes(float *acc, const float *dy, const int8_t *xq, const float *xf,
                       int32_t x_zp, int32_t len, const tt_conv_geom *g, int32_t c);

/* 1 if acc holds the gradient, 0 if the reference must run; x int8 (xq) or fp32 (xf) */
static __attribute__((noinline)) int dw_weight_fast(float *acc, const float *dy,
                                                    const int8_t *xq, const float *xf,
                                                    int32_t x_zp, const tt_conv_geom *g,
                                                    int32_t c)
{
    const int32_t S = g->sw, K = g->kw, W = g->w, OW = g->ow, pl = g->pl;
    const int32_t padr = (OW - 1) * S - pl + K - W > 0 ? (OW - 1) * S - pl + K - W : 0;
    int32_t oy, ox, i, lo, hi;

    if (g->dw != 1 || S < 1 || S > CS_CLS || g->sh < 1 || g->dh < 1 || K > CS_KW ||
        g->kh * K > CS_KK || W > CS_ROW || pl > CS_KW || pl + W + padr > CS_PAD) {
        return 0;
    }
    /* dy columns whose taps reach the padding: their values must be finite */
    lo = (pl + S - 1) / S;
    hi = W - K + pl >= 0 ? (W - K + pl) / S + 1 : 0;
    lo = lo < OW ? lo : OW;
    hi = hi > lo ? hi : lo;
    for (oy = 0; oy < g->oh; ++oy) {
        const float *d = &dy[oy * OW];
        uint32_t bad = 0;
        for (ox = 0; ox < lo; ++ox) {
            bad |= !cs_finite(d[ox]);
        }
        for (ox = hi; ox < OW; ++ox) {
            bad |= !cs_finite(d[ox]);
        }
        if (bad) {
            return 0;
        }
    }
    for (i = 0; i < g->kh * K; ++i) {
        acc[i] = 0.0f;
    }
    dww_planes(acc, dy, xq, xf, x_zp, pl + W + padr, g, c);
    return 1;
}

/* the padded x row (its own frame, as dwi_planes) and the loops compiled per shape */
static __attribute__((noinline)) void dww_planes(float *acc, const float *dy, const int8_t *xq,
                                                 const float *xf, int32_t x_zp, int32_t len,
                                                 const tt_conv_geom *g, int32_t c)
{
    const int32_t S = g->sw, K = g->kw;
    float xp[CS_PAD];

    memset(xp, 0, sizeof(float) * (size_t)len);
    if (K == 3 && S == 1 && g->kh == 3 && g->sh == 1 && g->dh == 1) {
        dww_k3s1(acc, dy, xq, xf, x_zp, xp, g, c);
    } else if (K == 3 && S == 1) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 3, 1);
    } else if (K == 5 && S == 1) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 5, 1);
    } else if (K == 7 && S == 1) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 7, 1);
    } else if (K == 3 && S == 2) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 3, 2);
    } else if (K == 5 && S == 2) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 5, 2);
    } else if (K == 7 && S == 2) {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 7, 2);
    } else {
        dww_plane(acc, dy, xq, xf, x_zp, xp, g, c, 0, 0);
    }
}

void tt_cs_dw_weight_sgd_s8_opt(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                float x_scale, int32_t x_zp, const tt_conv_geom *g, int32_t c,
                                const float *step, const tt_q8_update *u)
{
    float acc[CS_KK];
    float s;
    int32_t i;

    if (!dw_weight_fast(acc, dy, x, NULL, x_zp, g, c)) {
        tt_cs_dw_weight_sgd_s8(w, shadow, dy, x, x_scale, x_zp, g, c, step, u);
        return;
    }
    s = tt_q8_lr_step(step, c, u); /* hoisted: one multiply per channel */
    if (u->mode == TT_Q8_STOCHASTIC) { /* the rounding inline, its key hoisted */
        const int32_t taps = g->kh * g->kw;
        cs_sr_row(&w[c * taps], acc, x_scale, s, tt_sr_key(u->salt, u->step),
                  (uint32_t)(c * taps), taps);
        return;
    }
    for (i = 0; i < g->kh * g->kw; ++i) {
        const int32_t wi = c * g->kh * g->kw + i;
        const float gr = acc[i] * x_scale;
        w[wi] = tt_q8_step_s8(w[wi], shadow != NULL ? &shadow[wi] : NULL, gr * s, u,
                              (uint32_t)wi);
    }
}

void tt_cs_dw_weight_sgd_f32_opt(float *w, float *m, const float *dy, const float *x,
                                 const tt_conv_geom *g, int32_t c, float lr, float momentum,
                                 float wd)
{
    float acc[CS_KK];
    int32_t i;

    if (!dw_weight_fast(acc, dy, NULL, x, 0, g, c)) {
        tt_cs_dw_weight_sgd_f32(w, m, dy, x, g, c, lr, momentum, wd);
        return;
    }
    for (i = 0; i < g->kh * g->kw; ++i) {
        const int32_t wi = c * g->kh * g->kw + i;
        w[wi] = tt_sgd_elem(w[wi], acc[i], m != NULL ? &m[wi] : NULL, lr, momentum, wd);
    }
}
