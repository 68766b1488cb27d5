/* tinytrain board layer: nRF52840-DK (PCA10056, Cortex-M4F @ 64 MHz, 1 MB flash, 256 KB RAM),
 * implements firmware/tt_port.h. Written from the nRF52840 Product Specification v1.x and the
 * ARMv7-M ARM (DDI 0403); no nRF SDK/MDK headers. Registers are cited by PS chapter name and
 * register name (NVMC is PS §4.3); subsection numbers of the other chapters are not quoted.
 * Clocks (CLOCK chapter): the CPU always runs at 64 MHz; HFCLK is switched to the 32 MHz crystal
 *   (HFXO, TASKS_HFCLKSTART) for an accurate UART; if it does not start within a bounded wait we
 *   keep HFINT (baud error up to ~1.5 %).
 * UART (UARTE chapter, GPIO chapter): UARTE0, TX P0.06, RX P0.08 (the DK's J-Link VCOM, RTS/CTS
 *   P0.05/P0.07 left unconnected), 115200 8N1, no flow control. EasyDMA reads/writes data RAM only
 *   (Memory chapter), so TX copies chunks into a static RAM buffer; RX keeps a 1-byte DMA buffer
 *   armed (RXD.MAXCNT = 1) and re-arms after each ENDRX; bytes arriving meanwhile wait in the UARTE
 *   RX FIFO, so the link must not stream more than a few bytes while nobody calls tt_port_getc.
 * Ticks: DWT->CYCCNT (DDI 0403 §C1.8; no lock access register on the M4), 32 bits.
 * Flash map (NVMC §4.3, 4 KB pages, word writes): 0x00000-0x01000 MBR of the Nordic DFU bootloader,
 *   application from 0x01000, then the two checkpoint slots (whole pages sized for the trainable
 *   parameters at build time), bootloader 0xE0000-. Erase ~85 ms per page (~1.4 s per slot); the CPU stalls on flash
 *   fetches while the NVMC is busy. No SoftDevice may be running (it owns the NVMC otherwise).
 * Untested without hardware: this is compile-checked only (tests/test_board_layers.py); the HFXO
 *   start, the UARTE on the wire (RX FIFO behaviour under re-arm) and NVMC erase/write need a DK.
 */
#include "tt_port.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define DSB() __asm__ volatile("dsb 0xF" ::: "memory")

/* ---- CLOCK (base 0x40000000) ---- */
#define CLOCK_BASE 0x40000000u
#define CLOCK_TASKS_HFCLKSTART REG32(CLOCK_BASE + 0x000u)
#define CLOCK_EVENTS_HFCLKSTARTED REG32(CLOCK_BASE + 0x100u)
#define HFXO_START_SPINS 1000000u /* HFXO starts in well under 1 ms; bound the wait anyway */

/* ---- GPIO P0 (base 0x50000000) ---- */
#define P0_BASE 0x50000000u
#define P0_OUTSET REG32(P0_BASE + 0x508u)
#define P0_PIN_CNF(pin) REG32(P0_BASE + 0x700u + 4u * (pin))
#define PIN_CNF_DIR_OUTPUT (1u << 0)
#define PIN_CNF_INPUT_DISCONNECT (1u << 1) /* 0 = input buffer connected */
#define PIN_CNF_PULLUP (3u << 2)
#define UART_TX_PIN 6u /* P0.06 */
#define UART_RX_PIN 8u /* P0.08 */

/* ---- UARTE0 (base 0x40002000) ---- */
#define UARTE0_BASE 0x40002000u
#define UARTE_TASKS_STARTRX REG32(UARTE0_BASE + 0x000u)
#define UARTE_TASKS_STARTTX REG32(UARTE0_BASE + 0x008u)
#define UARTE_EVENTS_ENDRX REG32(UARTE0_BASE + 0x110u)
#define UARTE_EVENTS_ENDTX REG32(UARTE0_BASE + 0x120u)
#define UARTE_EVENTS_ERROR REG32(UARTE0_BASE + 0x124u)
#define UARTE_SHORTS REG32(UARTE0_BASE + 0x200u)
#define UARTE_INTEN REG32(UARTE0_BASE + 0x300u)
#define UARTE_ERRORSRC REG32(UARTE0_BASE + 0x480u) /* write 1 to clear */
#define UARTE_ENABLE REG32(UARTE0_BASE + 0x500u)
#define UARTE_PSEL_RTS REG32(UARTE0_BASE + 0x508u)
#define UARTE_PSEL_TXD REG32(UARTE0_BASE + 0x50Cu)
#define UARTE_PSEL_CTS REG32(UARTE0_BASE + 0x510u)
#define UARTE_PSEL_RXD REG32(UARTE0_BASE + 0x514u)
#define UARTE_BAUDRATE REG32(UARTE0_BASE + 0x524u)
#define UARTE_RXD_PTR REG32(UARTE0_BASE + 0x534u)
#define UARTE_RXD_MAXCNT REG32(UARTE0_BASE + 0x538u)
#define UARTE_TXD_PTR REG32(UARTE0_BASE + 0x544u)
#define UARTE_TXD_MAXCNT REG32(UARTE0_BASE + 0x548u)
#define UARTE_CONFIG REG32(UARTE0_BASE + 0x56Cu)
#define UARTE_ENABLE_ENABLED 8u
#define UARTE_PSEL_DISCONNECTED 0xFFFFFFFFu /* CONNECT bit 31 = 1 */
#define UARTE_BAUD_115200 0x01D7E000u /* actual 115108 baud */
#define UARTE_CONFIG_8N1_NO_HWFC 0u /* HWFC = 0, PARITY = excluded, STOP = one */
#define UARTE_ERRORSRC_ALL 0xFu /* OVERRUN, PARITY, FRAMING, BREAK */
#define TX_CHUNK 64u

/* ---- NVMC, PS §4.3 (base 0x4001E000) ---- */
#define NVMC_BASE 0x4001E000u
#define NVMC_READY REG32(NVMC_BASE + 0x400u)
#define NVMC_CONFIG REG32(NVMC_BASE + 0x504u)
#define NVMC_ERASEPAGE REG32(NVMC_BASE + 0x508u)
#define NVMC_READY_READY 1u
#define NVMC_CONFIG_REN 0u /* read only */
#define NVMC_CONFIG_WEN 1u /* write enabled */
#define NVMC_CONFIG_EEN 2u /* erase enabled */
#define FLASH_PAGE_SIZE 4096u
#define FLASH_WRITE_UNIT 4u
#define ERASED_WORD 0xFFFFFFFFu
/* The slots are whole pages right below the bootloader, sized for the trainable parameters at
 * build time (tinytrain.boards.flash_layout); the build passes their addresses and size. */
#if !defined(TT_CKPT_SLOT0) || !defined(TT_CKPT_SLOT1) || !defined(TT_CKPT_SLOT_SIZE)
#error "TT_CKPT_SLOT0, TT_CKPT_SLOT1 and TT_CKPT_SLOT_SIZE come from the build (board flash map)"
#endif
#if TT_CKPT_SLOT_SIZE % 4096u != 0 || TT_CKPT_SLOT0 % 4096u != 0 || TT_CKPT_SLOT1 % 4096u != 0
#error "checkpoint slots must be whole 4 KB pages"
#endif
#define SLOT_SIZE TT_CKPT_SLOT_SIZE
#define SLOT0_ADDR TT_CKPT_SLOT0
#define SLOT1_ADDR TT_CKPT_SLOT1

/* ---- Debug: DEMCR (DDI 0403 §C1.6.5), DWT (§C1.8) ---- */
#define DEMCR REG32(0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL REG32(0xE0001000u)
#define DWT_CYCCNT REG32(0xE0001004u)
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCLE_BITS 32u

/* EasyDMA buffers: static, hence in data RAM. */
static volatile uint8_t s_rx_byte;
static uint8_t s_tx_buf[TX_CHUNK];

static inline void rx_arm(void)
{
    UARTE_RXD_PTR = (uint32_t)(uintptr_t)&s_rx_byte;
    UARTE_RXD_MAXCNT = 1u;
    UARTE_TASKS_STARTRX = 1u;
}

void tt_port_init(void)
{
    CLOCK_EVENTS_HFCLKSTARTED = 0u;
    CLOCK_TASKS_HFCLKSTART = 1u;
    for (uint32_t i = 0; i < HFXO_START_SPINS && !CLOCK_EVENTS_HFCLKSTARTED; i++) {}
    CLOCK_EVENTS_HFCLKSTARTED = 0u;

    /* TX idles high as an output before the UARTE takes the pin; RX input with pull-up. */
    P0_OUTSET = 1u << UART_TX_PIN;
    P0_PIN_CNF(UART_TX_PIN) = PIN_CNF_DIR_OUTPUT | PIN_CNF_INPUT_DISCONNECT;
    P0_PIN_CNF(UART_RX_PIN) = PIN_CNF_PULLUP; /* DIR input, input buffer connected */

    UARTE_ENABLE = 0u;
    UARTE_PSEL_TXD = UART_TX_PIN; /* PIN[4:0], PORT bit 5 = 0, CONNECT = 0 */
    UARTE_PSEL_RXD = UART_RX_PIN;
    UARTE_PSEL_RTS = UARTE_PSEL_DISCONNECTED;
    UARTE_PSEL_CTS = UARTE_PSEL_DISCONNECTED;
    UARTE_BAUDRATE = UARTE_BAUD_115200;
    UARTE_CONFIG = UARTE_CONFIG_8N1_NO_HWFC;
    UARTE_SHORTS = 0u;
    UARTE_INTEN = 0u; /* polled */
    UARTE_ENABLE = UARTE_ENABLE_ENABLED;
    UARTE_EVENTS_ENDRX = 0u;
    UARTE_EVENTS_ENDTX = 0u;
    UARTE_EVENTS_ERROR = 0u;
    UARTE_ERRORSRC = UARTE_ERRORSRC_ALL;
    rx_arm();

    DEMCR |= DEMCR_TRCENA;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
}

int tt_port_getc(void)
{
    while (!UARTE_EVENTS_ENDRX) {
        if (UARTE_EVENTS_ERROR) { /* overrun/framing: clear so reception keeps going */
            UARTE_EVENTS_ERROR = 0u;
            UARTE_ERRORSRC = UARTE_ERRORSRC_ALL;
        }
    }
    UARTE_EVENTS_ENDRX = 0u;
    int c = s_rx_byte; /* read before re-arming: the next byte lands in the same buffer */
    rx_arm();
    return c;
}

void tt_port_write(const uint8_t *p, size_t n)
{
    while (n > 0u) {
        size_t k = n < TX_CHUNK ? n : TX_CHUNK;
        for (size_t i = 0; i < k; i++) s_tx_buf[i] = p[i]; /* EasyDMA cannot read flash */
        UARTE_TXD_PTR = (uint32_t)(uintptr_t)s_tx_buf;
        UARTE_TXD_MAXCNT = (uint32_t)k;
        UARTE_EVENTS_ENDTX = 0u;
        DSB(); /* buffer contents visible to EasyDMA before the task starts */
        UARTE_TASKS_STARTTX = 1u;
        while (!UARTE_EVENTS_ENDTX) {} /* DMA has read the buffer: safe to refill */
        p += k;
        n -= k;
    }
}

uint32_t tt_port_ticks(void) { return DWT_CYCCNT; }
uint32_t tt_port_tick_bits(void) { return DWT_CYCLE_BITS; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_CYCLES; }

/* ---- checkpoint flash (NVMC, PS §4.3) ----
 * Reads of the slots are plain AHB reads of flash: the NVMC instruction cache (ICACHECNF) only
 * caches instruction fetches and the M4 has no data cache, so the memory-mapped view is coherent
 * as soon as READY is set again. */
uint32_t tt_port_flash_slot_size(void) { return SLOT_SIZE; }
uint32_t tt_port_flash_write_unit(void) { return FLASH_WRITE_UNIT; }

const uint8_t *tt_port_flash_slot(uint32_t slot)
{
    return slot == 0u ? (const uint8_t *)SLOT0_ADDR : slot == 1u ? (const uint8_t *)SLOT1_ADDR : NULL;
}

static inline void nvmc_wait_ready(void)
{
    while (!(NVMC_READY & NVMC_READY_READY)) {}
}

static inline void nvmc_config(uint32_t mode)
{
    nvmc_wait_ready();
    NVMC_CONFIG = mode;
    DSB();
}

int tt_port_flash_erase(uint32_t slot)
{
    const uint8_t *base = tt_port_flash_slot(slot);
    if (!base) return -1;
    nvmc_config(NVMC_CONFIG_EEN);
    for (uint32_t off = 0; off < SLOT_SIZE; off += FLASH_PAGE_SIZE) {
        NVMC_ERASEPAGE = (uint32_t)(uintptr_t)(base + off);
        DSB();
        nvmc_wait_ready();
    }
    nvmc_config(NVMC_CONFIG_REN);
    /* The NVMC reports no errors: verify instead. */
    const volatile uint32_t *w = (const volatile uint32_t *)base;
    for (uint32_t i = 0; i < SLOT_SIZE / FLASH_WRITE_UNIT; i++)
        if (w[i] != ERASED_WORD) return -1;
    return 0;
}

/* p may be unaligned: assemble each little-endian word from bytes. */
static inline uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n)
{
    const uint8_t *base = tt_port_flash_slot(slot);
    if (!base || offset % FLASH_WRITE_UNIT || n % FLASH_WRITE_UNIT || offset > SLOT_SIZE ||
        n > SLOT_SIZE - offset)
        return -1;
    volatile uint32_t *dst = (volatile uint32_t *)(uintptr_t)(base + offset);
    nvmc_config(NVMC_CONFIG_WEN);
    for (size_t i = 0; i < n; i += FLASH_WRITE_UNIT) {
        dst[i / FLASH_WRITE_UNIT] = le32(p + i); /* the NVMC takes only aligned 32-bit writes */
        DSB();
        nvmc_wait_ready();
    }
    nvmc_config(NVMC_CONFIG_REN);
    for (size_t i = 0; i < n; i += FLASH_WRITE_UNIT) /* verify: bits can only go 1 -> 0 */
        if (dst[i / FLASH_WRITE_UNIT] != le32(p + i)) return -1;
    return 0;
}
