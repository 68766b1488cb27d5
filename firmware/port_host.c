/* Host build of the board layer: the link runs over stdin/stdout (a pipe to tinytrain), ticks
 * come from the monotonic clock in nanoseconds. The flash half is port_host_flash.c. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdio.h>
#include <time.h>

#include "tt_port.h"

void tt_port_init(void) {
    /* Full buffering: a response is flushed in one write when the device waits for input. */
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
}

int tt_port_getc(void) {
    fflush(stdout); /* a finished response must reach the host before we wait for input */
    int c = getchar();
    return c == EOF ? -1 : c;
}

void tt_port_write(const uint8_t *p, size_t n) {
    if (fwrite(p, 1, n, stdout) != n) return;
}

uint32_t tt_port_ticks(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
}

uint32_t tt_port_tick_bits(void) { return 32; }
uint32_t tt_port_tick_unit(void) { return TT_TICKS_NS; }
