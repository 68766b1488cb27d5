/* Bare-metal test harness for kernels on the QEMU twins (tests/ckernel/__init__.py): prints
 * through ARM semihosting and exits with the test's status. Cortex-M SysTick as an instruction
 * counter (1 tick = 40 instructions under -icount shift=0, see DESIGN notes in README). */
#include <stdint.h>
#include <string.h>

#include "harness.h"

static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void th_puts(const char *s) { semihost(0x04, s); } /* SYS_WRITE0 */

void th_exit(int status) {
    /* SYS_EXIT: ADP_Stopped_ApplicationExit is a clean exit (QEMU exit code 0), anything
     * else (ADP_Stopped_RunTimeErrorUnknown) makes QEMU exit with 1. */
    semihost(0x18, (const void *)(uintptr_t)(status == 0 ? 0x20026 : 0x20023));
    for (;;) {
    }
}

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)

void th_ticks_start(void) {
    SYST_RVR = 0x00FFFFFFu;
    SYST_CVR = 0;
    SYST_CSR = 0x5u;
}

uint32_t th_ticks(void) { return 0x00FFFFFFu - (SYST_CVR & 0x00FFFFFFu); }
uint32_t th_elapsed(uint32_t t0) { return (th_ticks() - t0) & 0x00FFFFFFu; }
