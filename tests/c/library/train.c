/* A C program using a generated model as a library (tests/test_library_*.py): trains on the
 * samples of samples.h in order, one step each, and prints every loss, the outputs for the
 * first sample and the trained parameters, as hex bits (exact comparisons).
 *
 * Compiled with -DMODEL=<prefix> -DMODEL_UP=<PREFIX> -DMODEL_HEADER=\"<header>\".
 * Arguments: [lr [momentum [weight_decay]]] ("-" keeps the build's value): set through the
 * run-time setters before training. `train check` instead tries every setter with good and
 * bad values and prints what each returned and what the getters read afterwards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include MODEL_HEADER
#include "samples.h"

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define API(name) CAT(MODEL, name)     /* API(init) -> <prefix>_init */
#define CONST(name) CAT(MODEL_UP, name) /* CONST(BATCH) -> <PREFIX>_BATCH */

static uint32_t bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static void show_set(const char *what, int32_t ret, float now)
{
    printf("set %s %d %08lx\n", what, (int)ret, (unsigned long)bits(now));
}

/* call a setter, then read its getter (C leaves the order of arguments unspecified) */
#define TRY(what, call, getter)                                                            \
    do {                                                                                   \
        const int32_t ret_ = (call);                                                       \
        show_set(what, ret_, getter());                                                    \
    } while (0)

static void check_setters(void)
{
    const float nan = strtof("nan", NULL), inf = strtof("inf", NULL);
    const float lr0 = API(get_lr)();

    TRY("lr_negative", API(set_lr)(-0.01f), API(get_lr));
    TRY("lr_nan", API(set_lr)(nan), API(get_lr));
    TRY("lr_inf", API(set_lr)(inf), API(get_lr));
    TRY("lr_zero", API(set_lr)(0.0f), API(get_lr));
    TRY("lr_back", API(set_lr)(lr0), API(get_lr));
    TRY("momentum_one", API(set_momentum)(1.0f), API(get_momentum));
    TRY("momentum_nan", API(set_momentum)(nan), API(get_momentum));
    TRY("momentum_half", API(set_momentum)(0.5f), API(get_momentum));
    TRY("momentum_zero", API(set_momentum)(0.0f), API(get_momentum));
    TRY("wd_negative", API(set_weight_decay)(-1e-3f), API(get_weight_decay));
    TRY("wd_inf", API(set_weight_decay)(inf), API(get_weight_decay));
    TRY("wd_small", API(set_weight_decay)(1e-3f), API(get_weight_decay));
    TRY("wd_zero", API(set_weight_decay)(0.0f), API(get_weight_decay));
}

int main(int argc, char **argv)
{
    static API(input_t) x[CONST(INPUT_SIZE)];
    static unsigned char target[CONST(TARGET_BYTES)];
    static float out[CONST(OUTPUT_SIZE)];
    int32_t i, pred = 0, updated = 0;

    API(init)();
    if (argc > 1 && strcmp(argv[1], "check") == 0) {
        check_setters();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "-") != 0)
        TRY("lr", API(set_lr)(strtof(argv[1], NULL)), API(get_lr));
    if (argc > 2 && strcmp(argv[2], "-") != 0)
        TRY("momentum", API(set_momentum)(strtof(argv[2], NULL)), API(get_momentum));
    if (argc > 3 && strcmp(argv[3], "-") != 0)
        TRY("wd", API(set_weight_decay)(strtof(argv[3], NULL)), API(get_weight_decay));
    for (i = 0; i < SAMPLES_N; ++i) {
        float loss;
        memcpy(x, &samples_x[(size_t)i * CONST(INPUT_BYTES)], CONST(INPUT_BYTES));
        memcpy(target, &samples_y[(size_t)i * CONST(TARGET_BYTES)], CONST(TARGET_BYTES));
        loss = API(train_step)(x, target, &pred, &updated);
        printf("loss %d %08lx\n", (int)i, (unsigned long)bits(loss));
    }
    API(apply_update)();
    memcpy(x, samples_x, CONST(INPUT_BYTES));
    API(infer)(x, out);
    printf("out");
    for (i = 0; i < CONST(OUTPUT_SIZE); ++i)
        printf(" %08lx", (unsigned long)bits(out[i]));
    printf("\n");
    for (i = 0; i < CONST(NUM_TRAINABLE); ++i) {
        const API(param_info) *p = API(trainable)(i);
        int32_t k;
        printf("param %s %d ", p->name, (int)p->dtype);
        for (k = 0; k < p->bytes; ++k)
            printf("%02x", ((const unsigned char *)p->data)[k]);
        printf("\n");
    }
    return 0;
}
