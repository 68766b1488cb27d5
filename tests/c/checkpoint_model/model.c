/* The fake model's parameters and training state, with compiled-in values a boot without a
 * checkpoint keeps. */
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

static int32_t pending = 0;
static float momentum[5] = {0.0f, 0.25f, -0.5f, 1.0f, 0.0f};
static int8_t shadow[11] = {0};

static const tt_param_info tt_state_table[TT_NUM_STATE] = {
    {"pending_samples", &pending, 1, (int32_t)sizeof pending},
    {"fc.weight.momentum", momentum, 5, (int32_t)sizeof momentum},
    {"q.weight.shadow", shadow, 11, (int32_t)sizeof shadow},
};

const tt_param_info *tt_state(int32_t i) {
    return (i >= 0 && i < TT_NUM_STATE) ? &tt_state_table[i] : NULL;
}

#ifdef FAKE_RECEIVED
static const int8_t r_a[7] = {3, 1, 4, 1, 5, 9, 2};
static const float r_b[10] = {0.5f, 1.5f, -2.5f, 3.5f, -4.5f, 5.5f, 6.5f, -7.5f, 8.5f, 9.5f};
static const int8_t r_c[3] = {-7, 0, 7};
static const void *r_now[TT_NUM_RECEIVED] = {r_a, r_b, r_c};
static const tt_param_info r_table[TT_NUM_RECEIVED] = {
    {"r.a", (void *)(uintptr_t)r_a, 7, 7},
    {"r.b", (void *)(uintptr_t)r_b, 10, 40},
    {"r.c", (void *)(uintptr_t)r_c, 3, 3},
};

const tt_param_info *tt_received(int32_t i) {
    static tt_param_info out;
    if (i < 0 || i >= TT_NUM_RECEIVED) return NULL;
    out = r_table[i];
    out.data = (void *)(uintptr_t)r_now[i];
    return &out;
}

void tt_received_use(int32_t i, const void *data) {
    if (i >= 0 && i < TT_NUM_RECEIVED) r_now[i] = data ? data : r_table[i].data;
}
#endif
