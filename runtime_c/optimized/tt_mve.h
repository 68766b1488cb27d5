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

#endif /* TT_MVE_H */
