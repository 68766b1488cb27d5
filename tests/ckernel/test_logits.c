/* tt_dense_s8_logits (runtime_c/reference/tt_q8_logits.c) on the cases that
 * tests/test_dense_logits_q8.py writes to logits_cases.h next to a copy of this file: each
 * case's real logits against numpy's float32 ones bit for bit. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

typedef struct {
    const char *name;
    int32_t in, out, in_offset;
    const int8_t *x, *w;
    const uint8_t *s; /* NULL: no master */
    const int32_t *b; /* NULL: no bias */
    const float *scale;
    const float *y;   /* numpy's logits */
} logits_case;

#include "logits_cases.h" /* CASES[], N_CASES, MAX_Y */

int main(void)
{
    static float y[MAX_Y];
    char line[96];
    int k, bad = 0;

    for (k = 0; k < N_CASES; ++k) {
        const logits_case *c = &CASES[k];
        int32_t o, diff = 0;
        tt_dense_s8_logits(y, c->x, c->w, c->s, c->b, c->in, c->out, c->in_offset, c->scale);
        for (o = 0; o < c->out; ++o) {
            diff += memcmp(&y[o], &c->y[o], sizeof(float)) != 0;
        }
        snprintf(line, sizeof line, "case %s diff %ld\n", c->name, (long)diff);
        th_puts(line);
        bad += diff != 0;
    }
    th_puts("done\n");
    th_exit(bad);
    return 0;
}
