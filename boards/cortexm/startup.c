/* Reset and vector table for every Cortex-M board and twin: copy .data from flash, zero .bss,
 * turn on the FPU (CP10/CP11 full access; the code is built hard-float), call main().
 * Symbols come from the generated linker script (board/firmware.ld). */
#include <stdint.h>
#include <string.h>

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define CPACR_CP10_CP11_FULL (0xFu << 20)

void Reset_Handler(void);
void Default_Handler(void);

void Reset_Handler(void) {
    memcpy(&_sdata, &_sidata, (size_t)((uint8_t *)&_edata - (uint8_t *)&_sdata));
    memset(&_sbss, 0, (size_t)((uint8_t *)&_ebss - (uint8_t *)&_sbss));
    SCB_CPACR |= CPACR_CP10_CP11_FULL;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    (void)main();
    for (;;) {
    }
}

/* A fault stops the device; the host sees its link time out and reports it. */
void Default_Handler(void) {
    for (;;) {
    }
}

typedef void (*tt_vector)(void);

/* Initial stack pointer and the 15 system exceptions; no peripheral interrupt is used. */
__attribute__((section(".isr_vector"), used)) const tt_vector tt_vectors[16] = {
    (tt_vector)(uintptr_t)&_estack, Reset_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, 0, 0, 0, 0, Default_Handler,
    Default_Handler, 0, Default_Handler, Default_Handler,
};
