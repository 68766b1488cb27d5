/* tinytrain board layer: Alif Ensemble E7 (AE722F80F55D5LS) on the DevKit Gen 2 or the AI/ML
 * AppKit Gen 2, RTSS-HE core (Cortex-M55, 256 KB DTCM, MRAM), implements firmware/tt_port.h.
 * Written from Alif's Ensemble CMSIS DFP (github.com/alifsemi/alif_ensemble-cmsis-dfp, 2.0.x; no
 * vendor header is included): Device/soc/AE722F80F55D5/include/rtss_he/soc.h (peripheral map,
 * register blocks), soc_features.h (clocks, MRAM), drivers/include/uart.h, sys_ctrl_uart.h,
 * pinconf.h and drivers/source/pinconf.c (UART, its clock, the pin mux), drivers/source/mram.c
 * and Alif_CMSIS/Source/Driver_MRAM.c (MRAM writes), the kits' Layers/M55_HE (console UART and
 * its pins, the Conductor clock configuration); the ARMv8-M ARM (DDI 0553) for the DWT and caches.
 * Clocks: set by the Secure Enclave from the device configuration SETOOLS programs, before this
 *   core starts; the kits' configuration gives RTSS_HE_CLK 160 MHz and SYST_PCLK 100 MHz, which
 *   this layer takes as given (it cannot check them: HFOSC_CLK is off in that configuration).
 * UART: UART4 (DesignWare APB UART, 16550-compatible registers plus USR/SRR/DLF), RX P12_1 and
 *   TX P12_2, alternate function 2 = the kits' console on the PRG USB port (J3; jumpers J26-A/B
 *   on the DevKit, J15-A/B on the AppKit, at UART4). Clock SYST_PCLK (CLKCTL_PER_SLV UART_CTRL:
 *   bit n enables UARTn's clock, bit 8+n selects SYST_PCLK over HFOSC_CLK), 115200 8N1: divisor
 *   100 MHz / (16 x 115200) = 54.25 = DLL 54 + DLF 4/16 (115207 baud), FIFOs on, polled. Line
 *   errors (overrun, parity, framing, break) are cleared by reading LSR, so they never wedge RX.
 * Ticks: DWT->CYCCNT (DDI 0553 DWT), 32 bits.
 * MRAM (soc_features.h: 5.5 MB at 0x80000000; the DFP gives the HE the 2 MB from 0x80000000):
 *   written 128 bits at a time at 16-byte-aligned addresses, in place, without an erase (mram.h
 *   MRAM_SECTOR_SIZE; mram.c writes a quad-word as two 64-bit stores). The two checkpoint slots
 *   are sized for the trainable parameters at build time (boards/alif_e7_he.toml: below
 *   0x80080000); "erase" writes 0xFF quad-words, "program" writes quad-words, each read back.
 * Caches: the M55's caches are off after reset and this firmware leaves them off. If the D-cache
 *   is on anyway (CCR.DC), every written line is cleaned to memory (DCCMVAC), as Driver_MRAM.c does.
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the baud
 *   rate on the wire (it depends on the SE's SYST_PCLK), MRAM write timing, and whether
 *   DWT->CYCCNT counts in the Secure state the HE starts in (Secure non-invasive debug must be
 *   allowed) need a board run. Driver_MRAM.c warns that on Rev A silicon no code may execute from
 *   MRAM while MRAM is written; this layer runs from MRAM (its silicon revision is not checked).
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define DSB() __asm__ volatile("dsb 0xF" ::: "memory")

/* ---- CLKCTL_PER_SLV (soc.h: 0x4902F000), UART_CTRL at 0x08 (sys_ctrl_uart.h) ---- */
#define CLKCTL_PER_SLV_BASE 0x4902F000u
#define CLKCTL_UART_CTRL REG32(CLKCTL_PER_SLV_BASE + 0x08u)
#define UART_INSTANCE 4u
#define UART_CTRL_CLK_EN (1u << UART_INSTANCE)               /* bits 0-7: clock enable */
#define UART_CTRL_SEL_PCLK (1u << (8u + UART_INSTANCE))      /* bits 8-15: 1 = SYST_PCLK */
#define SYST_PCLK_HZ 100000000u

/* ---- Pin mux (soc.h: PINMUX_BASE 0x1A603000; pinconf.c: one word per pin at port * 32 +
 * pin * 4, alternate function in bits 2:0, pad control in bits 23:16) ---- */
#define PINMUX_BASE 0x1A603000u
#define PINMUX(port, pin) REG32(PINMUX_BASE + 32u * (port) + 4u * (pin))
#define PINMUX_PADCTRL_SHIFT 16u
#define PADCTRL_READ_ENABLE 0x01u /* pinconf.h: input buffer on */
#define UART4_PORT 12u
#define UART4_RX_PIN 1u /* P12_1 = UART4_RX_B */
#define UART4_TX_PIN 2u /* P12_2 = UART4_TX_B */
#define UART4_ALT_FUNCTION 2u

/* ---- UART4 (soc.h: 0x4901C000; register offsets from the UART_Type block, bits from uart.h) */
#define UART4_BASE 0x4901C000u
#define UART_RBR REG32(UART4_BASE + 0x00u) /* DLAB = 0, read */
#define UART_THR REG32(UART4_BASE + 0x00u) /* DLAB = 0, write */
#define UART_DLL REG32(UART4_BASE + 0x00u) /* DLAB = 1 */
#define UART_DLH REG32(UART4_BASE + 0x04u) /* DLAB = 1 */
#define UART_IER REG32(UART4_BASE + 0x04u) /* DLAB = 0 */
#define UART_FCR REG32(UART4_BASE + 0x08u)
#define UART_LCR REG32(UART4_BASE + 0x0Cu)
#define UART_MCR REG32(UART4_BASE + 0x10u)
#define UART_LSR REG32(UART4_BASE + 0x14u)
#define UART_USR REG32(UART4_BASE + 0x7Cu)
#define UART_SRR REG32(UART4_BASE + 0x88u)
#define UART_DLF REG32(UART4_BASE + 0xC0u) /* divisor latch fraction, 4 bits (UART_DLF_SIZE) */
#define UART_FCR_FIFO_ENABLE 0x01u
#define UART_LCR_8N1 0x03u /* 8 data bits, 1 stop bit, no parity */
#define UART_LCR_DLAB 0x80u
#define UART_LSR_DR 0x01u   /* data ready */
#define UART_LSR_TEMT 0x40u /* transmitter empty: FIFO and shift register */
#define UART_USR_TFNF 0x02u /* transmit FIFO not full */
#define UART_SRR_RESET 0x07u /* UART reset, RX FIFO reset, TX FIFO reset */
#define UART_DLF_BITS 4u
#define UART_BAUD 115200u
#define BYTE_MASK 0xFFu
/* The DesignWare UART needs a few cycles of its own clock after a reset or a divisor change
 * before it works (Driver_USART.c waits 5 us, uart.c 32 x divisor loop turns): 20000 turns are
 * well over that at 160 MHz. */
#define UART_SETTLE_SPINS 20000u

/* ---- Debug: DEMCR and DWT (DDI 0553, ARMv8-M debug) ---- */
#define DEMCR REG32(0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL REG32(0xE0001000u)
#define DWT_CYCCNT REG32(0xE0001004u)
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCLE_BITS 32u

/* ---- Caches (DDI 0553: CCR.DC, DCCMVAC clean data cache line by address to PoC) ---- */
#define SCB_CCR REG32(0xE000ED14u)
#define SCB_CCR_DC (1u << 16)
#define SCB_DCCMVAC REG32(0xE000EF68u)
#define DCACHE_LINE 32u /* Cortex-M55 data cache line */

/* ---- MRAM (soc_features.h, mram.h) ---- */
#define MRAM_HE_BASE 0x80000000u
#define MRAM_HE_END 0x80200000u /* app_mem_regions.h: the HE's 2 MB window */
#define MRAM_WRITE_UNIT 16u     /* 128 bits */
#define ERASED_BYTE 0xFFu
/* The slots are chosen for the trainable parameters at build time (tinytrain.boards
 * flash_layout over the toml's [layout]); the build passes their addresses and size. */
#if !defined(TT_CKPT_SLOT0) || !defined(TT_CKPT_SLOT1) || !defined(TT_CKPT_SLOT_SIZE)
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the build (board flash map)"
#endif
#if (TT_CKPT_SLOT0 % MRAM_WRITE_UNIT) || (TT_CKPT_SLOT1 % MRAM_WRITE_UNIT) ||                  \
    (TT_CKPT_SLOT_SIZE % MRAM_WRITE_UNIT) || TT_CKPT_SLOT_SIZE == 0u ||                         \
    TT_CKPT_SLOT0 < MRAM_HE_BASE || TT_CKPT_SLOT1 < MRAM_HE_BASE ||                              \
    TT_CKPT_SLOT0 + TT_CKPT_SLOT_SIZE > MRAM_HE_END || TT_CKPT_SLOT1 + TT_CKPT_SLOT_SIZE > MRAM_HE_END
#error "the checkpoint slots must be whole quad-words inside the HE's MRAM window"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1

static void spin(uint32_t n)
{
    for (volatile uint32_t i = 0; i < n; i++) {}
}

void tt_port_init(void)
{
    /* UART4's clock from SYST_PCLK, then its pins (sys_ctrl_uart.h, pinconf.c) */
    CLKCTL_UART_CTRL |= UART_CTRL_SEL_PCLK | UART_CTRL_CLK_EN;
    PINMUX(UART4_PORT, UART4_RX_PIN) = (PADCTRL_READ_ENABLE << PINMUX_PADCTRL_SHIFT) | UART4_ALT_FUNCTION;
    PINMUX(UART4_PORT, UART4_TX_PIN) = UART4_ALT_FUNCTION;

    /* The sequence of Driver_USART.c: reset, divisor (integer and fraction), 8N1, FIFOs. */
    UART_SRR = UART_SRR_RESET;
    spin(UART_SETTLE_SPINS);
    const uint32_t div16 = (SYST_PCLK_HZ + UART_BAUD / 2u) / UART_BAUD; /* divisor x 16 */
    UART_LCR = UART_LCR_DLAB;
    UART_DLL = (div16 >> UART_DLF_BITS) & BYTE_MASK;
    UART_DLH = (div16 >> (UART_DLF_BITS + 8u)) & BYTE_MASK;
    UART_DLF = div16 & ((1u << UART_DLF_BITS) - 1u);
    UART_LCR = UART_LCR_8N1; /* DLAB off */
    spin(UART_SETTLE_SPINS);
    UART_IER = 0u; /* polled */
    UART_MCR = 0u;
    UART_FCR = UART_FCR_FIFO_ENABLE;

    DEMCR |= DEMCR_TRCENA;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
}

int tt_port_getc(void)
{
    for (;;) { /* reading LSR clears OE/PE/FE/BI; a lost byte is the link's to recover */
        if (UART_LSR & UART_LSR_DR) return (int)(UART_RBR & BYTE_MASK);
    }
}

void tt_port_write(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (!(UART_USR & UART_USR_TFNF)) {}
        UART_THR = p[i];
    }
    while (!(UART_LSR & UART_LSR_TEMT)) {}
}

uint32_t tt_port_ticks(void) { return DWT_CYCCNT; }
uint32_t tt_port_tick_bits(void) { return DWT_CYCLE_BITS; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_CYCLES; }

/* ---- checkpoint slots in MRAM ---- */
uint32_t tt_port_flash_slot_size(void) { return SLOT_SIZE; }
uint32_t tt_port_flash_write_unit(void) { return MRAM_WRITE_UNIT; }

const uint8_t *tt_port_flash_slot(uint32_t slot)
{
    return slot == 0u ? (const uint8_t *)SLOT0_ADDR : slot == 1u ? (const uint8_t *)SLOT1_ADDR : NULL;
}

/* p may be unaligned: assemble each little-endian word from bytes. */
static inline uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* One quad-word (4 words: w) to the 16-byte-aligned MRAM address dst, as mram.c writes it (two
 * 64-bit stores), cleaned from the D-cache if that is on, then read back. Returns 0 when the
 * MRAM holds w. */
static int mram_write_quad(uint32_t dst, const uint32_t w[4])
{
    volatile uint64_t *d = (volatile uint64_t *)(uintptr_t)dst;
    d[0] = (uint64_t)w[0] | (uint64_t)w[1] << 32;
    d[1] = (uint64_t)w[2] | (uint64_t)w[3] << 32;
    DSB();
    if (SCB_CCR & SCB_CCR_DC) {
        SCB_DCCMVAC = dst & ~(DCACHE_LINE - 1u);
        DSB();
    }
    const volatile uint32_t *r = (const volatile uint32_t *)(uintptr_t)dst;
    return (r[0] == w[0] && r[1] == w[1] && r[2] == w[2] && r[3] == w[3]) ? 0 : -1;
}

int tt_port_flash_erase(uint32_t slot)
{
    if (slot > 1u) return -1;
    const uint32_t base = slot == 0u ? SLOT0_ADDR : SLOT1_ADDR;
    const uint32_t ones = (uint32_t)ERASED_BYTE * 0x01010101u;
    const uint32_t w[4] = {ones, ones, ones, ones};
    for (uint32_t a = base; a < base + SLOT_SIZE; a += MRAM_WRITE_UNIT)
        if (mram_write_quad(a, w)) return -1;
    return 0;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n)
{
    if (slot > 1u || offset % MRAM_WRITE_UNIT || n % MRAM_WRITE_UNIT || offset > SLOT_SIZE ||
        n > SLOT_SIZE - offset)
        return -1;
    const uint32_t dst = (slot == 0u ? SLOT0_ADDR : SLOT1_ADDR) + offset;
    for (size_t i = 0; i < n; i += MRAM_WRITE_UNIT) {
        const uint32_t w[4] = {le32(p + i), le32(p + i + 4u), le32(p + i + 8u), le32(p + i + 12u)};
        if (mram_write_quad(dst + (uint32_t)i, w)) return -1;
    }
    return 0;
}
