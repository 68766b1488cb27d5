/* Whether this core has Helium, Arm's M-profile Vector Extension (Cortex-M55, M85): TT_MVE for
 * its integer lanes (__ARM_FEATURE_MVE bit 0), TT_MVE_F32 for its float lanes (bit 1). The
 * kernels of tt_q8_mve.c and tt_f32_mve.c compile only there; elsewhere the DSP-extension and
 * FPU kernels run, with the same results. */
#ifndef TT_MVE_H
#define TT_MVE_H

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define TT_MVE 1
#else
#define TT_MVE 0
#endif
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
#define TT_MVE_F32 1
#else
#define TT_MVE_F32 0
#endif

#if TT_MVE
#include <arm_mve.h>
#include <stdint.h>

/* Outputs 0..3 at 0, C, 2 C, 3 C in the 32-bit lanes where VMOV's two-register form puts
 * sums s0..s3 by "vmov v[2], v[0], s2, s0" and "vmov v[3], v[1], s3, s1". Which of the
 * pair's registers lands in the lower lane only the emulator vouches for; putting the store
 * offsets through the same two instructions makes each output meet its own offset either
 * way (the Helium depthwise, pointwise and stem kernels). */
static inline uint32x4_t tt_mve_pair_offsets(int32_t C)
{
    uint32x4_t v = vdupq_n_u32(0);
    const int32_t o0 = 0, o1 = C, o2 = 2 * C, o3 = 3 * C;
    __asm__("vmov %q[v][2], %q[v][0], %[o2], %[o0]\n\t"
            "vmov %q[v][3], %q[v][1], %[o3], %[o1]"
            : [v] "+w"(v)
            : [o0] "r"(o0), [o1] "r"(o1), [o2] "r"(o2), [o3] "r"(o3));
    return v;
}
#endif

#endif /* TT_MVE_H */
