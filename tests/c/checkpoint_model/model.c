/* The fake model's parameters, with compiled-in values a boot without a checkpoint keeps. */
#include "model.h"

static float w_fc[6] = {0.5f, -1.25f, 2.0f, 0.125f, -3.5f, 7.75f};
static int8_t w_q[13] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13};
static int32_t b_q[3] = {-100000, 0, 123456};
static int8_t w_tail[5] = {-128, 127, 0, 42, -42};

static const tt_param_info tt_params[TT_NUM_TRAINABLE] = {
    {"fc.weight", w_fc, 6, (int32_t)sizeof w_fc},
    {"q.weight", w_q, 13, (int32_t)sizeof w_q},
    {"q.bias", b_q, 3, (int32_t)sizeof b_q},
    {"tail.weight", w_tail, 5, (int32_t)sizeof w_tail},
};

const tt_param_info *tt_trainable(int32_t i) {
    return &tt_params[i];
}
