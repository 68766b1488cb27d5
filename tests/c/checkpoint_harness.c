/* Test driver for firmware/tt_checkpoint.c on the host flash (firmware/port_host_flash.c),
 * with the fake model in tests/c/checkpoint_model. Used by tests/test_checkpoint.py.
 *
 * Commands run in order, one output line each:
 *   info            "info <slot size> <write unit>"
 *   fill V          set every parameter and state byte to the pattern of variant V (no output)
 *   save V          fill V, then tt_checkpoint_save: "save <rc> <seq>"
 *   load            tt_checkpoint_load: "load <rc> <seq> <class>"
 *   newest          tt_checkpoint_newest: "newest <rc> <seq>"
 *   receive V       (FAKE_RECEIVED) fill V, then send the received tensors the pattern of
 *                   variant V in pieces (32 bytes, or to a tensor's end) and commit:
 *                   "receive <rc> <seq>"
 * <class> names what the parameters hold: "init" (compiled-in values), "v<K>" (exactly the
 * pattern of variant K) or "mix" (anything else).
 *
 *   cutloop V EXTRA [receive] (must be the only command; needs TT_FLASH_FILE)
 * Power cuts at every byte of one save (or receive). The flash file as it is now is the "before" state.
 * For N = 1, 2, ...: restore the file, fork a child that fills V and saves with
 * TT_FLASH_CUT_AFTER=N (it dies after the N-th byte erased or programmed), then fork a fresh
 * "boot" child that starts from the compiled-in values and loads. One line per N:
 *   "cut <N> <save> <changed> <load rc> <seq> <class>"
 * <save> is "cut" (the child died at byte N), "done" (the save returned 0) or "rc<code>";
 * <changed> is a bit mask of the slots whose bytes differ from the before state. Stops after
 * EXTRA saves that completed without being cut. The parent never calls the flash functions,
 * so every child starts with a fresh port that reads its own environment. */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model.h"
#include "tt_checkpoint.h"
#include "tt_port.h"

#define CUT_EXIT 75          /* what port_host_flash.c exits with at a power cut */
#define MAX_CUTS (1u << 22)  /* a runaway loop guard, far above any slot size here */
#define NUM_VARIANTS 256u
#define NUM_SLOTS 2u

#ifndef TT_NUM_RECEIVED
#define TT_NUM_RECEIVED 0
#define TT_RECEIVED_BYTES 0
#endif
#define ENTRIES (TT_NUM_RECEIVED + TT_NUM_TRAINABLE + TT_NUM_STATE)
#define ENTRY_BYTES (TT_RECEIVED_BYTES + TT_TRAINABLE_BYTES + TT_STATE_BYTES)

static uint8_t init_values[ENTRY_BYTES];

/* What a checkpoint holds: the received tensors (as the model reads them now), the
 * parameters, then the training state. */
static const tt_param_info *entry(int32_t i) {
#if TT_NUM_RECEIVED > 0
    if (i < TT_NUM_RECEIVED) return tt_received(i);
#endif
    i -= TT_NUM_RECEIVED;
    return i < TT_NUM_TRAINABLE ? tt_trainable(i) : tt_state(i - TT_NUM_TRAINABLE);
}

static uint8_t pattern(unsigned variant, int32_t param, int32_t byte) {
    return (uint8_t)(variant * 53u + (unsigned)param * 17u + (unsigned)byte * 29u + 7u);
}

/* Parameters and state only: received tensors are read-only, changed by a receive. */
static void fill(unsigned variant) {
    for (int32_t i = TT_NUM_RECEIVED; i < ENTRIES; i++) {
        uint8_t *d = (uint8_t *)entry(i)->data;
        for (int32_t j = 0; j < entry(i)->bytes; j++) {
            d[j] = pattern(variant, i, j);
        }
    }
}

/* Copies the parameters to or from a flat buffer. */
static void snapshot(uint8_t *flat, int to_params) {
    size_t off = 0;
    for (int32_t i = 0; i < ENTRIES; i++) {
        const size_t n = (size_t)entry(i)->bytes;
        if (to_params && i < TT_NUM_RECEIVED) {
            off += n; /* the compiled-in values: the boot's own */
            continue;
        }
        if (to_params) {
            memcpy(entry(i)->data, flat + off, n);
        } else {
            memcpy(flat + off, entry(i)->data, n);
        }
        off += n;
    }
}

static int matches(unsigned variant) {
    for (int32_t i = 0; i < ENTRIES; i++) {
        const uint8_t *d = (const uint8_t *)entry(i)->data;
        for (int32_t j = 0; j < entry(i)->bytes; j++) {
            if (d[j] != pattern(variant, i, j)) {
                return 0;
            }
        }
    }
    return 1;
}

static void classify(char *out, size_t size) {
    uint8_t now[ENTRY_BYTES];
    snapshot(now, 0);
    if (memcmp(now, init_values, sizeof now) == 0) {
        snprintf(out, size, "init");
        return;
    }
    for (unsigned v = 0; v < NUM_VARIANTS; v++) {
        if (matches(v)) {
            snprintf(out, size, "v%u", v);
            return;
        }
    }
    snprintf(out, size, "mix");
}

static void print_load(const char *prefix) {
    uint32_t seq = 0;
    const int rc = tt_checkpoint_load(&seq);
    char cls[16];
    classify(cls, sizeof cls);
    printf("%s%d %u %s\n", prefix, rc, (unsigned)seq, cls);
}

static int read_all(int fd, uint8_t *buf, size_t n) {
    return pread(fd, buf, n, 0) == (ssize_t)n ? 0 : -1;
}

/* fill V, then a receive of variant V's pattern in pieces of 32 bytes or to a tensor's end. */
static int receive(unsigned variant, uint32_t *seq) {
    fill(variant);
#if TT_NUM_RECEIVED > 0
    uint32_t off = 0u;
    for (int32_t i = 0; i < TT_NUM_RECEIVED; i++) {
        const uint32_t n = (uint32_t)entry(i)->bytes;
        for (uint32_t j = 0u; j < n; j += 32u) {
            uint8_t piece[32];
            const uint32_t k = n - j < 32u ? n - j : 32u;
            for (uint32_t b = 0u; b < k; b++) {
                piece[b] = pattern(variant, i, (int32_t)(j + b));
            }
            const int rc = tt_checkpoint_receive(off, piece, k);
            if (rc != 0) return rc;
            off += k;
        }
    }
#endif
    return tt_checkpoint_receive_commit(seq);
}

static int cutloop(unsigned variant, unsigned extra, int by_receive) {
    const char *path = getenv("TT_FLASH_FILE");
    const int fd = path != NULL ? open(path, O_RDWR) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % NUM_SLOTS != 0) {
        fprintf(stderr, "cutloop: TT_FLASH_FILE must name an existing flash file\n");
        return 2;
    }
    const size_t size = (size_t)st.st_size;
    const size_t slot_size = size / NUM_SLOTS;
    uint8_t *before = malloc(size);
    uint8_t *after = malloc(size);
    if (before == NULL || after == NULL || read_all(fd, before, size) != 0) {
        fprintf(stderr, "cutloop: cannot read the flash file\n");
        return 2;
    }
    unsigned completed = 0;
    for (unsigned n = 1; n < MAX_CUTS && completed < extra; n++) {
        if (pwrite(fd, before, size, 0) != (ssize_t)size) {
            fprintf(stderr, "cutloop: cannot restore the flash file\n");
            return 2;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            char cut[24];
            snprintf(cut, sizeof cut, "%u", n);
            setenv("TT_FLASH_CUT_AFTER", cut, 1);
            int rc;
            if (by_receive) {
                rc = receive(variant, NULL);
            } else {
                fill(variant);
                rc = tt_checkpoint_save(NULL);
            }
            _exit(rc == 0 ? 0 : 100 - rc);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid) {
            fprintf(stderr, "cutloop: fork/wait failed\n");
            return 2;
        }
        char save[16];
        if (WIFEXITED(status) && WEXITSTATUS(status) == CUT_EXIT) {
            snprintf(save, sizeof save, "cut");
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            snprintf(save, sizeof save, "done");
            completed++;
        } else if (WIFEXITED(status)) {
            snprintf(save, sizeof save, "rc%d", 100 - WEXITSTATUS(status));
        } else {
            snprintf(save, sizeof save, "crash");
        }
        if (read_all(fd, after, size) != 0) {
            fprintf(stderr, "cutloop: cannot read the flash file\n");
            return 2;
        }
        unsigned changed = 0;
        for (unsigned k = 0; k < NUM_SLOTS; k++) {
            if (memcmp(before + k * slot_size, after + k * slot_size, slot_size) != 0) {
                changed |= 1u << k;
            }
        }
        char prefix[64];
        snprintf(prefix, sizeof prefix, "cut %u %s %u ", n, save, changed);
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            /* A fresh boot: compiled-in values, no power cut armed. */
            unsetenv("TT_FLASH_CUT_AFTER");
            snapshot(init_values, 1);
            print_load(prefix);
            fflush(stdout);
            _exit(0);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "cutloop: boot child failed\n");
            return 2;
        }
    }
    free(before);
    free(after);
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    snapshot(init_values, 0);
    if (argc >= 2 && strcmp(argv[1], "cutloop") == 0) {
        if (argc != 4 && !(argc == 5 && strcmp(argv[4], "receive") == 0)) {
            fprintf(stderr, "usage: cutloop V EXTRA [receive]\n");
            return 2;
        }
        return cutloop((unsigned)strtoul(argv[2], NULL, 10), (unsigned)strtoul(argv[3], NULL, 10),
                       argc == 5);
    }
    for (int a = 1; a < argc; a++) {
        const char *cmd = argv[a];
        const int has_arg = a + 1 < argc;
        if (strcmp(cmd, "info") == 0) {
            printf("info %u %u\n", (unsigned)tt_port_flash_slot_size(),
                   (unsigned)tt_port_flash_write_unit());
        } else if (strcmp(cmd, "fill") == 0 && has_arg) {
            fill((unsigned)strtoul(argv[++a], NULL, 10));
        } else if (strcmp(cmd, "save") == 0 && has_arg) {
            fill((unsigned)strtoul(argv[++a], NULL, 10));
            uint32_t seq = 0;
            const int rc = tt_checkpoint_save(&seq);
            printf("save %d %u\n", rc, (unsigned)seq);
        } else if (strcmp(cmd, "receive") == 0 && has_arg) {
            uint32_t seq = 0;
            const int rc = receive((unsigned)strtoul(argv[++a], NULL, 10), &seq);
            printf("receive %d %u\n", rc, (unsigned)seq);
        } else if (strcmp(cmd, "load") == 0) {
            print_load("load ");
        } else if (strcmp(cmd, "newest") == 0) {
            uint32_t seq = 0;
            const int rc = tt_checkpoint_newest(&seq);
            printf("newest %d %u\n", rc, (unsigned)seq);
        } else {
            fprintf(stderr, "unknown command or missing argument: %s\n", cmd);
            return 2;
        }
    }
    return 0;
}
