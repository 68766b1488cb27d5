/* tinytrain board layer: B-U585I-IOT02A discovery kit (STM32U585AI: Cortex-M33, 2 MB flash,
 * 768 KB contiguous SRAM), implements firmware/tt_port.h. Written from RM0456 (STM32U5 reference
 * manual), DS13086 (STM32U585xx datasheet), UM2839 (the board), the ARMv8-M ARM (DDI 0553) and
 * the Cortex-M33 TRM; no vendor headers. Each register block below names its RM0456 chapter
 * (2 memory map, 7 FLASH, 10 PWR, 11 RCC, 13 GPIO, USART) and the register; subsection numbers are
 * deliberately not quoted. TrustZone is off (TZEN = 0, as shipped): every register is reached at
 * its non-secure address and the flash through its non-secure registers (NSKEYR, NSSR, NSCR).
 * Clocks (ch. 10, 11): reset state is MSIS 4 MHz, regulator LDO, voltage range 4. We stay on the
 *   LDO (ch. 10: LDO and SMPS both serve every range; the SMPS only saves power) and go to range 1
 *   (VOS = 11, wait VOSRDY and ACTVOSRDY), then HSI16 -> PLL1 M=1 (16 MHz, PLL1RGE 8-16 MHz)
 *   N=20 (VCO 320 MHz) R=2 -> SYSCLK 160 MHz. Above 50 MHz the EPOD booster must be ready: its
 *   clock is the PLL1 source / PLL1MBOOST (/2 = 8 MHz, within 4-16 MHz), programmed while BOOSTEN
 *   = 0, then BOOSTEN, wait BOOSTRDY. FLASH_ACR 4 WS + prefetch (ch. 7 wait-state table, range 1,
 *   128 < HCLK <= 160 MHz), read back, before the switch. AHB, APB1/2/3 /1 (160 MHz is their
 *   limit). If any ready flag does not come up within a bounded loop we go back to MSIS 4 MHz
 *   (the reset clock), PLL1 and booster off; the voltage range reached is kept (a higher range
 *   is always valid for a lower clock). BRR is computed from the clock reached.
 * UART (USART ch., ch. 13): USART1, TX PA9, RX PA10, AF7 = the ST-LINK virtual COM port
 *   (UM2839), kernel clock PCLK2 (RCC_CCIPR1 USART1SEL = 00), 115200 8N1, oversampling 16, FIFO
 *   off, polled; PE/FE/NE/ORE are cleared as they come so they never wedge the link.
 * Ticks: DWT->CYCCNT (DDI 0553 DWT), 32 bits. ARMv8-M has no software lock on the DWT.
 * Flash map (ch. 7): 2 banks of 1 MB, 128 pages of 8 KB each; bank 1 at 0x08000000, bank 2 at
 *   0x08100000 (swapped when the SWAP_BANK option bit is set, which page erase honours). The two
 *   checkpoint slots are runs of whole pages sized for the trainable parameters at build time
 *   (boards/stm32u585.toml: at the top of bank 2), the program lives below them. Programming is
 *   by quad-word (16 bytes + ECC): each quad-word is written once after an erase, four 32-bit
 *   stores at a 16-byte-aligned address, the fourth starting the operation.
 * Caches: ICACHE (which also serves data reads of flash over the C-bus) stays disabled as after
 *   reset, so slot reads after erase/program need no invalidation; enabling it for speed would
 *   need ICACHE_CR CACHEINV after every flash operation.
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the clock
 *   tree and booster sequence, the baud rate on the wire, page erase/quad-word program timing and
 *   error flags (incl. erase and program with the fallback clock in voltage range 4), and bank
 *   selection with SWAP_BANK set all need a board run.
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define DSB() __asm__ volatile("dsb 0xF" ::: "memory")

/* ---- RCC registers, RM0456 ch. 11 (non-secure base 0x46020C00 from the ch. 2 memory map) ---- */
#define RCC_BASE 0x46020C00u
#define RCC_CR REG32(RCC_BASE + 0x00u)
#define RCC_CFGR1 REG32(RCC_BASE + 0x1Cu)
#define RCC_CFGR2 REG32(RCC_BASE + 0x20u)
#define RCC_CFGR3 REG32(RCC_BASE + 0x24u)
#define RCC_PLL1CFGR REG32(RCC_BASE + 0x28u)
#define RCC_PLL1DIVR REG32(RCC_BASE + 0x34u)
#define RCC_AHB2ENR1 REG32(RCC_BASE + 0x8Cu)
#define RCC_AHB3ENR REG32(RCC_BASE + 0x94u)
#define RCC_APB2ENR REG32(RCC_BASE + 0xA4u)
#define RCC_CCIPR1 REG32(RCC_BASE + 0xE0u) /* peripherals independent clock configuration 1 */
#define RCC_CR_HSION (1u << 8)
#define RCC_CR_HSIRDY (1u << 10)
#define RCC_CR_PLL1ON (1u << 24)
#define RCC_CR_PLL1RDY (1u << 25)
#define CFGR1_SW_MASK 0x3u
#define CFGR1_SW_PLL1 0x3u /* 00 MSIS, 01 HSI16, 10 HSE, 11 PLL1 R output */
#define CFGR1_SWS_MASK (0x3u << 2)
#define CFGR1_SWS_MSIS (0x0u << 2)
#define CFGR1_SWS_PLL1 (0x3u << 2)
#define CFGR2_PRESC_MASK 0x77Fu /* HPRE[3:0] PPRE1[6:4] PPRE2[10:8]: 0 = /1 */
#define CFGR3_PPRE3_MASK (0x7u << 4)
#define PLL1CFGR_SRC_MASK 0x3u
#define PLL1CFGR_SRC_HSI16 0x2u /* 00 none, 01 MSIS, 10 HSI16, 11 HSE */
#define PLL1CFGR_RGE_SHIFT 2u
#define PLL1CFGR_RGE_8_16MHZ 0x3u /* 00-10: 4-8 MHz, 11: 8-16 MHz reference */
#define PLL1CFGR_FRACEN (1u << 4)
#define PLL1CFGR_M_SHIFT 8u /* divider = PLL1M + 1 */
#define PLL1CFGR_MBOOST_SHIFT 12u
#define PLL1CFGR_MBOOST_DIV2 0x1u /* 0000 /1, 0001 /2, 0010 /4, ... */
#define PLL1CFGR_PEN (1u << 16)
#define PLL1CFGR_QEN (1u << 17)
#define PLL1CFGR_REN (1u << 18)
#define PLL1CFGR_FIELDS 0x0007FF1Fu /* SRC RGE FRACEN M[11:8] MBOOST[15:12] P/Q/R EN */
#define PLL1DIVR_N_SHIFT 0u /* multiplier = PLL1N + 1 */
#define PLL1DIVR_P_SHIFT 9u /* dividers = field + 1 */
#define PLL1DIVR_Q_SHIFT 16u
#define PLL1DIVR_R_SHIFT 24u
#define PLL_M 1u
#define PLL_N 20u /* 16 MHz x 20 = VCO 320 MHz */
#define PLL_PQR 2u /* R: 160 MHz (P, Q left disabled) */
#define AHB2ENR1_GPIOA (1u << 0)
#define AHB3ENR_PWR (1u << 2)
#define APB2ENR_USART1 (1u << 14)
#define CCIPR1_USART1SEL_MASK 0x3u /* 00 = PCLK2 */

/* ---- PWR registers, RM0456 ch. 10 (non-secure base 0x46020800) ---- */
#define PWR_BASE 0x46020800u
#define PWR_VOSR REG32(PWR_BASE + 0x0Cu)  /* voltage scaling */
#define PWR_SVMSR REG32(PWR_BASE + 0x3Cu) /* supply voltage monitoring status */
#define PWR_VOSR_BOOSTRDY (1u << 14)
#define PWR_VOSR_VOSRDY (1u << 15)
#define PWR_VOSR_VOS_MASK (0x3u << 16)
#define PWR_VOSR_VOS_RANGE1 (0x3u << 16) /* 11 range 1 (up to 160 MHz), 00 range 4 (reset) */
#define PWR_VOSR_BOOSTEN (1u << 18)
#define PWR_SVMSR_ACTVOSRDY (1u << 15)

/* ---- Flash interface registers, RM0456 ch. 7 (non-secure base 0x40022000) ---- */
#define FLASH_R_BASE 0x40022000u
#define FLASH_ACR REG32(FLASH_R_BASE + 0x00u)
#define FLASH_NSKEYR REG32(FLASH_R_BASE + 0x08u)
#define FLASH_NSSR REG32(FLASH_R_BASE + 0x20u)
#define FLASH_NSCR REG32(FLASH_R_BASE + 0x28u)
#define FLASH_OPTR REG32(FLASH_R_BASE + 0x40u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_4WS 4u /* range 1, 128 < HCLK <= 160 MHz */
#define FLASH_ACR_PRFTEN (1u << 8)
#define FLASH_KEY1 0x45670123u /* ch. 7 "Flash memory unlocking": NSKEYR key sequence */
#define FLASH_KEY2 0xCDEF89ABu
#define FLASH_NSSR_EOP (1u << 0)
#define FLASH_NSSR_ERRORS 0x20FAu /* OPERR[1] PROGERR[3] WRPERR[4] PGAERR[5] SIZERR[6] PGSERR[7] OPTWERR[13] */
#define FLASH_NSSR_BSY (1u << 16)
#define FLASH_NSSR_WDW (1u << 17) /* wait data to write: a quad-word is partly written */
#define FLASH_NSCR_PG (1u << 0)
#define FLASH_NSCR_PER (1u << 1)
#define FLASH_NSCR_MER1 (1u << 2)
#define FLASH_NSCR_PNB_SHIFT 3u
#define FLASH_NSCR_PNB_MASK (0x7Fu << FLASH_NSCR_PNB_SHIFT) /* PNB[6:0]: page in the bank */
#define FLASH_NSCR_BKER (1u << 11) /* page erase in bank 2 */
#define FLASH_NSCR_BWR (1u << 14)
#define FLASH_NSCR_MER2 (1u << 15)
#define FLASH_NSCR_STRT (1u << 16)
#define FLASH_NSCR_LOCK (1u << 31)
#define FLASH_NSCR_OP_MASK (FLASH_NSCR_PG | FLASH_NSCR_PER | FLASH_NSCR_MER1 | FLASH_NSCR_PNB_MASK | \
                            FLASH_NSCR_BKER | FLASH_NSCR_BWR | FLASH_NSCR_MER2)
#define FLASH_OPTR_SWAP_BANK (1u << 20) /* bank 2 at 0x08000000, bank 1 at 0x08100000 */
#define FLASH_BASE_ADDR 0x08000000u
#define FLASH_BANK_BYTES 0x00100000u /* 1 MB */
#define FLASH_PAGE_BYTES 0x2000u     /* 8 KB */
#define FLASH_END_ADDR (FLASH_BASE_ADDR + 2u * FLASH_BANK_BYTES)
#define FLASH_WRITE_UNIT 16u /* quad-word */
#define QUAD_WORDS 4u
#define ERASED_WORD 0xFFFFFFFFu
#define FLASH_SPINS 50000000u /* BSY polls: > 1 s at 160 MHz; a page erase takes milliseconds */
#define FLASH_TIMED_OUT FLASH_NSSR_BSY /* flash_wait's "error" when BSY/WDW never clear */
/* The slots are runs of whole pages chosen for the trainable parameters at build time
 * (tinytrain.boards.flash_layout); the build passes their addresses and size. */
#if !defined(TT_CKPT_SLOT0) || !defined(TT_CKPT_SLOT1) || !defined(TT_CKPT_SLOT_SIZE)
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the build (board flash map)"
#endif
#if (TT_CKPT_SLOT0 % 0x2000u) || (TT_CKPT_SLOT1 % 0x2000u) || (TT_CKPT_SLOT_SIZE % 0x2000u) || \
    TT_CKPT_SLOT_SIZE == 0u || TT_CKPT_SLOT0 < 0x08000000u || TT_CKPT_SLOT1 < 0x08000000u ||   \
    TT_CKPT_SLOT0 + TT_CKPT_SLOT_SIZE > 0x08200000u || TT_CKPT_SLOT1 + TT_CKPT_SLOT_SIZE > 0x08200000u
#error "the checkpoint slots must be whole 8 KB pages inside the 2 MB flash"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1

/* ---- GPIO registers, RM0456 ch. 13 (GPIOA non-secure 0x42020000) ---- */
#define GPIOA_BASE 0x42020000u
#define GPIO_MODER(b) REG32((b) + 0x00u)
#define GPIO_OSPEEDR(b) REG32((b) + 0x08u)
#define GPIO_PUPDR(b) REG32((b) + 0x0Cu)
#define GPIO_AFR(b, pin) REG32((b) + 0x20u + 4u * ((pin) >> 3)) /* AFRL 0x20, AFRH 0x24 */
#define GPIO_FIELD2_MASK 0x3u /* MODER/OSPEEDR/PUPDR: 2 bits per pin */
#define GPIO_AFR_FIELD_MASK 0xFu /* AFRL/AFRH: 4 bits per pin */
#define GPIO_MODE_AF 0x2u
#define GPIO_SPEED_HIGH 0x2u
#define GPIO_PULL_UP 0x1u
#define GPIO_AF7_USART1 7u
#define UART_TX_PIN 9u  /* PA9 */
#define UART_RX_PIN 10u /* PA10 */

/* ---- USART1 registers, RM0456 USART chapter (non-secure base 0x40013800) ---- */
#define USART1_BASE 0x40013800u
#define USART_CR1 REG32(USART1_BASE + 0x00u)
#define USART_CR2 REG32(USART1_BASE + 0x04u)
#define USART_CR3 REG32(USART1_BASE + 0x08u)
#define USART_BRR REG32(USART1_BASE + 0x0Cu)
#define USART_ISR REG32(USART1_BASE + 0x1Cu)
#define USART_ICR REG32(USART1_BASE + 0x20u)
#define USART_RDR REG32(USART1_BASE + 0x24u)
#define USART_TDR REG32(USART1_BASE + 0x28u)
#define USART_PRESC REG32(USART1_BASE + 0x2Cu)
#define USART_CR1_UE (1u << 0)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_ISR_ERRORS 0xFu /* PE[0] FE[1] NE[2] ORE[3]; ICR clears them at the same bit positions */
#define USART_ISR_RXNE (1u << 5) /* RXFNE with the FIFO off */
#define USART_ISR_TC (1u << 6)
#define USART_ISR_TXE (1u << 7) /* TXFNF with the FIFO off */
#define UART_BAUD 115200u
#define BYTE_MASK 0xFFu

/* ---- Debug: DEMCR and DWT (DDI 0553, ARMv8-M debug) ---- */
#define DEMCR REG32(0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL REG32(0xE0001000u)
#define DWT_CYCCNT REG32(0xE0001004u)
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCLE_BITS 32u

#define MSIS_HZ 4000000u /* the reset clock */
#define SYSCLK_PLL_HZ 160000000u
#define READY_SPINS 1000000u /* >= 250 ms at 4 MHz even at one poll per cycle */

static uint32_t s_core_hz = MSIS_HZ; /* core clock actually reached (HCLK = PCLK2, all /1) */

/* Wait for (reg & mask) == want, at most READY_SPINS polls. Returns 0 when reached. */
static inline int wait_bits(volatile uint32_t *reg, uint32_t mask, uint32_t want)
{
    for (uint32_t i = 0; i < READY_SPINS; i++)
        if ((*reg & mask) == want) return 0;
    return -1;
}

/* Sequence of RM0456 ch. 10 "Dynamic voltage scaling management" and the EPOD booster, ch. 7
 * (wait states before a faster clock) and ch. 11 (HSI16, PLL1, clock switch). */
static int clocks_to_160mhz(void)
{
    RCC_AHB3ENR |= AHB3ENR_PWR;
    (void)RCC_AHB3ENR; /* read back: the enable takes effect before PWR is touched */
    PWR_VOSR = (PWR_VOSR & ~(PWR_VOSR_VOS_MASK | PWR_VOSR_BOOSTEN)) | PWR_VOSR_VOS_RANGE1;
    if (wait_bits(&PWR_VOSR, PWR_VOSR_VOSRDY, PWR_VOSR_VOSRDY)) return -1;
    if (wait_bits(&PWR_SVMSR, PWR_SVMSR_ACTVOSRDY, PWR_SVMSR_ACTVOSRDY)) return -1;
    RCC_CR |= RCC_CR_HSION;
    if (wait_bits(&RCC_CR, RCC_CR_HSIRDY, RCC_CR_HSIRDY)) return -1;
    /* PLL1 off (as after reset) and BOOSTEN = 0: the only state PLL1MBOOST may be written in. */
    RCC_PLL1CFGR = (RCC_PLL1CFGR & ~PLL1CFGR_FIELDS) | PLL1CFGR_SRC_HSI16 |
                   (PLL1CFGR_RGE_8_16MHZ << PLL1CFGR_RGE_SHIFT) | ((PLL_M - 1u) << PLL1CFGR_M_SHIFT) |
                   (PLL1CFGR_MBOOST_DIV2 << PLL1CFGR_MBOOST_SHIFT) | PLL1CFGR_REN;
    RCC_PLL1DIVR = ((PLL_N - 1u) << PLL1DIVR_N_SHIFT) | ((PLL_PQR - 1u) << PLL1DIVR_P_SHIFT) |
                   ((PLL_PQR - 1u) << PLL1DIVR_Q_SHIFT) | ((PLL_PQR - 1u) << PLL1DIVR_R_SHIFT);
    PWR_VOSR |= PWR_VOSR_BOOSTEN;
    if (wait_bits(&PWR_VOSR, PWR_VOSR_BOOSTRDY, PWR_VOSR_BOOSTRDY)) return -1;
    RCC_CR |= RCC_CR_PLL1ON;
    if (wait_bits(&RCC_CR, RCC_CR_PLL1RDY, RCC_CR_PLL1RDY)) return -1;
    /* More wait states before a faster clock (ch. 7); read back to check it was taken. */
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY_MASK) | FLASH_ACR_LATENCY_4WS | FLASH_ACR_PRFTEN;
    if ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_4WS) return -1;
    RCC_CFGR2 &= ~CFGR2_PRESC_MASK; /* AHB, APB1, APB2 /1 */
    RCC_CFGR3 &= ~CFGR3_PPRE3_MASK; /* APB3 /1 */
    RCC_CFGR1 = (RCC_CFGR1 & ~CFGR1_SW_MASK) | CFGR1_SW_PLL1;
    return wait_bits(&RCC_CFGR1, CFGR1_SWS_MASK, CFGR1_SWS_PLL1);
}

static void clocks_init(void)
{
    if (clocks_to_160mhz() == 0) {
        s_core_hz = SYSCLK_PLL_HZ;
        return;
    }
    /* Fallback: back to MSIS 4 MHz (reset source), PLL1, booster and HSI16 off. The flash
     * latency and voltage range set above (if any) are more than 4 MHz needs, which is safe. */
    RCC_CFGR1 &= ~CFGR1_SW_MASK;
    (void)wait_bits(&RCC_CFGR1, CFGR1_SWS_MASK, CFGR1_SWS_MSIS);
    RCC_CR &= ~RCC_CR_PLL1ON;
    PWR_VOSR &= ~PWR_VOSR_BOOSTEN;
    RCC_CR &= ~RCC_CR_HSION;
    s_core_hz = MSIS_HZ;
}

static inline void gpio_af7(uint32_t base, uint32_t pin, uint32_t pull)
{
    uint32_t af = 4u * (pin & 7u), two = 2u * pin;
    GPIO_AFR(base, pin) = (GPIO_AFR(base, pin) & ~(GPIO_AFR_FIELD_MASK << af)) | (GPIO_AF7_USART1 << af);
    GPIO_OSPEEDR(base) = (GPIO_OSPEEDR(base) & ~(GPIO_FIELD2_MASK << two)) | (GPIO_SPEED_HIGH << two);
    GPIO_PUPDR(base) = (GPIO_PUPDR(base) & ~(GPIO_FIELD2_MASK << two)) | (pull << two);
    GPIO_MODER(base) = (GPIO_MODER(base) & ~(GPIO_FIELD2_MASK << two)) | (GPIO_MODE_AF << two);
}

void tt_port_init(void)
{
    clocks_init();
    RCC_AHB2ENR1 |= AHB2ENR1_GPIOA;
    RCC_APB2ENR |= APB2ENR_USART1;
    (void)RCC_APB2ENR;
    RCC_CCIPR1 &= ~CCIPR1_USART1SEL_MASK; /* USART1 kernel clock = PCLK2 */
    gpio_af7(GPIOA_BASE, UART_TX_PIN, 0u);
    gpio_af7(GPIOA_BASE, UART_RX_PIN, GPIO_PULL_UP); /* idle-high if the ST-LINK is unpowered */
    USART_CR1 = 0u;   /* UE = 0: M = 8 bits, OVER8 = 0, no parity, FIFO off */
    USART_CR2 = 0u;   /* 1 stop bit */
    USART_CR3 = 0u;   /* no flow control, no DMA */
    USART_PRESC = 0u; /* kernel clock /1 */
    USART_BRR = (s_core_hz + UART_BAUD / 2u) / UART_BAUD; /* OVER8 = 0: BRR = fck / baud */
    USART_CR1 = USART_CR1_TE | USART_CR1_RE | USART_CR1_UE;

    DEMCR |= DEMCR_TRCENA;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
}

int tt_port_getc(void)
{
    for (;;) {
        uint32_t isr = USART_ISR;
        if (isr & USART_ISR_ERRORS) USART_ICR = isr & USART_ISR_ERRORS; /* ORE would stop RXNE */
        if (isr & USART_ISR_RXNE) return (int)(USART_RDR & BYTE_MASK);
    }
}

void tt_port_write(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (!(USART_ISR & USART_ISR_TXE)) {}
        USART_TDR = p[i];
    }
    while (!(USART_ISR & USART_ISR_TC)) {}
}

uint32_t tt_port_ticks(void) { return DWT_CYCCNT; }
uint32_t tt_port_tick_bits(void) { return DWT_CYCLE_BITS; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_CYCLES; }

/* ---- checkpoint flash (RM0456 ch. 7: unlock, page erase, programming sequences) ----
 * Dual bank: an erase or program in one bank lets code keep running from the other (RWW); in
 * the same bank, fetches stall until BSY clears, which is legal since code never lives in a
 * slot's pages. No interrupt is enabled, so nothing can come between a quad-word's four stores. */
uint32_t tt_port_flash_slot_size(void) { return SLOT_SIZE; }
uint32_t tt_port_flash_write_unit(void) { return FLASH_WRITE_UNIT; }

const uint8_t *tt_port_flash_slot(uint32_t slot)
{
    return slot == 0u ? (const uint8_t *)SLOT0_ADDR : slot == 1u ? (const uint8_t *)SLOT1_ADDR : NULL;
}

/* Wait until neither BSY nor WDW is set; returns the error flags (FLASH_TIMED_OUT if stuck). */
static uint32_t flash_wait(void)
{
    for (uint32_t i = 0; i < FLASH_SPINS; i++) {
        uint32_t sr = FLASH_NSSR;
        if (!(sr & (FLASH_NSSR_BSY | FLASH_NSSR_WDW))) return sr & FLASH_NSSR_ERRORS;
    }
    return FLASH_TIMED_OUT;
}

/* Wait for idle, clear stale flags, unlock; returns 0 when FLASH_NSCR is writable. */
static int flash_begin(void)
{
    if (flash_wait() == FLASH_TIMED_OUT) return -1;
    FLASH_NSSR = FLASH_NSSR_ERRORS | FLASH_NSSR_EOP; /* write 1 to clear */
    if (FLASH_NSCR & FLASH_NSCR_LOCK) {
        FLASH_NSKEYR = FLASH_KEY1;
        FLASH_NSKEYR = FLASH_KEY2;
    }
    return (FLASH_NSCR & FLASH_NSCR_LOCK) ? -1 : 0;
}

/* Operation bits off, lock, and clear what the operation flagged so it cannot linger. */
static inline void flash_end(void)
{
    FLASH_NSCR = (FLASH_NSCR & ~FLASH_NSCR_OP_MASK) | FLASH_NSCR_LOCK;
    FLASH_NSSR = FLASH_NSSR_ERRORS | FLASH_NSSR_EOP;
}

int tt_port_flash_erase(uint32_t slot)
{
    if (slot > 1u || flash_begin()) return -1;
    const uint32_t base = slot == 0u ? SLOT0_ADDR : SLOT1_ADDR;
    /* BKER names the physical bank: with SWAP_BANK set, bank 2 is the one at 0x08000000. */
    const uint32_t swapped = (FLASH_OPTR & FLASH_OPTR_SWAP_BANK) ? 1u : 0u;
    uint32_t err = 0u;
    for (uint32_t a = base; !err && a < base + SLOT_SIZE; a += FLASH_PAGE_BYTES) {
        uint32_t off = a - FLASH_BASE_ADDR;
        uint32_t bank2 = (off / FLASH_BANK_BYTES) ^ swapped;
        uint32_t page = (off % FLASH_BANK_BYTES) / FLASH_PAGE_BYTES;
        FLASH_NSCR = (FLASH_NSCR & ~FLASH_NSCR_OP_MASK) | FLASH_NSCR_PER |
                     (page << FLASH_NSCR_PNB_SHIFT) | (bank2 ? FLASH_NSCR_BKER : 0u);
        FLASH_NSCR |= FLASH_NSCR_STRT;
        DSB();
        err = flash_wait();
    }
    flash_end();
    const volatile uint32_t *w = (const volatile uint32_t *)tt_port_flash_slot(slot);
    for (uint32_t i = 0; !err && i < SLOT_SIZE / 4u; i++)
        if (w[i] != ERASED_WORD) err = 1u;
    return err ? -1 : 0;
}

/* p may be unaligned: assemble each little-endian word from bytes. */
static inline uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n)
{
    if (slot > 1u || offset % FLASH_WRITE_UNIT || n % FLASH_WRITE_UNIT || offset > SLOT_SIZE ||
        n > SLOT_SIZE - offset)
        return -1;
    if (flash_begin()) return -1;
    volatile uint32_t *dst = (volatile uint32_t *)(uintptr_t)(tt_port_flash_slot(slot) + offset);
    FLASH_NSCR = (FLASH_NSCR & ~FLASH_NSCR_OP_MASK) | FLASH_NSCR_PG;
    uint32_t err = 0u;
    for (size_t i = 0; !err && i < n; i += FLASH_WRITE_UNIT) {
        for (uint32_t k = 0; k < QUAD_WORDS; k++) /* WDW until the fourth word starts it */
            dst[k] = le32(p + i + 4u * k);
        DSB();
        err = flash_wait();
        for (uint32_t k = 0; !err && k < QUAD_WORDS; k++)
            if (dst[k] != le32(p + i + 4u * k)) err = 1u;
        dst += QUAD_WORDS;
    }
    flash_end();
    return err ? -1 : 0;
}
