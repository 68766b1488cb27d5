/*
 * Helium (MVE) channel mask of the fp32 backward, see tt_f32_mask_mve.h: a channel's elements
 * kept where its bit of a 1-bit mask is set, +0 elsewhere (tt_cs_mask_opt, ch a multiple of
 * 8). Lanes are four pixels: one byte gather fetches their mask bytes (st bytes apart), a
 * VSHL puts the channel's bit into the sign (the bits above it leave the lane), and a VPT on
 * "negative" predicates the load of `in`, whose inactive lanes Helium writes as zeros: +0's
 * bits. Nothing is computed on a float, so every value (NaN payloads, -0, denormals) comes
 * out as the reference's assignment stores it.
 */
#include "tt_f32_mask_mve.h"

#if TT_MVE_F32
#include <arm_mve.h>

void tt_cs_mask_mve(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                    int32_t c)
{
    const int32_t st = ch >> 3; /* a pixel's bytes */
    const uint8_t *mp = mask + (c >> 3);
    const uint32x4_t o0 = vmulq_n_u32(vidupq_n_u32(0u, 1), (uint32_t)st); /* 0, st, 2st, 3st */
    const uint32x4_t o1 = vaddq_n_u32(o0, 4u * (uint32_t)st); /* the next four pixels */
    const int32_t up = 31 - (c & 7); /* a shift by a core register: no Q register for the bit */
    const int32_t n8 = n >> 3;
    int32_t p;

    if (n8 > 0) { /* eight pixels a pass; the pointers end at the pixels left */
#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
        /* 12 instructions a pass with the LE, in q0..q3 (no VPUSH). GCC 12 moves each
         * predicate through a core register (VMRS, SXTH, VMSR, VPST: 20 a pass). Both
         * vectors are loaded before either is stored (out may be in). */
        uint32x4_t m0, m1;
        __asm__ volatile("dls lr, %[cnt]\n"
                         "1:\n\t"
                         "vldrb.u32 %q[m0], [%[mp], %q[o0]]\n\t"
                         "vldrb.u32 %q[m1], [%[mp], %q[o1]]\n\t"
                         "add %[mp], %[mp], %[st8]\n\t"
                         "vshl.u32 %q[m0], %[up]\n\t"
                         "vpt.s32 lt, %q[m0], zr\n\t"
                         "vldrwt.u32 %q[m0], [%[in]], #16\n\t"
                         "vshl.u32 %q[m1], %[up]\n\t"
                         "vpt.s32 lt, %q[m1], zr\n\t"
                         "vldrwt.u32 %q[m1], [%[in]], #16\n\t"
                         "vstrw.32 %q[m0], [%[out]], #16\n\t"
                         "vstrw.32 %q[m1], [%[out]], #16\n\t"
                         "le lr, 1b"
                         : [m0] "=&w"(m0), [m1] "=&w"(m1), [mp] "+r"(mp), [in] "+r"(in),
                           [out] "+r"(out)
                         : [o0] "w"(o0), [o1] "w"(o1), [up] "r"(up), [st8] "r"(8 * st),
                           [cnt] "r"(n8)
                         : "lr", "memory");
#else
        int32_t q;
        for (q = 0; q < n8; ++q, in += 8, out += 8) {
            const uint8_t *const m = mp + 8 * q * st;
            const int32x4_t g0 = vreinterpretq_s32_u32(vldrbq_gather_offset_u32(m, o0));
            const int32x4_t g1 = vreinterpretq_s32_u32(vldrbq_gather_offset_u32(m, o1));
            const mve_pred16_t k0 = vcmpltq_n_s32(vshlq_r_s32(g0, up), 0);
            const mve_pred16_t k1 = vcmpltq_n_s32(vshlq_r_s32(g1, up), 0);
            const float32x4_t v0 = vldrwq_z_f32(in, k0);
            const float32x4_t v1 = vldrwq_z_f32(in + 4, k1);
            vstrwq_f32(out, v0);
            vstrwq_f32(out + 4, v1);
        }
        mp += (n & 7) != 0 ? 8 * n8 * st : 0; /* no pointer past the mask when none is left */
#endif
    }
    for (p = 0; p < (n & 7); p += 4) { /* the last 1..7 pixels, tail-predicated vectors */
        const mve_pred16_t t = vctp32q((uint32_t)((n & 7) - p));
        const uint32x4_t g = vldrbq_gather_offset_z_u32(mp + p * st, o0, t);
        const mve_pred16_t k = vcmpltq_m_n_s32(vshlq_r_s32(vreinterpretq_s32_u32(g), up), 0, t);
        vstrwq_p_f32(out + p, vldrwq_z_f32(in + p, k), t);
    }
}

#endif
