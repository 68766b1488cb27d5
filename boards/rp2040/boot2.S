/* tinytrain second-stage boot loader for the RP2040 (Raspberry Pi Pico). Our own minimal
 * stage 2, written from the RP2040 datasheet (ch. 2.8 Bootrom: flash boot sequence, bootrom
 * contents / function table) and the ARMv6-M ARM; not derived from the Pico SDK's boot2.
 *
 * What the boot ROM does first (datasheet 2.8.1 flash boot): connect_internal_flash and
 * flash_exit_xip (SSI in serial mode, SCK = clk_sys / 6), read the first 256 bytes of flash
 * into the top of SRAM (0x20041F00, above the ROM's own stack), check the CRC-32 in the last
 * 4 bytes (2.8.1.3.1) and enter the copy at its first byte in Thumb state. So this code runs
 * from SRAM at an address it does not know: it is position independent (PC-relative literals
 * only, no absolute references to its own labels).
 *
 * What it does: look up connect_internal_flash ('I','F') and flash_enter_cmd_xip ('C','X')
 * with the ROM's rom_table_lookup (16-bit pointers at 0x14 = function table, 0x18 = lookup
 * function, Thumb bit already set), call them, which leaves XIP on plain 03h serial reads
 * (slow, but every SPI NOR flash answers them); then VTOR = 0x10000100 (the vector table right
 * after these 256 bytes), MSP = vector[0], jump to vector[1]. Thumb-1 (ARMv6-M) only.
 * make_boot2.py assembles this, pads it to 252 bytes, appends the CRC and pastes the 256
 * bytes into board.c.
 */
    .syntax unified
    .cpu cortex-m0plus
    .thumb

    .equ ROM_FUNC_TABLE_PTR, 0x14     @ 16-bit pointer to the ROM function table
    .equ ROM_LOOKUP_PTR_OFF, 0x04     @ 0x18 - 0x14: 16-bit pointer to rom_table_lookup
    .equ CODE_IF, 0x4649              @ 'I' | 'F' << 8: connect_internal_flash
    .equ CODE_CX, 0x5843              @ 'C' | 'X' << 8: flash_enter_cmd_xip
    .equ VECTORS, 0x10000100          @ XIP base + 256: the image's vector table
    .equ SCB_VTOR, 0xE000ED08         @ ARMv6-M SCB vector table offset register

    .section .text.tt_boot2, "ax"
    .global tt_boot2_entry
    .type tt_boot2_entry, %function
    .thumb_func
tt_boot2_entry:
    movs r0, #ROM_FUNC_TABLE_PTR
    ldrh r4, [r0]                     @ r4 = function table (kept across calls: callee-saved)
    ldrh r5, [r0, #ROM_LOOKUP_PTR_OFF] @ r5 = rom_table_lookup(table, code)
    movs r0, r4
    ldr r1, =CODE_IF
    blx r5                            @ r0 = connect_internal_flash
    blx r0
    movs r0, r4
    ldr r1, =CODE_CX
    blx r5                            @ r0 = flash_enter_cmd_xip
    blx r0
    ldr r0, =VECTORS
    ldr r1, =SCB_VTOR
    str r0, [r1]
    ldmia r0!, {r1, r2}               @ r1 = initial MSP, r2 = reset handler (Thumb bit set)
    msr msp, r1
    bx r2
    .ltorg
    .size tt_boot2_entry, . - tt_boot2_entry
