/* Two generated models in one program (tests/test_library_export.py): built with --prefix mlp
 * and --prefix cnn, they train in turns, sample by sample; each prints its losses as hex bits,
 * to compare with its own single-model build. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cnn_model.h"
#include "cnn_samples.h"
#include "mlp_model.h"
#include "mlp_samples.h"

static uint32_t bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

int main(void)
{
    static mlp_input_t mx[MLP_INPUT_SIZE];
    static cnn_input_t cx[CNN_INPUT_SIZE];
    int32_t mt, ct, pred, updated, i;

    mlp_init();
    cnn_init();
    for (i = 0; i < MLP_N || i < CNN_N; ++i) {
        if (i < MLP_N) {
            memcpy(mx, &mlp_x[(size_t)i * MLP_INPUT_BYTES], MLP_INPUT_BYTES);
            memcpy(&mt, &mlp_y[(size_t)i * MLP_TARGET_BYTES], sizeof mt);
            printf("mlp %d %08lx\n", (int)i,
                   (unsigned long)bits(mlp_train_step(mx, &mt, &pred, &updated)));
        }
        if (i < CNN_N) {
            memcpy(cx, &cnn_x[(size_t)i * CNN_INPUT_BYTES], CNN_INPUT_BYTES);
            memcpy(&ct, &cnn_y[(size_t)i * CNN_TARGET_BYTES], sizeof ct);
            printf("cnn %d %08lx\n", (int)i,
                   (unsigned long)bits(cnn_train_step(cx, &ct, &pred, &updated)));
        }
    }
    return 0;
}
