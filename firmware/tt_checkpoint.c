/* Checkpoints of the trainable parameters, the training state and the received tensors in two
 * flash slots; the layout and the reasoning about power cuts are in tt_checkpoint.h. */
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

#ifndef TT_NUM_RECEIVED /* a model.h from before --receive: none */
#define TT_NUM_RECEIVED 0
#define TT_RECEIVED_BYTES 0
#endif
#if TT_NUM_RECEIVED > 0
#define CKPT_LAYOUT TT_CKPT_VERSION_RECEIVED
#else
#define CKPT_LAYOUT TT_CKPT_VERSION
#endif
/* Payload entries in order: the received tensors, the parameters, the state. */
#define CKPT_CORE (TT_NUM_RECEIVED + TT_NUM_TRAINABLE) /* entries every checkpoint holds */

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
    uint32_t payload_bytes; /* the entries, each padded */
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

/* Payload entry i: a received tensor (its values in use), a parameter, or a state entry. */
static const tt_param_info *entry(int32_t i) {
#if TT_NUM_RECEIVED > 0
    if (i < TT_NUM_RECEIVED) {
        return tt_received(i);
    }
#endif
    i -= TT_NUM_RECEIVED;
    return i < TT_NUM_TRAINABLE ? tt_trainable(i) : tt_state(i - TT_NUM_TRAINABLE);
}

static uint32_t entry_bytes(int32_t i) {
    const int32_t bytes = entry(i)->bytes;
    return bytes > 0 ? (uint32_t)bytes : 0u;
}

/* What entry i takes in the slot: a received tensor is read in place, so it is padded to keep
 * the next one aligned; the others to the write unit. */
static uint32_t entry_span(int32_t i, uint32_t unit) {
    const uint32_t pad = i < TT_NUM_RECEIVED && unit < TT_CKPT_RECEIVED_ALIGN
                             ? TT_CKPT_RECEIVED_ALIGN : unit;
    return round_up(entry_bytes(i), pad);
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
     * received tensors and the parameters must fit; the state goes in only if all of it fits
     * after them (a build sizes the slots for all, unless the board's flash cannot hold that). */
    const uint32_t room = g->slot_size - g->header_span;
    uint32_t total = 0u;
    uint32_t core = 0u;
    g->num_state = 0u;
    for (int32_t i = 0; i < CKPT_CORE + TT_NUM_STATE; i++) {
        const uint32_t bytes = entry_bytes(i);
        const uint32_t padded = entry_span(i, g->unit);
        if (bytes > room || padded > room - total) {
            if (i < CKPT_CORE) {
                return TT_CKPT_ETOOBIG;
            }
            g->payload_bytes = core;
            return TT_CKPT_OK;
        }
        total += padded;
        if (i < CKPT_CORE) {
            core = total;
        }
    }
    g->payload_bytes = total;
    g->num_state = (uint32_t)TT_NUM_STATE;
    return TT_CKPT_OK;
}

/* Encodes the header fields before the CRC into the first CKPT_CRC_COVERED_HEADER bytes. */
static void put_header_fields(uint8_t *h, const ckpt_geom *g, uint32_t seq) {
    put_u32(h + TT_CKPT_OFF_VERSION, CKPT_LAYOUT);
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
        get_u32(s + TT_CKPT_OFF_VERSION) != CKPT_LAYOUT ||
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

/* Program n bytes from src at offset, then 0xFF up to `span` (offset and span multiples of
 * the unit), through the stack buffer: src may be RAM or the other slot's flash. */
static int program_entry(uint32_t slot, uint32_t offset, const uint8_t *src, uint32_t n,
                         uint32_t span, uint32_t unit) {
    uint8_t stage[TT_CKPT_STAGE_BYTES];
    const uint32_t chunk_max = TT_CKPT_STAGE_BYTES / unit * unit;
    for (uint32_t done = 0u; done < span;) {
        const uint32_t k = span - done < chunk_max ? span - done : chunk_max;
        const uint32_t real = done >= n ? 0u : (n - done < k ? n - done : k);
        memcpy(stage, src + done, real);
        memset(stage + real, CKPT_ERASED, k - real);
        const int rc = program_verify(slot, offset + done, stage, k);
        if (rc != TT_CKPT_OK) {
            return rc;
        }
        done += k;
    }
    return TT_CKPT_OK;
}

/* Where a save goes: the slot not holding the newest valid checkpoint, and its seq. */
static void save_target(const ckpt_geom *g, uint32_t *target, uint32_t *seq) {
    uint32_t newest_slot = 0u;
    uint32_t newest_seq = 0u;
    *target = 0u;
    *seq = 1u;
    if (find_newest(g, &newest_slot, &newest_seq)) {
        *target = 1u - newest_slot;
        *seq = newest_seq + 1u;
    }
}

/* Step 1: erase; the program below needs blank flash, so check rather than trust the port. */
static int erase_blank(const ckpt_geom *g, uint32_t target) {
    if (tt_port_flash_erase(target) != 0) {
        return TT_CKPT_EERASE;
    }
    const uint8_t *s = tt_port_flash_slot(target);
    const uint32_t used = g->header_span + g->payload_bytes;
    for (uint32_t i = 0u; i < used; i++) {
        if (s[i] != CKPT_ERASED) {
            return TT_CKPT_EERASE;
        }
    }
    return TT_CKPT_OK;
}

/* Where payload entry i starts, from the slot's start. */
static uint32_t entry_offset(const ckpt_geom *g, int32_t i) {
    uint32_t offset = g->header_span;
    for (int32_t k = 0; k < i; k++) {
        offset += entry_span(k, g->unit);
    }
    return offset;
}

#if TT_NUM_RECEIVED > 0
/* The model reads its received tensors from this slot's payload from now on. */
static void use_slot(const ckpt_geom *g, uint32_t slot) {
    const uint8_t *s = tt_port_flash_slot(slot) + g->header_span;
    for (int32_t i = 0; i < TT_NUM_RECEIVED; i++) {
        tt_received_use(i, s);
        s += entry_span(i, g->unit);
    }
}
#endif

/* Payload entries first..last-1 from where the model holds them (RAM, or flash for received
 * tensors) into the target slot, each at its place and padded. */
static int program_entries(const ckpt_geom *g, uint32_t target, int32_t first, int32_t last) {
    uint32_t offset = entry_offset(g, first);
    for (int32_t i = first; i < last; i++) {
        const uint32_t span = entry_span(i, g->unit);
        const int rc = program_entry(target, offset, (const uint8_t *)entry(i)->data,
                                     entry_bytes(i), span, g->unit);
        if (rc != TT_CKPT_OK) {
            return rc;
        }
        offset += span;
    }
    return TT_CKPT_OK;
}

/* Steps 2b-4 after the received tensors are in place: the parameters and the state from RAM,
 * the header (its CRC over the payload read back), the magic last; then the slot must
 * validate with the new seq, and the model reads the received tensors from it. */
static int finish(const ckpt_geom *g, uint32_t target, uint32_t seq, uint32_t *seq_out) {
    int rc = program_entries(g, target, TT_NUM_RECEIVED, CKPT_CORE + (int32_t)g->num_state);
    if (rc != TT_CKPT_OK) {
        return rc;
    }

    /* The header: everything before the unit holding the magic, then that unit, so the
     * magic (the last bytes of the header) is the last thing programmed. */
    uint8_t stage[TT_CKPT_STAGE_BYTES];
    memset(stage, CKPT_ERASED, g->header_span);
    put_header_fields(stage, g, seq);
    uint32_t crc = tt_crc32(0u, stage, CKPT_CRC_COVERED_HEADER);
    crc = tt_crc32(crc, tt_port_flash_slot(target) + g->header_span, g->payload_bytes);
    put_u32(stage + TT_CKPT_OFF_CRC, crc);
    put_u32(stage + TT_CKPT_OFF_MAGIC, TT_CKPT_MAGIC);
    const uint32_t commit = TT_CKPT_OFF_MAGIC / g->unit * g->unit;
    if (commit > 0u) {
        rc = program_verify(target, 0u, stage, commit);
        if (rc != TT_CKPT_OK) {
            return rc;
        }
    }
    rc = program_verify(target, commit, stage + commit, g->header_span - commit);
    if (rc != TT_CKPT_OK) {
        return rc;
    }

    uint32_t got = 0u;
    if (!slot_valid(target, g, &got) || got != seq) {
        return TT_CKPT_EVERIFY;
    }
#if TT_NUM_RECEIVED > 0
    use_slot(g, target);
#endif
    if (seq_out != NULL) {
        *seq_out = seq;
    }
    return TT_CKPT_OK;
}

#if TT_NUM_RECEIVED > 0
/* An open receive: where it writes and how far it got. Its pieces are programmed straight
 * from the caller's buffer, so nothing is staged between them. */
static struct {
    uint32_t open;   /* 1 from the piece at offset 0 until the commit, an error or a save */
    uint32_t slot;   /* the slot it writes */
    uint32_t seq;    /* the seq the commit gives it */
    uint32_t cursor; /* received bytes taken so far (TT_RECEIVED_BYTES when complete) */
} rcv;
#endif

int tt_checkpoint_save(uint32_t *seq_out) {
    ckpt_geom g;
    int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
#if TT_NUM_RECEIVED > 0
    rcv.open = 0u; /* the slot it was writing is ours now */
#endif
    uint32_t target = 0u;
    uint32_t seq = 1u;
    save_target(&g, &target, &seq);
    rc = erase_blank(&g, target);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    /* 2. The received tensors as the model reads them now (compiled-in, or the newest slot's,
     * which is not the target), then the rest. */
    rc = program_entries(&g, target, 0, TT_NUM_RECEIVED);
    return rc != TT_CKPT_OK ? rc : finish(&g, target, seq, seq_out);
}

int tt_checkpoint_receive(uint32_t offset, const uint8_t *p, uint32_t n) {
#if TT_NUM_RECEIVED > 0
    ckpt_geom g;
    int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    if (!(offset == 0u || (rcv.open && offset == rcv.cursor)) ||
        n > (uint32_t)TT_RECEIVED_BYTES - offset) {
        return TT_CKPT_EORDER;
    }
    /* The tensor the piece starts in, where it starts in the stream and in the slot. */
    int32_t i = 0;
    uint32_t base = 0u;
    uint32_t at = g.header_span;
    while (i < TT_NUM_RECEIVED && offset >= base + entry_bytes(i)) {
        base += entry_bytes(i);
        at += entry_span(i, g.unit);
        i++;
    }
    { /* the piece must end at a tensor's end or TT_CKPT_RECEIVE_PIECE bytes into it, so the
       * next one starts on a write unit: checked before anything is touched */
        const uint32_t end = offset + n;
        uint32_t b = base;
        for (int32_t k = i; n > 0u && k < TT_NUM_RECEIVED; k++) {
            if (end <= b + entry_bytes(k)) {
                if (end != b + entry_bytes(k) && (end - b) % TT_CKPT_RECEIVE_PIECE != 0u) {
                    return TT_CKPT_EORDER;
                }
                break;
            }
            b += entry_bytes(k);
        }
    }
    if (offset == 0u) { /* open: erase the slot a save would write */
        rcv.open = 0u;
        save_target(&g, &rcv.slot, &rcv.seq);
        rc = erase_blank(&g, rcv.slot);
        if (rc != TT_CKPT_OK) {
            return rc;
        }
        rcv.open = 1u;
        rcv.cursor = 0u;
    }
    while (n > 0u) { /* each tensor's part of the piece: whole units from p, then the tail */
        const uint32_t rel = rcv.cursor - base;
        const uint32_t bytes = entry_bytes(i);
        const uint32_t take = bytes - rel < n ? bytes - rel : n;
        const uint32_t whole = take / g.unit * g.unit;
        rc = whole ? program_verify(rcv.slot, at + rel, p, whole) : TT_CKPT_OK;
        if (rc == TT_CKPT_OK && whole < take) { /* only at the tensor's end */
            uint8_t tail[TT_CKPT_MAX_WRITE_UNIT];
            memcpy(tail, p + whole, take - whole);
            memset(tail + (take - whole), CKPT_ERASED, g.unit - (take - whole));
            rc = program_verify(rcv.slot, at + rel + whole, tail, g.unit);
        }
        if (rc != TT_CKPT_OK) {
            rcv.open = 0u;
            return rc;
        }
        rcv.cursor += take;
        p += take;
        n -= take;
        if (rel + take == bytes) {
            base += bytes;
            at += entry_span(i, g.unit);
            i++;
        }
    }
    return TT_CKPT_OK;
#else
    (void)offset;
    (void)p;
    (void)n;
    return TT_CKPT_EORDER;
#endif
}

int tt_checkpoint_receive_commit(uint32_t *seq_out) {
#if TT_NUM_RECEIVED > 0
    ckpt_geom g;
    const int rc = geom_get(&g);
    if (rc != TT_CKPT_OK) {
        return rc;
    }
    if (!rcv.open || rcv.cursor != (uint32_t)TT_RECEIVED_BYTES) {
        return TT_CKPT_EORDER;
    }
    rcv.open = 0u;
    return finish(&g, rcv.slot, rcv.seq, seq_out);
#else
    (void)seq_out;
    return TT_CKPT_EORDER;
#endif
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
    const uint8_t *src = tt_port_flash_slot(slot) + entry_offset(&g, TT_NUM_RECEIVED);
    const int32_t entries = CKPT_CORE + (int32_t)g.num_state;
    for (int32_t i = TT_NUM_RECEIVED; i < entries; i++) {
        const uint32_t bytes = entry_bytes(i);
        if (bytes > 0u) {
            memcpy(entry(i)->data, src, bytes);
        }
        src += entry_span(i, g.unit);
    }
#if TT_NUM_RECEIVED > 0
    use_slot(&g, slot);
#endif
    if (seq_out != NULL) {
        *seq_out = seq;
    }
    return TT_CKPT_OK;
}
