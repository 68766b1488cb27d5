/* Tiny harness for kernel tests that run the same C on the host and on the QEMU twins. */
#ifndef TT_HARNESS_H
#define TT_HARNESS_H
#include <stdint.h>

void th_puts(const char *s);
void th_exit(int status);
void th_ticks_start(void);
uint32_t th_ticks(void); /* twins: SysTick ticks (TH_TICK_CENTI / 100 instructions); host: clock() */
/* Hundredths of an instruction a twin's SysTick tick counts under -icount shift=0: 40 on the
 * MPS2 images (25 MHz), 31.25 on the AN547 (32 MHz; tests/ckernel/__init__.py passes it). */
#ifndef TH_TICK_CENTI
#define TH_TICK_CENTI 4000u
#endif
/* Ticks since t0 (the twins' SysTick is 24 bits wide: up to 671 M instructions). */
uint32_t th_elapsed(uint32_t t0);

/* Deterministic PRNG (xorshift32) so host and twin draw the same test data. */
static inline uint32_t th_rand(uint32_t *s) {
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

/* Instructions of one call f(opt) on a twin (SysTick ticks of TH_TICK_CENTI / 100), repeated
 * until well measured. */
static inline uint32_t th_instructions(void (*f)(int), int opt)
{
    uint32_t reps = 1, t0, ticks, r;

    for (;;) {
        t0 = th_ticks();
        for (r = 0; r < reps; ++r) {
            f(opt);
        }
        ticks = th_elapsed(t0);
        if (ticks >= 20000u || reps >= 4096u) {
            return (uint32_t)(((uint64_t)ticks * TH_TICK_CENTI + 50u * reps) / (100u * reps));
        }
        reps *= 4u;
    }
}
#endif
