// A C++ program using a generated model as a library (tests/test_library_*.py): the model's
// header has extern "C" guards, so g++ links the C objects. It prints what train.c prints
// for the losses and the first sample's outputs (hex bits, for exact comparisons). Built with
// -DTT_SEMIHOST it runs bare metal on a QEMU twin (tests/ckernel's semihosting harness).
//
// Compiled with -DMODEL=<prefix> -DMODEL_UP=<PREFIX> -DMODEL_HEADER=\"<header>\".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include MODEL_HEADER
#include "samples.h"

#ifdef TT_SEMIHOST
extern "C" {
#include "harness.h"
}
static void emit(const char *s) { th_puts(s); }
#else
static void emit(const char *s) { std::fputs(s, stdout); }
#endif

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define API(name) CAT(MODEL, name)
#define CONST(name) CAT(MODEL_UP, name)

namespace {

unsigned long bits(float v)
{
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
}

// One model behind a small C++ interface, as a sketch or a firmware class would wrap it.
class Learner {
public:
    Learner() : x_(CONST(INPUT_SIZE)), target_(CONST(TARGET_BYTES)), out_(CONST(OUTPUT_SIZE))
    {
        API(init)();
    }

    float step(const unsigned char *sample, const unsigned char *target)
    {
        std::int32_t pred = 0, updated = 0;
        load(sample);
        std::memcpy(target_.data(), target, target_.size());
        return API(train_step)(x_.data(), target_.data(), &pred, &updated);
    }

    const std::vector<float> &infer(const unsigned char *sample)
    {
        load(sample);
        API(infer)(x_.data(), out_.data());
        return out_;
    }

private:
    void load(const unsigned char *sample) { std::memcpy(x_.data(), sample, CONST(INPUT_BYTES)); }

    std::vector<API(input_t)> x_;
    std::vector<unsigned char> target_;
    std::vector<float> out_;
};

} // namespace

int main()
{
    Learner model;
    char line[64];

    for (int i = 0; i < SAMPLES_N; ++i) {
        const float loss = model.step(&samples_x[static_cast<std::size_t>(i) * CONST(INPUT_BYTES)],
                                      &samples_y[static_cast<std::size_t>(i) * CONST(TARGET_BYTES)]);
        std::snprintf(line, sizeof line, "loss %d %08lx\n", i, bits(loss));
        emit(line);
    }
    API(apply_update)();
    emit("out");
    for (float v : model.infer(samples_x)) {
        std::snprintf(line, sizeof line, " %08lx", bits(v));
        emit(line);
    }
    emit("\n");
#ifdef TT_SEMIHOST
    th_exit(0);
#endif
    return 0;
}
