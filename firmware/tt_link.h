/* The serial training link: one framed request/response protocol for the host build (stdin/
 * stdout), the QEMU twins (UART <-> TCP socket) and the boards (UART). The host side is
 * tinytrain/link/. Documented for users in docs/serial-protocol.md.
 *
 * Frame on the wire: 0x7E, body with HDLC byte stuffing (0x7E -> 0x7D 0x5E, 0x7D -> 0x7D 0x5D),
 * 0x7E. Body: u8 version | u16 seq | u8 cmd | payload | u32 CRC-32 (zlib) of everything
 * before it. All integers little-endian, floats IEEE-754 binary32.
 * A response repeats the request's seq with cmd | 0x80 and starts its payload with a status
 * byte. A frame that fails its CRC is answered with a NAK frame (cmd 0x15, seq 0), so the host
 * resends at once instead of waiting for a timeout. The device remembers the last request's
 * (seq, cmd) and its response: a retransmitted request is answered again from that copy and
 * never executed twice, so each training sample is applied exactly once. */
#ifndef TT_LINK_H
#define TT_LINK_H

#include <stdint.h>

/* The link's version: raised whenever a command is added or changes. 5 added 'O' (SGD
 * scalars) and 'g'/'s' (training state) to version 4; 6 added 'W'/'X'/'Y' (received tensors)
 * and the hello's received-bytes field. A build may be given an older version
 * (-DTT_LINK_VERSION=4) to serve that version's commands only, as its firmware did. */
#ifndef TT_LINK_VERSION
#define TT_LINK_VERSION 6
#endif
#define TT_LINK_FLAG 0x7E
#define TT_LINK_ESC 0x7D
#define TT_LINK_NAK 0x15
#define TT_LINK_CHUNK 256 /* bytes of parameters per get/set request */

/* Status bytes (first byte of every response payload). */
enum {
    TT_ST_OK = 0,
    TT_ST_UNKNOWN_CMD = 1,
    TT_ST_BAD_LENGTH = 2,
    TT_ST_BAD_ARG = 3,
    TT_ST_CKPT_ERROR = 4, /* followed by i32 tt_checkpoint error code */
    TT_ST_CKPT_NONE = 5,
    TT_ST_VERSION = 6,    /* followed by u8 the device's link version */
    TT_ST_REFUSED = 7,    /* an SGD scalar refused: u8 which (0 lr, 1 momentum, 2 weight
                           * decay), u8 the setter's error (TT_ERR_RANGE / _UNSUPPORTED) */
};

/* Serve requests until the link closes (never, on a board). */
void tt_link_serve(void);

/* Set by main() after the boot-time checkpoint load; reported by the 'K' command. */
extern uint32_t tt_link_boot_checkpoint;

#endif
