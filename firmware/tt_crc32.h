/* CRC-32 (IEEE 802.3: reflected, polynomial 0xEDB88320, init and final xor 0xFFFFFFFF), the
 * same value as Python's zlib.crc32. Used by the serial link frames and the checkpoints. */
#ifndef TT_CRC32_H
#define TT_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: start with crc = 0, feed chunks in order. */
uint32_t tt_crc32(uint32_t crc, const uint8_t *p, size_t n);

#endif
