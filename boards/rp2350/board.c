/* tinytrain board layer: Raspberry Pi Pico 2 (RP2350, its Cortex-M33 side in the Secure state,
 * 4 MB QSPI flash, 520 KB SRAM), implements firmware/tt_port.h. Written from the RP2350
 * datasheet and the ARMv8-M ARM (DDI 0553); no Pico SDK code or headers. Register blocks name
 * their datasheet chapter (2.1/2.2 bus fabric and address map, 5.2 boot sequence, 5.4 bootrom
 * APIs, 5.9 metadata blocks, 7 resets, 8.1 clocks, 8.2 XOSC, 8.3 ROSC, 8.6 PLL, 9 GPIO and pads,
 * 12.1 UART = Arm PL011, 12.14 QMI).
 * Clocks (8.1, 8.2, 8.6): XOSC 12 MHz crystal -> clk_ref; PLL_SYS REFDIV 1, FBDIV 125 (VCO
 *   1500 MHz), POSTDIV1 5, POSTDIV2 2 -> clk_sys 150 MHz (8.6.4's table); clk_peri = clk_sys.
 *   If the XOSC never reports STABLE within a bounded wait, clk_sys runs on clk_ref, which the
 *   boot ROM keeps on the ring oscillator at a nominal 11 MHz (8.3: 4.6-24 MHz with PVT, so the
 *   link may then not work); if the PLL never locks, clk_sys = clk_ref = XOSC 12 MHz. The UART
 *   divisor is computed from the clock reached.
 * UART (12.1, 9): UART0 on GP0 (TX) / GP1 (RX), function 2; pads get input enable and lose
 *   their isolation latch (ISO) after the function is selected. 115200 8N1, FIFOs on, polled.
 * Ticks: DWT->CYCCNT (ARMv8-M DWT; no lock access register), 32 bits.
 * Boot (5.9.5): the IMAGE_DEF block below (Arm, Secure, executable, RP2350) follows the vector
 *   table in the first 4 KB of flash; with no VECTOR_TABLE/ENTRY_POINT item the ROM enters
 *   through the vector table at the start of the image (0x10000000), setting MSP and VTOR.
 *   The ROM itself sets up XIP while scanning flash (5.2.7): no boot2 on this chip.
 * Flash (5.4.8): erase and program go through the ROM's low-level routines found with
 *   rom_table_lookup(code, RT_FLAG_FUNC_ARM_SEC): connect_internal_flash, flash_exit_xip,
 *   flash_range_erase/_program (flash OFFSETS; 4 KB sectors, 64 KB D8h blocks where aligned;
 *   whole 256-byte pages), flash_flush_cache; then, as 5.4.8.10 requires, the XIP setup function
 *   the ROM saved at the base of boot RAM is copied to SRAM (boot RAM never executes) and run
 *   to restore the read mode found at boot. The QMI is in direct mode meanwhile (XIP accesses
 *   bus-fault), so the sequence runs from RAM functions (.data, copied by startup.c) with
 *   interrupts masked, on ROM pointers and a page buffer already in RAM. 4-byte program units
 *   are made from pages pre-filled with 0xFF (programming 1s leaves NOR bits as they are).
 *   Boot locks (5.4.4) are left disabled, as after reset; core 1 stays parked in the ROM.
 * XIP speed: the ROM's chosen QMI divisor stays; QMI SCK is clk_sys / CLKDIV (12.14.3), so its
 *   SCK rises with clk_sys to 150 MHz exactly as under the SDK's default (no XIP setup) build.
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the ROM
 *   accepting the IMAGE_DEF, the clock switch and the baud rate on the wire, DWT counting in
 *   the Secure state (debug authentication from OTP), the ROM flash calls and the saved XIP
 *   setup function all need a Pico 2.
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define DSB_ISB() __asm__ volatile("dsb 0xF\n\tisb 0xF" ::: "memory")

/* ---- atomic register aliases, 2.1 (bus fabric): +0x2000 bitmask set, +0x3000 bitmask clear ---- */
#define ALIAS_SET 0x2000u
#define ALIAS_CLR 0x3000u

/* ---- RESETS, 7 (base 0x40020000, 2.2 address map) ---- */
#define RESETS_BASE 0x40020000u
#define RESETS_RESET_SET REG32(RESETS_BASE + ALIAS_SET + 0x0u)
#define RESETS_RESET_CLR REG32(RESETS_BASE + ALIAS_CLR + 0x0u)
#define RESETS_RESET_DONE REG32(RESETS_BASE + 0x8u)
#define RESET_IO_BANK0 (1u << 6)
#define RESET_PADS_BANK0 (1u << 9)
#define RESET_PLL_SYS (1u << 14)
#define RESET_UART0 (1u << 26)

/* ---- XOSC, 8.2 (base 0x40048000) ---- */
#define XOSC_BASE 0x40048000u
#define XOSC_CTRL REG32(XOSC_BASE + 0x00u)
#define XOSC_STATUS REG32(XOSC_BASE + 0x04u)
#define XOSC_STARTUP REG32(XOSC_BASE + 0x0Cu)
#define XOSC_CTRL_FREQ_1_15MHZ 0xAA0u           /* FREQ_RANGE[11:0] */
#define XOSC_CTRL_ENABLE (0xFABu << 12)         /* ENABLE[23:12] magic */
#define XOSC_STATUS_STABLE (1u << 31)
#define XOSC_HZ 12000000u                       /* the Pico 2's crystal */
#define XOSC_STARTUP_DELAY 188u /* DELAY[13:0] in 256 crystal cycles: ~4 ms (8.2.4: 1 ms suffices) */

/* ---- clk_ref out of the boot ROM, 8.3: ring oscillator, nominal 11 MHz ---- */
#define CLK_REF_BOOT_NOMINAL_HZ 11000000u

/* ---- PLL_SYS, 8.6 (base 0x40050000) ---- */
#define PLL_SYS_BASE 0x40050000u
#define PLL_CS REG32(PLL_SYS_BASE + 0x0u)
#define PLL_PWR REG32(PLL_SYS_BASE + 0x4u)
#define PLL_FBDIV_INT REG32(PLL_SYS_BASE + 0x8u)
#define PLL_PRIM REG32(PLL_SYS_BASE + 0xCu)
#define PLL_CS_LOCK (1u << 31)
#define PLL_PWR_DSMPD (1u << 2)     /* DSM off: integer feedback (must stay set) */
#define PLL_PWR_POSTDIVPD (1u << 3) /* post dividers powered down */
#define PLL_REFDIV 1u               /* CS.REFDIV[5:0]: 12 MHz reference */
#define PLL_FBDIV 125u              /* VCO 1500 MHz (750-1600 MHz allowed) */
#define PLL_POSTDIV1 5u             /* PRIM.POSTDIV1[18:16] */
#define PLL_POSTDIV2 2u             /* PRIM.POSTDIV2[14:12] -> 1500 / 10 = 150 MHz */
#define PLL_PRIM_POSTDIV1_SHIFT 16u
#define PLL_PRIM_POSTDIV2_SHIFT 12u
#define PLL_SYS_HZ 150000000u

/* ---- CLOCKS, 8.1 (base 0x40010000) ---- */
#define CLOCKS_BASE 0x40010000u
#define CLK_REF_CTRL REG32(CLOCKS_BASE + 0x30u)
#define CLK_REF_DIV REG32(CLOCKS_BASE + 0x34u)
#define CLK_REF_SELECTED REG32(CLOCKS_BASE + 0x38u)
#define CLK_SYS_CTRL REG32(CLOCKS_BASE + 0x3Cu)
#define CLK_SYS_DIV REG32(CLOCKS_BASE + 0x40u)
#define CLK_SYS_SELECTED REG32(CLOCKS_BASE + 0x44u)
#define CLK_PERI_CTRL REG32(CLOCKS_BASE + 0x48u)
#define CLK_PERI_DIV REG32(CLOCKS_BASE + 0x4Cu)
#define CLK_REF_SRC_MASK 0x3u     /* SRC[1:0]: 0 rosc_clksrc_ph, 1 aux, 2 xosc_clksrc, 3 lposc */
#define CLK_REF_SRC_ROSC 0x0u
#define CLK_REF_SRC_XOSC 0x2u
#define CLK_REF_DIV_1 (1u << 16)  /* DIV.INT[23:16] */
#define CLK_SYS_SRC_AUX (1u << 0) /* SRC[0]: 0 clk_ref, 1 clksrc_clk_sys_aux */
#define CLK_SYS_AUXSRC_MASK (0x7u << 5) /* AUXSRC[7:5]: 0 clksrc_pll_sys */
#define CLK_SYS_AUXSRC_PLL_SYS (0x0u << 5)
#define CLK_SYS_DIV_1 (1u << 16)  /* DIV.INT[31:16], FRAC[15:0] = 0 */
#define CLK_PERI_DIV_1 (1u << 16) /* DIV.INT[17:16] */
#define CLK_PERI_ENABLE (1u << 11)
#define CLK_PERI_AUXSRC_CLK_SYS (0x0u << 5)
/* SELECTED registers are one-hot: bit n set when the glitchless mux has switched to SRC n. */
#define SELECTED(src) (1u << (src))

/* ---- IO_BANK0 (base 0x40028000) and PADS_BANK0 (base 0x40038000), 9 ---- */
#define IO_BANK0_BASE 0x40028000u
#define GPIO_CTRL(pin) REG32(IO_BANK0_BASE + 8u * (pin) + 0x4u)
#define GPIO_FUNC_UART 2u /* FUNCSEL[4:0] = 2: GP0 UART0 TX, GP1 UART0 RX; overrides all 0 */
#define PADS_BANK0_BASE 0x40038000u
#define PADS_GPIO(pin) REG32(PADS_BANK0_BASE + 0x4u + 4u * (pin))
#define PAD_SCHMITT (1u << 1)
#define PAD_PUE (1u << 3)
#define PAD_DRIVE_4MA (1u << 4) /* DRIVE[5:4] = 1 (reset value) */
#define PAD_IE (1u << 6)        /* input enable (0 after reset on this chip); OD[7] = 0 */
#define PAD_ISO (1u << 8)       /* isolation latch, 1 after reset: clear once configured */
#define UART_TX_PIN 0u
#define UART_RX_PIN 1u

/* ---- UART0, 12.1 (PL011, base 0x40070000) ---- */
#define UART0_BASE 0x40070000u
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

/* ---- Debug: DEMCR and DWT, ARMv8-M ARM (DEMCR 0xE000EDFC, DWT 0xE0001000) ---- */
#define DEMCR REG32(0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL REG32(0xE0001000u)
#define DWT_CYCCNT REG32(0xE0001004u)
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCLE_BITS 32u

/* ---- boot ROM, 5.4.1 (fixed words) and 5.4.8 (functions) ---- */
#define ROM_MAGIC_ADDR 0x10u        /* 'M', 'u', version 2 */
#define ROM_MAGIC 0x02754Du
#define ROM_MAGIC_MASK 0x00FFFFFFu
#define ROM_TABLE_LOOKUP_PTR 0x16u  /* 16-bit pointer to rom_table_lookup(code, mask) */
#define RT_FLAG_FUNC_ARM_SEC 0x0004u /* mask: the Arm Secure entry points */
#define ROM_CODE(c1, c2) ((uint32_t)(c1) | ((uint32_t)(c2) << 8))
#define BOOTRAM_BASE 0x400E0000u     /* 2.2: boot RAM; its first 256 bytes: the XIP setup function */
#define XIP_SETUP_WORDS 64u          /* 256 bytes, position independent (5.2.7) */

/* ---- flash, 5.4.8 (ROM flash functions) and the XIP map ---- */
#define XIP_BASE 0x10000000u
#define FLASH_PAGE 256u              /* program granularity of flash_range_program */
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
#error "checkpoint slots are XIP addresses of chip select 0 (0x10000000-0x10FFFFFF)"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1

#define READY_SPINS 500000u /* >= 2M cycles (>= 4 per APB poll): >= 80 ms at the ROSC's 24 MHz */

/* Code that must not execute from flash: its section matches the linker script's *(.data*), so
 * startup.c copies it to RAM with .data (not named ".data.<x>": the assembler warns about code in
 * a section of that special name), and it is called through a register (long_call: RAM at
 * 0x20000000 is out of BL range of flash at 0x10000000). */
#define RAMFUNC __attribute__((section(".data_tt_ramfunc"), noinline, noclone, long_call))

/* ---- IMAGE_DEF, 5.9 (block format 5.9.1, items 5.9.3, the minimum Arm block 5.9.5) ----
 * A block is START marker, items, a LAST item, a link word, END marker. Item header word:
 * bits [6:0] type, bit 7 size_flag (0: 1-byte size in bits [15:8], the item's length in words
 * including the header; 1: 2-byte size in bits [23:8]), then item data. */
#define PICOBIN_BLOCK_MARKER_START 0xFFFFDED3u
#define PICOBIN_BLOCK_MARKER_END 0xAB123579u
#define PICOBIN_ITEM_1BS_IMAGE_TYPE 0x42u /* size_flag 0, type 0x42 */
#define PICOBIN_ITEM_2BS_LAST 0xFFu       /* size_flag 1, type 0x7F */
/* IMAGE_TYPE flags, bits [31:16] of its (only) word (5.9.3.1 IMAGE_DEF item): */
#define IMAGE_TYPE_EXE 0x1u                     /* [3:0] image type 1: executable */
#define IMAGE_TYPE_EXE_SECURITY_S (0x2u << 4)   /* [5:4] 2: runs in the Secure state */
#define IMAGE_TYPE_EXE_CPU_ARM (0x0u << 8)      /* [10:8] 0: Arm */
#define IMAGE_TYPE_EXE_CHIP_RP2350 (0x1u << 12) /* [14:12] 1: RP2350; [15] TBYB = 0 */
#define IMAGE_TYPE_FLAGS \
    (IMAGE_TYPE_EXE | IMAGE_TYPE_EXE_SECURITY_S | IMAGE_TYPE_EXE_CPU_ARM | IMAGE_TYPE_EXE_CHIP_RP2350)
#define IMAGE_TYPE_ITEM_WORDS 1u
#define IMAGE_DEF_IMAGE_TYPE \
    (PICOBIN_ITEM_1BS_IMAGE_TYPE | (IMAGE_TYPE_ITEM_WORDS << 8) | (IMAGE_TYPE_FLAGS << 16))
#define IMAGE_DEF_LAST (PICOBIN_ITEM_2BS_LAST | (IMAGE_TYPE_ITEM_WORDS << 8)) /* words of the items before it; [31:24] pad 0 */
#define IMAGE_DEF_LINK_SELF 0x00000000u /* relative offset of the next block: 0 = a loop of this block only */
/* 5.9.5 quotes the resulting words verbatim: check the bit assembly against them. */
typedef char image_def_type_word_is_0x10210142[IMAGE_DEF_IMAGE_TYPE == 0x10210142u ? 1 : -1];
typedef char image_def_last_word_is_0x000001ff[IMAGE_DEF_LAST == 0x000001FFu ? 1 : -1];

__attribute__((section(".tt_image_def"), used, aligned(4))) static const uint32_t tt_rp2350_image_def[5] = {
    PICOBIN_BLOCK_MARKER_START, IMAGE_DEF_IMAGE_TYPE, IMAGE_DEF_LAST, IMAGE_DEF_LINK_SELF,
    PICOBIN_BLOCK_MARKER_END,
};

static uint32_t s_clk_sys_hz = CLK_REF_BOOT_NOMINAL_HZ; /* clk_sys = clk_peri actually reached */

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

/* 8.6 "Configuration": reset, dividers, power VCO, wait LOCK, post dividers, power them. */
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

/* 8.1: clk_ref and clk_sys have glitchless muxes (switch SRC, poll SELECTED); clk_sys's aux
 * mux may only change while SRC selects clk_ref. The ROM may leave clk_sys on a faster ROSC
 * tap (A3+ quadruples it), so clk_sys goes to clk_ref first, whatever happens next. */
static void clocks_init(void)
{
    CLK_SYS_CTRL &= ~CLK_SYS_SRC_AUX;
    if (wait_bits(&CLK_SYS_SELECTED, SELECTED(0u), SELECTED(0u))) return;
    CLK_SYS_DIV = CLK_SYS_DIV_1;
    if (xosc_start()) return; /* stay on clk_ref = ROSC, nominal 11 MHz */
    CLK_REF_CTRL = (CLK_REF_CTRL & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_XOSC;
    if (wait_bits(&CLK_REF_SELECTED, SELECTED(CLK_REF_SRC_XOSC), SELECTED(CLK_REF_SRC_XOSC))) {
        CLK_REF_CTRL = (CLK_REF_CTRL & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_ROSC;
        (void)wait_bits(&CLK_REF_SELECTED, SELECTED(CLK_REF_SRC_ROSC), SELECTED(CLK_REF_SRC_ROSC));
        return;
    }
    CLK_REF_DIV = CLK_REF_DIV_1; /* the ROM may have raised it to hold the ROSC at 11 MHz */
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

/* PL011: divisor = UARTCLK / (16 * baud) as IBRD + FBRD / 64, FBRD rounded (12.1 baud rate). */
static void uart_set_baud(uint32_t uartclk_hz)
{
    uint32_t div64 = ((8u * uartclk_hz) / UART_BAUD + 1u) >> 1; /* 8 * clk < 2^32 up to 536 MHz */
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
    (void)CLK_PERI_CTRL; /* >= 2 cycles of the old source (8.1 "configuring") */
    CLK_PERI_DIV = CLK_PERI_DIV_1;
    CLK_PERI_CTRL = CLK_PERI_AUXSRC_CLK_SYS | CLK_PERI_ENABLE;

    (void)unreset(RESET_IO_BANK0 | RESET_PADS_BANK0);
    RESETS_RESET_SET = RESET_UART0; /* a clean PL011 whatever ran before (UART boot uses it) */
    (void)unreset(RESET_UART0);

    /* 9: pad settings and function first, then release the isolation latch. */
    PADS_GPIO(UART_TX_PIN) = PAD_DRIVE_4MA | PAD_SCHMITT | PAD_IE | PAD_ISO;
    PADS_GPIO(UART_RX_PIN) = PAD_DRIVE_4MA | PAD_SCHMITT | PAD_IE | PAD_PUE | PAD_ISO; /* idle high if unplugged */
    GPIO_CTRL(UART_TX_PIN) = GPIO_FUNC_UART;
    GPIO_CTRL(UART_RX_PIN) = GPIO_FUNC_UART;
    PADS_GPIO(UART_TX_PIN) &= ~PAD_ISO;
    PADS_GPIO(UART_RX_PIN) &= ~PAD_ISO;

    UART_CR = 0u; /* disabled while configured */
    UART_IMSC = 0u;
    UART_DMACR = 0u;
    uart_set_baud(s_clk_sys_hz); /* clk_peri = clk_sys, divider 1 */
    UART_LCR_H = UART_LCR_H_WLEN_8 | UART_LCR_H_FEN;
    UART_RSR = 0u;
    UART_CR = UART_CR_UARTEN | UART_CR_TXE | UART_CR_RXE;

    DEMCR |= DEMCR_TRCENA;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
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

uint32_t tt_port_ticks(void) { return DWT_CYCCNT; }
uint32_t tt_port_tick_bits(void) { return DWT_CYCLE_BITS; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_CYCLES; }

/* ---- checkpoint flash through the boot ROM (5.4.8) ---- */
typedef void (*rom_void_fn)(void);
typedef void (*rom_erase_fn)(uint32_t offset, size_t count, uint32_t block_size, uint8_t block_cmd);
typedef void (*rom_program_fn)(uint32_t offset, const uint8_t *data, size_t count);
typedef void *(*rom_lookup_fn)(uint32_t code, uint32_t mask);

/* Looked up while XIP is on, kept on the caller's stack (RAM) for the RAM functions. */
struct rom_flash {
    rom_void_fn connect_internal_flash, flash_exit_xip, flash_flush_cache;
    rom_erase_fn flash_range_erase;
    rom_program_fn flash_range_program;
    rom_void_fn xip_setup; /* the SRAM copy of boot RAM's XIP setup function, or NULL */
};

static uint32_t s_page[FLASH_PAGE / 4u];       /* the RAM page handed to flash_range_program */
static uint32_t s_xip_setup[XIP_SETUP_WORDS]; /* SRAM copy of the XIP setup function */

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
    rom_lookup_fn lookup = (rom_lookup_fn)(uintptr_t)rom_read(ROM_TABLE_LOOKUP_PTR, 2u);
    f->connect_internal_flash = (rom_void_fn)(uintptr_t)lookup(ROM_CODE('I', 'F'), RT_FLAG_FUNC_ARM_SEC);
    f->flash_exit_xip = (rom_void_fn)(uintptr_t)lookup(ROM_CODE('E', 'X'), RT_FLAG_FUNC_ARM_SEC);
    f->flash_range_erase = (rom_erase_fn)(uintptr_t)lookup(ROM_CODE('R', 'E'), RT_FLAG_FUNC_ARM_SEC);
    f->flash_range_program = (rom_program_fn)(uintptr_t)lookup(ROM_CODE('R', 'P'), RT_FLAG_FUNC_ARM_SEC);
    f->flash_flush_cache = (rom_void_fn)(uintptr_t)lookup(ROM_CODE('F', 'C'), RT_FLAG_FUNC_ARM_SEC);
    if (!f->connect_internal_flash || !f->flash_exit_xip || !f->flash_range_erase ||
        !f->flash_range_program || !f->flash_flush_cache)
        return -1;
    /* 5.2.7: boot RAM is never executable; copy the (position-independent) XIP setup function
     * to SRAM. Without one (blank boot RAM) flash_exit_xip's 03h mode simply stays. */
    const volatile uint32_t *src = (const volatile uint32_t *)BOOTRAM_BASE;
    volatile uint32_t *dst = s_xip_setup; /* volatile: no memcpy call */
    for (uint32_t i = 0; i < XIP_SETUP_WORDS; i++) dst[i] = src[i];
    DSB_ISB(); /* the copied instructions are visible before they are fetched */
    f->xip_setup = s_xip_setup[0] == 0u || s_xip_setup[0] == ERASED_WORD
                       ? NULL
                       : (rom_void_fn)((uintptr_t)s_xip_setup | 1u); /* Thumb */
    return 0;
}

static inline uint32_t irq_save(void)
{
    uint32_t primask;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask)::"memory");
    return primask;
}

static inline void irq_restore(uint32_t primask) { __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory"); }

/* 5.4.8.10's sequence. Runs from RAM: while the ROM drives the QMI in direct mode any XIP
 * access bus-faults. Only registers, the stack, SRAM and ROM code are used. */
RAMFUNC static void ram_flash_erase(const struct rom_flash *f, uint32_t offset, uint32_t count)
{
    f->connect_internal_flash();
    f->flash_exit_xip();
    f->flash_range_erase(offset, count, FLASH_BLOCK, FLASH_BLOCK_ERASE_CMD);
    f->flash_flush_cache();
    if (f->xip_setup) f->xip_setup();
}

RAMFUNC static void ram_flash_program(const struct rom_flash *f, uint32_t offset, const uint8_t *page)
{
    f->connect_internal_flash();
    f->flash_exit_xip();
    f->flash_range_program(offset, page, FLASH_PAGE);
    f->flash_flush_cache();
    if (f->xip_setup) f->xip_setup();
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
