/* What a board provides to the tinytrain firmware (the serial link server and checkpoints).
 * One implementation per board: firmware/port_host.c (stdin/stdout and a file-backed flash),
 * boards/<board>/board.c for the microcontrollers and their QEMU twins.
 * All functions are called from one thread; nothing here may allocate. */
#ifndef TT_PORT_H
#define TT_PORT_H

#include <stddef.h>
#include <stdint.h>

/* Clocks, UART (115200 8N1 on real boards), SysTick/DWT. Called once, first thing in main(). */
void tt_port_init(void);

/* Blocking read of one byte from the link; returns 0..255, or -1 when the link is closed
 * (host: end of file). Boards never return -1. */
int tt_port_getc(void);

/* Write n bytes to the link, returning when they are queued or sent. */
void tt_port_write(const uint8_t *p, size_t n);

/* A free-running counter for profiling, in the board's unit (see TT_PORT_TICK_INSTR below):
 * DWT->CYCCNT on real boards, SysTick down-counter converted to an up-count on QEMU twins. */
uint32_t tt_port_ticks(void);
/* Bits of tt_port_ticks() that wrap (24 for SysTick, 32 for DWT). */
uint32_t tt_port_tick_bits(void);
/* What a tick of tt_port_ticks() is, told to the host in the hello so that `tinytrain bench
 * --port` says cycles only where they are cycles. */
#define TT_TICKS_UNKNOWN 0u
#define TT_TICKS_CYCLES 1u   /* core clock cycles: DWT->CYCCNT */
#define TT_TICKS_SYSTICK 2u  /* the MPS2 twins' 25 MHz SysTick: 40 instructions under -icount 0 */
#define TT_TICKS_NS 3u       /* nanoseconds of the host's monotonic clock */
uint32_t tt_port_tick_unit(void);

/* ---- checkpoint flash: two slots, each tt_port_flash_slot_size() bytes, memory mapped ---- */
/* Bytes per slot (0: this board has no checkpoint flash). */
uint32_t tt_port_flash_slot_size(void);
/* Program granularity in bytes (writes are whole multiples of it, at aligned offsets). */
uint32_t tt_port_flash_write_unit(void);
/* Erase a whole slot to 0xFF. Returns 0 on success. */
int tt_port_flash_erase(uint32_t slot);
/* Program n bytes at offset into an erased area of the slot (NOR: bits only go 1 -> 0).
 * offset and n are multiples of the write unit. Returns 0 on success. */
int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n);
/* Read-only view of the slot's bytes. */
const uint8_t *tt_port_flash_slot(uint32_t slot);

#endif
