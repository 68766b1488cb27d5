/* Board layer of the QEMU twins: ARM MPS2 FPGA images as QEMU models them, mps2-an500
 * (Cortex-M7, twin of the STM32F746), mps2-an386 (Cortex-M4F, twin of the nRF52840),
 * mps2-an385 (Cortex-M3, runs the RP2040's ARMv6-M code) and mps2-an505 (Cortex-M33 in the
 * Arm SSE-200, twin of the RP2350 and the STM32U585; UART0 at its Secure alias 0x50200000).
 * Only this file differs from the real boards: the model, the link and the checkpoint code are
 * the same objects.
 *  - UART0 is an ARM CMSDK APB UART at TT_TWIN_UART0 (0x40004000 on the MPS2 images; ARM
 *    DDI 0479, CMSDK TRM, APB UART); QEMU wires it to -serial, here a TCP socket that
 *    tinytrain reaches with pyserial.
 *  - Ticks: SysTick on the processor clock. Under `-icount shift=0` QEMU's virtual clock runs
 *    one instruction per ns and the MPS2 SysTick counts at 25 MHz (20 MHz on the AN505), so
 *    one tick is exactly 40 (50) executed instructions; the host knows which from the board's
 *    TOML. DWT->CYCCNT reads 0 in QEMU, so it is not used here.
 *  - "Flash": the twin's code memory is RAM (ZBT SSRAM1 at 0x0), so the two checkpoint slots
 *    are emulated with NOR semantics (erase to 0xFF, programming only clears bits) at the
 *    addresses the board's TOML gives (passed as TT_CKPT_SLOT0/1, TT_CKPT_SLOT_SIZE), with the
 *    board's write unit (TT_TWIN_WRITE_UNIT), so checkpoints are laid out as on the board. */
#include <string.h>

#include "tt_port.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

#ifndef TT_TWIN_UART0
#define TT_TWIN_UART0 0x40004000u
#endif
#ifndef TT_TWIN_WRITE_UNIT
#define TT_TWIN_WRITE_UNIT 4u
#endif
#define UART0_BASE TT_TWIN_UART0
#define UART_DATA REG(UART0_BASE + 0x00u)
#define UART_STATE REG(UART0_BASE + 0x04u)
#define UART_CTRL REG(UART0_BASE + 0x08u)
#define UART_BAUDDIV REG(UART0_BASE + 0x10u)
#define UART_STATE_TXFULL 0x1u
#define UART_STATE_RXFULL 0x2u
#define UART_STATE_RXOVERRUN 0x8u
#define UART_CTRL_TXEN 0x1u
#define UART_CTRL_RXEN 0x2u
#define MPS2_APB_HZ 25000000u
#define LINK_BAUD 115200u /* QEMU does not pace the UART; the divider must just be >= 16 */

#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define SYST_CSR_ENABLE_PROCCLK 0x5u /* ENABLE | CLKSOURCE = processor clock, no interrupt */
#define SYST_MAX 0x00FFFFFFu

#ifndef TT_CKPT_SLOT0
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the board's TOML"
#endif

void tt_port_init(void) {
    UART_BAUDDIV = MPS2_APB_HZ / LINK_BAUD;
    UART_CTRL = UART_CTRL_TXEN | UART_CTRL_RXEN;
    SYST_RVR = SYST_MAX;
    SYST_CVR = 0;
    SYST_CSR = SYST_CSR_ENABLE_PROCCLK;
}

int tt_port_getc(void) {
    while (!(UART_STATE & UART_STATE_RXFULL)) {
    }
    UART_STATE = UART_STATE_RXOVERRUN; /* write-one-to-clear: a lost byte must not wedge us */
    return (int)(UART_DATA & 0xFFu);
}

void tt_port_write(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        while (UART_STATE & UART_STATE_TXFULL) {
        }
        UART_DATA = p[i];
    }
}

uint32_t tt_port_ticks(void) { return SYST_MAX - (SYST_CVR & SYST_MAX); }

uint32_t tt_port_tick_bits(void) { return 24; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_SYSTICK; }

static uint8_t *slot_base(uint32_t slot) {
    return (uint8_t *)(uintptr_t)(slot ? TT_CKPT_SLOT1 : TT_CKPT_SLOT0);
}

uint32_t tt_port_flash_slot_size(void) { return TT_CKPT_SLOT_SIZE; }

uint32_t tt_port_flash_write_unit(void) { return TT_TWIN_WRITE_UNIT; }

int tt_port_flash_erase(uint32_t slot) {
    if (slot > 1) return -1;
    memset(slot_base(slot), 0xFF, TT_CKPT_SLOT_SIZE);
    return 0;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n) {
    if (slot > 1 || offset > TT_CKPT_SLOT_SIZE || n > TT_CKPT_SLOT_SIZE - offset ||
        offset % TT_TWIN_WRITE_UNIT || n % TT_TWIN_WRITE_UNIT)
        return -1;
    volatile uint8_t *dst = slot_base(slot) + offset;
    for (size_t i = 0; i < n; i++) dst[i] &= p[i];
    return 0;
}

const uint8_t *tt_port_flash_slot(uint32_t slot) { return slot_base(slot); }
