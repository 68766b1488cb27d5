/* tinytrain board layer: STM32F746G-DISCO (Cortex-M7, 1 MB flash, 320 KB RAM), implements
 * firmware/tt_port.h. Written from RM0385 (STM32F75xxx/F74xxx reference manual), the ARMv7-M ARM
 * (DDI 0403) and the Cortex-M7 TRM; no vendor headers. Each register block below names its RM0385
 * chapter (2 memory map, 3 FLASH, 4 PWR, 5 RCC, 6 GPIO, USART) and the register; subsection
 * numbers are deliberately not quoted.
 * Clocks (ch. 5): HSE 25 MHz crystal (HSEBYP off) -> PLL M=25 N=432 P=2 Q=9 -> SYSCLK 216 MHz,
 *   48 MHz on PLLQ; voltage scale 1 + over-drive (ch. 4 "Entering Over-drive mode"); FLASH_ACR
 *   7 WS + ART + prefetch (ch. 3 read-latency table, 2.7-3.6 V) before the switch; AHB /1,
 *   APB1 /4 = 54 MHz, APB2 /2 = 108 MHz. If HSE or any ready flag does not come up within a
 *   bounded loop we stay on HSI 16 MHz, prescalers /1; BRR is computed from the clock reached.
 * UART (USART ch., ch. 6): USART1, TX PA9, RX PB7, AF7 = the ST-LINK virtual COM port (UM1907),
 *   115200 8N1, oversampling 16, polled.
 * Ticks: DWT->CYCCNT (DDI 0403 §C1.8; the M7 needs its DWT lock access register unlocked), 32 bits.
 * Flash map (ch. 3 organisation table, AXIM view): sectors 0-3 32 KB, 4 128 KB, 5-7 256 KB.
 *   The two checkpoint slots are runs of whole sectors sized for the trainable parameters at
 *   build time (never sector 0, which boots); the program lives in the other sectors.
 *   Program unit 4 bytes (PSIZE x32, VDD 2.7-3.6 V).
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the clock
 *   tree, the baud rate on the wire, sector erase/program timing and error flags, and the
 *   read-after-program coherence all need a board run.
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define DSB() __asm__ volatile("dsb 0xF" ::: "memory")

/* ---- RCC registers, RM0385 ch. 5 (base 0x40023800 from the ch. 2 memory map) ---- */
#define RCC_BASE 0x40023800u
#define RCC_CR REG32(RCC_BASE + 0x00u)
#define RCC_PLLCFGR REG32(RCC_BASE + 0x04u)
#define RCC_CFGR REG32(RCC_BASE + 0x08u)
#define RCC_AHB1ENR REG32(RCC_BASE + 0x30u)
#define RCC_APB1ENR REG32(RCC_BASE + 0x40u)
#define RCC_APB2ENR REG32(RCC_BASE + 0x44u)
#define RCC_DCKCFGR2 REG32(RCC_BASE + 0x90u) /* dedicated clocks 2 */
#define RCC_CR_HSEON (1u << 16)
#define RCC_CR_HSERDY (1u << 17)
#define RCC_CR_HSEBYP (1u << 18)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
#define PLL_M 25u /* 25 MHz / 25 = 1 MHz VCO input */
#define PLL_N 432u /* VCO 432 MHz */
#define PLL_P_DIV2 0u /* PLLP field 00 = /2 -> 216 MHz */
#define PLL_Q 9u /* 48 MHz */
#define PLLCFGR_N_SHIFT 6u
#define PLLCFGR_P_SHIFT 16u
#define PLLCFGR_SRC_HSE (1u << 22)
#define PLLCFGR_Q_SHIFT 24u
#define PLLCFGR_FIELDS 0x0F437FFFu /* M[5:0] N[14:6] P[17:16] SRC[22] Q[27:24]; other bits reserved */
#define CFGR_SW_MASK 0x3u
#define CFGR_SW_PLL 0x2u
#define CFGR_SWS_MASK (0x3u << 2)
#define CFGR_SWS_PLL (0x2u << 2)
#define CFGR_PRESC_MASK 0xFCF0u /* HPRE[7:4] PPRE1[12:10] PPRE2[15:13] */
#define CFGR_PPRE1_DIV4 (0x5u << 10)
#define CFGR_PPRE2_DIV2 (0x4u << 13)
#define AHB1ENR_GPIOA (1u << 0)
#define AHB1ENR_GPIOB (1u << 1)
#define APB1ENR_PWR (1u << 28)
#define APB2ENR_USART1 (1u << 4)
#define DCKCFGR2_USART1SEL_MASK 0x3u /* 00 = PCLK2 */

/* ---- PWR registers, RM0385 ch. 4 (base 0x40007000) ---- */
#define PWR_BASE 0x40007000u
#define PWR_CR1 REG32(PWR_BASE + 0x00u)
#define PWR_CSR1 REG32(PWR_BASE + 0x04u)
#define PWR_CR1_VOS_SCALE1 (0x3u << 14)
#define PWR_CR1_ODEN (1u << 16)
#define PWR_CR1_ODSWEN (1u << 17)
#define PWR_CSR1_ODRDY (1u << 16)
#define PWR_CSR1_ODSWRDY (1u << 17)

/* ---- Flash interface registers, RM0385 ch. 3 (base 0x40023C00) ---- */
#define FLASH_BASE 0x40023C00u
#define FLASH_ACR REG32(FLASH_BASE + 0x00u)
#define FLASH_KEYR REG32(FLASH_BASE + 0x04u)
#define FLASH_SR REG32(FLASH_BASE + 0x0Cu)
#define FLASH_CR REG32(FLASH_BASE + 0x10u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_7WS 7u /* 210 < HCLK <= 216 MHz at 2.7-3.6 V */
#define FLASH_ACR_PRFTEN (1u << 8)
#define FLASH_ACR_ARTEN (1u << 9)
#define FLASH_KEY1 0x45670123u /* ch. 3 "Unlocking the Flash control register" */
#define FLASH_KEY2 0xCDEF89ABu
#define FLASH_SR_EOP (1u << 0)
#define FLASH_SR_ERRORS 0xF2u /* OPERR[1] WRPERR[4] PGAERR[5] PGPERR[6] ERSERR[7] */
#define FLASH_SR_BSY (1u << 16)
#define FLASH_CR_PG (1u << 0)
#define FLASH_CR_SER (1u << 1)
#define FLASH_CR_SNB_SHIFT 3u
#define FLASH_CR_SNB_MASK (0xFu << FLASH_CR_SNB_SHIFT) /* SNB[3:0] on F74x/F75x */
#define FLASH_CR_PSIZE_MASK (0x3u << 8)
#define FLASH_CR_PSIZE_X32 (0x2u << 8)
#define FLASH_CR_STRT (1u << 16)
#define FLASH_CR_LOCK (1u << 31)
#define FLASH_CR_OP_MASK (FLASH_CR_PG | FLASH_CR_SER | FLASH_CR_SNB_MASK | FLASH_CR_PSIZE_MASK)
#define FLASH_WRITE_UNIT 4u
#define ERASED_WORD 0xFFFFFFFFu
#define FLASH_BASE_ADDR 0x08000000u /* AXIM */
#define FLASH_SECTORS 8u
/* The slots are runs of whole sectors chosen for the trainable parameters at build time
 * (tinytrain.boards.flash_layout); the build passes their addresses and size. */
#if !defined(TT_CKPT_SLOT0) || !defined(TT_CKPT_SLOT1) || !defined(TT_CKPT_SLOT_SIZE)
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the build (board flash map)"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1
/* Sector start addresses (RM0385 §3.3, AXIM): 4 x 32 KB, 1 x 128 KB, 3 x 256 KB. */
static const uint32_t sector_start[FLASH_SECTORS + 1] = {
    0x08000000u, 0x08008000u, 0x08010000u, 0x08018000u, 0x08020000u,
    0x08040000u, 0x08080000u, 0x080C0000u, 0x08100000u,
};

/* ---- GPIO registers, RM0385 ch. 6 (GPIOA 0x40020000, GPIOB 0x40020400) ---- */
#define GPIOA_BASE 0x40020000u
#define GPIOB_BASE 0x40020400u
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
#define UART_TX_PIN 9u /* PA9 */
#define UART_RX_PIN 7u /* PB7 */

/* ---- USART1 registers, RM0385 USART chapter (base 0x40011000) ---- */
#define USART1_BASE 0x40011000u
#define USART_CR1 REG32(USART1_BASE + 0x00u)
#define USART_CR2 REG32(USART1_BASE + 0x04u)
#define USART_CR3 REG32(USART1_BASE + 0x08u)
#define USART_BRR REG32(USART1_BASE + 0x0Cu)
#define USART_ISR REG32(USART1_BASE + 0x1Cu)
#define USART_ICR REG32(USART1_BASE + 0x20u)
#define USART_RDR REG32(USART1_BASE + 0x24u)
#define USART_TDR REG32(USART1_BASE + 0x28u)
#define USART_CR1_UE (1u << 0)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_ISR_ERRORS 0xFu /* PE[0] FE[1] NF[2] ORE[3]; ICR clears them at the same bit positions */
#define USART_ISR_RXNE (1u << 5)
#define USART_ISR_TC (1u << 6)
#define USART_ISR_TXE (1u << 7)
#define UART_BAUD 115200u
#define BYTE_MASK 0xFFu

/* ---- Debug: DEMCR (DDI 0403 §C1.6.5), DWT (§C1.8), LAR (Cortex-M7 TRM, CoreSight lock) ---- */
#define DEMCR REG32(0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL REG32(0xE0001000u)
#define DWT_CYCCNT REG32(0xE0001004u)
#define DWT_LAR REG32(0xE0001FB0u)
#define DWT_LAR_KEY 0xC5ACCE55u
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCLE_BITS 32u

#define HSI_HZ 16000000u
#define SYSCLK_PLL_HZ 216000000u
#define APB2_DIV_PLL 2u
#define READY_SPINS 1000000u /* >= 62 ms at 16 MHz even at one poll per cycle; HSE needs ~2 ms */

static uint32_t s_core_hz = HSI_HZ; /* core clock actually reached (HCLK, AHB /1) */
static uint32_t s_apb2_div = 1u;    /* PCLK2 = s_core_hz / s_apb2_div clocks USART1 */

/* Wait for (reg & mask) == want, at most READY_SPINS polls. Returns 0 when reached. */
static inline int wait_bits(volatile uint32_t *reg, uint32_t mask, uint32_t want)
{
    for (uint32_t i = 0; i < READY_SPINS; i++)
        if ((*reg & mask) == want) return 0;
    return -1;
}

/* Sequence of RM0385 ch. 4 "Entering Over-drive mode" and ch. 5 (HSE, PLL, clock switch). */
static int clocks_to_216mhz(void)
{
    RCC_APB1ENR |= APB1ENR_PWR;
    (void)RCC_APB1ENR; /* read back: the enable takes effect before PWR is touched */
    PWR_CR1 |= PWR_CR1_VOS_SCALE1; /* VOS can only change while the PLL is off */
    RCC_CR = (RCC_CR & ~RCC_CR_HSEBYP) | RCC_CR_HSEON;
    if (wait_bits(&RCC_CR, RCC_CR_HSERDY, RCC_CR_HSERDY)) return -1;
    RCC_PLLCFGR = (RCC_PLLCFGR & ~PLLCFGR_FIELDS) | PLL_M | (PLL_N << PLLCFGR_N_SHIFT) |
                  (PLL_P_DIV2 << PLLCFGR_P_SHIFT) | PLLCFGR_SRC_HSE | (PLL_Q << PLLCFGR_Q_SHIFT);
    RCC_CR |= RCC_CR_PLLON;
    PWR_CR1 |= PWR_CR1_ODEN;
    if (wait_bits(&PWR_CSR1, PWR_CSR1_ODRDY, PWR_CSR1_ODRDY)) return -1;
    PWR_CR1 |= PWR_CR1_ODSWEN;
    if (wait_bits(&PWR_CSR1, PWR_CSR1_ODSWRDY, PWR_CSR1_ODSWRDY)) return -1;
    /* More wait states before a faster clock (ch. 3); read back to check it was taken. */
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY_MASK) | FLASH_ACR_LATENCY_7WS | FLASH_ACR_PRFTEN |
                FLASH_ACR_ARTEN;
    if ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_7WS) return -1;
    RCC_CFGR = (RCC_CFGR & ~CFGR_PRESC_MASK) | CFGR_PPRE1_DIV4 | CFGR_PPRE2_DIV2; /* HPRE = /1 */
    if (wait_bits(&RCC_CR, RCC_CR_PLLRDY, RCC_CR_PLLRDY)) return -1;
    RCC_CFGR = (RCC_CFGR & ~CFGR_SW_MASK) | CFGR_SW_PLL;
    return wait_bits(&RCC_CFGR, CFGR_SWS_MASK, CFGR_SWS_PLL);
}

static void clocks_init(void)
{
    if (clocks_to_216mhz() == 0) {
        s_core_hz = SYSCLK_PLL_HZ;
        s_apb2_div = APB2_DIV_PLL;
        return;
    }
    /* Fallback: back to HSI (reset source), PLL and HSE off, prescalers /1. The flash latency
     * set above (if any) is more than 16 MHz needs, which is safe. */
    RCC_CFGR &= ~(CFGR_SW_MASK | CFGR_PRESC_MASK);
    (void)wait_bits(&RCC_CFGR, CFGR_SWS_MASK, 0u);
    RCC_CR &= ~(RCC_CR_PLLON | RCC_CR_HSEON);
    s_core_hz = HSI_HZ;
    s_apb2_div = 1u;
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
    RCC_AHB1ENR |= AHB1ENR_GPIOA | AHB1ENR_GPIOB;
    RCC_APB2ENR |= APB2ENR_USART1;
    (void)RCC_APB2ENR;
    RCC_DCKCFGR2 &= ~DCKCFGR2_USART1SEL_MASK; /* USART1 kernel clock = PCLK2 */
    gpio_af7(GPIOA_BASE, UART_TX_PIN, 0u);
    gpio_af7(GPIOB_BASE, UART_RX_PIN, GPIO_PULL_UP); /* idle-high if the ST-LINK is unpowered */
    USART_CR1 = 0u;                                  /* UE = 0: M = 8 bits, OVER8 = 0, no parity */
    USART_CR2 = 0u;                                  /* 1 stop bit */
    USART_CR3 = 0u;                                  /* no flow control, no DMA */
    uint32_t pclk2 = s_core_hz / s_apb2_div;
    USART_BRR = (pclk2 + UART_BAUD / 2u) / UART_BAUD; /* OVER8 = 0: BRR = USARTDIV = fck / baud */
    USART_CR1 = USART_CR1_TE | USART_CR1_RE | USART_CR1_UE;

    DEMCR |= DEMCR_TRCENA;
    DWT_LAR = DWT_LAR_KEY; /* Cortex-M7: DWT writes from software are ignored while locked */
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

/* ---- checkpoint flash (RM0385 ch. 3: unlock, sector erase, programming sequences) ----
 * The F746 flash is single bank: while an erase or program runs, any fetch from flash (this
 * code included) stalls the bus until BSY clears. That is legal as long as the target sector is
 * not the one being executed from, which holds since code never lives in a slot's sectors.
 * Coherence: the slots are read through AXIM 0x08000000 (not the ITCM alias 0x00200000 that the
 * ART accelerator caches). AXIM reads go through the M7 L1 D-cache only if it is enabled; this
 * firmware does not enable it (if it ever does, invalidate the slot range after erase/program). */
uint32_t tt_port_flash_slot_size(void) { return SLOT_SIZE; }
uint32_t tt_port_flash_write_unit(void) { return FLASH_WRITE_UNIT; }

const uint8_t *tt_port_flash_slot(uint32_t slot)
{
    return slot == 0u ? (const uint8_t *)SLOT0_ADDR : slot == 1u ? (const uint8_t *)SLOT1_ADDR : NULL;
}

static inline uint32_t flash_wait(void)
{
    while (FLASH_SR & FLASH_SR_BSY) {}
    return FLASH_SR & FLASH_SR_ERRORS;
}

/* Wait for idle, clear stale flags, unlock; returns 0 when FLASH_CR is writable. */
static int flash_begin(void)
{
    (void)flash_wait();
    FLASH_SR = FLASH_SR_ERRORS | FLASH_SR_EOP; /* write 1 to clear */
    if (FLASH_CR & FLASH_CR_LOCK) {
        FLASH_KEYR = FLASH_KEY1;
        FLASH_KEYR = FLASH_KEY2;
    }
    return (FLASH_CR & FLASH_CR_LOCK) ? -1 : 0;
}

static inline void flash_end(void) { FLASH_CR = (FLASH_CR & ~FLASH_CR_OP_MASK) | FLASH_CR_LOCK; }

int tt_port_flash_erase(uint32_t slot)
{
    if (slot > 1u || flash_begin()) return -1;
    const uint32_t base = slot == 0u ? SLOT0_ADDR : SLOT1_ADDR;
    uint32_t err = 0u;
    /* every sector that starts inside the slot (the slot is a run of whole sectors) */
    for (uint32_t k = 0; !err && k < FLASH_SECTORS; k++) {
        if (sector_start[k] < base || sector_start[k] >= base + SLOT_SIZE) continue;
        FLASH_CR = (FLASH_CR & ~FLASH_CR_OP_MASK) | FLASH_CR_PSIZE_X32 | FLASH_CR_SER |
                   (k << FLASH_CR_SNB_SHIFT);
        FLASH_CR |= FLASH_CR_STRT;
        DSB();
        err = flash_wait();
    }
    flash_end();
    const volatile uint32_t *w = (const volatile uint32_t *)tt_port_flash_slot(slot);
    for (uint32_t i = 0; !err && i < SLOT_SIZE / FLASH_WRITE_UNIT; i++)
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
    FLASH_CR = (FLASH_CR & ~FLASH_CR_OP_MASK) | FLASH_CR_PSIZE_X32 | FLASH_CR_PG;
    uint32_t err = 0u;
    for (size_t i = 0; !err && i < n; i += FLASH_WRITE_UNIT) {
        uint32_t v = le32(p + i); /* one 32-bit STR per word (PSIZE x32) */
        *dst = v;
        DSB(); /* drain the M7 write buffer so the flash interface sees the write now */
        err = flash_wait();
        if (!err && *dst != v) err = 1u;
        dst++;
    }
    flash_end();
    return err ? -1 : 0;
}
