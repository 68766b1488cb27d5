/* Checkpoints of the trainable parameters and the training state in two flash slots; the layout and the reasoning
 * about power cuts are in tt_checkpoint.h. */
#include "tt_checkpoint.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TT_MODEL_ALIASES /* model.h's tt_* names, whatever the build's --prefix */
#include "model.h"
#include "tt_crc32.h"
#include "tt_port.h"

#ifndef TT_MODEL_ID
#error "model.h must define TT_MODEL_ID: without it another model's checkpoint could be loaded"
#endif

#define CKPT_NUM_SLOTS 2u
#define CKPT_ERASED 0xFFu
/* The CRC covers the header fields in front of it, then the payload. */
#define CKPT_CRC_COVERED_HEADER TT_CKPT_OFF_CRC

#if TT_NUM_TRAINABLE > 0xFFFF || TT_NUM_STATE > 0xFFFF
#error "a checkpoint header counts parameters and state entries in 16 bits"
#endif
#if TT_CKPT_MAX_WRITE_UNIT > TT_CKPT_STAGE_BYTES || TT_CKPT_HEADER_BYTES > TT_CKPT_STAGE_BYTES
#error "the stage buffer must hold one write unit and the header"
#endif

/* The slot geometry for this board and model, worked out once per call. */
typedef struct {
    uint32_t slot_size;
    uint32_t unit;          /* flash write unit */
    uint32_t header_span;   /* TT_CKPT_HEADER_BYTES rounded up to the unit: payload offset */
    uint32_t payload_bytes; /* the entries, each padded to the unit */
    uint32_t num_state;     /* TT_NUM_STATE when the state fits the slot too, else 0 */
} ckpt_geom;

static uint32_t round_up(uint32_t n, uint32_t unit) {
    return (n + unit - 1u) / unit * unit;
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The checkpoint's entries: the trainable parameters, then (when the slot has room for them)
 * the training state: pending-sample count, accumulators, momentum, int8 shadows, counters. */
static const tt_param_info *entry(int32_t i) {
    return i < TT_NUM_TRAINABLE ? tt_trainable(i) : tt_state(i - TT_NUM_TRAINABLE);
}

static uint32_t param_bytes(int32_t i) {
    const int32_t bytes = entry(i)->bytes;
    return bytes > 0 ? (uint32_t)bytes : 0u;
}

/* The parameters alone, each padded to the unit (they fit: checked first by geom_get). */
static uint32_t total_params(uint32_t unit) {
    uint32_t total = 0u;
    for (int32_t i = 0; i < TT_NUM_TRAINABLE; i++) {
        total += round_up(param_bytes(i), unit);
    }
    return total;
}

/* Checks that do not touch flash; every entry point starts here so a board or model that can
 * never hold a checkpoint fails before anything is erased. */
static int geom_get(ckpt_geom *g) {
    g->slot_size = tt_port_flash_slot_size();
    if (g->slot_size == 0u || tt_port_flash_slot(0) == NULL || tt_port_flash_slot(1) == NULL) {
        return TT_CKPT_ENOFLASH;
    }
    g->unit = tt_port_flash_write_unit();
    if (g->unit == 0u || g->unit > TT_CKPT_MAX_WRITE_UNIT) {
        return TT_CKPT_EUNIT;
    }
    g->header_span = round_up(TT_CKPT_HEADER_BYTES, g->unit);
    if (g->header_span > g->slot_size) {
        return TT_CKPT_ETOOBIG;
    }
    /* Summed against the room left so a huge table cannot wrap the 32-bit total. The
     * parameters must fit; the state goes in only if all of it fits after them (a build sizes
     * the slots for both, unless the board's flash cannot hold that). */
    const uint32_t room = g->slot_size - g->header_span;
    uint32_t total = 0u;
    g->num_state = 0u;
    for (int32_t i = 0; i < TT_NUM_TRAINABLE + TT_NUM_STATE; i++) {
        const uint32_t bytes = param_bytes(i);
        const uint32_t padded = round_up(bytes, g->unit);
        if (bytes > room || padded > room - total) {
            if (i < TT_NUM_TRAINABLE) {
                return TT_CKPT_ETOOBIG;
            }
            g->payload_bytes = total_params(g->unit);
            return TT_CKPT_OK;
        }
        total += padded;
    }
    g->payload_bytes = total;
    g->num_state = (uint32_t)TT_NUM_STATE;
    return TT_CKPT_OK;
}

/* Encodes the header fields before the CRC into the first CKPT_CRC_COVERED_HEADER bytes. */
static void put_header_fields(uint8_t *h, const ckpt_geom *g, uint32_t seq) {
    put_u32(h + TT_CKPT_OFF_VERSION, TT_CKPT_VERSION);
    put_u32(h + TT_CKPT_OFF_MODEL_ID, (uint32_t)TT_MODEL_ID);
    put_u32(h + TT_CKPT_OFF_SEQ, seq);
    put_u32(h + TT_CKPT_OFF_PAYLOAD_BYTES, g->payload_bytes);
    put_u32(h + TT_CKPT_OFF_NUM_PARAMS, (uint32_t)TT_NUM_TRAINABLE | (g->num_state << 16));
    put_u32(h + TT_CKPT_OFF_WRITE_UNIT, g->unit);
}

/* 1 if the slot holds a complete checkpoint of this model (seq in *seq), else 0. */
static int slot_valid(uint32_t slot, const ckpt_geom *g, uint32_t *seq) {
    const uint8_t *s = tt_port_flash_slot(slot);
    const uint32_t counts = (uint32_t)TT_NUM_TRAINABLE | (g->num_state << 16);
    if (s == NULL || get_u32(s + TT_CKPT_OFF_MAGIC) != TT_CKPT_MAGIC ||
        get_u32(s + TT_CKPT_OFF_VERSION) != TT_CKPT_VERSION ||
        get_u32(s + TT_CKPT_OFF_MODEL_ID) != (uint32_t)TT_MODEL_ID ||
        get_u32(s + TT_CKPT_OFF_PAYLOAD_BYTES) != g->payload_bytes ||
        get_u32(s + TT_CKPT_OFF_NUM_PARAMS) != counts ||
        get_u32(s + TT_CKPT_OFF_WRITE_UNIT) != g->unit) {
        return 0;
    }
    uint32_t crc = tt_crc32(0u, s, CKPT_CRC_COVERED_HEADER);
    crc = tt_crc32(crc, s + g->header_span, g->payload_bytes);
    if (crc != get_u32(s + TT_CKPT_OFF_CRC)) {
        return 0;
    }
    *seq = get_u32(s + TT_CKPT_OFF_SEQ);
    return 1;
}

/* The newest valid slot: 1 with *slot and *seq set, or 0 if neither is valid. Sequence numbers
 * are compared modulo 2^32 so the count can wrap; equal ones (never written by a save) go to
 * slot 0. */
static int find_newest(const ckpt_geom *g, uint32_t *slot, uint32_t *seq) {
    uint32_t seqs[CKPT_NUM_SLOTS];
    int valid[CKPT_NUM_SLOTS];
    for (uint32_t k = 0u; k < CKPT_NUM_SLOTS; k++) {
        valid[k] = slot_valid(k, g, &seqs[k]);
    }
    if (!valid[0] && !valid[1]) {
        return 0;
    }
    uint32_t best = valid[0] ? 0u : 1u;
    if (valid[0] && valid[1] && (int32_t)(seqs[1] - seqs[0]) > 0) {
        best = 1u;
    }
    *slot = best;
    *seq = seqs[best];
    return 1;
}

/* Program n staged bytes (n a multiple of the unit) and read them back. */
static int program_verify(uint32_t slot, uint32_t offset, const uint8_t *stage, uint32_t n) {
    if (tt_port_flash_program(slot, offset, stage, n) != 0) {
        return TT_CKPT_EPROGRAM;
    }
    if (memcmp(tt_port_flash_slot(slot) + offset, stage, n) != 0) {
        return TT_CKPT_EVERIFY;
    }
    return TT_CKPT_OK;
}

int tt_checkpoint_save(uint32_t *seq_out) {
    ckpt_geom g;
    int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    uint32_t newest_slot = 0u;
    uint32_t newest_seq = 0u;
    uint32_t target = 0u;
    uint32_t seq = 1u;
    if (find_newest(&g, &newest_slot, &newest_seq)) {
        target = 1u - newest_slot;
        seq = newest_seq + 1u;
    }

    /* 1. Erase; the program below needs blank flash, so check rather than trust the port. */
    if (tt_port_flash_erase(target) != 0) {
        return TT_CKPT_EERASE;
    }
    const uint8_t *s = tt_port_flash_slot(target);
    const uint32_t used = g.header_span + g.payload_bytes;
    for (uint32_t i = 0u; i < used; i++) {
        if (s[i] != CKPT_ERASED) {
            return TT_CKPT_EERASE;
        }
    }

    /* 2. Payload, in chunks of whole write units; a parameter's last chunk is padded with
     * 0xFF. The CRC runs over the header fields first, then over exactly what is programmed. */
    uint8_t stage[TT_CKPT_STAGE_BYTES];
    const uint32_t chunk_max = TT_CKPT_STAGE_BYTES / g.unit * g.unit;
    put_header_fields(stage, &g, seq);
    uint32_t crc = tt_crc32(0u, stage, CKPT_CRC_COVERED_HEADER);
    uint32_t offset = g.header_span;
    const int32_t entries = TT_NUM_TRAINABLE + (int32_t)g.num_state;
    for (int32_t i = 0; i < entries; i++) {
        const uint8_t *src = (const uint8_t *)entry(i)->data;
        uint32_t left = param_bytes(i);
        while (left > 0u) {
            const uint32_t n = left < chunk_max ? left : chunk_max;
            const uint32_t padded = round_up(n, g.unit);
            memcpy(stage, src, n);
            memset(stage + n, CKPT_ERASED, padded - n);
            crc = tt_crc32(crc, stage, padded);
            rc = program_verify(target, offset, stage, padded);
            if (rc != TT_CKPT_OK) {
                return rc;
            }
            offset += padded;
            src += n;
            left -= n;
        }
    }

    /* 2b/3. The header: everything before the unit holding the magic, then that unit, so the
     * magic (the last bytes of the header) is the last thing programmed. */
    memset(stage, CKPT_ERASED, g.header_span);
    put_header_fields(stage, &g, seq);
    put_u32(stage + TT_CKPT_OFF_CRC, crc);
    put_u32(stage + TT_CKPT_OFF_MAGIC, TT_CKPT_MAGIC);
    const uint32_t commit = TT_CKPT_OFF_MAGIC / g.unit * g.unit;
    if (commit > 0u) {
        rc = program_verify(target, 0u, stage, commit);
        if (rc != TT_CKPT_OK) {
            return rc;
        }
    }
    rc = program_verify(target, commit, stage + commit, g.header_span - commit);
    if (rc != TT_CKPT_OK) {
        return rc;
    }

    /* 4. The slot must now be valid as a whole, with the new seq. */
    uint32_t got = 0u;
    if (!slot_valid(target, &g, &got) || got != seq) {
        return TT_CKPT_EVERIFY;
    }
    if (seq_out != NULL) {
        *seq_out = seq;
    }
    return TT_CKPT_OK;
}

int tt_checkpoint_newest(uint32_t *seq_out) {
    ckpt_geom g;
    const int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    uint32_t slot = 0u;
    uint32_t seq = 0u;
    if (!find_newest(&g, &slot, &seq)) {
        return TT_CKPT_NONE;
    }
    if (seq_out != NULL) {
        *seq_out = seq;
    }
    return TT_CKPT_OK;
}

int tt_checkpoint_load(uint32_t *seq_out) {
    ckpt_geom g;
    const int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    uint32_t slot = 0u;
    uint32_t seq = 0u;
    if (!find_newest(&g, &slot, &seq)) {
        return TT_CKPT_NONE;
    }
    /* Validated above, CRC included, so the copy cannot stop half way. */
    const uint8_t *src = tt_port_flash_slot(slot) + g.header_span;
    const int32_t entries = TT_NUM_TRAINABLE + (int32_t)g.num_state;
    for (int32_t i = 0; i < entries; i++) {
        const uint32_t bytes = param_bytes(i);
        if (bytes > 0u) {
            memcpy(entry(i)->data, src, bytes);
        }
        src += round_up(bytes, g.unit);
    }
    if (seq_out != NULL) {
        *seq_out = seq;
    }
    return TT_CKPT_OK;
}
