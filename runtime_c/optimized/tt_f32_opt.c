/*
 * Optimised fp32 kernels for small models trained in full (conv, dense, fused SGD updates,
 * max pool). The reference kernels (tt_conv2d_f32.c, tt_dense_f32.c, tt_sparse_f32.c,
 * tt_pool_f32.c) are the specification.
 *
 * Every output element is computed with the reference's operations in the reference's order
 * (the same first value, the same products added one by one in the same sequence), so the
 * results are bit-identical; only the loop nesting differs. One exception: the plain update of
 * a dense layer (no momentum buffer, wd == 0; sgd_rows_lr) computes p - (lr*dy)*x, one
 * multiply per weight, where the reference computes p - lr*(0 + dy*x + 0*p): the step is a few
 * roundings (2^-24 each) from the reference's, a p of -0 may come out +0, and an infinite p
 * stays infinite where the reference's 0*p makes it NaN. The work is split into a few
 * micro-kernels that each keep several independent accumulators in registers:
 *   dot4/dot1:  acc[r] += sum_k x[k] * w_r[k]        (4 or 1 weight rows: conv / dense fwd)
 *   dot4p:      the same for a run of pixels, each from a bias (pointwise conv forward)
 *   tacc:       acc[j] += sum_k a[k] * B[k][j]       (j < 8 or 4: a broadcast times a row)
 *   taccp:      the same for a run of pixels, each from 0 (pointwise conv input gradient)
 *   tacc2:      two such rows from a[k], a[k]+1      (weight gradients: 2 output channels)
 *   vmac:       acc[j] += sum_k P[k][j] * Q[k][j]    (elementwise: depthwise weight gradient)
 *   ger / vger: y[p][j] += a[p] * w[j] / P[p][j] * w[j] over the pixels p a tap reaches,
 *               w in registers (thin stems / depthwise: one pass per tap, taps in the
 *               reference's order)
 *   sgd_rows / sgd_vec: the fused SGD update of a dense layer / of a computed gradient;
 *   sgd_rows_lr: the plain one of a dense layer, two rows per block of x.
 * The 2-D ones run over "rows" of n steps (pointers advanced by byte strides) so that one
 * call covers a whole convolution window or tap rectangle.
 *
 * On Cortex-M4F/M7 they are written in assembly: VLDM loads up to 16 floats per instruction
 * and VMLA.F32 is the non-fused multiply-accumulate (the architecture defines it as FPMul
 * then FPAdd, each rounded), so it gives exactly the bits of `acc += a * b` compiled with
 * -ffp-contract=off. GCC does not emit VMLA for these cores by itself and issues one VLDR per
 * float, which is what costs the reference 10-15 instructions per MAC. Elsewhere (host
 * builds) the same micro-kernels are plain C with the same operation order, so host and twin
 * results are bit-identical.
 */
#include "tt_kernels.h"
#include "tt_q8_round.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if (defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_8M_MAIN__)) && defined(__ARM_FP) && \
    ((__ARM_FP) & 4) && defined(__thumb2__) /* the M4F, M7 and M33: Thumb-2 with SP VFP */
#define TTK_ASM 1
#else
#define TTK_ASM 0
#endif

/* Arguments of a micro-kernel (one pointer keeps the call cheap; strides are in bytes). */
typedef struct {
    float *acc;        /* accumulators, stored back at the end */
    const float *a;    /* dot: x;  tacc: broadcast a;  vmac: P */
    int32_t as;        /* step of a per k (dot: unused, x is contiguous) */
    const float *b;    /* dot: weight row 0;  tacc: B row;  vmac: Q */
    int32_t bs;        /* dot: bytes between weight rows r and r+1;  else: step of b per k */
    int32_t n;         /* k steps per row, >= 0 */
    int32_t rows;      /* >= 1 */
    int32_t ar, br;    /* bytes from one row's start to the next, for a and b */
    const float *init; /* initial accumulators: acc itself, a bias, or zeros */
} ttk_args;

/* The dense fused update, all rows: w[o*w_in + j] = tt_sgd_elem(w[..], 0.0f + dy[o] * x[j],
 * m ? &m[o*k + j] : NULL, lr, momentum, wd) for o < out (>= 1), j < k. */
typedef struct {
    float *w;
    float *m;
    const float *x;
    const float *dy;
    int32_t k, out;
    int32_t wskip; /* bytes from the end of a row's k weights to the next row */
    float lr, momentum, wd;
} ttk_sgd_args;

static const float ttk_zeros[16];

/* The conv paths stay out of their callers so that only one path's frame is live: the stack
 * stays well under 1 KB per call. */
#if defined(__GNUC__)
#define TTK_NOINLINE __attribute__((noinline))
#else
#define TTK_NOINLINE
#endif

#if TTK_ASM

void ttk_dot4(const ttk_args *p);
void ttk_dot1(const ttk_args *p);
void ttk_tacc8(const ttk_args *p);
void ttk_tacc4(const ttk_args *p);
void ttk_vmac8(const ttk_args *p);
void ttk_vmac4(const ttk_args *p);
void ttk_taccp8(const ttk_args *p);
void ttk_taccp4(const ttk_args *p);
void ttk_taccq8(const ttk_args *p);
void ttk_taccq4(const ttk_args *p);
void ttk_tacc2_8(const ttk_args *p);
void ttk_tacc2_4(const ttk_args *p);
void ttk_ger8(const ttk_args *p);
void ttk_ger4(const ttk_args *p);
void ttk_vger8(const ttk_args *p);
void ttk_vger4(const ttk_args *p);
void ttk_dot4p(const ttk_args *p);
/* y[i] += *d * x[i], i < n */
void ttk_axpy(float *y, const float *x, int32_t n, const float *d);
void ttk_sgd_rows(const ttk_sgd_args *p);
void ttk_sgd_rows_lr(const ttk_sgd_args *p);
/* p[i] = tt_sgd_elem(p[i], g[i], m ? m + i : NULL, prm[0], prm[1], prm[2]), i < n */
void ttk_sgd_vec(float *p, float *m, const float *g, int32_t n, const float *prm);

#define TTK_FUNC(name) \
    ".pushsection .text." #name ",\"ax\",%progbits\n.balign 4\n.global " #name "\n" \
    ".type " #name ", %function\n.thumb_func\n" #name ":\n"
#define TTK_END(name) ".size " #name ", .-" #name "\n.popsection\n"

/* Register usage: s16-s31 and r4-r11 are callee-saved (pushed); every kernel reads its
 * ttk_args with one LDM: r1 acc, r2 a, r3 as, r4 b, r5 bs, r6 n, r7 rows, r8 ar, r9 br. */
__asm__(
    ".syntax unified\n"
    ".thumb\n"
    ".altmacro\n"
    /* cnt times: op s[d], s[a], s[b], each register number stepped by dd, da, db */
    ".macro TTK_OP op, d, dd, a, da, b, db, cnt\n"
    "  .if cnt\n"
    "    op s&d, s&a, s&b\n"
    "    TTK_OP op, %(d+dd), dd, %(a+da), da, %(b+db), db, %(cnt-1)\n"
    "  .endif\n"
    ".endm\n"
    ".macro TTK_VLD base, lo, hi\n"
    "  vldmia base, {s&lo-s&hi}\n"
    ".endm\n"
    ".macro TTK_VLDW base, lo, hi\n"
    "  vldmia base!, {s&lo-s&hi}\n"
    ".endm\n"
    ".macro TTK_VST base, lo, hi\n"
    "  vstmia base, {s&lo-s&hi}\n"
    ".endm\n"
    ".macro TTK_VSTW base, lo, hi\n"
    "  vstmia base!, {s&lo-s&hi}\n"
    ".endm\n"

    /* tacc, W accumulators in s24..: k pairs (a in s0/s1, two B rows from s8), with fast
     * paths for a contiguous a (one VLDM for both) and contiguous B rows (one VLDM for
     * both); an odd k last. P = 1 (taccp): rows are pixels, each starting from init (lr)
     * and stored to acc (r1), which advances by br (r9); B does not move. P = 2 (taccq):
     * the same, each pixel starting from its own acc. */
    ".macro TTK_TACC W, P\n"
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldr lr, [r0, #36]\n"
    "  TTK_VLD lr, 24, %(24+W-1)\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  .if P == 1\n"
    "  TTK_VLD lr, 24, %(24+W-1)\n"
    "  .endif\n"
    "  .if P == 2\n"
    "  TTK_VLD r1, 24, %(24+W-1)\n"
    "  .endif\n"
    "  mov r10, r2\n"
    "  mov r11, r4\n"
    "  lsrs ip, r6, #1\n"
    "  beq 5f\n"
    "  cmp r3, #4\n"
    "  bne 4f\n"
    "  cmp r5, #(W*4)\n"
    "  bne 3f\n"
    "2:\n"
    "  vldmia r10!, {s0-s1}\n"
    "  TTK_VLDW r11, 8, %(8+2*W-1)\n"
    "  TTK_OP vmla.f32, 24, 1, 0, 0, 8, 1, W\n"
    "  TTK_OP vmla.f32, 24, 1, 1, 0, %(8+W), 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 2b\n"
    "  b 5f\n"
    "3:\n"
    "  vldmia r10!, {s0-s1}\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_VLD r11, %(8+W), %(8+2*W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_OP vmla.f32, 24, 1, 0, 0, 8, 1, W\n"
    "  TTK_OP vmla.f32, 24, 1, 1, 0, %(8+W), 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 3b\n"
    "  b 5f\n"
    "4:\n"
    "  vldr s0, [r10]\n"
    "  add r10, r10, r3\n"
    "  vldr s1, [r10]\n"
    "  add r10, r10, r3\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_VLD r11, %(8+W), %(8+2*W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_OP vmla.f32, 24, 1, 0, 0, 8, 1, W\n"
    "  TTK_OP vmla.f32, 24, 1, 1, 0, %(8+W), 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 4b\n"
    "5:\n"
    "  tst r6, #1\n"
    "  beq 6f\n"
    "  vldr s0, [r10]\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  TTK_OP vmla.f32, 24, 1, 0, 0, 8, 1, W\n"
    "6:\n"
    "  add r2, r2, r8\n"
    "  .if P\n"
    "  TTK_VST r1, 24, %(24+W-1)\n"
    "  add r1, r1, r9\n"
    "  .else\n"
    "  add r4, r4, r9\n"
    "  .endif\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  .if P == 0\n"
    "  TTK_VST r1, 24, %(24+W-1)\n"
    "  .endif\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r11, pc}\n"
    ".endm\n"

    /* tacc2: two accumulator rows (s16.., s16+W..) from a pair a[k], a[k]+1 (s0, s1)
     * times one B row (s8..; one VLDM with write-back when the rows are contiguous):
     * acc layout {row 0: W floats, row 1: W floats} */
    ".macro TTK_TACC2 W\n"
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldr lr, [r0, #36]\n"
    "  TTK_VLD lr, 16, %(16+2*W-1)\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  mov r10, r2\n"
    "  mov r11, r4\n"
    "  movs ip, r6\n"
    "  beq 3f\n"
    "  cmp r5, #(W*4)\n"
    "  beq 4f\n"
    "2:\n"
    "  vldmia r10, {s0-s1}\n"
    "  add r10, r10, r3\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_OP vmla.f32, 16, 1, 0, 0, 8, 1, W\n"
    "  TTK_OP vmla.f32, %(16+W), 1, 1, 0, 8, 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 2b\n"
    "  b 3f\n"
    "4:\n"
    "  vldmia r10, {s0-s1}\n"
    "  add r10, r10, r3\n"
    "  TTK_VLDW r11, 8, %(8+W-1)\n"
    "  TTK_OP vmla.f32, 16, 1, 0, 0, 8, 1, W\n"
    "  TTK_OP vmla.f32, %(16+W), 1, 1, 0, 8, 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 4b\n"
    "3:\n"
    "  add r2, r2, r8\n"
    "  add r4, r4, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  TTK_VST r1, 16, %(16+2*W-1)\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r11, pc}\n"
    ".endm\n"

    /* ger: y[p][j] += a[p] * w[j] over the pixels p of a rectangle; w (W floats) stays in
     * s24..; two pixels at a time (a in s0/s1, their y in s8..), with fast paths for
     * contiguous y pixels (one VLDM / VSTM for both) and a contiguous a. r1 y, r4 w,
     * r5 y's step per pixel, r9 per row. */
    ".macro TTK_GER W\n"
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldm r0, {r1-r9}\n"
    "  TTK_VLD r4, 24, %(24+W-1)\n"
    "1:\n"
    "  mov r10, r2\n"
    "  mov r11, r1\n"
    "  lsrs ip, r6, #1\n"
    "  beq 5f\n"
    "  cmp r5, #(W*4)\n"
    "  bne 4f\n"
    "  cmp r3, #4\n"
    "  bne 3f\n"
    "2:\n"
    "  vldmia r10!, {s0-s1}\n"
    "  TTK_VLD r11, 8, %(8+2*W-1)\n"
    "  TTK_OP vmla.f32, 8, 1, 0, 0, 24, 1, W\n"
    "  TTK_OP vmla.f32, %(8+W), 1, 1, 0, 24, 1, W\n"
    "  TTK_VSTW r11, 8, %(8+2*W-1)\n"
    "  subs ip, ip, #1\n"
    "  bne 2b\n"
    "  b 5f\n"
    "3:\n"
    "  vldr s0, [r10]\n"
    "  add r10, r10, r3\n"
    "  vldr s1, [r10]\n"
    "  add r10, r10, r3\n"
    "  TTK_VLD r11, 8, %(8+2*W-1)\n"
    "  TTK_OP vmla.f32, 8, 1, 0, 0, 24, 1, W\n"
    "  TTK_OP vmla.f32, %(8+W), 1, 1, 0, 24, 1, W\n"
    "  TTK_VSTW r11, 8, %(8+2*W-1)\n"
    "  subs ip, ip, #1\n"
    "  bne 3b\n"
    "  b 5f\n"
    "4:\n"
    "  vldr s0, [r10]\n"
    "  add r10, r10, r3\n"
    "  vldr s1, [r10]\n"
    "  add r10, r10, r3\n"
    "  add lr, r11, r5\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  TTK_VLD lr, %(8+W), %(8+2*W-1)\n"
    "  TTK_OP vmla.f32, 8, 1, 0, 0, 24, 1, W\n"
    "  TTK_OP vmla.f32, %(8+W), 1, 1, 0, 24, 1, W\n"
    "  TTK_VST r11, 8, %(8+W-1)\n"
    "  TTK_VST lr, %(8+W), %(8+2*W-1)\n"
    "  add r11, lr, r5\n"
    "  subs ip, ip, #1\n"
    "  bne 4b\n"
    "5:\n"
    "  tst r6, #1\n"
    "  beq 6f\n"
    "  vldr s0, [r10]\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  TTK_OP vmla.f32, 8, 1, 0, 0, 24, 1, W\n"
    "  TTK_VST r11, 8, %(8+W-1)\n"
    "6:\n"
    "  add r2, r2, r8\n"
    "  add r1, r1, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r11, pc}\n"
    ".endm\n"

    /* vger: y[p][j] += P[p][j] * w[j] over the pixels p of a rectangle, w (W floats) in
     * s24.., P in s0.., y in s8..; r1 y, r2 P, r3 P's step, r4 w, r5 y's step */
    ".macro TTK_VGER W\n"
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldm r0, {r1-r9}\n"
    "  TTK_VLD r4, 24, %(24+W-1)\n"
    "1:\n"
    "  mov r10, r2\n"
    "  mov r11, r1\n"
    "  movs ip, r6\n"
    "  beq 3f\n"
    "2:\n"
    "  TTK_VLD r10, 0, %(W-1)\n"
    "  add r10, r10, r3\n"
    "  TTK_VLD r11, 8, %(8+W-1)\n"
    "  TTK_OP vmla.f32, 8, 1, 0, 1, 24, 1, W\n"
    "  TTK_VST r11, 8, %(8+W-1)\n"
    "  add r11, r11, r5\n"
    "  subs ip, ip, #1\n"
    "  bne 2b\n"
    "3:\n"
    "  add r2, r2, r8\n"
    "  add r1, r1, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r11, pc}\n"
    ".endm\n"

    /* vmac, W accumulators in s24..: P row in s8.., Q row in s16.. */
    ".macro TTK_VMAC W\n"
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldr lr, [r0, #36]\n"
    "  TTK_VLD lr, 24, %(24+W-1)\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  mov r10, r2\n"
    "  mov r11, r4\n"
    "  movs ip, r6\n"
    "  beq 3f\n"
    "2:\n"
    "  TTK_VLD r10, 8, %(8+W-1)\n"
    "  add r10, r10, r3\n"
    "  TTK_VLD r11, 16, %(16+W-1)\n"
    "  add r11, r11, r5\n"
    "  TTK_OP vmla.f32, 24, 1, 8, 1, 16, 1, W\n"
    "  subs ip, ip, #1\n"
    "  bne 2b\n"
    "3:\n"
    "  add r2, r2, r8\n"
    "  add r4, r4, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  TTK_VST r1, 24, %(24+W-1)\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r11, pc}\n"
    ".endm\n"

    /* one dot4 row: s16-s19 += x . w_r for the four weight rows r4, r4+r5, r4+2*r5, r4+3*r5
     * over r6 elements of x at r2, in chunks of 8, then 4, then single steps; x chunk s0-s7,
     * one weight row's chunk s8-s15 at a time; uses r0, r3, r10, r11, ip, lr */
    ".macro TTK_DOT4_ROW\n"
    "  mov r10, r2\n"
    "  mov r11, r4\n"
    "  add r3, r4, r5\n"
    "  add ip, r3, r5\n"
    "  add lr, ip, r5\n"
    "  subs r0, r6, #8\n"
    "  blt 3f\n"
    "2:\n"
    "  vldmia r10!, {s0-s7}\n"
    "  vldmia r11!, {s8-s15}\n"
    "  TTK_OP vmla.f32, 16, 0, 0, 1, 8, 1, 8\n"
    "  vldmia r3!, {s8-s15}\n"
    "  TTK_OP vmla.f32, 17, 0, 0, 1, 8, 1, 8\n"
    "  vldmia ip!, {s8-s15}\n"
    "  TTK_OP vmla.f32, 18, 0, 0, 1, 8, 1, 8\n"
    "  vldmia lr!, {s8-s15}\n"
    "  TTK_OP vmla.f32, 19, 0, 0, 1, 8, 1, 8\n"
    "  subs r0, r0, #8\n"
    "  bge 2b\n"
    "3:\n"
    "  adds r0, r0, #4\n"
    "  blt 4f\n"
    "  vldmia r10!, {s0-s3}\n"
    "  vldmia r11!, {s8-s11}\n"
    "  vldmia r3!, {s12-s15}\n"
    "  TTK_OP vmla.f32, 16, 0, 0, 1, 8, 1, 4\n"
    "  TTK_OP vmla.f32, 17, 0, 0, 1, 12, 1, 4\n"
    "  vldmia ip!, {s8-s11}\n"
    "  vldmia lr!, {s12-s15}\n"
    "  TTK_OP vmla.f32, 18, 0, 0, 1, 8, 1, 4\n"
    "  TTK_OP vmla.f32, 19, 0, 0, 1, 12, 1, 4\n"
    "  subs r0, r0, #4\n"
    "4:\n"
    "  adds r0, r0, #4\n"
    "  beq 6f\n"
    "5:\n"
    "  vldmia r10!, {s0}\n"
    "  vldmia r11!, {s8}\n"
    "  vldmia r3!, {s9}\n"
    "  vldmia ip!, {s10}\n"
    "  vldmia lr!, {s11}\n"
    "  vmla.f32 s16, s0, s8\n"
    "  vmla.f32 s17, s0, s9\n"
    "  vmla.f32 s18, s0, s10\n"
    "  vmla.f32 s19, s0, s11\n"
    "  subs r0, r0, #1\n"
    "  bne 5b\n"
    "6:\n"
    ".endm\n"

    /* dot4: accumulators s16-s19 (TTK_DOT4_ROW) over r7 rows of x (step r8) and w (step r9) */
    TTK_FUNC(ttk_dot4)
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s19}\n"
    "  ldr lr, [r0, #36]\n"
    "  vldmia lr, {s16-s19}\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  TTK_DOT4_ROW\n"
    "  add r2, r2, r8\n"
    "  add r4, r4, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  vstmia r1, {s16-s19}\n"
    "  vpop {s16-s19}\n"
    "  pop {r4-r11, pc}\n"
    TTK_END(ttk_dot4)

    /* dot4p: dot4 for a run of pixels (pointwise conv): per pixel p the accumulators start
     * from init (a bias), take x_p . w_r over n, and are stored to y_p; x_p advances by as,
     * y_p by ar. as and init live on the stack ([sp], [sp, #4]) for want of registers. */
    TTK_FUNC(ttk_dot4p)
    "  push {r4-r11, lr}\n"
    "  vpush {s16-s19}\n"
    "  ldr ip, [r0, #36]\n"
    "  ldr r3, [r0, #8]\n"
    "  push {r3, ip}\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  ldr ip, [sp, #4]\n"
    "  vldmia ip, {s16-s19}\n"
    "  TTK_DOT4_ROW\n"
    "  vstmia r1, {s16-s19}\n"
    "  add r1, r1, r8\n"
    "  ldr ip, [sp]\n"
    "  add r2, r2, ip\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  add sp, sp, #8\n"
    "  vpop {s16-s19}\n"
    "  pop {r4-r11, pc}\n"
    TTK_END(ttk_dot4p)

    /* dot1: accumulator s0; x chunk s8-s15, weight chunk s16-s23 */
    TTK_FUNC(ttk_dot1)
    "  push {r4-r9, lr}\n"
    "  vpush {s16-s23}\n"
    "  ldr lr, [r0, #36]\n"
    "  vldr s0, [lr]\n"
    "  ldm r0, {r1-r9}\n"
    "1:\n"
    "  mov ip, r2\n"
    "  mov lr, r4\n"
    "  subs r0, r6, #8\n"
    "  blt 3f\n"
    "2:\n"
    "  vldmia ip!, {s8-s15}\n"
    "  vldmia lr!, {s16-s23}\n"
    "  TTK_OP vmla.f32, 0, 0, 8, 1, 16, 1, 8\n"
    "  subs r0, r0, #8\n"
    "  bge 2b\n"
    "3:\n"
    "  adds r0, r0, #4\n"
    "  blt 4f\n"
    "  vldmia ip!, {s8-s11}\n"
    "  vldmia lr!, {s16-s19}\n"
    "  TTK_OP vmla.f32, 0, 0, 8, 1, 16, 1, 4\n"
    "  subs r0, r0, #4\n"
    "4:\n"
    "  adds r0, r0, #4\n"
    "  beq 6f\n"
    "5:\n"
    "  vldmia ip!, {s8}\n"
    "  vldmia lr!, {s16}\n"
    "  vmla.f32 s0, s8, s16\n"
    "  subs r0, r0, #1\n"
    "  bne 5b\n"
    "6:\n"
    "  add r2, r2, r8\n"
    "  add r4, r4, r9\n"
    "  subs r7, r7, #1\n"
    "  bne 1b\n"
    "  vstr s0, [r1]\n"
    "  vpop {s16-s23}\n"
    "  pop {r4-r9, pc}\n"
    TTK_END(ttk_dot1)

    TTK_FUNC(ttk_tacc8) "  TTK_TACC 8, 0\n" TTK_END(ttk_tacc8)
    TTK_FUNC(ttk_tacc4) "  TTK_TACC 4, 0\n" TTK_END(ttk_tacc4)
    TTK_FUNC(ttk_taccp8) "  TTK_TACC 8, 1\n" TTK_END(ttk_taccp8)
    TTK_FUNC(ttk_taccp4) "  TTK_TACC 4, 1\n" TTK_END(ttk_taccp4)
    TTK_FUNC(ttk_taccq8) "  TTK_TACC 8, 2\n" TTK_END(ttk_taccq8)
    TTK_FUNC(ttk_taccq4) "  TTK_TACC 4, 2\n" TTK_END(ttk_taccq4)
    TTK_FUNC(ttk_vmac8) "  TTK_VMAC 8\n" TTK_END(ttk_vmac8)
    TTK_FUNC(ttk_vmac4) "  TTK_VMAC 4\n" TTK_END(ttk_vmac4)
    TTK_FUNC(ttk_tacc2_8) "  TTK_TACC2 8\n" TTK_END(ttk_tacc2_8)
    TTK_FUNC(ttk_tacc2_4) "  TTK_TACC2 4\n" TTK_END(ttk_tacc2_4)
    TTK_FUNC(ttk_ger8) "  TTK_GER 8\n" TTK_END(ttk_ger8)
    TTK_FUNC(ttk_ger4) "  TTK_GER 4\n" TTK_END(ttk_ger4)
    TTK_FUNC(ttk_vger8) "  TTK_VGER 8\n" TTK_END(ttk_vger8)
    TTK_FUNC(ttk_vger4) "  TTK_VGER 4\n" TTK_END(ttk_vger4)

    /* axpy: d in s0, x chunk s8-s15, y chunk s16-s23 */
    TTK_FUNC(ttk_axpy)
    "  vpush {s16-s23}\n"
    "  vldr s0, [r3]\n"
    "  subs r2, r2, #8\n"
    "  blt 2f\n"
    "1:\n"
    "  vldmia r1!, {s8-s15}\n"
    "  vldmia r0, {s16-s23}\n"
    "  TTK_OP vmla.f32, 16, 1, 0, 0, 8, 1, 8\n"
    "  vstmia r0!, {s16-s23}\n"
    "  subs r2, r2, #8\n"
    "  bge 1b\n"
    "2:\n"
    "  adds r2, r2, #8\n"
    "  beq 4f\n"
    "3:\n"
    "  vldmia r1!, {s8}\n"
    "  vldr s16, [r0]\n"
    "  vmla.f32 s16, s0, s8\n"
    "  vstmia r0!, {s16}\n"
    "  subs r2, r2, #1\n"
    "  bne 3b\n"
    "4:\n"
    "  vpop {s16-s23}\n"
    "  bx lr\n"
    TTK_END(ttk_axpy)

    /* sgd_rows: the dense fused update, every row in one call. Per element exactly
     * tt_sgd_elem(p, 0.0f + d*x, m, ...): g = d*x; g = 0 + g; g = g + wd*p;
     * [m = g + momentum*m; g = m]; p = p - lr*g (VMLS: the product rounded, then the
     * subtraction, as vmul + vsub). s27 +0, s28 dy[o], s29 lr, s30 momentum, s31 wd; r1 w,
     * r2 m, r3 x, r4 dy, r5 k, r6 out, r7 bytes from a row's end to the next row of w, r8 x
     * cursor, ip count. */
    TTK_FUNC(ttk_sgd_rows)
    "  push {r4-r8, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldm r0!, {r1-r7}\n"
    "  vldmia r0, {s29-s31}\n"
    "  movs ip, #0\n"
    "  vmov s27, ip\n"
    "  cmp r2, #0\n"
    "  beq 20f\n"
    /* with momentum, 4 at a time: x s0-s3, p s4-s7, g s8-s11, m s12-s15 */
    "10:\n"
    "  vldmia r4!, {s28}\n"
    "  mov r8, r3\n"
    "  subs ip, r5, #4\n"
    "  blt 12f\n"
    "11:\n"
    "  vldmia r8!, {s0-s3}\n"
    "  vldmia r1, {s4-s7}\n"
    "  vldmia r2, {s12-s15}\n"
    "  TTK_OP vmul.f32, 8, 1, 28, 0, 0, 1, 4\n"
    "  TTK_OP vadd.f32, 8, 1, 27, 0, 8, 1, 4\n"
    "  TTK_OP vmla.f32, 8, 1, 31, 0, 4, 1, 4\n"
    "  TTK_OP vmla.f32, 8, 1, 30, 0, 12, 1, 4\n"
    "  vstmia r2!, {s8-s11}\n"
    "  TTK_OP vmls.f32, 4, 1, 29, 0, 8, 1, 4\n"
    "  vstmia r1!, {s4-s7}\n"
    "  subs ip, ip, #4\n"
    "  bge 11b\n"
    "12:\n"
    "  adds ip, ip, #4\n"
    "  beq 14f\n"
    "13:\n"
    "  vldmia r8!, {s0}\n"
    "  vldr s4, [r1]\n"
    "  vldr s12, [r2]\n"
    "  vmul.f32 s8, s28, s0\n"
    "  vadd.f32 s8, s27, s8\n"
    "  vmla.f32 s8, s31, s4\n"
    "  vmla.f32 s8, s30, s12\n"
    "  vstmia r2!, {s8}\n"
    "  vmls.f32 s4, s29, s8\n"
    "  vstmia r1!, {s4}\n"
    "  subs ip, ip, #1\n"
    "  bne 13b\n"
    "14:\n"
    "  add r1, r1, r7\n"
    "  subs r6, r6, #1\n"
    "  bne 10b\n"
    "  b 30f\n"
    /* plain, 8 at a time: x s0-s7, p s8-s15, g s16-s23 */
    "20:\n"
    "  vldmia r4!, {s28}\n"
    "  mov r8, r3\n"
    "  subs ip, r5, #8\n"
    "  blt 22f\n"
    "21:\n"
    "  vldmia r8!, {s0-s7}\n"
    "  vldmia r1, {s8-s15}\n"
    "  TTK_OP vmul.f32, 16, 1, 28, 0, 0, 1, 8\n"
    "  TTK_OP vadd.f32, 16, 1, 27, 0, 16, 1, 8\n"
    "  TTK_OP vmla.f32, 16, 1, 31, 0, 8, 1, 8\n"
    "  TTK_OP vmls.f32, 8, 1, 29, 0, 16, 1, 8\n"
    "  vstmia r1!, {s8-s15}\n"
    "  subs ip, ip, #8\n"
    "  bge 21b\n"
    "22:\n"
    "  adds ip, ip, #8\n"
    "  beq 24f\n"
    "23:\n"
    "  vldmia r8!, {s0}\n"
    "  vldr s8, [r1]\n"
    "  vmul.f32 s16, s28, s0\n"
    "  vadd.f32 s16, s27, s16\n"
    "  vmla.f32 s16, s31, s8\n"
    "  vmls.f32 s8, s29, s16\n"
    "  vstmia r1!, {s8}\n"
    "  subs ip, ip, #1\n"
    "  bne 23b\n"
    "24:\n"
    "  add r1, r1, r7\n"
    "  subs r6, r6, #1\n"
    "  bne 20b\n"
    "30:\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r8, pc}\n"
    TTK_END(ttk_sgd_rows)

    /* sgd_rows_lr: the plain update (no momentum buffer, wd == 0) as p = p - (lr*d)*x, one
     * VMLS per weight with lr*d rounded once per row (the reference: p - lr*(0 + d*x + 0*p)):
     * two rows share each block of x. s26/s27 lr*dy of the two rows, s29 lr; r1 row 0, r2
     * row 1, r0 bytes from one row's start to the next, r8 x cursor, ip count; x s0-s7,
     * row 0 s8-s15, row 1 s16-s23. */
    TTK_FUNC(ttk_sgd_rows_lr)
    "  push {r4-r8, lr}\n"
    "  vpush {s16-s31}\n"
    "  ldm r0!, {r1-r7}\n"
    "  vldmia r0, {s29}\n"
    "  add r0, r7, r5, lsl #2\n"
    "  subs r6, r6, #2\n"
    "  blt 40f\n"
    "30:\n"
    "  vldmia r4!, {s26-s27}\n"
    "  vmul.f32 s26, s29, s26\n"
    "  vmul.f32 s27, s29, s27\n"
    "  add r2, r1, r0\n"
    "  mov r8, r3\n"
    "  subs ip, r5, #8\n"
    "  blt 32f\n"
    "31:\n"
    "  vldmia r8!, {s0-s7}\n"
    "  vldmia r1, {s8-s15}\n"
    "  vldmia r2, {s16-s23}\n"
    "  TTK_OP vmls.f32, 8, 1, 26, 0, 0, 1, 8\n"
    "  TTK_OP vmls.f32, 16, 1, 27, 0, 0, 1, 8\n"
    "  vstmia r1!, {s8-s15}\n"
    "  vstmia r2!, {s16-s23}\n"
    "  subs ip, ip, #8\n"
    "  bge 31b\n"
    "32:\n"
    "  adds ip, ip, #8\n"
    "  beq 34f\n"
    "33:\n"
    "  vldmia r8!, {s0}\n"
    "  vldr s8, [r1]\n"
    "  vldr s16, [r2]\n"
    "  vmls.f32 s8, s26, s0\n"
    "  vmls.f32 s16, s27, s0\n"
    "  vstmia r1!, {s8}\n"
    "  vstmia r2!, {s16}\n"
    "  subs ip, ip, #1\n"
    "  bne 33b\n"
    "34:\n"
    "  add r1, r2, r7\n"
    "  subs r6, r6, #2\n"
    "  bge 30b\n"
    "40:\n"
    "  adds r6, r6, #2\n"
    "  beq 50f\n"
    "  vldmia r4!, {s26}\n"
    "  vmul.f32 s26, s29, s26\n"
    "  mov r8, r3\n"
    "  subs ip, r5, #8\n"
    "  blt 42f\n"
    "41:\n"
    "  vldmia r8!, {s0-s7}\n"
    "  vldmia r1, {s8-s15}\n"
    "  TTK_OP vmls.f32, 8, 1, 26, 0, 0, 1, 8\n"
    "  vstmia r1!, {s8-s15}\n"
    "  subs ip, ip, #8\n"
    "  bge 41b\n"
    "42:\n"
    "  adds ip, ip, #8\n"
    "  beq 50f\n"
    "43:\n"
    "  vldmia r8!, {s0}\n"
    "  vldr s8, [r1]\n"
    "  vmls.f32 s8, s26, s0\n"
    "  vstmia r1!, {s8}\n"
    "  subs ip, ip, #1\n"
    "  bne 43b\n"
    "50:\n"
    "  vpop {s16-s31}\n"
    "  pop {r4-r8, pc}\n"
    TTK_END(ttk_sgd_rows_lr)

    /* sgd_vec: p[i] = tt_sgd_elem(p[i], g[i], m + i, ...) for a computed gradient g:
     * g = g + wd*p; [m = g + momentum*m; g = m]; p = p - lr*g (VMLS). r0 p, r1 m, r2 g,
     * r3 n, prm = {lr, momentum, wd} in s29-s31; g s0-s3, p s4-s7, m s12-s15. */
    TTK_FUNC(ttk_sgd_vec)
    "  ldr ip, [sp]\n"
    "  vpush {s16-s31}\n"
    "  vldmia ip, {s29-s31}\n"
    "  cmp r1, #0\n"
    "  beq 5f\n"
    "  subs r3, r3, #4\n"
    "  blt 2f\n"
    "1:\n"
    "  vldmia r2!, {s0-s3}\n"
    "  vldmia r0, {s4-s7}\n"
    "  vldmia r1, {s12-s15}\n"
    "  TTK_OP vmla.f32, 0, 1, 31, 0, 4, 1, 4\n"
    "  TTK_OP vmla.f32, 0, 1, 30, 0, 12, 1, 4\n"
    "  vstmia r1!, {s0-s3}\n"
    "  TTK_OP vmls.f32, 4, 1, 29, 0, 0, 1, 4\n"
    "  vstmia r0!, {s4-s7}\n"
    "  subs r3, r3, #4\n"
    "  bge 1b\n"
    "2:\n"
    "  adds r3, r3, #4\n"
    "  beq 9f\n"
    "3:\n"
    "  vldmia r2!, {s0}\n"
    "  vldr s4, [r0]\n"
    "  vldr s12, [r1]\n"
    "  vmla.f32 s0, s31, s4\n"
    "  vmla.f32 s0, s30, s12\n"
    "  vstmia r1!, {s0}\n"
    "  vmls.f32 s4, s29, s0\n"
    "  vstmia r0!, {s4}\n"
    "  subs r3, r3, #1\n"
    "  bne 3b\n"
    "  b 9f\n"
    "5:\n"
    "  subs r3, r3, #4\n"
    "  blt 7f\n"
    "6:\n"
    "  vldmia r2!, {s0-s3}\n"
    "  vldmia r0, {s4-s7}\n"
    "  TTK_OP vmla.f32, 0, 1, 31, 0, 4, 1, 4\n"
    "  TTK_OP vmls.f32, 4, 1, 29, 0, 0, 1, 4\n"
    "  vstmia r0!, {s4-s7}\n"
    "  subs r3, r3, #4\n"
    "  bge 6b\n"
    "7:\n"
    "  adds r3, r3, #4\n"
    "  beq 9f\n"
    "8:\n"
    "  vldmia r2!, {s0}\n"
    "  vldr s4, [r0]\n"
    "  vmla.f32 s0, s31, s4\n"
    "  vmls.f32 s4, s29, s0\n"
    "  vstmia r0!, {s4}\n"
    "  subs r3, r3, #1\n"
    "  bne 8b\n"
    "9:\n"
    "  vpop {s16-s31}\n"
    "  bx lr\n"
    TTK_END(ttk_sgd_vec)
    ".noaltmacro\n");

#else /* portable C: the same operations in the same order */

#define TTK_AT(p, off) ((const float *)(const void *)((const char *)(p) + (off)))

static void ttk_dot(const ttk_args *p, int32_t nr)
{
    float acc[4];
    const float *x = p->a;
    const float *w = p->b;
    int32_t r, row, i;

    for (r = 0; r < nr; ++r) {
        acc[r] = p->init[r];
    }
    for (row = 0; row < p->rows; ++row) {
        for (i = 0; i < p->n; ++i) {
            for (r = 0; r < nr; ++r) {
                acc[r] += x[i] * TTK_AT(w, r * p->bs)[i];
            }
        }
        x = TTK_AT(x, p->ar);
        w = TTK_AT(w, p->br);
    }
    for (r = 0; r < nr; ++r) {
        p->acc[r] = acc[r];
    }
}

static void ttk_dot4(const ttk_args *p) { ttk_dot(p, 4); }
static void ttk_dot1(const ttk_args *p) { ttk_dot(p, 1); }

/* vm: 0 tacc (a[k] broadcast), 1 vmac (a[k][j]), 2 tacc2 (rows j / nw: a[k][j / nw]) */
static void ttk_mac(const ttk_args *p, int32_t nw, int32_t vm)
{
    float acc[16];
    const float *ar = p->a;
    const float *br = p->b;
    const int32_t na = (vm == 2) ? 2 * nw : nw;
    int32_t j, row, k;

    for (j = 0; j < na; ++j) {
        acc[j] = p->init[j];
    }
    for (row = 0; row < p->rows; ++row) {
        for (k = 0; k < p->n; ++k) {
            const float *a = TTK_AT(ar, k * p->as);
            const float *b = TTK_AT(br, k * p->bs);
            for (j = 0; j < na; ++j) {
                acc[j] += a[vm == 1 ? j : (vm == 2 ? j / nw : 0)] * b[j % nw];
            }
        }
        ar = TTK_AT(ar, p->ar);
        br = TTK_AT(br, p->br);
    }
    for (j = 0; j < na; ++j) {
        p->acc[j] = acc[j];
    }
}

static void ttk_tacc8(const ttk_args *p) { ttk_mac(p, 8, 0); }
static void ttk_tacc4(const ttk_args *p) { ttk_mac(p, 4, 0); }
static void ttk_vmac8(const ttk_args *p) { ttk_mac(p, 8, 1); }
static void ttk_vmac4(const ttk_args *p) { ttk_mac(p, 4, 1); }
/* rows are pixels: each from init (own: from its acc), stored to acc, acc advancing by br */
static void ttk_taccp(const ttk_args *p, int32_t nw, int32_t own)
{
    ttk_args q = *p;
    int32_t px;

    q.rows = 1;
    q.ar = q.br = 0;
    for (px = 0; px < p->rows; ++px) {
        if (own) {
            q.init = q.acc;
        }
        ttk_mac(&q, nw, 0);
        q.acc = (float *)(void *)((char *)q.acc + p->br);
        q.a = TTK_AT(q.a, p->ar);
    }
}

static void ttk_taccp8(const ttk_args *p) { ttk_taccp(p, 8, 0); }
static void ttk_taccp4(const ttk_args *p) { ttk_taccp(p, 4, 0); }
static void ttk_taccq8(const ttk_args *p) { ttk_taccp(p, 8, 1); }
static void ttk_taccq4(const ttk_args *p) { ttk_taccp(p, 4, 1); }
static void ttk_tacc2_8(const ttk_args *p) { ttk_mac(p, 8, 2); }
static void ttk_tacc2_4(const ttk_args *p) { ttk_mac(p, 4, 2); }

/* y (acc) pixels p: y[p][j] += a[p] * w[j] */
static void ttk_ger(const ttk_args *p, int32_t nw)
{
    const float *ar = p->a;
    float *yr = p->acc;
    int32_t j, row, k;

    for (row = 0; row < p->rows; ++row) {
        for (k = 0; k < p->n; ++k) {
            const float a = *TTK_AT(ar, k * p->as);
            float *y = (float *)(void *)((char *)yr + k * p->bs);
            for (j = 0; j < nw; ++j) {
                y[j] += a * p->b[j];
            }
        }
        ar = TTK_AT(ar, p->ar);
        yr = (float *)(void *)((char *)yr + p->br);
    }
}

static void ttk_ger8(const ttk_args *p) { ttk_ger(p, 8); }
static void ttk_ger4(const ttk_args *p) { ttk_ger(p, 4); }

/* y (acc) pixels p: y[p][j] += P[p][j] * w[j] */
static void ttk_vger(const ttk_args *p, int32_t nw)
{
    const float *ar = p->a;
    float *yr = p->acc;
    int32_t j, row, k;

    for (row = 0; row < p->rows; ++row) {
        for (k = 0; k < p->n; ++k) {
            const float *a = TTK_AT(ar, k * p->as);
            float *y = (float *)(void *)((char *)yr + k * p->bs);
            for (j = 0; j < nw; ++j) {
                y[j] += a[j] * p->b[j];
            }
        }
        ar = TTK_AT(ar, p->ar);
        yr = (float *)(void *)((char *)yr + p->br);
    }
}

static void ttk_vger8(const ttk_args *p) { ttk_vger(p, 8); }
static void ttk_vger4(const ttk_args *p) { ttk_vger(p, 4); }

/* pixels (rows) of a pointwise conv: y_p[r] = init[r] + x_p . w_r */
static void ttk_dot4p(const ttk_args *p)
{
    ttk_args q = *p;
    int32_t px;

    q.rows = 1;
    q.ar = q.br = 0;
    for (px = 0; px < p->rows; ++px) {
        ttk_dot(&q, 4);
        q.acc = (float *)(void *)((char *)q.acc + p->ar);
        q.a = TTK_AT(q.a, p->as);
    }
}

static void ttk_axpy(float *y, const float *x, int32_t n, const float *d)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        y[i] += *d * x[i];
    }
}

static void ttk_sgd_rows(const ttk_sgd_args *p)
{
    float *w = p->w;
    float *m = p->m;
    int32_t o, j;

    for (o = 0; o < p->out; ++o) {
        for (j = 0; j < p->k; ++j) {
            w[j] = tt_sgd_elem(w[j], 0.0f + p->dy[o] * p->x[j], m != NULL ? &m[j] : NULL,
                               p->lr, p->momentum, p->wd);
        }
        w = (float *)(void *)((char *)(w + p->k) + p->wskip);
        m = (m != NULL) ? m + p->k : NULL;
    }
}

/* p - (lr * d) * x: see the assembly */
static void ttk_sgd_rows_lr(const ttk_sgd_args *p)
{
    float *w = p->w;
    int32_t o, j;

    for (o = 0; o < p->out; ++o) {
        const float step = p->lr * p->dy[o];
        for (j = 0; j < p->k; ++j) {
            w[j] = w[j] - step * p->x[j];
        }
        w = (float *)(void *)((char *)(w + p->k) + p->wskip);
    }
}

static void ttk_sgd_vec(float *w, float *m, const float *g, int32_t n, const float *prm)
{
    int32_t i;

    for (i = 0; i < n; ++i) {
        w[i] = tt_sgd_elem(w[i], g[i], m != NULL ? &m[i] : NULL, prm[0], prm[1], prm[2]);
    }
}

#endif /* TTK_ASM */

/* ---- call helpers (strides in floats) ---- */

static void ttk_run(void (*k)(const ttk_args *), float *acc, const float *init,
                    const float *a, int32_t as, const float *b, int32_t bs, int32_t n,
                    int32_t rows, int32_t ar, int32_t br)
{
    ttk_args p;

    p.acc = acc;
    p.a = a;
    p.as = as * 4;
    p.b = b;
    p.bs = bs * 4;
    p.n = n;
    p.rows = rows;
    p.ar = ar * 4;
    p.br = br * 4;
    p.init = init;
    k(&p);
}

/* tacc / vmac / tacc2 / ger / vger over rows x n steps: rows that continue one another in
 * both a and b are one longer row (fewer row setups in the kernel) */
static void ttk_run2d(void (*k)(const ttk_args *), float *acc, const float *init,
                      const float *a, int32_t as, const float *b, int32_t bs, int32_t n,
                      int32_t rows, int32_t ar, int32_t br)
{
    if (rows > 1 && ar == n * as && br == n * bs) {
        n *= rows;
        rows = 1;
    }
    ttk_run(k, acc, init, a, as, b, bs, n, rows, ar, br);
}

/* nw (8 or 4) wide tacc / vmac */
static void tacc(int32_t nw, float *acc, const float *init, const float *a, int32_t as,
                 const float *b, int32_t bs, int32_t n, int32_t rows, int32_t ar, int32_t br)
{
    ttk_run2d(nw == 8 ? ttk_tacc8 : ttk_tacc4, acc, init, a, as, b, bs, n, rows, ar, br);
}

static void vmac(int32_t nw, float *acc, const float *init, const float *a, int32_t as,
                 const float *b, int32_t bs, int32_t n, int32_t rows, int32_t ar, int32_t br)
{
    ttk_run2d(nw == 8 ? ttk_vmac8 : ttk_vmac4, acc, init, a, as, b, bs, n, rows, ar, br);
}

/* chunk width for count remaining items: 8, 4, or 1 (scalar C) */
static int32_t width(int32_t remaining, int32_t cap)
{
    if (remaining >= 8 && cap >= 8) {
        return 8;
    }
    return (remaining >= 4 && cap >= 4) ? 4 : 1;
}

/* Taps k < n (spacing d) of a window starting at input base that land in [0, size). */
static void tap_span(int32_t base, int32_t d, int32_t n, int32_t size, int32_t *lo,
                     int32_t *hi)
{
    int32_t a = 0, b = n;

    if (base < 0) {
        a = (-base + d - 1) / d;
    }
    if (base + (n - 1) * d >= size) {
        b = (size - 1 - base < 0) ? 0 : (size - 1 - base) / d + 1;
    }
    if (a > n) {
        a = n;
    }
    *lo = a;
    *hi = b < a ? a : b;
}

/* Outputs o < on whose window (stride s, offset off: input o*s + off) lands in [0, size). */
static void out_span(int32_t off, int32_t s, int32_t on, int32_t size, int32_t *lo,
                     int32_t *hi)
{
    int32_t a = 0, b;

    if (off < 0) {
        a = (-off + s - 1) / s;
    }
    b = (size - 1 - off < 0) ? 0 : (size - 1 - off) / s + 1;
    if (b > on) {
        b = on;
    }
    if (a > on) {
        a = on;
    }
    *lo = a;
    *hi = b < a ? a : b;
}

/* The valid output rectangle of tap (ky, kx): outputs [oy0, oy1) x [ox0, ox1). */
typedef struct {
    int32_t oy0, oy1, ox0, ox1, iy0, ix0;
} tap_rect;

static void tap_rect_of(const tt_conv_geom *g, int32_t ky, int32_t kx, tap_rect *r)
{
    out_span(ky * g->dh - g->pt, g->sh, g->oh, g->h, &r->oy0, &r->oy1);
    out_span(kx * g->dw - g->pl, g->sw, g->ow, g->w, &r->ox0, &r->ox1);
    r->iy0 = r->oy0 * g->sh - g->pt + ky * g->dh;
    r->ix0 = r->ox0 * g->sw - g->pl + kx * g->dw;
}

/* y[p*stride + j] = v[j] for j < nw (8 or 4), p < n */
static void fill_pixels(float *y, const float *v, int32_t nw, int32_t stride, int32_t n)
{
    int32_t p, j;

    if (nw == 8) {
        const float v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
        const float v4 = v[4], v5 = v[5], v6 = v[6], v7 = v[7];
        for (p = 0; p < n; ++p, y += stride) {
            y[0] = v0;
            y[1] = v1;
            y[2] = v2;
            y[3] = v3;
            y[4] = v4;
            y[5] = v5;
            y[6] = v6;
            y[7] = v7;
        }
        return;
    }
    for (p = 0; p < n; ++p, y += stride) {
        for (j = 0; j < nw; ++j) {
            y[j] = v[j];
        }
    }
}

/* ====================================================================================== */
/* convolution forward                                                                     */

/* Output channels [oc0, cout) with the dot kernel: per output pixel and block of 4 output
 * channels one call covers the window (one row per valid ky when the kx taps of a row are
 * contiguous in x and in w, else one call per ky with one row per kx). */
TTK_NOINLINE static void conv_fwd_dot(float *y, const float *x, const float *w, const float *b,
                         const tt_conv_geom *g, int32_t oc0)
{
    const int32_t cin = g->cin, cout = g->cout;
    const int32_t cin_g = cin / g->groups, cout_g = cout / g->groups;
    const int32_t K = g->kh * g->kw * cin_g;
    const int32_t merge = (g->dw == 1 && cin_g == cin);
    int32_t oy, ox;

    for (oy = 0; oy < g->oh; ++oy) {
        int32_t ky0, ky1;
        tap_span(oy * g->sh - g->pt, g->dh, g->kh, g->h, &ky0, &ky1);
        for (ox = 0; ox < g->ow; ++ox) {
            float *yp = y + (oy * g->ow + ox) * cout;
            int32_t kx0, kx1, grp, oc;
            const float *xp;
            tap_span(ox * g->sw - g->pl, g->dw, g->kw, g->w, &kx0, &kx1);
            if (ky0 == ky1 || kx0 == kx1) {
                for (oc = oc0; oc < cout; ++oc) {
                    yp[oc] = (b != NULL) ? b[oc] : 0.0f;
                }
                continue;
            }
            xp = x + ((oy * g->sh - g->pt + ky0 * g->dh) * g->w +
                      (ox * g->sw - g->pl + kx0 * g->dw)) * cin;
            for (grp = oc0 / cout_g; grp < g->groups; ++grp) {
                const int32_t oce = (grp + 1) * cout_g;
                const float *xg = xp + grp * cin_g;
                const float *wt = w + (ky0 * g->kw + kx0) * cin_g;
                oc = (oc0 > grp * cout_g) ? oc0 : grp * cout_g;
                while (oc < oce) {
                    void (*k)(const ttk_args *) = (oce - oc >= 4) ? ttk_dot4 : ttk_dot1;
                    const float *init = (b != NULL) ? b + oc : ttk_zeros;
                    if (merge) {
                        ttk_run(k, yp + oc, init, xg, 0, wt + oc * K, K, (kx1 - kx0) * cin,
                                ky1 - ky0, g->dh * g->w * cin, g->kw * cin);
                    } else {
                        int32_t ky;
                        for (ky = 0; ky < ky1 - ky0; ++ky) {
                            ttk_run(k, yp + oc, ky == 0 ? init : yp + oc,
                                    xg + ky * g->dh * g->w * cin, 0,
                                    wt + oc * K + ky * g->kw * cin_g, K, cin_g, kx1 - kx0,
                                    g->dw * cin, cin_g);
                        }
                    }
                    oc += (k == ttk_dot4) ? 4 : 1;
                }
            }
        }
    }
}

/* Pointwise (1x1, groups == 1, cin >= 4): per output row, the pixels whose input is inside
 * go through dot4p (4 output channels, one call for the row, or for the whole image when its
 * pixels are contiguous in x and y); channels past a multiple of 4 and pixels on the padding
 * as conv_fwd_dot. */
TTK_NOINLINE static void conv_fwd_pw(float *y, const float *x, const float *w, const float *b,
                                     const tt_conv_geom *g)
{
    const int32_t cin = g->cin, cout = g->cout;
    const int32_t oc4 = cout & ~3;
    const int32_t whole = (g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
                           g->ow == g->w && g->oh <= g->h);
    int32_t oy, ox0, ox1, oc;

    out_span(-g->pl, g->sw, g->ow, g->w, &ox0, &ox1);
    for (oy = 0; oy < g->oh; ++oy) {
        const int32_t iy = oy * g->sh - g->pt;
        const int32_t npx = whole ? g->oh * g->ow : ox1 - ox0;
        if (iy < 0 || iy >= g->h || npx == 0) {
            continue; /* all padding: conv_fwd_dot writes the bias */
        }
        for (oc = 0; oc < oc4; oc += 4) {
            ttk_run(ttk_dot4p, y + (oy * g->ow + ox0) * cout + oc,
                    (b != NULL) ? b + oc : ttk_zeros, x + (iy * g->w + ox0 * g->sw - g->pl) * cin,
                    g->sw * cin, w + oc * cin, cin, cin, npx, cout, 0);
        }
        if (whole) {
            break;
        }
    }
    /* what is left: channels oc4.. everywhere, and every channel of the padding pixels */
    if (oc4 < cout || ox0 > 0 || ox1 < g->ow || g->oh * g->sh - g->pt > g->h || g->pt > 0) {
        for (oy = 0; oy < g->oh; ++oy) {
            const int32_t iy = oy * g->sh - g->pt;
            int32_t ox;
            for (ox = 0; ox < g->ow; ++ox) {
                float *yp = y + (oy * g->ow + ox) * cout;
                const int32_t inside = iy >= 0 && iy < g->h && ox >= ox0 && ox < ox1;
                for (oc = inside ? oc4 : 0; oc < cout; ++oc) {
                    float acc = (b != NULL) ? b[oc] : 0.0f;
                    if (inside) {
                        ttk_run(ttk_dot1, &acc, &acc, x + (iy * g->w + ox * g->sw - g->pl) * cin,
                                0, w + oc * cin, cin, cin, 1, 0, 0);
                    }
                    yp[oc] = acc;
                }
            }
        }
    }
}

/* groups == 1 with few input channels per kernel row (stems): y starts as the bias, then per
 * tap and input channel, in the reference's order (ky, kx, ic), a rank-1 update of every
 * output pixel the tap reaches, 8 (or 4) output channels at a time with their weights in
 * registers. Returns the output channels done (a multiple of 4). */
TTK_NOINLINE static int32_t conv_fwd_ger(float *y, const float *x, const float *w,
                                         const float *b, const tt_conv_geom *g)
{
    const int32_t cin = g->cin, cout = g->cout;
    const int32_t K = g->kh * g->kw * cin;
    float wv[8];
    int32_t oc = 0;

    while (cout - oc >= 4) {
        const int32_t nw = width(cout - oc, 8);
        int32_t ky, kx, ic, j;
        fill_pixels(y + oc, (b != NULL) ? b + oc : ttk_zeros, nw, cout, g->oh * g->ow);
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                tap_rect r;
                tap_rect_of(g, ky, kx, &r);
                if (r.oy0 == r.oy1 || r.ox0 == r.ox1) {
                    continue;
                }
                for (ic = 0; ic < cin; ++ic) {
                    for (j = 0; j < nw; ++j) {
                        wv[j] = w[(oc + j) * K + (ky * g->kw + kx) * cin + ic];
                    }
                    ttk_run2d(nw == 8 ? ttk_ger8 : ttk_ger4,
                              y + (r.oy0 * g->ow + r.ox0) * cout + oc, NULL,
                              x + (r.iy0 * g->w + r.ix0) * cin + ic, g->sw * cin, wv, cout,
                              r.ox1 - r.ox0, r.oy1 - r.oy0, g->sh * g->w * cin, g->ow * cout);
                }
            }
        }
        oc += nw;
    }
    return oc;
}

/* Depthwise (one input and one output channel per group), 8 (or 4) channels at a time: y
 * starts as the bias, then per tap in the reference's order (ky, kx) one vger adds x * w to
 * every output pixel the tap reaches, the tap's weights in registers. */
TTK_NOINLINE static void conv_fwd_dw(float *y, const float *x, const float *w, const float *b,
                                     const tt_conv_geom *g)
{
    const int32_t C = g->cout, taps = g->kh * g->kw;
    float wv[8];
    int32_t c = 0;

    while (c < C) {
        const int32_t nw = width(C - c, 8);
        int32_t ky, kx, j;
        fill_pixels(y + c, (b != NULL) ? b + c : ttk_zeros, nw, C, g->oh * g->ow);
        for (ky = 0; ky < g->kh; ++ky) {
            for (kx = 0; kx < g->kw; ++kx) {
                const int32_t tap = ky * g->kw + kx;
                tap_rect r;
                int32_t oy, ox;
                tap_rect_of(g, ky, kx, &r);
                if (r.oy0 == r.oy1 || r.ox0 == r.ox1) {
                    continue;
                }
                for (j = 0; j < nw; ++j) {
                    wv[j] = w[(c + j) * taps + tap];
                }
                if (nw > 1) {
                    ttk_run2d(nw == 8 ? ttk_vger8 : ttk_vger4,
                              y + (r.oy0 * g->ow + r.ox0) * C + c, NULL,
                              x + (r.iy0 * g->w + r.ix0) * C + c, g->sw * C, wv, C,
                              r.ox1 - r.ox0, r.oy1 - r.oy0, g->sh * g->w * C, g->ow * C);
                    continue;
                }
                for (oy = r.oy0; oy < r.oy1; ++oy) {
                    for (ox = r.ox0; ox < r.ox1; ++ox) {
                        y[(oy * g->ow + ox) * C + c] +=
                            x[((r.iy0 + (oy - r.oy0) * g->sh) * g->w + r.ix0 +
                               (ox - r.ox0) * g->sw) * C + c] * wv[0];
                    }
                }
            }
        }
        c += nw;
    }
}

void tt_conv2d_f32_opt(float *y, const float *x, const float *w, const float *b,
                       const tt_conv_geom *g)
{
    const int32_t cin_g = g->cin / g->groups, cout_g = g->cout / g->groups;
    int32_t oc = 0;

    if (cin_g == 1 && cout_g == 1) {
        conv_fwd_dw(y, x, w, b, g);
        return;
    }
    /* a pass per tap only pays with a few output pixels; the dot path takes everything else
     * (large windows, grouped convs, depthwise with a multiplier, the last cout % 4) */
    if (g->groups == 1 && g->cin * g->kw <= 4 && g->oh * g->ow >= 8) {
        oc = conv_fwd_ger(y, x, w, b, g); /* short kernel rows: weights in registers */
    } else if (g->groups == 1 && g->kh == 1 && g->kw == 1 && g->oh * g->ow >= 2) {
        conv_fwd_pw(y, x, w, b, g);
        return;
    }
    if (oc < g->cout) {
        conv_fwd_dot(y, x, w, b, g, oc);
    }
}

/* ====================================================================================== */
/* convolution backward input                                                              */

/* Tap by tap in descending order: for a given input, its source pixels (oy, ox) ascending
 * -- and per source pixel oc ascending -- is the order the reference adds d * w in. dx starts
 * at 0; per (group, 8 or 4 input channels, tap) the tap's weights are repacked to wt[oc][j]
 * (contiguous rows for the kernel), then per output row of the tap's rectangle one taccq adds
 * sum over oc of dy * w to each input pixel the row reaches. */
#define TTK_WT 128 /* floats of repacked weights on the stack */

TTK_NOINLINE static void conv_bwd_in_taps(float *dx, const float *dy, const float *w,
                                          const tt_conv_geom *g, int32_t zero)
{
    const int32_t cin = g->cin, cout = g->cout;
    const int32_t cin_g = cin / g->groups, cout_g = cout / g->groups;
    const int32_t taps = g->kh * g->kw, K = taps * cin_g;
    float wt[TTK_WT];
    int32_t grp;

    for (grp = 0; grp < g->groups; ++grp) {
        int32_t ic = 0;
        while (ic < cin_g) {
            const int32_t nw = width(cin_g - ic, 8);
            const int32_t c0 = grp * cin_g + ic; /* dx channel */
            const float *wg = w + grp * cout_g * K + ic;
            const int32_t pack = (nw > 1 && cout_g * nw <= TTK_WT);
            int32_t tap, oc, j, oy, ox;
            if (zero) {
                fill_pixels(dx + c0, ttk_zeros, nw, cin, g->h * g->w);
            }
            for (tap = taps - 1; tap >= 0; --tap) {
                const float *wb = wg + tap * cin_g; /* w[oc][tap][ic..], oc stride K */
                tap_rect r;
                tap_rect_of(g, tap / g->kw, tap % g->kw, &r);
                if (r.oy0 == r.oy1 || r.ox0 == r.ox1) {
                    continue;
                }
                if (pack) {
                    for (oc = 0; oc < cout_g; ++oc) {
                        for (j = 0; j < nw; ++j) {
                            wt[oc * nw + j] = wb[oc * K + j];
                        }
                    }
                }
                for (oy = r.oy0; oy < r.oy1; ++oy) {
                    float *dxr = dx + ((r.iy0 + (oy - r.oy0) * g->sh) * g->w + r.ix0) * cin + c0;
                    const float *dyr = dy + (oy * g->ow + r.ox0) * cout + grp * cout_g;
                    if (nw > 1) {
                        ttk_run(nw == 8 ? ttk_taccq8 : ttk_taccq4, dxr, NULL, dyr, 1,
                                pack ? wt : wb, pack ? nw : K, cout_g, r.ox1 - r.ox0, cout,
                                g->sw * cin);
                        continue;
                    }
                    for (ox = 0; ox < r.ox1 - r.ox0; ++ox) {
                        float acc = dxr[ox * g->sw * cin];
                        for (oc = 0; oc < cout_g; ++oc) {
                            acc += dyr[ox * cout + oc] * wb[oc * K];
                        }
                        dxr[ox * g->sw * cin] = acc;
                    }
                }
            }
            ic += nw;
        }
    }
}

/* Depthwise, 8 (or 4) channels at a time: dx starts at 0, then per tap in descending order
 * -- for a given input that is its source pixels (oy, ox) ascending, the reference's order --
 * one vger adds dy * w to every input the tap reaches. */
TTK_NOINLINE static void conv_bwd_in_dw(float *dx, const float *dy, const float *w,
                                        const tt_conv_geom *g, int32_t zero)
{
    const int32_t C = g->cin, taps = g->kh * g->kw;
    float wv[8];
    int32_t c = 0;

    while (c < C) {
        const int32_t nw = width(C - c, 8);
        int32_t tap, j;
        if (zero) {
            fill_pixels(dx + c, ttk_zeros, nw, C, g->h * g->w);
        }
        for (tap = taps - 1; tap >= 0; --tap) {
            tap_rect r;
            int32_t oy, ox;
            tap_rect_of(g, tap / g->kw, tap % g->kw, &r);
            if (r.oy0 == r.oy1 || r.ox0 == r.ox1) {
                continue;
            }
            for (j = 0; j < nw; ++j) {
                wv[j] = w[(c + j) * taps + tap];
            }
            if (nw > 1) {
                ttk_run2d(nw == 8 ? ttk_vger8 : ttk_vger4, dx + (r.iy0 * g->w + r.ix0) * C + c,
                          NULL, dy + (r.oy0 * g->ow + r.ox0) * C + c, C, wv, g->sw * C,
                          r.ox1 - r.ox0, r.oy1 - r.oy0, g->ow * C, g->sh * g->w * C);
                continue;
            }
            for (oy = r.oy0; oy < r.oy1; ++oy) {
                for (ox = r.ox0; ox < r.ox1; ++ox) {
                    dx[((r.iy0 + (oy - r.oy0) * g->sh) * g->w + r.ix0 + (ox - r.ox0) * g->sw) *
                       C + c] += dy[(oy * g->ow + ox) * C + c] * wv[0];
                }
            }
        }
        c += nw;
    }
}

/* Pointwise, stride 1, no padding, same size (each input pixel is one output pixel): per
 * 8 (or 4) input channels one taccp over every pixel, dx_p = sum over oc of dy_p * w. */
TTK_NOINLINE static void conv_bwd_in_pw(float *dx, const float *dy, const float *w,
                                        const tt_conv_geom *g)
{
    const int32_t cin = g->cin, cout = g->cout, npx = g->h * g->w;
    int32_t ic = 0;

    while (ic < cin) {
        const int32_t nw = width(cin - ic, 8);
        if (nw > 1) {
            ttk_run(nw == 8 ? ttk_taccp8 : ttk_taccp4, dx + ic, ttk_zeros, dy, 1, w + ic, cin,
                    cout, npx, cout, cin);
        } else {
            int32_t px, oc;
            for (px = 0; px < npx; ++px) {
                float acc = 0.0f;
                for (oc = 0; oc < cout; ++oc) {
                    acc += dy[px * cout + oc] * w[oc * cin + ic];
                }
                dx[px * cin + ic] = acc;
            }
        }
        ic += nw;
    }
}

void tt_conv2d_backward_input_f32_opt(float *dx, const float *dy, const float *w,
                                      const tt_conv_geom *g)
{
    if (g->groups == 1 && g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
        g->pt == 0 && g->pl == 0 && g->oh == g->h && g->ow == g->w) {
        conv_bwd_in_pw(dx, dy, w, g);
    } else if (g->cin == g->groups && g->cout == g->groups) {
        conv_bwd_in_dw(dx, dy, w, g, 1);
    } else {
        conv_bwd_in_taps(dx, dy, w, g, 1);
    }
}

void tt_conv2d_backward_input_acc_f32_opt(float *dx, const float *dy, const float *w,
                                          const tt_conv_geom *g)
{
    if (g->cin == g->groups && g->cout == g->groups) {
        conv_bwd_in_dw(dx, dy, w, g, 0);
    } else {
        conv_bwd_in_taps(dx, dy, w, g, 0);
    }
}

/* ====================================================================================== */
/* convolution weight gradient, accumulated (sgd == NULL) or fused with its SGD update      */

typedef struct {
    float *w;
    float *m;
    int32_t w_cin;
    const int32_t *idx;
    float prm[3]; /* lr, momentum, wd */
} sgd_sink;

/* gradient element gi = ((oc*kh + ky)*kw + kx)*cin_g + ic starts from dw[gi] (accumulate)
 * or 0 (fused, as the reference's acc) */
static float grad_init(const sgd_sink *s, const float *dw, int32_t gi)
{
    return (s == NULL) ? dw[gi] : 0.0f;
}

static void grad_put(const sgd_sink *s, float *dw, int32_t cin_g, int32_t gi, float acc)
{
    if (s == NULL) {
        dw[gi] = acc;
    } else {
        float *wp = s->w + (gi / cin_g) * s->w_cin + tt_channel(s->idx, gi % cin_g);
        *wp = tt_sgd_elem(*wp, acc, s->m != NULL ? &s->m[gi] : NULL, s->prm[0], s->prm[1],
                          s->prm[2]);
    }
}

/* n gradient elements gi.. of one (oc, tap) row, consecutive input channels */
static void grad_put_row(const sgd_sink *s, float *dw, int32_t cin_g, int32_t gi,
                         const float *v, int32_t n)
{
    int32_t j;

    if (s != NULL && s->idx == NULL) {
        ttk_sgd_vec(s->w + (gi / cin_g) * s->w_cin + gi % cin_g,
                    s->m != NULL ? s->m + gi : NULL, v, n, s->prm);
        return;
    }
    for (j = 0; j < n; ++j) {
        grad_put(s, dw, cin_g, gi + j, v[j]);
    }
}

/* One gradient element in plain C: (oy, ox) ascending over the tap's rectangle. */
static void grad_elem(float *dw, const float *dy, const float *x, const tt_conv_geom *g,
                      const sgd_sink *s, const tap_rect *r, int32_t oc, int32_t tap,
                      int32_t ic)
{
    const int32_t cin_g = g->cin / g->groups;
    const int32_t grp = oc / (g->cout / g->groups);
    const int32_t gi = (oc * g->kh * g->kw + tap) * cin_g + ic;
    float acc = grad_init(s, dw, gi);
    int32_t oy, ox;

    for (oy = r->oy0; oy < r->oy1 && r->ox0 < r->ox1; ++oy) {
        const float *xr = x + ((r->iy0 + (oy - r->oy0) * g->sh) * g->w + r->ix0) * g->cin +
                          grp * cin_g + ic;
        for (ox = r->ox0; ox < r->ox1; ++ox) {
            acc += dy[(oy * g->ow + ox) * g->cout + oc] *
                   xr[(ox - r->ox0) * g->sw * g->cin];
        }
    }
    grad_put(s, dw, cin_g, gi, acc);
}

/* Depthwise with at most 9 taps: a channel chunk's gradients for every tap in acc[tap][j],
 * so that each channel's row of taps is then updated in one sgd_vec. */
#define TTK_DW_TAPS 9

TTK_NOINLINE static void conv_wgrad_dw(float *dw, const float *dy, const float *x,
                                       const tt_conv_geom *g, const sgd_sink *s)
{
    const int32_t C = g->cout, taps = g->kh * g->kw;
    float acc[TTK_DW_TAPS * 8], row[TTK_DW_TAPS];
    int32_t c = 0;

    while (c < C) {
        const int32_t nw = width(C - c, 8);
        int32_t tap, j;
        for (tap = 0; tap < taps; ++tap) {
            tap_rect r;
            tap_rect_of(g, tap / g->kw, tap % g->kw, &r);
            if (nw == 1) {
                grad_elem(dw, dy, x, g, s, &r, c, tap, 0);
                continue;
            }
            for (j = 0; j < nw; ++j) {
                acc[tap * nw + j] = grad_init(s, dw, (c + j) * taps + tap);
            }
            if (r.oy0 < r.oy1 && r.ox0 < r.ox1) {
                vmac(nw, acc + tap * nw, acc + tap * nw, dy + (r.oy0 * g->ow + r.ox0) * C + c, C,
                     x + (r.iy0 * g->w + r.ix0) * C + c, g->sw * C, r.ox1 - r.ox0,
                     r.oy1 - r.oy0, g->ow * C, g->sh * g->w * C);
            }
        }
        for (j = 0; j < nw && nw > 1; ++j) {
            if (s != NULL && s->idx == NULL && s->w_cin == 1) {
                for (tap = 0; tap < taps; ++tap) {
                    row[tap] = acc[tap * nw + j];
                }
                ttk_sgd_vec(s->w + (c + j) * taps, s->m != NULL ? s->m + (c + j) * taps : NULL,
                            row, taps, s->prm);
            } else {
                for (tap = 0; tap < taps; ++tap) {
                    grad_put(s, dw, 1, (c + j) * taps + tap, acc[tap * nw + j]);
                }
            }
        }
        c += nw;
    }
}

static void conv_wgrad(float *dw, const float *dy, const float *x, const tt_conv_geom *g,
                       const sgd_sink *s)
{
    const int32_t cin = g->cin, cout = g->cout;
    const int32_t cin_g = cin / g->groups, cout_g = cout / g->groups;
    const int32_t taps = g->kh * g->kw;
    const int32_t depthwise = (cin_g == 1 && cout_g == 1);
    float acc[16];
    int32_t ky, kx, j;

    for (ky = 0; ky < g->kh; ++ky) {
        for (kx = 0; kx < g->kw; ++kx) {
            const int32_t tap = ky * g->kw + kx;
            tap_rect r;
            int32_t noy, nox, oc, ic;
            const float *dy0;
            const float *x0;
            tap_rect_of(g, ky, kx, &r);
            noy = r.oy1 - r.oy0;
            nox = r.ox1 - r.ox0;
            /* dy and x at the rectangle's first pixel (only read when it is not empty) */
            dy0 = dy + (noy > 0 && nox > 0 ? (r.oy0 * g->ow + r.ox0) * cout : 0);
            x0 = x + (noy > 0 && nox > 0 ? (r.iy0 * g->w + r.ix0) * cin : 0);
            if (depthwise) {
                /* channels in the vector: acc[j] += dy[., c+j] * x[., c+j] */
                int32_t c = 0;
                while (c < cout) {
                    const int32_t nw = width(cout - c, 8);
                    if (nw == 1) {
                        grad_elem(dw, dy, x, g, s, &r, c, tap, 0);
                    } else {
                        for (j = 0; j < nw; ++j) {
                            acc[j] = grad_init(s, dw, (c + j) * taps + tap);
                        }
                        if (noy > 0 && nox > 0) {
                            vmac(nw, acc, acc, dy0 + c, cout, x0 + c, g->sw * cin, nox, noy,
                                 g->ow * cout, g->sh * g->w * cin);
                        }
                        for (j = 0; j < nw; ++j) {
                            grad_put(s, dw, 1, (c + j) * taps + tap, acc[j]);
                        }
                    }
                    c += nw;
                }
            } else if (cin_g >= 4 || cout_g < 4) {
                /* input channels in the vector, two output channels a call (they share the
                 * x loads): acc[q][j] += dy[., oc+q] * x[., ic+j] */
                oc = 0;
                while (oc < cout) {
                    const int32_t grp = oc / cout_g;
                    const int32_t np = (oc + 1 < (grp + 1) * cout_g) ? 2 : 1;
                    int32_t q;
                    ic = 0;
                    while (ic < cin_g) {
                        const int32_t nw = width(cin_g - ic, 8);
                        if (nw == 1) {
                            for (q = 0; q < np; ++q) {
                                grad_elem(dw, dy, x, g, s, &r, oc + q, tap, ic);
                            }
                        } else {
                            /* fused: the gradient starts from 0; else from dw */
                            for (q = 0; q < np * (s == NULL); ++q) {
                                for (j = 0; j < nw; ++j) {
                                    acc[q * nw + j] = dw[((oc + q) * taps + tap) * cin_g + ic + j];
                                }
                            }
                            if (noy > 0 && nox > 0) {
                                ttk_run2d(np == 2 ? (nw == 8 ? ttk_tacc2_8 : ttk_tacc2_4)
                                          : (nw == 8 ? ttk_tacc8 : ttk_tacc4),
                                          acc, s == NULL ? acc : ttk_zeros, dy0 + oc, cout,
                                          x0 + grp * cin_g + ic, g->sw * cin, nox, noy,
                                          g->ow * cout, g->sh * g->w * cin);
                            } else {
                                for (j = 0; j < np * nw && s != NULL; ++j) {
                                    acc[j] = 0.0f;
                                }
                            }
                            for (q = 0; q < np; ++q) {
                                grad_put_row(s, dw, cin_g, ((oc + q) * taps + tap) * cin_g + ic,
                                             acc + q * nw, nw);
                            }
                        }
                        ic += nw;
                    }
                    oc += np;
                }
            } else {
                /* few input channels: output channels in the vector,
                 * acc[j] += x[., ic] * dy[., oc+j] */
                int32_t grp;
                for (grp = 0; grp < g->groups; ++grp) {
                    for (ic = 0; ic < cin_g; ++ic) {
                        oc = grp * cout_g;
                        while (oc < (grp + 1) * cout_g) {
                            const int32_t nw = width((grp + 1) * cout_g - oc, 8);
                            if (nw == 1) {
                                grad_elem(dw, dy, x, g, s, &r, oc, tap, ic);
                            } else {
                                for (j = 0; j < nw; ++j) {
                                    acc[j] = grad_init(s, dw, ((oc + j) * taps + tap) * cin_g +
                                                                  ic);
                                }
                                if (noy > 0 && nox > 0) {
                                    tacc(nw, acc, acc, x0 + grp * cin_g + ic, g->sw * cin,
                                         dy0 + oc, cout, nox, noy, g->sh * g->w * cin,
                                         g->ow * cout);
                                }
                                for (j = 0; j < nw; ++j) {
                                    grad_put(s, dw, cin_g, ((oc + j) * taps + tap) * cin_g + ic,
                                             acc[j]);
                                }
                            }
                            oc += nw;
                        }
                    }
                }
            }
        }
    }
}

/* the one tap of a 1x1 conv with a single output pixel, if inside the input: x there */
static const float *single_pixel(const float *x, const tt_conv_geom *g)
{
    if (g->groups != 1 || g->kh != 1 || g->kw != 1 || g->oh != 1 || g->ow != 1 ||
        g->pt > 0 || -g->pt >= g->h || g->pl > 0 || -g->pl >= g->w) {
        return NULL;
    }
    return x + (-g->pt * g->w - g->pl) * g->cin;
}

void tt_conv2d_backward_weight_f32_opt(float *dw, const float *dy, const float *x,
                                       const tt_conv_geom *g)
{
    const float *x1 = single_pixel(x, g);

    if (x1 != NULL) {
        tt_dense_backward_weight_f32_opt(dw, dy, x1, g->cin, g->cout); /* dw += dy x^T */
    } else if (g->cin == g->groups && g->cout == g->groups && g->kh * g->kw <= TTK_DW_TAPS) {
        conv_wgrad_dw(dw, dy, x, g, NULL);
    } else {
        conv_wgrad(dw, dy, x, g, NULL);
    }
}

void tt_conv2d_backward_weight_sgd_f32_opt(float *w, float *m, const float *dy,
                                           const float *x, const tt_conv_geom *g,
                                           int32_t w_cin, const int32_t *idx, float lr,
                                           float momentum, float wd)
{
    sgd_sink s;
    const float *x1 = single_pixel(x, g);

    if (x1 != NULL && idx == NULL) {
        /* one product per element: the reference's 0.0f + dy * x, the dense update */
        tt_dense_backward_weight_sgd_f32_opt(w, m, dy, x1, g->cin, g->cout, w_cin, NULL, lr,
                                             momentum, wd);
        return;
    }
    s.w = w;
    s.m = m;
    s.w_cin = w_cin;
    s.idx = idx;
    s.prm[0] = lr;
    s.prm[1] = momentum;
    s.prm[2] = wd;
    if (g->cin == g->groups && g->cout == g->groups && g->kh * g->kw <= TTK_DW_TAPS) {
        conv_wgrad_dw(NULL, dy, x, g, &s);
    } else {
        conv_wgrad(NULL, dy, x, g, &s);
    }
}

/* ====================================================================================== */
/* dense                                                                                   */

void tt_dense_f32_opt(float *y, const float *x, const float *w, const float *b, int32_t in,
                      int32_t out)
{
    int32_t o = 0;

    while (o < out) {
        void (*k)(const ttk_args *) = (out - o >= 4) ? ttk_dot4 : ttk_dot1;
        ttk_run(k, y + o, (b != NULL) ? b + o : ttk_zeros, x, 0, w + o * in, in, in, 1, 0,
                0);
        o += (k == ttk_dot4) ? 4 : 1;
    }
}

/* dx[i] = sum over o ascending of dy[o] * w[o][i], from 0: 8 (or 4) i per tacc */
void tt_dense_backward_input_f32_opt(float *dx, const float *dy, const float *w, int32_t in,
                                     int32_t out)
{
    int32_t i = 0;

    while (i < in) {
        const int32_t nw = width(in - i, 8);
        if (nw > 1) {
            tacc(nw, dx + i, ttk_zeros, dy, 1, w + i, in, out, 1, 0, 0);
        } else {
            float acc = 0.0f;
            int32_t o;
            for (o = 0; o < out; ++o) {
                acc += dy[o] * w[o * in + i];
            }
            dx[i] = acc;
        }
        i += nw;
    }
}

void tt_dense_backward_weight_f32_opt(float *dw, const float *dy, const float *x, int32_t in,
                                      int32_t out)
{
    int32_t o;

    for (o = 0; o < out; ++o) {
        ttk_axpy(dw + o * in, x, in, &dy[o]);
    }
}

void tt_dense_backward_weight_sgd_f32_opt(float *w, float *m, const float *dy,
                                          const float *x, int32_t k, int32_t out,
                                          int32_t w_in, const int32_t *idx, float lr,
                                          float momentum, float wd)
{
    int32_t o, j;

    if (idx == NULL) {
        ttk_sgd_args p;
        if (out <= 0) {
            return;
        }
        p.w = w;
        p.m = m;
        p.x = x;
        p.dy = dy;
        p.k = k;
        p.out = out;
        p.wskip = (w_in - k) * 4;
        p.lr = lr;
        p.momentum = momentum;
        p.wd = wd;
        /* plain SGD without weight decay: one multiply per weight (see ttk_sgd_rows_lr) */
        if (m == NULL && wd == 0.0f) { /* direct calls: the stack estimate follows them */
            ttk_sgd_rows_lr(&p);
        } else {
            ttk_sgd_rows(&p);
        }
        return;
    }
    for (o = 0; o < out; ++o) {
        for (j = 0; j < k; ++j) {
            float *wp = &w[o * w_in + idx[j]];
            *wp = tt_sgd_elem(*wp, 0.0f + dy[o] * x[j], m != NULL ? &m[o * k + j] : NULL, lr,
                              momentum, wd);
        }
    }
}

/* acc[j] = the sum of dy's column ch + j (rows x c), rows ascending from 0.0f as the
 * reference's bias updates add them, as tacc with a == 1.0f (1 * v is exactly v); returns
 * how many columns: 8 or 4 a call, or 1 (and with fewer than 2 rows) in C */
static int32_t col_sums(float *acc, const float *dy, int32_t rows, int32_t c, int32_t ch)
{
    static const float one = 1.0f;
    const int32_t nw = rows > 1 ? width(c - ch, 8) : 1;
    int32_t r;

    if (nw > 1) {
        tacc(nw, acc, ttk_zeros, &one, 0, dy + ch, c, rows, 1, 0, 0);
        return nw;
    }
    acc[0] = 0.0f;
    for (r = 0; r < rows; ++r) {
        acc[0] += dy[r * c + ch];
    }
    return 1;
}

/* dy's column sums (col_sums), then the update as the reference's. One row (a dense bias)
 * is the dense update with x = dy and dy = 1: 0 + 1*v == 0 + (0 + v). */
void tt_bias_backward_sgd_f32_opt(float *b, float *m, const float *dy, int32_t rows,
                                  int32_t c, float lr, float momentum, float wd)
{
    static const float one = 1.0f;
    float acc[8];
    int32_t ch = 0, j;

    if (rows == 1) {
        tt_dense_backward_weight_sgd_f32_opt(b, m, &one, dy, c, 1, c, NULL, lr, momentum, wd);
        return;
    }
    while (ch < c) {
        const int32_t nw = col_sums(acc, dy, rows, c, ch);
        for (j = 0; j < nw; ++j) {
            b[ch + j] = tt_sgd_elem(b[ch + j], 0.0f + acc[j],
                                    m != NULL ? &m[ch + j] : NULL, lr, momentum, wd);
        }
        ch += nw;
    }
}

/* tt_bias_sgd_s32: the column sums as above, then each channel's update with the
 * reference's delta (sum * its step) and rounding index; stochastic rounding inline
 * (tt_q8_round.h), its key hoisted: the library call's floorf was ~200 instructions a bias */
void tt_bias_sgd_s32_opt(int32_t *b, const float *dy, int32_t rows, int32_t c,
                         const float *step, const tt_q8_update *u)
{
    const int32_t sr = u->mode == TT_Q8_STOCHASTIC;
    const uint32_t key = tt_sr_key(u->salt, u->step);
    float acc[8];
    int32_t ch = 0, j;

    while (ch < c) {
        const int32_t nw = col_sums(acc, dy, rows, c, ch);
        for (j = 0; j < nw; ++j) {
            const int32_t i = ch + j;
            const float d = acc[j] * tt_q8_lr_step(step, i, u);
            b[i] = sr ? tt_sr_s32(b[i], d, key, (uint32_t)i)
                          : tt_q8_step_s32(b[i], d, u, (uint32_t)i);
        }
        ch += nw;
    }
}

/* tt_bias_grad_row_f32: sum[j] += 1 * dy[p][j], pixels ascending, 8 or 4 channels a call */
void tt_bias_grad_row_f32_opt(float *sum, const float *dy, int32_t pixels, int32_t c)
{
    static const float one = 1.0f;
    int32_t ch = 0, p;

    while (ch < c) {
        const int32_t nw = pixels > 0 ? width(c - ch, 8) : 1;
        if (nw > 1) {
            tacc(nw, sum + ch, sum + ch, &one, 0, dy + ch, c, pixels, 1, 0, 0);
        } else {
            for (p = 0; p < pixels; ++p) {
                sum[ch] += dy[p * c + ch];
            }
        }
        ch += nw;
    }
}

/* ====================================================================================== */
/* max pool: the reference's first maximal in-bounds tap (strict >, ky then kx), with the
 * window's bounds computed once per output pixel instead of per tap and channel */

#define TTK_POOL_TAPS 64

/* offsets (in x, of channel 0) of the valid taps of output (oy, ox), in scan order */
static int32_t pool_taps(const tt_conv_geom *g, int32_t oy, int32_t ox, int32_t *off)
{
    int32_t ky0, ky1, kx0, kx1, ky, kx, n = 0;

    tap_span(oy * g->sh - g->pt, g->dh, g->kh, g->h, &ky0, &ky1);
    tap_span(ox * g->sw - g->pl, g->dw, g->kw, g->w, &kx0, &kx1);
    for (ky = ky0; ky < ky1; ++ky) {
        for (kx = kx0; kx < kx1; ++kx) {
            off[n++] = ((oy * g->sh - g->pt + ky * g->dh) * g->w +
                        (ox * g->sw - g->pl + kx * g->dw)) * g->cout;
        }
    }
    return n;
}

/* 2x2 windows, stride 2, no padding, tiling the input exactly (MaxPool2d(2) on even sizes):
 * every input belongs to one window */
static int32_t pool_tiles2(const tt_conv_geom *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 &&
           g->pt == 0 && g->pl == 0 && g->oh * 2 == g->h && g->ow * 2 == g->w;
}

void tt_max_pool2d_f32_opt(float *y, const float *x, const tt_conv_geom *g)
{
    const int32_t c = g->cout;
    int32_t off[TTK_POOL_TAPS];
    int32_t oy, ox, ch, t;

    if (pool_tiles2(g)) {
        for (oy = 0; oy < g->oh; ++oy) {
            for (ox = 0; ox < g->ow; ++ox) {
                const float *p0 = x + (oy * 2 * g->w + ox * 2) * c;
                const float *p1 = p0 + g->w * c;
                float *yp = y + (oy * g->ow + ox) * c;
                for (ch = 0; ch < c; ++ch) {
                    float v = p0[ch], u = p0[c + ch];
                    v = (u > v) ? u : v;
                    u = p1[ch];
                    v = (u > v) ? u : v;
                    u = p1[c + ch];
                    yp[ch] = (u > v) ? u : v;
                }
            }
        }
        return;
    }
    if (g->kh * g->kw > TTK_POOL_TAPS) {
        tt_max_pool2d_f32(y, x, g);
        return;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            float *yp = y + (oy * g->ow + ox) * c;
            const int32_t n = pool_taps(g, oy, ox, off);
            for (ch = 0; ch < c; ++ch) {
                float v = 0.0f; /* window entirely in the padding */
                if (n > 0) {
                    v = x[off[0] + ch];
                    for (t = 1; t < n; ++t) {
                        const float u = x[off[t] + ch];
                        if (u > v) {
                            v = u;
                        }
                    }
                }
                yp[ch] = v;
            }
        }
    }
}

void tt_max_pool2d_backward_f32_opt(float *dx, const float *dy, const float *x,
                                    const tt_conv_geom *g)
{
    const int32_t c = g->cout;
    const int32_t nx = g->h * g->w * c;
    int32_t off[TTK_POOL_TAPS];
    int32_t i, oy, ox, ch, t;

    if (pool_tiles2(g)) {
        /* each input is written once: 0.0f + dy at its window's maximum, else 0 */
        for (oy = 0; oy < g->oh; ++oy) {
            for (ox = 0; ox < g->ow; ++ox) {
                const float *p0 = x + (oy * 2 * g->w + ox * 2) * c;
                const float *p1 = p0 + g->w * c;
                const float *dyp = dy + (oy * g->ow + ox) * c;
                float *q0 = dx + (oy * 2 * g->w + ox * 2) * c;
                float *q1 = q0 + g->w * c;
                for (ch = 0; ch < c; ++ch) {
                    const float a = p0[ch], b = p0[c + ch], e = p1[ch], f = p1[c + ch];
                    const float d = 0.0f + dyp[ch];
                    float v = a;
                    int32_t best = 0;
                    if (b > v) {
                        v = b;
                        best = 1;
                    }
                    if (e > v) {
                        v = e;
                        best = 2;
                    }
                    if (f > v) {
                        best = 3;
                    }
                    q0[ch] = (best == 0) ? d : 0.0f;
                    q0[c + ch] = (best == 1) ? d : 0.0f;
                    q1[ch] = (best == 2) ? d : 0.0f;
                    q1[c + ch] = (best == 3) ? d : 0.0f;
                }
            }
        }
        return;
    }
    if (g->kh * g->kw > TTK_POOL_TAPS) {
        tt_max_pool2d_backward_f32(dx, dy, x, g);
        return;
    }
    for (i = 0; i < nx; ++i) {
        dx[i] = 0.0f;
    }
    for (oy = 0; oy < g->oh; ++oy) {
        for (ox = 0; ox < g->ow; ++ox) {
            const float *dyp = dy + (oy * g->ow + ox) * c;
            const int32_t n = pool_taps(g, oy, ox, off);
            if (n == 0) {
                continue;
            }
            for (ch = 0; ch < c; ++ch) {
                int32_t best = off[0] + ch;
                float v = x[best];
                for (t = 1; t < n; ++t) {
                    const float u = x[off[t] + ch];
                    if (u > v) {
                        v = u;
                        best = off[t] + ch;
                    }
                }
                dx[best] += dyp[ch];
            }
        }
    }
}
