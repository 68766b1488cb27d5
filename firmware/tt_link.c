/* Device side of the serial training link (protocol in tt_link.h). */
#include "tt_link.h"

#include <math.h>
#include <string.h>

#define TT_MODEL_ALIASES /* model.h's tt_* names, whatever the build's --prefix */
#include "model.h"
#include "tt_checkpoint.h"
#include "tt_crc32.h"
#include "tt_port.h"

#ifndef TT_BOARD_NAME
#define TT_BOARD_NAME "unknown"
#endif
#ifndef TT_PROFILE_OPS
#define TT_PROFILE_OPS 0
#endif

#define TT_HDR 4 /* version, seq (2), cmd */
#define TT_CRC 4
#define TT_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define TT_PROFILE_CHUNK 64 /* op counters per 'P' response */

/* Largest request payload kept whole: a parameter chunk with its offset, a training target.
 * A sample is never held here: its rows go straight into the model's input buffer (or its
 * row-streaming ring) while the frame arrives; see sample(). */
#define TT_RX_PAYLOAD TT_MAX2(TT_TARGET_BYTES, TT_MAX2(4 + TT_LINK_CHUNK, 16))
/* Largest response payload (after the status byte): inference outputs, a chunk, info. */
#define TT_TX_PAYLOAD \
    TT_MAX2(TT_OUTPUT_SIZE * 4, TT_MAX2(TT_LINK_CHUNK, TT_MAX2(4 + 4 * TT_PROFILE_CHUNK, 64)))

static uint8_t rx[TT_HDR + TT_RX_PAYLOAD + TT_CRC] __attribute__((aligned(4)));
/* The last response body (without CRC), kept to answer a retransmitted request again. */
static uint8_t tx[TT_HDR + 1 + TT_TX_PAYLOAD + TT_CRC] __attribute__((aligned(4)));
static uint32_t tx_len;
static uint16_t last_seq;
static uint8_t last_cmd; /* 0: nothing to repeat */

typedef struct {
    uint32_t steps, skipped_nonfinite, crc_errors, bad_frames, duplicates, frames_ok;
} tt_link_stats;
static tt_link_stats stats;
uint32_t tt_link_boot_checkpoint = 0xFFFFFFFFu;

/* Ticks spent waiting for and reading sample bytes inside a training step. The step's time and
 * the op profile run on a clock that stops while the link is read, so they count computation
 * only: how fast the host sends is not the model's cost. */
static uint32_t io_ticks;
static uint32_t tick_mask(void) {
    uint32_t bits = tt_port_tick_bits();
    return bits < 32 ? (1u << bits) - 1u : 0xFFFFFFFFu;
}
static uint32_t compute_now(void) { return tt_port_ticks() - io_ticks; }

#ifdef TT_PROFILE
uint32_t tt_profile_now(void) { return compute_now(); }
#endif

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* ---- receiving: a frame is read byte by byte, so a sample can be consumed as it arrives ---- */

static struct {
    int synced;       /* a flag was seen: the next byte starts a frame */
    int ended;        /* the frame's closing flag was read */
    int closed;       /* the link closed (host build: stdin ended) */
    int esc;
    uint32_t n;       /* body bytes read so far */
    uint32_t crc;     /* CRC-32 of all body bytes but the last four */
    uint8_t tail[4];  /* the last four body bytes: the CRC when the frame ends */
} fr;

/* Wait for the start of the next frame. As in HDLC and the host's FrameReader, the flag that
 * closed the last frame also opens the next: a request whose own opening flag was lost on the
 * line is still read. Returns -1 when the link closed. */
static int begin_frame(void) {
    while (!fr.synced) { /* hunt for the first flag: whatever came before it is garbage */
        int c = tt_port_getc();
        if (c < 0) return -1;
        fr.synced = c == TT_LINK_FLAG;
    }
    fr.ended = fr.esc = 0;
    fr.n = 0;
    fr.crc = 0;
    return 0;
}

/* The frame's next body byte, or -1 at its end (closing flag, or the link closed). */
static int frame_byte(void) {
    while (!fr.ended) {
        int c = tt_port_getc();
        if (c < 0) { fr.ended = fr.closed = 1; break; }
        if (c == TT_LINK_FLAG) {
            if (fr.n == 0 && !fr.esc) continue; /* back-to-back flags: still between frames */
            fr.ended = 1;
            break;
        }
        if (c == TT_LINK_ESC) { fr.esc = 1; continue; }
        if (fr.esc) { c ^= 0x20; fr.esc = 0; }
        if (fr.n >= 4) fr.crc = tt_crc32(fr.crc, &fr.tail[fr.n % 4], 1);
        fr.tail[fr.n % 4] = (uint8_t)c;
        fr.n++;
        return c;
    }
    return -1;
}

/* Read the rest of the frame (into buf while it has room); returns the bytes seen. */
static uint32_t drain(uint8_t *buf, uint32_t room) {
    uint32_t k = 0;
    int c;
    while ((c = frame_byte()) >= 0) {
        if (k < room) buf[k] = (uint8_t)c;
        k++;
    }
    return k;
}

/* After the frame ended: did it end cleanly with a matching CRC? */
static int frame_ok(void) {
    if (fr.closed || fr.esc || fr.n < TT_HDR + TT_CRC) return 0;
    uint32_t want = 0;
    for (uint32_t i = 0; i < 4; i++) want |= (uint32_t)fr.tail[(fr.n + i) % 4] << (8 * i);
    return fr.crc == want;
}

static void send_stuffed(const uint8_t *p, uint32_t n, uint8_t *out, uint32_t *k) {
    for (uint32_t i = 0; i < n; i++) {
        if (*k + 2 > 64) { tt_port_write(out, *k); *k = 0; }
        if (p[i] == TT_LINK_FLAG || p[i] == TT_LINK_ESC) {
            out[(*k)++] = TT_LINK_ESC;
            out[(*k)++] = (uint8_t)(p[i] ^ 0x20);
        } else {
            out[(*k)++] = p[i];
        }
    }
}

static void send_body(const uint8_t *body, uint32_t n) {
    uint8_t out[64], crc[4];
    uint32_t k = 0;
    put_u32(crc, tt_crc32(0, body, n));
    out[k++] = TT_LINK_FLAG;
    send_stuffed(body, n, out, &k);
    send_stuffed(crc, 4, out, &k);
    if (k + 1 > sizeof(out)) { tt_port_write(out, k); k = 0; }
    out[k++] = TT_LINK_FLAG;
    tt_port_write(out, k);
}

static void send_nak(void) {
    const uint8_t body[TT_HDR] = {TT_LINK_VERSION, 0, 0, TT_LINK_NAK};
    send_body(body, TT_HDR);
}

/* ---- commands: each fills the response payload after the status byte, returns status ---- */

static uint8_t *const reply = tx + TT_HDR + 1;

static uint8_t cmd_hello(uint32_t *len) {
    uint32_t v[10] = {TT_LINK_VERSION, TT_MODEL_ID, TT_ARENA_SIZE, TT_TRAINABLE_BYTES,
                      TT_INPUT_SIZE, TT_OUTPUT_SIZE, TT_TARGET_BYTES, TT_BATCH,
                      tt_port_tick_bits(), TT_PROFILE_OPS};
    memcpy(reply, v, sizeof(v));
    memset(reply + sizeof(v), 0, 16);
    memcpy(reply + sizeof(v), TT_BOARD_NAME, strlen(TT_BOARD_NAME) < 16 ? strlen(TT_BOARD_NAME)
                                                                         : 16);
    *len = sizeof(v) + 16;
#if TT_LINK_VERSION >= 5
    { /* what a tick is (a trailing field: hosts that do not know it ignore it) */
        const uint32_t unit = tt_port_tick_unit();
        memcpy(reply + *len, &unit, 4);
        *len += 4;
    }
#endif
#if TT_LINK_VERSION >= 6
    { /* bytes of received tensors (--receive), another trailing field */
        const uint32_t received = TT_RECEIVED_BYTES;
        memcpy(reply + *len, &received, 4);
        *len += 4;
    }
#endif
    last_cmd = 0; /* a new host session: forget the previous session's last request */
    return TT_ST_OK;
}

/* ---- samples: the input's rows are read from the frame straight into the model ---- */

#define TT_SAMPLE_SHORT 1 /* the frame ended before the whole input arrived */
#define TT_SAMPLE_BAD 2   /* a bad CRC, a broken escape, or the link closed */
#define TT_SAMPLE_LENGTH 3 /* a good frame with more bytes than the sample */
#define TT_SAMPLE_NONFINITE 4 /* a float sample holding NaN or an infinity */
static int sample_error;
static int sample_nonfinite;

/* The model's input source (model.h): row r of the sample from the frame; at the end
 * (r == -1) the rest of the frame is read and checked. Nothing is trained unless it passes. */
static int32_t link_rows_io(void *row, int32_t r);
static int32_t link_rows(void *ctx, void *row, int32_t r) {
    (void)ctx;
    uint32_t t0 = tt_port_ticks();
    int32_t rc = link_rows_io(row, r);
    io_ticks += (tt_port_ticks() - t0) & tick_mask();
    return rc;
}

static int32_t link_rows_io(void *row, int32_t r) {
    if (r >= 0) {
        uint8_t *dst = (uint8_t *)row;
        for (uint32_t i = 0; i < TT_INPUT_ROW_BYTES; i++) {
            int c = frame_byte();
            if (c < 0) { /* short frame: finish the pass on zeros, then refuse the sample */
                memset(dst + i, 0, TT_INPUT_ROW_BYTES - i);
                sample_error = TT_SAMPLE_SHORT;
                return 1;
            }
            dst[i] = (uint8_t)c;
        }
#ifndef TT_INPUT_SCALE /* a float input: a NaN or infinity (exponent bits all set) is refused */
        for (uint32_t i = 0; i + 4 <= TT_INPUT_ROW_BYTES; i += 4) {
            uint32_t v;
            memcpy(&v, dst + i, 4);
            sample_nonfinite |= (v & 0x7F800000u) == 0x7F800000u;
        }
#endif
        return 0;
    }
    uint32_t extra = drain(NULL, 0);
    if (!frame_ok()) sample_error = TT_SAMPLE_BAD;
    else if (extra != TT_CRC || sample_error) sample_error = TT_SAMPLE_LENGTH;
    else if (sample_nonfinite) sample_error = TT_SAMPLE_NONFINITE;
    return sample_error != 0;
}

/* A train or infer request whose header (and target) are in rx: run it on the frame's rows.
 * The response goes to `out`, not to the kept reply: a frame that fails its CRC at the end must
 * not overwrite the reply a retransmitted earlier request is answered from. */
static uint8_t sample(uint8_t cmd, uint8_t *out, uint32_t *len) {
    int32_t pred = 0, updated = 0, rc;
    sample_error = 0;
    sample_nonfinite = 0;
    if (cmd == 'I') {
        float y[TT_OUTPUT_SIZE];
        rc = tt_infer_from(link_rows, NULL, y);
        if (rc == 0) memcpy(out, y, sizeof(y));
        *len = sizeof(y);
    } else {
        float loss = 0.0f;
        uint32_t skipped_before = tt_skipped_steps();
        uint32_t t0 = compute_now();
        rc = tt_train_step_from(link_rows, NULL, rx + TT_HDR, &loss, &pred, &updated);
        uint32_t ticks = (compute_now() - t0) & tick_mask();
        uint8_t skipped = tt_skipped_steps() != skipped_before;
        if (rc == 0) {
            stats.steps++;
            stats.skipped_nonfinite += skipped;
        }
        memcpy(out, &loss, 4);
        memcpy(out + 4, &pred, 4);
        out[8] = (uint8_t)updated;
        out[9] = skipped;
        out[10] = out[11] = 0;
        put_u32(out + 12, ticks);
        *len = 16;
    }
    if (rc == TT_ERR_TARGET && sample_error == 0) return TT_ST_BAD_ARG; /* nothing trained */
    if (sample_error == TT_SAMPLE_NONFINITE) return TT_ST_BAD_ARG;       /* nor here */
    if (rc != 0 && sample_error == 0) sample_error = TT_SAMPLE_BAD;
    return sample_error == 0 ? TT_ST_OK : TT_ST_BAD_LENGTH;
}

/* A table (the trainable parameters, or the training state) as one byte string: its entries
 * back to back, `total` bytes in all. */
typedef const tt_param_info *(*table_fn)(int32_t i);
static uint8_t table_bytes(table_fn entry, uint32_t total, uint32_t off, uint8_t *buf,
                           uint32_t n, int write) {
    if (off > total || n > total - off) return TT_ST_BAD_ARG;
    uint32_t base = 0;
    const tt_param_info *t;
    for (int32_t i = 0; (t = entry(i)) != NULL && n; i++) {
        uint32_t b = (uint32_t)t->bytes;
        if (off < base + b) {
            uint32_t k = off - base, m = b - k < n ? b - k : n;
            if (write) memcpy((uint8_t *)t->data + k, buf, m);
            else memcpy(buf, (const uint8_t *)t->data + k, m);
            buf += m; off += m; n -= m;
        }
        base += b;
    }
    return TT_ST_OK;
}

static uint8_t cmd_get(table_fn entry, uint32_t total, const uint8_t *p, uint32_t n,
                       uint32_t *len) {
    if (n != 6) return TT_ST_BAD_LENGTH;
    uint32_t off = get_u32(p), cnt = (uint32_t)p[4] | ((uint32_t)p[5] << 8);
    if (cnt > TT_LINK_CHUNK) return TT_ST_BAD_ARG;
    *len = cnt;
    return table_bytes(entry, total, off, reply, cnt, 0);
}

static uint8_t cmd_set(uint8_t *p, uint32_t n) {
    if (n < 4 || n - 4 > TT_LINK_CHUNK) return TT_ST_BAD_LENGTH;
    return table_bytes(tt_trainable, TT_TRAINABLE_BYTES, get_u32(p), p + 4, n - 4, 1);
}

#if TT_LINK_VERSION >= 5 /* version 4 had no training-state or SGD-scalar commands */
/* Training state writes: entry 0, the pending-sample count, must stay in 0..BATCH-1 (the
 * step compares it with BATCH), so a write that would put it elsewhere changes nothing. The
 * other entries take any bytes, as parameters do. */
static uint8_t cmd_set_state(uint8_t *p, uint32_t n) {
    if (n < 4 || n - 4 > TT_LINK_CHUNK) return TT_ST_BAD_LENGTH;
    uint32_t off = get_u32(p), cnt = n - 4;
    if (off < 4) {
        uint8_t v[4];
        int32_t pending;
        memcpy(v, tt_state(0)->data, 4);
        for (uint32_t i = off; i < 4 && i - off < cnt; i++) v[i] = p[4 + i - off];
        memcpy(&pending, v, 4);
        if (pending < 0 || pending >= TT_BATCH) return TT_ST_BAD_ARG;
    }
    return table_bytes(tt_state, TT_STATE_BYTES, off, p + 4, cnt, 1);
}

#endif

/* A checkpoint operation's result: the seq, no checkpoint, or the error code. */
static uint8_t checkpoint_reply(int rc, uint32_t seq, uint32_t *len) {
    if (rc < 0) { put_u32(reply, (uint32_t)rc); *len = 4; return TT_ST_CKPT_ERROR; }
    if (rc > 0) return TT_ST_CKPT_NONE;
    put_u32(reply, seq);
    *len = 4;
    return TT_ST_OK;
}

static uint8_t cmd_checkpoint(int save, uint32_t *len) {
    uint32_t seq = 0;
    int rc = save ? tt_checkpoint_save(&seq) : tt_checkpoint_load(&seq);
    return checkpoint_reply(rc, seq, len);
}

#if TT_LINK_VERSION >= 6
/* Received tensors: 'W' u32 offset | bytes writes the next piece of their new values (offset
 * 0 opens a receive), 'X' commits them (the reply is the new checkpoint's seq); a receive's
 * error is a checkpoint error (tt_checkpoint.h). */
static uint8_t cmd_receive(const uint8_t *p, uint32_t n, uint32_t *len) {
    if (n < 4 || n - 4 > TT_LINK_CHUNK) return TT_ST_BAD_LENGTH;
    const int rc = tt_checkpoint_receive(get_u32(p), p + 4, n - 4);
    return rc < 0 ? checkpoint_reply(rc, 0, len) : TT_ST_OK;
}

static const tt_param_info *received_entry(int32_t i) {
#if TT_NUM_RECEIVED > 0
    return tt_received(i);
#else
    (void)i;
    return NULL;
#endif
}
#endif

#if TT_LINK_VERSION >= 5
/* The SGD scalars: an empty request reads them; 3 x f32 (lr, momentum, weight decay) sets all
 * three or, if the model's setters refuse any, none (the earlier values are put back, which
 * the setters always accept). The reply is the values in force. */
static uint8_t cmd_optimizer(const uint8_t *p, uint32_t n, uint32_t *len) {
    if (n != 0 && n != 12) return TT_ST_BAD_LENGTH;
    if (n == 12) {
        const float old[3] = {tt_get_lr(), tt_get_momentum(), tt_get_weight_decay()};
        float v[3];
        memcpy(v, p, sizeof(v));
        int32_t rc[3] = {tt_set_lr(v[0]), tt_set_momentum(v[1]), tt_set_weight_decay(v[2])};
        for (uint8_t i = 0; i < 3; i++) {
            if (rc[i] == 0) continue;
            (void)tt_set_lr(old[0]);
            (void)tt_set_momentum(old[1]);
            (void)tt_set_weight_decay(old[2]);
            reply[0] = i;
            reply[1] = (uint8_t)rc[i];
            *len = 2;
            return TT_ST_REFUSED;
        }
    }
    const float now[3] = {tt_get_lr(), tt_get_momentum(), tt_get_weight_decay()};
    memcpy(reply, now, sizeof(now));
    *len = sizeof(now);
    return TT_ST_OK;
}
#endif

static uint8_t cmd_stats(uint32_t *len) {
    uint32_t v[7] = {stats.steps, stats.skipped_nonfinite, stats.crc_errors, stats.bad_frames,
                     stats.duplicates, stats.frames_ok, tt_link_boot_checkpoint};
    memcpy(reply, v, sizeof(v));
    *len = sizeof(v);
    return TT_ST_OK;
}

#ifdef TT_PROFILE
extern uint32_t tt_profile_ticks[];
#endif

static uint8_t cmd_profile(const uint8_t *p, uint32_t n, uint32_t *len) {
    if (n != 2) return TT_ST_BAD_LENGTH;
    uint32_t start = (uint32_t)p[0] | ((uint32_t)p[1] << 8), cnt = 0;
#ifdef TT_PROFILE
    if (start == 0xFFFFu) { /* reset the counters */
        memset(tt_profile_ticks, 0, sizeof(uint32_t) * TT_PROFILE_OPS);
        *len = 0;
        return TT_ST_OK;
    }
    for (uint32_t i = start; i < TT_PROFILE_OPS && cnt < TT_PROFILE_CHUNK; i++, cnt++)
        put_u32(reply + 4 + 4 * cnt, tt_profile_ticks[i]);
#else
    (void)start;
#endif
    put_u32(reply, cnt);
    *len = 4 + 4 * cnt;
    return TT_ST_OK;
}

static uint8_t dispatch(uint8_t cmd, uint8_t *p, uint32_t n, uint32_t *len) {
    *len = 0;
    switch (cmd) { /* the commands without a payload refuse one rather than ignore it */
    case 'H': return n ? TT_ST_BAD_LENGTH : cmd_hello(len);
    case 'T': /* a sample frame too short to hold its target */
    case 'I': (void)p; return TT_ST_BAD_LENGTH;
    case 'U': if (n) return TT_ST_BAD_LENGTH; tt_apply_update(); return TT_ST_OK;
    case 'G': return cmd_get(tt_trainable, TT_TRAINABLE_BYTES, p, n, len);
    case 'S': return cmd_set(p, n);
    case 'C': return n ? TT_ST_BAD_LENGTH : cmd_checkpoint(1, len);
    case 'L': return n ? TT_ST_BAD_LENGTH : cmd_checkpoint(0, len);
    case 'R': if (n) return TT_ST_BAD_LENGTH; tt_init(); return TT_ST_OK;
    case 'K': return n ? TT_ST_BAD_LENGTH : cmd_stats(len);
    case 'P': return cmd_profile(p, n, len);
#if TT_LINK_VERSION >= 5
    case 'g': return cmd_get(tt_state, TT_STATE_BYTES, p, n, len);
    case 's': return cmd_set_state(p, n);
    case 'O': return cmd_optimizer(p, n, len);
#endif
#if TT_LINK_VERSION >= 6
    case 'W': return cmd_receive(p, n, len);
    case 'X': {
        uint32_t seq = 0;
        if (n) return TT_ST_BAD_LENGTH;
        const int rc = tt_checkpoint_receive_commit(&seq);
        return checkpoint_reply(rc, seq, len);
    }
    case 'Y': return cmd_get(received_entry, TT_RECEIVED_BYTES, p, n, len);
#endif
    default: return TT_ST_UNKNOWN_CMD;
    }
}

static void respond(uint8_t cmd, uint8_t st, uint32_t len) {
    if (st != TT_ST_OK && st != TT_ST_CKPT_ERROR && st != TT_ST_VERSION && st != TT_ST_REFUSED)
        len = 0;
    tx[0] = TT_LINK_VERSION;
    tx[1] = rx[1];
    tx[2] = rx[2];
    tx[3] = (uint8_t)(cmd | 0x80);
    tx[4] = st;
    tx_len = TT_HDR + 1 + len;
    last_seq = (uint16_t)(rx[1] | (rx[2] << 8));
    last_cmd = cmd;
    send_body(tx, tx_len);
}

/* A frame that did not check: NAK it so the host resends at once (unless the link closed). */
static void reject(void) {
    if (fr.closed) return;
    if (fr.esc || fr.n < TT_HDR + TT_CRC) {
        stats.bad_frames++;
    } else {
        stats.crc_errors++;
        send_nak();
    }
}

void tt_link_serve(void) {
    for (;;) {
        if (begin_frame() < 0) return;
        uint32_t k = 0;
        int c;
        while (k < TT_HDR && (c = frame_byte()) >= 0) rx[k++] = (uint8_t)c;
        if (fr.closed) return;
        if (k < TT_HDR) { stats.bad_frames++; continue; }
        uint16_t seq = (uint16_t)(rx[1] | (rx[2] << 8));
        uint8_t cmd = rx[3];
        if (last_cmd && cmd == last_cmd && seq == last_seq && cmd != 'H') {
            drain(NULL, 0); /* our reply was lost: answer again, do not execute again */
            if (!frame_ok()) { reject(); continue; }
            stats.frames_ok++;
            stats.duplicates++;
            send_body(tx, tx_len);
            continue;
        }
        if (rx[0] == TT_LINK_VERSION && (cmd == 'T' || cmd == 'I')) {
            uint32_t want = cmd == 'T' ? TT_TARGET_BYTES : 0;
            while (k < TT_HDR + want && (c = frame_byte()) >= 0) rx[k++] = (uint8_t)c;
            if (k == TT_HDR + want) {
                static uint8_t out[TT_MAX2(TT_OUTPUT_SIZE * 4, 16)];
                uint32_t len = 0;
                uint8_t st = sample(cmd, out, &len);
                if (sample_error == TT_SAMPLE_BAD) { reject(); continue; }
                memcpy(reply, out, len);
                stats.frames_ok++;
                respond(cmd, st, len);
                continue;
            }
        }
        uint32_t room = sizeof(rx) - k;
        uint32_t rest = drain(rx + k, room); /* the CRC covers every byte, kept or not */
        if (fr.closed) return;
        if (!frame_ok()) { reject(); continue; } /* NAKed whatever its length */
        stats.frames_ok++;
        uint32_t body = k + rest - TT_CRC, len = 0;
        uint8_t st;
        if (rx[0] != TT_LINK_VERSION) { /* another version's request, of any length */
            st = TT_ST_VERSION;
            reply[0] = TT_LINK_VERSION;
            len = 1;
        } else if (rest > room) { /* longer than any request of this version */
            st = TT_ST_BAD_LENGTH;
        } else {
            st = dispatch(cmd, rx + TT_HDR, body - TT_HDR, &len);
        }
        respond(cmd, st, len);
    }
}
