/* Checkpoints: the trainable parameters and the training state (model.h's state table: the
 * pending-sample count, accumulators, momentum buffers, int8 shadows and the rounding's step
 * counter) saved to flash together, so that training survives a power cut as it was; and, in
 * builds with received tensors (--receive), the values of those frozen tensors, which the
 * model reads in place from the slot.
 *
 * The board gives two flash slots (tt_port.h). A save writes them to the slot that
 * does not hold the newest valid checkpoint, so the newest one is never touched; at boot
 * tt_checkpoint_load() copies the newest valid one back. A power cut at any point of a save
 * (during the erase or at any byte of the program) leaves the old checkpoint as the newest
 * valid one, so the device boots with the old parameters or the new ones, never a mix.
 *
 * A receive (tt_checkpoint_receive) is a save whose received tensors come from the link
 * instead of from the values in use: it streams them into the slot a save would write, and its
 * commit adds the parameters and the state as they are then, and the header. Until the commit
 * the model keeps reading the old values; after it, the new ones. A cut before the commit's
 * magic leaves the old checkpoint (and the old received values) in force.
 *
 * Slot layout. Fields are little-endian uint32 (two uint16 at 16 and 18), offsets in bytes
 * from the start of the slot:
 *
 *      0  version        TT_CKPT_VERSION, the version of this layout; TT_CKPT_VERSION_RECEIVED
 *                        when the build has received tensors (the same layout with them first)
 *      4  model_id       TT_MODEL_ID of the model that wrote it (identifies the model and its
 *                        trainable layout: another model's checkpoint is never loaded)
 *      8  seq            1 for the first save, newest + 1 after that; compared modulo 2^32
 *     12  payload_bytes  bytes of payload (the sum of the padded parameter sizes below)
 *     16  num_params     u16: TT_NUM_TRAINABLE
 *     18  num_state      u16: TT_NUM_STATE, or 0 when the slot cannot hold the state too (then
 *                        only the parameters are kept, and a load leaves the state as it is)
 *     20  write_unit     the flash write unit the payload is padded to
 *     24  crc            CRC-32 (zlib.crc32) of bytes 0..23, then of the payload_bytes of payload
 *     28  magic          TT_CKPT_MAGIC, the bytes "TTCK": the commit mark, programmed last
 *     32  0xFF           up to the header span: TT_CKPT_HEADER_BYTES rounded up to the write unit
 *   span  payload        version 3 only: each received tensor in tt_received() order, its
 *                        bytes, then 0xFF up to a multiple of TT_CKPT_RECEIVED_ALIGN or of the
 *                        write unit if larger (each starts aligned: the model reads it in
 *                        place); then each parameter in tt_trainable() order, then each state
 *                        entry in tt_state() order: its bytes as they are in RAM, then 0xFF up
 *                        to a multiple of the write unit
 *          the rest of the slot stays erased (0xFF).
 *
 * A slot is valid when the magic, version, model id, parameter and state counts, write unit
 * and payload size all match this build and the CRC matches. (The model id covers the received
 * tensors' names and shapes, so their count needs no field.) Version 1 (parameters only, a
 * uint32 parameter count) is not loaded: a build of this version starts from its compiled-in values. Of two valid slots the one with the larger seq
 * (in serial-number arithmetic, so the count may wrap) is the newest.
 *
 * Write order of a save, and why every prefix of it is invalid:
 *   1. erase the target slot (the other one is never touched): its old contents were at best
 *      an older checkpoint, so a cut mid-erase leaves the newest one in place;
 *   2. program the payload (received tensors first, as they arrive in a receive), then the
 *      header up to the write unit that holds the magic, its CRC computed over the payload
 *      read back: the magic is still erased (0xFFFFFFFF), so the slot is not valid;
 *   3. program the last header unit, which ends with the magic. Every byte of the magic has zero
 *      bits, so a magic programmed in part (bytes, or on NOR flash bits, still at 1) never
 *      equals TT_CKPT_MAGIC. With a write unit of 8 or more other header fields share that
 *      unit; a unit torn inside the flash is caught by the CRC.
 *   4. read back: every programmed chunk is compared with what was staged, and the slot must
 *      validate as a whole with the new seq.
 *
 * Writes are staged through a TT_CKPT_STAGE_BYTES stack buffer, so a parameter whose size is
 * not a multiple of the write unit is fine with any write unit up to TT_CKPT_MAX_WRITE_UNIT.
 * Nothing here allocates; only the parameters' own memory and the stack buffer are written,
 * and in builds with received tensors an open receive's four static words (which the build's
 * memory report counts).
 * Boards with a data cache over the flash must make tt_port_flash_slot() reads see what
 * tt_port_flash_program()/tt_port_flash_erase() wrote (invalidate in the port). */
#ifndef TT_CHECKPOINT_H
#define TT_CHECKPOINT_H

#include <stdint.h>

#define TT_CKPT_MAGIC 0x4B435454u   /* "TTCK" in little-endian byte order */
#define TT_CKPT_VERSION 2u
#define TT_CKPT_VERSION_RECEIVED 3u /* with received tensors */
#define TT_CKPT_RECEIVED_ALIGN 16u  /* a received tensor's alignment in the slot */
#define TT_CKPT_RECEIVE_PIECE 32u   /* a receive's piece ends at a tensor's end or a multiple
                                     * of this into it (a multiple of every write unit) */
#define TT_CKPT_HEADER_BYTES 32u    /* the fields above; the payload starts at the next unit */
#define TT_CKPT_OFF_VERSION 0u
#define TT_CKPT_OFF_MODEL_ID 4u
#define TT_CKPT_OFF_SEQ 8u
#define TT_CKPT_OFF_PAYLOAD_BYTES 12u
#define TT_CKPT_OFF_NUM_PARAMS 16u  /* u16 */
#define TT_CKPT_OFF_NUM_STATE 18u   /* u16 */
#define TT_CKPT_OFF_WRITE_UNIT 20u
#define TT_CKPT_OFF_CRC 24u
#define TT_CKPT_OFF_MAGIC 28u
#define TT_CKPT_STAGE_BYTES 64u     /* the stack buffer writes go through */
#define TT_CKPT_MAX_WRITE_UNIT 32u  /* covers STM32H7's 256-bit flash word */

/* Return codes. 0 is success; TT_CKPT_NONE is positive (nothing to load is not an error). */
#define TT_CKPT_OK 0
#define TT_CKPT_NONE 1          /* no valid checkpoint of this model in either slot */
#define TT_CKPT_ENOFLASH (-1)   /* the board has no checkpoint flash (slot size 0) */
#define TT_CKPT_EUNIT (-2)      /* write unit 0 or above TT_CKPT_MAX_WRITE_UNIT */
#define TT_CKPT_ETOOBIG (-3)    /* header and parameters do not fit in a slot */
#define TT_CKPT_EERASE (-4)     /* the erase failed or left the slot not blank */
#define TT_CKPT_EPROGRAM (-5)   /* tt_port_flash_program() failed */
#define TT_CKPT_EVERIFY (-6)    /* the read-back differs from what was written */
#define TT_CKPT_EORDER (-7)     /* a receive's bytes out of order or past the end, or its commit
                                 * before all of them arrived (or after a save closed it) */

/* Save the parameters and the training state to the slot not holding the newest valid checkpoint, with seq = newest + 1
 * (1 if there is none). Returns 0 and sets *seq_out (if not NULL), or a negative TT_CKPT_E*
 * code; flash is only touched once the size checks pass. After a failure the newest
 * checkpoint is still the one from before. */
int tt_checkpoint_save(uint32_t *seq_out);

/* Copy the newest valid checkpoint into the parameters (and the training state). Returns 0 and sets *seq_out (if not
 * NULL); TT_CKPT_NONE if no slot holds a valid checkpoint of this model; a negative code if
 * this board cannot hold one (TT_CKPT_ENOFLASH, TT_CKPT_EUNIT, TT_CKPT_ETOOBIG). The
 * parameters are only written when 0 is returned. */
int tt_checkpoint_load(uint32_t *seq_out);

/* Like tt_checkpoint_load() without copying anything: the seq of the newest valid checkpoint. */
int tt_checkpoint_newest(uint32_t *seq_out);

/* Receiving new values for the received tensors (builds with TT_NUM_RECEIVED > 0; others
 * answer TT_CKPT_EORDER): their TT_RECEIVED_BYTES bytes, back to back in tt_received() order,
 * in pieces, each starting where the last one ended and ending at a tensor's end or a
 * multiple of TT_CKPT_RECEIVE_PIECE bytes into a tensor (each is programmed as it comes). The
 * piece at offset 0 opens the receive and erases the slot a save would write (so it may take
 * as long as a save). The
 * commit then writes the parameters, the state and the header as a save does, and switches
 * the model to the new values; it returns the new checkpoint's seq. A save in between closes
 * the receive (its commit then fails with TT_CKPT_EORDER); an error leaves the newest
 * checkpoint and the values in use as they were. */
int tt_checkpoint_receive(uint32_t offset, const uint8_t *p, uint32_t n);
int tt_checkpoint_receive_commit(uint32_t *seq_out);

#endif
