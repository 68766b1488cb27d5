/* A stand-in for a generated model.h, just what the checkpoint code uses: four trainable
 * parameters of different types and sizes, one of them (int8, 13 bytes) and another (int8,
 * 5 bytes) not a multiple of 4, so padding to the flash write unit is exercised; and a
 * training state of three entries (the last, 11 bytes, padded too). */
#ifndef TT_MODEL_H
#define TT_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* Overridable so a test can build "another model" that shares the flash file. */
#ifndef FAKE_MODEL_ID
#define FAKE_MODEL_ID 0x5EED1234u
#endif
#define TT_MODEL_ID ((uint32_t)FAKE_MODEL_ID)
#define TT_NUM_TRAINABLE 4
#define TT_TRAINABLE_BYTES 54 /* 6 floats + 13 int8 + 3 int32 + 5 int8 */
#define TT_NUM_STATE 3
#define TT_STATE_BYTES 35 /* pending count (int32) + 5 momentum floats + 11 shadow bytes */

typedef struct {
    const char *name;
    void *data;
    int32_t size;  /* elements */
    int32_t bytes;
} tt_param_info;

const tt_param_info *tt_trainable(int32_t i);
const tt_param_info *tt_state(int32_t i); /* NULL past the last entry */

#ifdef FAKE_RECEIVED
/* Received tensors (--receive), read in place: 7 int8, 10 floats and 3 int8 bytes, so two
 * of them end off every write unit but 1. */
#define TT_NUM_RECEIVED 3
#define TT_RECEIVED_BYTES 50
const tt_param_info *tt_received(int32_t i);
void tt_received_use(int32_t i, const void *data);
#endif

#endif
