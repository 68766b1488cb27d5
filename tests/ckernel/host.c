/* Host side of the kernel test harness: stdio and exit. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"

void th_puts(const char *s) { fputs(s, stdout); }
void th_exit(int status) { fflush(stdout); exit(status); }
void th_ticks_start(void) {}
uint32_t th_ticks(void) { return (uint32_t)clock(); }
uint32_t th_elapsed(uint32_t t0) { return th_ticks() - t0; }
