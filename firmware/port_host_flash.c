/* The host build's checkpoint flash (the tt_port_flash_* functions of tt_port.h).
 *
 * Two slots of TT_HOST_FLASH_SLOT_SIZE bytes with NOR semantics: erase sets bytes to 0xFF,
 * program only clears bits and only into erased, unit-aligned areas (as ECC flash demands).
 *
 *   TT_FLASH_FILE=path      back the flash with this file through mmap(MAP_SHARED), so every
 *                           programmed or erased byte is in the file the moment it is stored
 *                           and survives the process dying; the file is created (or recreated
 *                           when its size is wrong) filled with 0xFF. Without the variable the
 *                           flash is a static array that lives as long as the process.
 *   TT_FLASH_CUT_AFTER=N    power-cut injection: _exit(TT_HOST_FLASH_CUT_EXIT) right after the
 *                           N-th byte this process erases or programs. Erase and program go
 *                           byte by byte, in ascending address order, so a cut can land
 *                           anywhere, mid-erase included.
 *
 * Both variables are read on the first call of any of these functions. */
#if !defined(__arm__)

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TT_MODEL_ALIASES /* model.h's tt_* names, whatever the build's --prefix */
#include "model.h"
#include "tt_port.h"

#ifndef TT_HOST_FLASH_WRITE_UNIT
#define TT_HOST_FLASH_WRITE_UNIT 4
#endif
/* Slots are whole sectors, like on a microcontroller. */
#define TT_HOST_FLASH_SECTOR 4096
/* Room for the checkpoint header (32 bytes, rounded up to the write unit). */
#define TT_HOST_FLASH_HEADER_ROOM 64
#ifndef TT_NUM_RECEIVED /* a model.h from before --receive: none */
#define TT_NUM_RECEIVED 0
#define TT_RECEIVED_BYTES 0
#endif
#ifndef TT_HOST_FLASH_SLOT_SIZE
/* The received tensors (each padded to 16 bytes or the unit), the parameters and the training
 * state (each padded to the write unit), plus the header, in whole sectors. */
#define TT_HOST_FLASH_SLOT_SIZE                                                              \
    ((TT_RECEIVED_BYTES + TT_NUM_RECEIVED * (15 + TT_HOST_FLASH_WRITE_UNIT) +                 \
      TT_TRAINABLE_BYTES + TT_NUM_TRAINABLE * (TT_HOST_FLASH_WRITE_UNIT - 1) +               \
      TT_STATE_BYTES + TT_NUM_STATE * (TT_HOST_FLASH_WRITE_UNIT - 1) +                      \
      TT_HOST_FLASH_HEADER_ROOM + TT_HOST_FLASH_SECTOR - 1) /                                \
     TT_HOST_FLASH_SECTOR * TT_HOST_FLASH_SECTOR)
#endif
#define TT_HOST_FLASH_SLOTS 2
#define TT_HOST_FLASH_TOTAL ((size_t)TT_HOST_FLASH_SLOTS * (size_t)(TT_HOST_FLASH_SLOT_SIZE))
/* EX_TEMPFAIL: the process did not fail, its power went away. */
#define TT_HOST_FLASH_CUT_EXIT 75
#define TT_HOST_FLASH_ERASED 0xFFu

/* Used when TT_FLASH_FILE is not set. +1: still a legal array when the slot size is 0. */
static unsigned char host_flash_ram[TT_HOST_FLASH_TOTAL + 1];
static unsigned char *host_flash;     /* NULL: no flash (slot size 0) */
static int host_flash_ready;
static unsigned long long host_flash_cut_after; /* 0: no cut */
static unsigned long long host_flash_touched;   /* bytes erased or programmed so far */

static void host_flash_fatal(const char *what, const char *detail) {
    fprintf(stderr, "tt flash: %s %s: %s\n", what, detail, strerror(errno));
    exit(1);
}

static void host_flash_init(void) {
    if (host_flash_ready) {
        return;
    }
    host_flash_ready = 1;
    const char *cut = getenv("TT_FLASH_CUT_AFTER");
    if (cut != NULL && *cut != '\0') {
        char *end = NULL;
        errno = 0;
        host_flash_cut_after = strtoull(cut, &end, 10);
        if (errno != 0 || *end != '\0' || cut[0] == '-') {
            errno = EINVAL;
            host_flash_fatal("bad TT_FLASH_CUT_AFTER", cut);
        }
    }
    if (TT_HOST_FLASH_TOTAL == 0) {
        return;
    }
    const char *path = getenv("TT_FLASH_FILE");
    if (path == NULL || *path == '\0') {
        memset(host_flash_ram, TT_HOST_FLASH_ERASED, TT_HOST_FLASH_TOTAL);
        host_flash = host_flash_ram;
        return;
    }
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        host_flash_fatal("cannot open", path);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        host_flash_fatal("cannot stat", path);
    }
    const int fresh = st.st_size != (off_t)TT_HOST_FLASH_TOTAL;
    /* A file of another size belongs to another build's layout: start blank. */
    if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)TT_HOST_FLASH_TOTAL) != 0)) {
        host_flash_fatal("cannot size", path);
    }
    void *map = mmap(NULL, TT_HOST_FLASH_TOTAL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        host_flash_fatal("cannot map", path);
    }
    close(fd);
    host_flash = (unsigned char *)map;
    if (fresh) {
        /* Factory state, not counted for power-cut injection. */
        memset(host_flash, TT_HOST_FLASH_ERASED, TT_HOST_FLASH_TOTAL);
    }
}

/* Called after each byte stored: the power may go now. */
static void host_flash_touch(void) {
    host_flash_touched++;
    if (host_flash_touched == host_flash_cut_after) {
        _exit(TT_HOST_FLASH_CUT_EXIT);
    }
}

/* A function, not the macro, in loops: with a slot size of 0 the compiler would warn that
 * `i < 0` is always false. */
static size_t host_flash_slot_bytes(void) {
    return (size_t)(TT_HOST_FLASH_SLOT_SIZE);
}

static unsigned char *host_flash_slot_ptr(uint32_t slot) {
    host_flash_init();
    if (host_flash == NULL || slot >= TT_HOST_FLASH_SLOTS) {
        return NULL;
    }
    return host_flash + (size_t)slot * host_flash_slot_bytes();
}

uint32_t tt_port_flash_slot_size(void) {
    host_flash_init();
    return host_flash == NULL ? 0u : (uint32_t)(TT_HOST_FLASH_SLOT_SIZE);
}

uint32_t tt_port_flash_write_unit(void) {
    return TT_HOST_FLASH_WRITE_UNIT;
}

int tt_port_flash_erase(uint32_t slot) {
    unsigned char *dst = host_flash_slot_ptr(slot);
    if (dst == NULL) {
        return -1;
    }
    for (size_t i = 0; i < host_flash_slot_bytes(); i++) {
        dst[i] = TT_HOST_FLASH_ERASED;
        host_flash_touch();
    }
    return 0;
}

int tt_port_flash_program(uint32_t slot, uint32_t offset, const uint8_t *p, size_t n) {
    unsigned char *dst = host_flash_slot_ptr(slot);
    const size_t unit = TT_HOST_FLASH_WRITE_UNIT;
    const size_t size = host_flash_slot_bytes();
    if (dst == NULL || (p == NULL && n > 0) || offset % unit != 0 || n % unit != 0 ||
        offset > size || n > size - offset) {
        return -1;
    }
    dst += offset;
    /* Programming over programmed bits is refused (ECC flash would fault): it would mean the
     * caller skipped the erase. */
    for (size_t i = 0; i < n; i++) {
        if (dst[i] != TT_HOST_FLASH_ERASED) {
            return -1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        dst[i] &= p[i];
        host_flash_touch();
    }
    return 0;
}

const uint8_t *tt_port_flash_slot(uint32_t slot) {
    return host_flash_slot_ptr(slot);
}

#else
/* Boards bring their own flash layer; ISO C wants at least one declaration per file. */
typedef int tt_port_host_flash_unused;
#endif
