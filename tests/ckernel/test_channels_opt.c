/* tt_gather_channels_* / tt_scatter_channels_*_opt (runtime_c/optimized/tt_channels_opt.c)
 * against the reference copies on random shapes, with runs (no index table, an offset
 * pointer, as the code generator passes TTE's first k and the rest) and with index tables.
 * Prints "OK" and a hash of the outputs (the twins must print the host's). */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tt_kernels.h"

#define N 4096
static int8_t xs[N], ya[N], yb[N];
static float xf[N], fa[N], fb[N];
static int32_t idx[64];
static uint32_t g_seed = 12345u, g_hash = 2166136261u;
static int g_fail;

static int32_t rnd(int32_t lo, int32_t hi)
{
    return lo + (int32_t)(th_rand(&g_seed) % (uint32_t)(hi - lo + 1));
}

static void hash(const void *p, int32_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    int32_t i;
    for (i = 0; i < n; ++i) {
        g_hash = (g_hash ^ b[i]) * 16777619u;
    }
}

static void same(const void *a, const void *b, int32_t n, const char *what)
{
    if (memcmp(a, b, (size_t)n) != 0) {
        char s[80];
        snprintf(s, sizeof s, "MISMATCH %s\n", what);
        th_puts(s);
        ++g_fail;
    }
    hash(b, n);
}

int main(void)
{
    int32_t t, i;

    for (t = 0; t < 300; ++t) {
        const int32_t c = rnd(1, 64), rows = rnd(1, N / 64), k = rnd(1, c);
        const int32_t first = rnd(0, c - k);
        const int use_idx = t % 3 == 0;
        int32_t *const ix = use_idx ? idx : NULL;
        for (i = 0; i < k; ++i) {
            idx[i] = use_idx ? rnd(0, c - 1) : first + i;
        }
        for (i = 0; i < N; ++i) {
            xs[i] = (int8_t)th_rand(&g_seed);
            xf[i] = (float)(int32_t)th_rand(&g_seed) * 1e-6f;
            ya[i] = yb[i] = (int8_t)th_rand(&g_seed);
            fa[i] = fb[i] = (float)i;
        }
        /* gather: rows x c -> rows x k (a run reads from x + first) */
        tt_gather_channels_s8(ya, use_idx ? xs : xs + first, rows, c, ix, k);
        tt_gather_channels_s8_opt(yb, use_idx ? xs : xs + first, rows, c, ix, k);
        same(ya, yb, N, "gather_s8");
        tt_gather_channels_f32(fa, use_idx ? xf : xf + first, rows, c, ix, k);
        tt_gather_channels_f32_opt(fb, use_idx ? xf : xf + first, rows, c, ix, k);
        same(fa, fb, 4 * N, "gather_f32");
        /* scatter: rows x k -> rows x c (a run writes from y + first) */
        tt_scatter_channels_s8(use_idx ? ya : ya + first, xs, rows, c, ix, k);
        tt_scatter_channels_s8_opt(use_idx ? yb : yb + first, xs, rows, c, ix, k);
        same(ya, yb, N, "scatter_s8");
        tt_scatter_channels_f32(use_idx ? fa : fa + first, xf, rows, c, ix, k);
        tt_scatter_channels_f32_opt(use_idx ? fb : fb + first, xf, rows, c, ix, k);
        same(fa, fb, 4 * N, "scatter_f32");
    }
    {
        char s[80];
        snprintf(s, sizeof s, "hash %08lx\n%s\n", (unsigned long)g_hash, g_fail ? "FAIL" : "OK");
        th_puts(s);
    }
    th_exit(g_fail != 0);
    return 0;
}
