/* tinytrain board layer: Raspberry Pi Pico (RP2040, Cortex-M0+ / ARMv6-M, 2 MB QSPI flash,
 * 264 KB SRAM), implements firmware/tt_port.h. Written from the RP2040 datasheet and the ARMv6-M
 * ARM (DDI 0419); no Pico SDK code or headers. Register blocks name their datasheet chapter
 * (2.1 bus fabric: atomic set/clear aliases, 2.8 bootrom, 2.14 subsystem resets, 2.15 clocks,
 * 2.16 XOSC, 2.17 ROSC, 2.18 PLL, 2.19 GPIO and pads, 4.2 UART = Arm PL011).
 * Clocks (2.15, 2.16, 2.18): XOSC 12 MHz crystal -> clk_ref; PLL_SYS REFDIV 1, FBDIV 125
 *   (VCO 1500 MHz), POSTDIV1 6, POSTDIV2 2 -> clk_sys 125 MHz (the datasheet's own example);
 *   clk_peri = clk_sys. If the XOSC never reports STABLE within a bounded wait we stay on the ring
 *   oscillator (nominal 6.5 MHz, 1.8-12 MHz with PVT: the link may then not work at all); if the
 *   PLL never locks, clk_sys = clk_ref = XOSC 12 MHz. The UART divisor is computed from the
 *   clock reached, with shifts and subtraction (ARMv6-M has no divide instruction; no libgcc).
 * UART (4.2, 2.19): UART0 on GP0 (TX) / GP1 (RX), function 2; 115200 8N1, FIFOs on, polled.
 * Ticks: SysTick (ARMv6-M B3.3; no DWT cycle counter on the M0+), processor clock, 24 bits,
 *   converted to an up-count; it counts core cycles, so TT_TICKS_CYCLES.
 * Boot (2.8.1): the ROM checks and runs the first 256 bytes of flash; our own stage 2 (boot2.S,
 *   pasted below by make_boot2.py) turns on 03h serial XIP and enters the vector table at
 *   0x10000100.
 * Flash (2.8.3 bootrom functions): erase and program go through the ROM's routines found with
 *   rom_table_lookup: connect_internal_flash, flash_exit_xip, flash_range_erase/_program (flash
 *   OFFSETS; erase in 4 KB sectors, using 64 KB D8h block erases where aligned; program whole
 *   256-byte pages), flash_flush_cache, flash_enter_cmd_xip (back to 03h reads, as boot2 left
 *   them). While XIP is off nothing may run from or read flash: the sequence runs in RAM
 *   functions (.data, copied by startup.c) with interrupts masked, on ROM pointers and a page
 *   buffer already in RAM. 4-byte program units are made from pages pre-filled with 0xFF
 *   (programming 1s leaves NOR bits as they are). Core 1 stays parked in the ROM.
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the
 *   boot2 hand-off, the clock switch and the baud rate on the wire, the ROM flash calls (and the
 *   XIP SCK of clk_sys / 6 = 20.8 MHz that flash_exit_xip leaves for 03h reads) all need a Pico.
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* ---- atomic register aliases, 2.1 (bus fabric): +0x2000 bitmask set, +0x3000 bitmask clear ---- */
#define ALIAS_SET 0x2000u
#define ALIAS_CLR 0x3000u

/* ---- RESETS, 2.14 (base 0x4000C000) ---- */
#define RESETS_BASE 0x4000C000u
#define RESETS_RESET_SET REG32(RESETS_BASE + ALIAS_SET + 0x0u)
#define RESETS_RESET_CLR REG32(RESETS_BASE + ALIAS_CLR + 0x0u)
#define RESETS_RESET_DONE REG32(RESETS_BASE + 0x8u)
#define RESET_IO_BANK0 (1u << 5)
#define RESET_PADS_BANK0 (1u << 8)
#define RESET_PLL_SYS (1u << 12)
#define RESET_UART0 (1u << 22)

/* ---- XOSC, 2.16 (base 0x40024000) ---- */
#define XOSC_BASE 0x40024000u
#define XOSC_CTRL REG32(XOSC_BASE + 0x00u)
#define XOSC_STATUS REG32(XOSC_BASE + 0x04u)
#define XOSC_STARTUP REG32(XOSC_BASE + 0x0Cu)
#define XOSC_CTRL_FREQ_1_15MHZ 0xAA0u           /* FREQ_RANGE[11:0] */
#define XOSC_CTRL_ENABLE (0xFABu << 12)         /* ENABLE[23:12] magic */
#define XOSC_STATUS_STABLE (1u << 31)
#define XOSC_HZ 12000000u                       /* the Pico's crystal */
#define XOSC_STARTUP_DELAY 188u /* DELAY[13:0] in 256 crystal cycles: ~4 ms (1 ms suffices per 2.16) */

/* ---- ROSC, 2.17: what clk_ref/clk_sys run on out of the boot ROM ---- */
#define ROSC_NOMINAL_HZ 6500000u

/* ---- PLL_SYS, 2.18 (base 0x40028000) ---- */
#define PLL_SYS_BASE 0x40028000u
#define PLL_CS REG32(PLL_SYS_BASE + 0x0u)
#define PLL_PWR REG32(PLL_SYS_BASE + 0x4u)
#define PLL_FBDIV_INT REG32(PLL_SYS_BASE + 0x8u)
#define PLL_PRIM REG32(PLL_SYS_BASE + 0xCu)
#define PLL_CS_LOCK (1u << 31)
#define PLL_PWR_DSMPD (1u << 2)     /* DSM off: integer feedback (must stay set) */
#define PLL_PWR_POSTDIVPD (1u << 3) /* post dividers powered down */
#define PLL_REFDIV 1u               /* CS.REFDIV[5:0]: 12 MHz reference */
#define PLL_FBDIV 125u              /* VCO 1500 MHz (750-1600 MHz allowed) */
#define PLL_POSTDIV1 6u             /* PRIM.POSTDIV1[18:16] */
#define PLL_POSTDIV2 2u             /* PRIM.POSTDIV2[14:12] -> 1500 / 12 = 125 MHz */
#define PLL_PRIM_POSTDIV1_SHIFT 16u
#define PLL_PRIM_POSTDIV2_SHIFT 12u
#define PLL_SYS_HZ 125000000u

/* ---- CLOCKS, 2.15 (base 0x40008000) ---- */
#define CLOCKS_BASE 0x40008000u
#define CLK_REF_CTRL REG32(CLOCKS_BASE + 0x30u)
#define CLK_REF_DIV REG32(CLOCKS_BASE + 0x34u)
#define CLK_REF_SELECTED REG32(CLOCKS_BASE + 0x38u)
#define CLK_SYS_CTRL REG32(CLOCKS_BASE + 0x3Cu)
#define CLK_SYS_DIV REG32(CLOCKS_BASE + 0x40u)
#define CLK_SYS_SELECTED REG32(CLOCKS_BASE + 0x44u)
#define CLK_PERI_CTRL REG32(CLOCKS_BASE + 0x48u)
#define CLK_REF_SRC_MASK 0x3u           /* SRC[1:0]: 0 rosc_clksrc_ph, 1 aux, 2 xosc_clksrc */
#define CLK_REF_SRC_ROSC 0x0u
#define CLK_REF_SRC_XOSC 0x2u
#define CLK_REF_DIV_1 (1u << 8)         /* DIV.INT[9:8] */
#define CLK_SYS_SRC_AUX (1u << 0)       /* SRC[0]: 0 clk_ref, 1 clksrc_clk_sys_aux */
#define CLK_SYS_AUXSRC_MASK (0x7u << 5) /* AUXSRC[7:5]: 0 clksrc_pll_sys */
#define CLK_SYS_AUXSRC_PLL_SYS (0x0u << 5)
#define CLK_SYS_DIV_1 (1u << 8)         /* DIV.INT[31:8], FRAC[7:0] = 0 */
#define CLK_PERI_ENABLE (1u << 11)
#define CLK_PERI_AUXSRC_CLK_SYS (0x0u << 5)
/* SELECTED registers are one-hot: bit n set when the glitchless mux has switched to SRC n. */
#define SELECTED(src) (1u << (src))

/* ---- IO_BANK0 (base 0x40014000) and PADS_BANK0 (base 0x4001C000), 2.19 ---- */
#define IO_BANK0_BASE 0x40014000u
#define GPIO_CTRL(pin) REG32(IO_BANK0_BASE + 8u * (pin) + 0x4u)
#define GPIO_FUNC_UART 2u /* FUNCSEL[4:0] = 2: GP0 UART0 TX, GP1 UART0 RX; overrides all 0 */
#define PADS_BANK0_BASE 0x4001C000u
#define PADS_GPIO(pin) REG32(PADS_BANK0_BASE + 0x4u + 4u * (pin))
#define PAD_SCHMITT (1u << 1)
#define PAD_PUE (1u << 3)
#define PAD_DRIVE_4MA (1u << 4) /* DRIVE[5:4] = 1 (reset value) */
#define PAD_IE (1u << 6)        /* input enable; OD[7] = 0: output enabled */
#define UART_TX_PIN 0u
#define UART_RX_PIN 1u

/* ---- UART0, 4.2 (PL011, base 0x40034000) ---- */
#define UART0_BASE 0x40034000u
#define UART_DR REG32(UART0_BASE + 0x000u)
#define UART_RSR REG32(UART0_BASE + 0x004u) /* read: error status; write: clear (ECR) */
#define UART_FR REG32(UART0_BASE + 0x018u)
#define UART_IBRD REG32(UART0_BASE + 0x024u)
#define UART_FBRD REG32(UART0_BASE + 0x028u)
#define UART_LCR_H REG32(UART0_BASE + 0x02Cu)
#define UART_CR REG32(UART0_BASE + 0x030u)
#define UART_IMSC REG32(UART0_BASE + 0x038u)
#define UART_DMACR REG32(UART0_BASE + 0x048u)
#define UART_DR_ERRORS (0xFu << 8) /* FE[8] PE[9] BE[10] OE[11] of the received character */
#define UART_FR_BUSY (1u << 3)
#define UART_FR_RXFE (1u << 4)
#define UART_FR_TXFF (1u << 5)
#define UART_LCR_H_FEN (1u << 4)
#define UART_LCR_H_WLEN_8 (0x3u << 5) /* PEN = 0, STP2 = 0: 8N1 */
#define UART_CR_UARTEN (1u << 0)
#define UART_CR_TXE (1u << 8)
#define UART_CR_RXE (1u << 9)
#define UART_IBRD_MAX 0xFFFFu
#define UART_FBRD_MASK 0x3Fu
#define UART_BAUD 115200u
#define BYTE_MASK 0xFFu

/* ---- SysTick, ARMv6-M B3.3 ---- */
#define SYST_CSR REG32(0xE000E010u)
#define SYST_RVR REG32(0xE000E014u)
#define SYST_CVR REG32(0xE000E018u)
#define SYST_CSR_ENABLE (1u << 0)
#define SYST_CSR_CLKSOURCE_CPU (1u << 2)
#define SYSTICK_MASK 0x00FFFFFFu
#define SYSTICK_BITS 24u

/* ---- boot ROM, 2.8.3 ---- */
#define ROM_MAGIC_ADDR 0x10u         /* 'M', 'u', version 1 */
#define ROM_MAGIC 0x01754Du
#define ROM_MAGIC_MASK 0x00FFFFFFu
#define ROM_FUNC_TABLE_PTR 0x14u     /* 16-bit pointer to the public function table */
#define ROM_TABLE_LOOKUP_PTR 0x18u   /* 16-bit pointer to rom_table_lookup(table, code) */
#define ROM_CODE(c1, c2) ((uint32_t)(c1) | ((uint32_t)(c2) << 8))

/* ---- flash, 2.8.3 (ROM flash functions) and the XIP map ---- */
#define XIP_BASE 0x10000000u
#define XIP_END 0x11000000u          /* 16 MB XIP window */
#define FLASH_PAGE 256u              /* program granularity of flash_range_program */
#define FLASH_SECTOR 4096u           /* erase granularity of flash_range_erase */
#define FLASH_BLOCK 65536u           /* D8h block erase, used where a whole block is inside */
#define FLASH_BLOCK_ERASE_CMD 0xD8u
#define FLASH_WRITE_UNIT 4u
#define ERASED_WORD 0xFFFFFFFFu
#define ERASED_BYTE 0xFFu
/* The slots are whole 4 KB sectors right below the end of flash, sized for the trainable
 * parameters at build time (tinytrain.boards.flash_layout); the build passes their XIP
 * addresses and size. */
#if !defined(TT_CKPT_SLOT0) || !defined(TT_CKPT_SLOT1) || !defined(TT_CKPT_SLOT_SIZE)
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the build (board flash map)"
#endif
#if TT_CKPT_SLOT_SIZE % 4096u != 0 || TT_CKPT_SLOT0 % 4096u != 0 || TT_CKPT_SLOT1 % 4096u != 0
#error "checkpoint slots must be whole 4 KB sectors"
#endif
#if TT_CKPT_SLOT0 < 0x10000000u || TT_CKPT_SLOT1 < 0x10000000u || \
    TT_CKPT_SLOT0 + TT_CKPT_SLOT_SIZE > 0x11000000u || TT_CKPT_SLOT1 + TT_CKPT_SLOT_SIZE > 0x11000000u
#error "checkpoint slots are XIP addresses (0x10000000-0x10FFFFFF)"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1

#define READY_SPINS 500000u /* >= 2M cycles (>= 4 per APB poll): ~0.3 s on ROSC, 16 ms at 125 MHz */

/* Code that must not execute from flash: its section matches the linker script's *(.data*), so
 * startup.c copies it to RAM with .data (not named ".data.<x>": the assembler warns about code in
 * a section of that special name), and it is called through a register (long_call: RAM at
 * 0x20000000 is out of BL range of flash at 0x10000000). */
#define RAMFUNC __attribute__((section(".data_tt_ramfunc"), noinline, noclone, long_call))

/* BEGIN boot2 (generated by boards/rp2040/make_boot2.py) */
/* Generated from boards/rp2040/boot2.S by boards/rp2040/make_boot2.py: assembled
 * with arm-none-eabi-gcc -mcpu=cortex-m0plus, objcopy -O binary, zero-padded to
 * 252 bytes, CRC-32/MPEG-2 0x8e66edf3 appended little-endian. Do not edit. */
__attribute__((section(".tt_boot2"), used)) static const unsigned char
    tt_rp2040_boot2[256] = {
    0x14, 0x20, 0x04, 0x88, 0x85, 0x88, 0x20, 0x00, 0x06, 0x49, 0xa8, 0x47,
    0x80, 0x47, 0x20, 0x00, 0x05, 0x49, 0xa8, 0x47, 0x80, 0x47, 0x05, 0x48,
    0x05, 0x49, 0x08, 0x60, 0x06, 0xc8, 0x81, 0xf3, 0x08, 0x88, 0x10, 0x47,
    0x49, 0x46, 0x00, 0x00, 0x43, 0x58, 0x00, 0x00, 0x00, 0x01, 0x00, 0x10,
    0x08, 0xed, 0x00, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xf3, 0xed, 0x66, 0x8e,
};
/* END boot2 */

static uint32_t s_clk_sys_hz = ROSC_NOMINAL_HZ; /* clk_sys = clk_peri actually reached */

/* Wait for (reg & mask) == want, at most READY_SPINS polls. Returns 0 when reached. */
static int wait_bits(volatile uint32_t *reg, uint32_t mask, uint32_t want)
{
    for (uint32_t i = 0; i < READY_SPINS; i++)
        if ((*reg & mask) == want) return 0;
    return -1;
}

static int unreset(uint32_t bits)
{
    RESETS_RESET_CLR = bits;
    return wait_bits(&RESETS_RESET_DONE, bits, bits);
}

static int xosc_start(void)
{
    XOSC_STARTUP = XOSC_STARTUP_DELAY;
    /* One write of range and ENABLE magic: ENABLE must never hold anything but ENABLE/DISABLE
     * (and DISABLE would stop a crystal clk_ref may already run on, after a debugger restart). */
    XOSC_CTRL = XOSC_CTRL_ENABLE | XOSC_CTRL_FREQ_1_15MHZ;
    return wait_bits(&XOSC_STATUS, XOSC_STATUS_STABLE, XOSC_STATUS_STABLE);
}

/* 2.18 "Configuration": reset, dividers, power VCO, wait LOCK, post dividers, power them. */
static int pll_sys_start(void)
{
    RESETS_RESET_SET = RESET_PLL_SYS;
    if (unreset(RESET_PLL_SYS)) return -1;
    PLL_CS = PLL_REFDIV;
    PLL_FBDIV_INT = PLL_FBDIV;
    PLL_PWR = PLL_PWR_DSMPD | PLL_PWR_POSTDIVPD; /* PD = VCOPD = 0: PLL and VCO on */
    if (wait_bits(&PLL_CS, PLL_CS_LOCK, PLL_CS_LOCK)) return -1;
    PLL_PRIM = (PLL_POSTDIV1 << PLL_PRIM_POSTDIV1_SHIFT) | (PLL_POSTDIV2 << PLL_PRIM_POSTDIV2_SHIFT);
    PLL_PWR = PLL_PWR_DSMPD; /* post dividers on */
    return 0;
}

/* 2.15: clk_ref and clk_sys have glitchless muxes (switch SRC, poll SELECTED); clk_sys's aux
 * mux may only change while SRC selects clk_ref. */
static void clocks_init(void)
{
    CLK_SYS_CTRL &= ~CLK_SYS_SRC_AUX; /* clk_sys = clk_ref while its sources change */
    if (wait_bits(&CLK_SYS_SELECTED, SELECTED(0u), SELECTED(0u))) return;
    if (xosc_start()) return; /* stay on the ring oscillator */
    CLK_REF_CTRL = (CLK_REF_CTRL & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_XOSC;
    if (wait_bits(&CLK_REF_SELECTED, SELECTED(CLK_REF_SRC_XOSC), SELECTED(CLK_REF_SRC_XOSC))) {
        CLK_REF_CTRL = (CLK_REF_CTRL & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_ROSC;
        (void)wait_bits(&CLK_REF_SELECTED, SELECTED(CLK_REF_SRC_ROSC), SELECTED(CLK_REF_SRC_ROSC));
        return;
    }
    CLK_REF_DIV = CLK_REF_DIV_1;
    CLK_SYS_DIV = CLK_SYS_DIV_1;
    s_clk_sys_hz = XOSC_HZ;
    if (pll_sys_start()) return; /* clk_sys stays on clk_ref = XOSC */
    CLK_SYS_CTRL = (CLK_SYS_CTRL & ~CLK_SYS_AUXSRC_MASK) | CLK_SYS_AUXSRC_PLL_SYS;
    CLK_SYS_CTRL |= CLK_SYS_SRC_AUX;
    if (wait_bits(&CLK_SYS_SELECTED, SELECTED(1u), SELECTED(1u))) {
        CLK_SYS_CTRL &= ~CLK_SYS_SRC_AUX;
        (void)wait_bits(&CLK_SYS_SELECTED, SELECTED(0u), SELECTED(0u));
        return;
    }
    s_clk_sys_hz = PLL_SYS_HZ;
}

/* n / d by shift and subtract (ARMv6-M has no UDIV; no libgcc __aeabi_uidiv). d < 2^31. */
static uint32_t udiv32(uint32_t n, uint32_t d)
{
    uint32_t q = 0u, r = 0u;
    for (uint32_t bit = 32u; bit-- > 0u;) {
        r = (r << 1) | ((n >> bit) & 1u);
        if (r >= d) {
            r -= d;
            q |= 1u << bit;
        }
    }
    return q;
}

/* PL011: divisor = UARTCLK / (16 * baud) as IBRD + FBRD / 64, FBRD rounded (4.2 baud rate). */
static void uart_set_baud(uint32_t uartclk_hz)
{
    uint32_t div128 = udiv32(8u * uartclk_hz, UART_BAUD); /* 128 * UARTCLK / (16 * baud) */
    uint32_t div64 = (div128 + 1u) >> 1;
    uint32_t ibrd = div64 >> 6, fbrd = div64 & UART_FBRD_MASK;
    if (ibrd == 0u) {
        ibrd = 1u;
        fbrd = 0u;
    } else if (ibrd >= UART_IBRD_MAX) {
        ibrd = UART_IBRD_MAX;
        fbrd = 0u;
    }
    UART_IBRD = ibrd;
    UART_FBRD = fbrd; /* both latched by the LCR_H write that follows */
}

void tt_port_init(void)
{
    clocks_init();
    CLK_PERI_CTRL = 0u; /* ENABLE off before (re)selecting the non-glitchless aux source */
    (void)CLK_PERI_CTRL;
    (void)CLK_PERI_CTRL; /* >= 2 cycles of the old source (2.15 "configuring") */
    CLK_PERI_CTRL = CLK_PERI_AUXSRC_CLK_SYS | CLK_PERI_ENABLE;

    (void)unreset(RESET_IO_BANK0 | RESET_PADS_BANK0);
    RESETS_RESET_SET = RESET_UART0; /* a clean PL011 whatever ran before */
    (void)unreset(RESET_UART0);

    PADS_GPIO(UART_TX_PIN) = PAD_DRIVE_4MA | PAD_SCHMITT | PAD_IE;
    PADS_GPIO(UART_RX_PIN) = PAD_DRIVE_4MA | PAD_SCHMITT | PAD_IE | PAD_PUE; /* idle high if unplugged */
    GPIO_CTRL(UART_TX_PIN) = GPIO_FUNC_UART;
    GPIO_CTRL(UART_RX_PIN) = GPIO_FUNC_UART;

    UART_CR = 0u; /* disabled while configured */
    UART_IMSC = 0u;
    UART_DMACR = 0u;
    uart_set_baud(s_clk_sys_hz); /* clk_peri = clk_sys */
    UART_LCR_H = UART_LCR_H_WLEN_8 | UART_LCR_H_FEN;
    UART_RSR = 0u;
    UART_CR = UART_CR_UARTEN | UART_CR_TXE | UART_CR_RXE;

    SYST_CSR = 0u;
    SYST_RVR = SYSTICK_MASK;
    SYST_CVR = 0u; /* any write clears it */
    SYST_CSR = SYST_CSR_CLKSOURCE_CPU | SYST_CSR_ENABLE;
}

int tt_port_getc(void)
{
    while (UART_FR & UART_FR_RXFE) {}
    uint32_t dr = UART_DR;
    if (dr & UART_DR_ERRORS) UART_RSR = 0u; /* clear the sticky copy; the PL011 keeps receiving */
    return (int)(dr & BYTE_MASK);
}

void tt_port_write(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (UART_FR & UART_FR_TXFF) {}
        UART_DR = p[i];
    }
    while (UART_FR & UART_FR_BUSY) {}
}

uint32_t tt_port_ticks(void) { return (SYSTICK_MASK - SYST_CVR) & SYSTICK_MASK; }
uint32_t tt_port_tick_bits(void) { return SYSTICK_BITS; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_CYCLES; }

/* ---- checkpoint flash through the boot ROM (2.8.3) ---- */
typedef void (*rom_void_fn)(void);
typedef void (*rom_erase_fn)(uint32_t offset, size_t count, uint32_t block_size, uint8_t block_cmd);
typedef void (*rom_program_fn)(uint32_t offset, const uint8_t *data, size_t count);
typedef void *(*rom_lookup_fn)(const uint16_t *table, uint32_t code);

/* Looked up while XIP is on, kept on the caller's stack (RAM) for the RAM functions. */
struct rom_flash {
    rom_void_fn connect_internal_flash, flash_exit_xip, flash_flush_cache, flash_enter_cmd_xip;
    rom_erase_fn flash_range_erase;
    rom_program_fn flash_range_program;
};

static uint32_t s_page[FLASH_PAGE / 4u]; /* the RAM page handed to flash_range_program */

/* The ROM's well-known words sit below 0x20: the empty asm hides the small constant address
 * from GCC (otherwise -Warray-bounds treats it as a null-pointer dereference). */
static uint32_t rom_read(uintptr_t addr, uint32_t bytes)
{
    __asm__("" : "+r"(addr));
    return bytes == 2u ? *(const volatile uint16_t *)addr : *(const volatile uint32_t *)addr;
}

static int rom_flash_lookup(struct rom_flash *f)
{
    if ((rom_read(ROM_MAGIC_ADDR, 4u) & ROM_MAGIC_MASK) != ROM_MAGIC) return -1;
    const uint16_t *table = (const uint16_t *)(uintptr_t)rom_read(ROM_FUNC_TABLE_PTR, 2u);
    rom_lookup_fn lookup = (rom_lookup_fn)(uintptr_t)rom_read(ROM_TABLE_LOOKUP_PTR, 2u);
    f->connect_internal_flash = (rom_void_fn)(uintptr_t)lookup(table, ROM_CODE('I', 'F'));
    f->flash_exit_xip = (rom_void_fn)(uintptr_t)lookup(table, ROM_CODE('E', 'X'));
    f->flash_range_erase = (rom_erase_fn)(uintptr_t)lookup(table, ROM_CODE('R', 'E'));
    f->flash_range_program = (rom_program_fn)(uintptr_t)lookup(table, ROM_CODE('R', 'P'));
    f->flash_flush_cache = (rom_void_fn)(uintptr_t)lookup(table, ROM_CODE('F', 'C'));
    f->flash_enter_cmd_xip = (rom_void_fn)(uintptr_t)lookup(table, ROM_CODE('C', 'X'));
    return f->connect_internal_flash && f->flash_exit_xip && f->flash_range_erase &&
                   f->flash_range_program && f->flash_flush_cache && f->flash_enter_cmd_xip
               ? 0
               : -1;
}

static inline uint32_t irq_save(void)
{
    uint32_t primask;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask)::"memory");
    return primask;
}

static inline void irq_restore(uint32_t primask) { __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory"); }

/* 2.8.3's call sequence. Runs from RAM: between flash_exit_xip and flash_enter_cmd_xip any
 * flash fetch or read would hang the bus. Only registers, the stack and ROM code are used. */
RAMFUNC static void ram_flash_erase(const struct rom_flash *f, uint32_t offset, uint32_t count)
{
    f->connect_internal_flash();
    f->flash_exit_xip();
    f->flash_range_erase(offset, count, FLASH_BLOCK, FLASH_BLOCK_ERASE_CMD);
    f->flash_flush_cache(); /* also releases the chip-select override flash_exit_xip set */
    f->flash_enter_cmd_xip();
}

RAMFUNC static void ram_flash_program(const struct rom_flash *f, uint32_t offset, const uint8_t *page)
{
    f->connect_internal_flash();
    f->flash_exit_xip();
    f->flash_range_program(offset, page, FLASH_PAGE);
    f->flash_flush_cache();
    f->flash_enter_cmd_xip();
}

uint32_t tt_port_flash_slot_size(void) { return SLOT_SIZE; }
uint32_t tt_port_flash_write_unit(void) { return FLASH_WRITE_UNIT; }

const uint8_t *tt_port_flash_slot(uint32_t slot)
{
    return slot == 0u ? (const uint8_t *)SLOT0_ADDR : slot == 1u ? (const uint8_t *)SLOT1_ADDR : NULL;
}

int tt_port_flash_erase(uint32_t slot)
{
    const uint8_t *base = tt_port_flash_slot(slot);
    struct rom_flash f;
    if (!base || rom_flash_lookup(&f)) return -1;
    uint32_t primask = irq_save();
    ram_flash_erase(&f, (uint32_t)(uintptr_t)base - XIP_BASE, SLOT_SIZE);
    irq_restore(primask);
    /* The ROM reports nothing: verify through XIP (its cache was flushed). */
    const volatile uint32_t *w = (const volatile uint32_t *)base;
    for (uint32_t i = 0; i < SLOT_SIZE / 4u; i++)
        if (w[i] != ERASED_WORD) return -1;
    return 0;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n)
{
    const uint8_t *base = tt_port_flash_slot(slot);
    struct rom_flash f;
    if (!base || offset % FLASH_WRITE_UNIT || n % FLASH_WRITE_UNIT || offset > SLOT_SIZE ||
        n > SLOT_SIZE - offset || rom_flash_lookup(&f))
        return -1;
    const uint32_t start = (uint32_t)(uintptr_t)base - XIP_BASE + offset; /* flash offset */
    const uint32_t end = start + (uint32_t)n;
    volatile uint8_t *buf = (volatile uint8_t *)s_page; /* volatile: no memset/memcpy calls */
    for (uint32_t page = start & ~(FLASH_PAGE - 1u); page < end; page += FLASH_PAGE) {
        for (uint32_t i = 0; i < FLASH_PAGE; i++) buf[i] = ERASED_BYTE; /* 1s: bits left alone */
        uint32_t lo = page < start ? start : page;
        uint32_t hi = end < page + FLASH_PAGE ? end : page + FLASH_PAGE;
        for (uint32_t a = lo; a < hi; a++) buf[a - page] = p[a - start]; /* p may be in flash */
        uint32_t primask = irq_save();
        ram_flash_program(&f, page, (const uint8_t *)s_page);
        irq_restore(primask);
    }
    const volatile uint8_t *dst = base + offset;
    for (size_t i = 0; i < n; i++) /* verify: NOR bits only go 1 -> 0 */
        if (dst[i] != p[i]) return -1;
    return 0;
}
