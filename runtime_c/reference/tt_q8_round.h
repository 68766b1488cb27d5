/*
 * The int8 update's stochastic rounding, inline: the reference updates (tt_q8_core.c) and the
 * optimised kernels share one definition of its bits, and a kernel that updates many elements
 * of one call hoists the per-call half of the key and the mode test out of its loop.
 *
 *     q_new = clamp(q - floor(delta + u(salt, step, idx)), -127, 127)        (int8 weights)
 *
 * u is a counter-based uniform in [0, 1) (murmur3's finaliser over the key), so every element
 * gets the same random number whatever order, kernel or target updates it.
 */
#ifndef TT_Q8_ROUND_H
#define TT_Q8_ROUND_H

#include <math.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TT_ROUND_INLINE static inline __attribute__((always_inline))
#else
#define TT_ROUND_INLINE static inline
#endif

/* the part of the key that is the same for every element of one update call */
TT_ROUND_INLINE uint32_t tt_sr_key(uint32_t salt, uint32_t step)
{
    return salt ^ (step * 0x9E3779B9u);
}

/* uniform in [0, 1) with 24 random bits: exact in float */
TT_ROUND_INLINE float tt_sr_uniform(uint32_t key, uint32_t idx)
{
    uint32_t h = key ^ (idx * 0x85EBCA6Bu);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return (float)(h >> 8) * (1.0f / 16777216.0f);
}

/* delta (in LSBs) clamped to +-2^24 so every conversion below stays inside int32; NaN: 0 */
TT_ROUND_INLINE float tt_sr_clamp(float d)
{
    const float lim = 16777216.0f;
    if (!(d == d)) {
        return 0.0f;
    }
    return d > lim ? lim : (d < -lim ? -lim : d);
}

/* TT_FPV5: the FPU has FPv5's conversions that round toward minus infinity (VCVTM; Cortex-M7
 * with fpv5-sp-d16 or fpv5-d16). GCC predefines the same macros for FPv4 and FPv5, so the
 * board's flags say it (boards/stm32f746.toml); without it the FPv4 sequences below run, with
 * the same results. */
#if defined(TT_FPV5) && defined(__arm__) && defined(__ARM_FP)
#define TT_SR_VCVTM 1
#endif

/* (int32_t)floorf(t) for |t| < 2^31. On Cortex-M one VCVTM, or truncate (one VCVT) and step
 * down, which is exact; the M4's floorf is newlib's software routine. */
TT_ROUND_INLINE int32_t tt_sr_floor(float t)
{
#if defined(TT_SR_VCVTM)
    int32_t i;
    __asm__("vcvtm.s32.f32 %0, %0" : "+t"(t));
    __asm__("vmov %0, %1" : "=r"(i) : "t"(t));
    return i;
#elif defined(__arm__) && defined(__ARM_FP)
    const int32_t i = (int32_t)t;
    return (float)i > t ? i - 1 : i;
#else
    return (int32_t)floorf(t);
#endif
}

#if defined(__arm__) && defined(__ARM_FP) && defined(__ARM_FEATURE_DSP)
/* floor(t) saturated to [-513, 511] ([-512, 511] with VCVTM), NaN -> 0, without a compare for
 * either: VCVT truncates, saturates and maps NaN to 0 in hardware, SSAT clamps the integer.
 * Any |t| >= 512 moves an int8 weight to a bound whatever the exact value, so this equals the
 * clamp-then-floor of tt_sr_s8's portable form for every input. */
TT_ROUND_INLINE int32_t tt_sr_floor_sat(float t)
{
#if defined(TT_SR_VCVTM) /* 3 instructions where the FPv4 sequence takes 9 */
    int32_t i;
    __asm__("vcvtm.s32.f32 %0, %0" : "+t"(t));
    __asm__("vmov %0, %1" : "=r"(i) : "t"(t));
    __asm__("ssat %0, #10, %1" : "=r"(i) : "r"(i));
    return i;
#else
    float f;
    int32_t i;
    __asm__("vcvt.s32.f32 %0, %1" : "=t"(f) : "t"(t));
    __asm__("vmov %0, %1" : "=r"(i) : "t"(f));
    __asm__("ssat %0, #10, %1" : "=r"(i) : "r"(i));
    return (float)i > t ? i - 1 : i;
#endif
}
#endif

/* one int8 weight, stochastic rounding (tt_q8_step_s8 in TT_Q8_STOCHASTIC mode) */
TT_ROUND_INLINE int8_t tt_sr_s8(int32_t w, float delta, uint32_t key, uint32_t idx)
{
#if defined(__arm__) && defined(__ARM_FP) && defined(__ARM_FEATURE_DSP)
    const int32_t v = w - tt_sr_floor_sat(delta + tt_sr_uniform(key, idx));
#else
    const int32_t v = w - tt_sr_floor(tt_sr_clamp(delta) + tt_sr_uniform(key, idx));
#endif
    return (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
}

/* one int32 bias, stochastic rounding (tt_q8_step_s32 in TT_Q8_STOCHASTIC mode): saturates
 * and counts in tt_q8_saturations */
TT_ROUND_INLINE int32_t tt_sr_s32(int32_t b, float delta, uint32_t key, uint32_t idx)
{
    extern uint32_t tt_q8_saturations;
    const int64_t v = (int64_t)b - (int64_t)tt_sr_floor(tt_sr_clamp(delta) +
                                                        tt_sr_uniform(key, idx));
    if (v > INT32_MAX || v < INT32_MIN) {
        tt_q8_saturations++;
        return v > INT32_MAX ? INT32_MAX : INT32_MIN;
    }
    return (int32_t)v;
}

#endif /* TT_Q8_ROUND_H */
