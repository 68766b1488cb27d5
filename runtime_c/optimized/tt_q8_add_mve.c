/*
 * Helium (MVE) int8 residual add, see tt_q8_add_mve.h.
 *
 * The reference (tt_q8_binary.c's add_one, LiteRT's 8-bit ADD) per element, X = (x + off) << 20:
 *     s = RDBPOT(SRDHM(Xa, am), ae) + RDBPOT(SRDHM(Xb, bm), be)
 *     y = clamp(RDBPOT(SRDHM(s, om), oe) + out_offset, act_min, act_max)
 * with SRDHM gemmlowp's SaturatingRoundingDoublingHighMul and RDBPOT its RoundingDivideByPOT
 * (tt_srdhm, tt_rdbpot in tt_q8.h). In 32-bit lanes:
 *  - SRDHM(x, m) = floor((x m + 2^30) / 2^31): the nudge 1 - 2^30 with the truncating division
 *    of a negative product rounds half up too. That is VQRDMULH, whose one saturating input pair
 *    (INT32_MIN twice) nothing here reaches.
 *  - RDBPOT(v, e), e >= 1, rounds half away from zero, VRSHL by -e half up: they agree once 1
 *    is taken from negative v. With m >= 0, v = SRDHM(x, m) is negative only where x is, and
 *    where x < 0 gives v = 0 the -1 still rounds to 0; so x's sign serves, as the accumulator
 *    VQRDMLAH adds SRDHM to: RDBPOT(SRDHM(x, m), e) = VRSHL(VQRDMLAH(-[x < 0], x, m), -e), with
 *    -[x < 0] from VSHR #31 (or VQDMLAH by 1, acc + floor(x / 2^31), into a running sum).
 *  - A linear input (m = 2^30, e = 0: AddPrepare gives the input of the larger scale 1/2) is
 *    exactly X / 2 = (x + off) << 19. The general form gives the same with m = 2^31 - 1, e = 1
 *    (SRDHM(X, 2^31 - 1) = X for |X| < 2^30, and X is even); the C form takes it so.
 *  - The output: RDBPOT(SRDHM(s, om), oe) as above (om >= 0, oe >= 1), narrowed to 16 bits with
 *    saturation, + out_offset saturating, narrowed to 8 bits with saturation: the byte of one
 *    saturation, as past the int16 range both sums miss int8 on the same side.
 * Ranges, for every accepted parameter set: |x + off| <= 383, so |X| <= 383 * 2^20 < 2^28.6;
 * |SRDHM(X, m)| <= |X| (m < 2^31), a rescaled input at most 383 * 2^19 + 1, |s| < 2^28.6, the
 * output's accumulator likewise: no lane wraps or saturates.
 *
 * Blocks of sixteen elements, four vectors of four 32-bit lanes. The narrowing pairs vectors
 * into bottom and top halves (elements 0 4 1 5 .. 3 7, then 0 8 4 12 1 9 ..), so the sixteen
 * bytes go out through one scatter store whose offsets undo that order. The blocks' loop is
 * inline assembly: from the intrinsics GCC 12 made 60 to 75 instructions a block, spilling the
 * constants and reloading them, against 51. It runs where one input is linear (always, with
 * LiteRT's constants), and folds that input into the other's rounding when e <= 3:
 *     ((xa + offa) << 19) + RDBPOT(v, e) = VRSHL(((xa + offa) << (19 + e)) - [xb < 0] + v, -e)
 * (the linear term is a multiple of 2^e, and |acc| <= 383 * 2^22 + 383 * 2^20 + 1 < 2^31):
 * per four elements two loads, VMLAS (a), VMLAS (b), VQDMLAH, VQRDMLAH, VRSHL for s, VSHR,
 * VQRDMLAH, VRSHL for the output and one narrowing; per sixteen the offset, the narrowing to
 * bytes, the store and two of loop: 51 instructions, 3.2 an element (the DSP loop took 14).
 * Other shifts (ADD_LG) add the linear input after the rounding, one more per four; a clamp
 * inside int8 two more per sixteen, and two per four to form xb without the VMLAS's vector
 * register, which the bounds take. The last n % 16 elements, the builds without the assembly
 * (-O0, -Os: GCC 12 cannot allocate its registers) and two rescaled inputs run the C form:
 * four lanes at a time, the general rescale for both inputs.
 */
#include "tt_q8_add_mve.h"

#if TT_MVE
#include <arm_mve.h>

#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define TT_ADD_ASM 1
#endif

static int add_lin(int32_t mult, int32_t shift)
{
    return mult == (1 << 30) && shift == 0;
}

/* RDBPOT(SRDHM((x + off) << 20, m), -ne) of four elements, c = off << 20 */
static inline int32x4_t add_in(int32x4_t x, int32_t c, int32_t m, int32_t ne)
{
    x = vaddq_n_s32(vshlq_n_s32(x, 20), c);
    return vrshlq_n_s32(vqrdmlahq_n_s32(vshrq_n_s32(x, 31), x, m), ne);
}

/* The C form: n elements, four at a time (the last ones under a tail predicate); a linear
 * input through the general form's equivalent, m = 2^31 - 1 and e = 1. */
__attribute__((noinline)) static void add_lanes(int8_t *y, const int8_t *a, const int8_t *b,
                                                int32_t n, const tt_q8_add *p)
{
    const int la = add_lin(p->a_mult, p->a_shift), lb = add_lin(p->b_mult, p->b_shift);
    const int32_t ca = (int32_t)((uint32_t)p->a_offset << 20);
    const int32_t cb = (int32_t)((uint32_t)p->b_offset << 20);
    const int32_t am = la ? 0x7FFFFFFF : p->a_mult, nae = la ? -1 : p->a_shift;
    const int32_t bm = lb ? 0x7FFFFFFF : p->b_mult, nbe = lb ? -1 : p->b_shift;
    int32_t i;
    for (i = 0; i < n; i += 4) {
        const mve_pred16_t q = vctp32q((uint32_t)(n - i));
        const int32x4_t s = vaddq_s32(add_in(vldrbq_z_s32(a + i, q), ca, am, nae),
                                      add_in(vldrbq_z_s32(b + i, q), cb, bm, nbe));
        int32x4_t r = vqrdmlahq_n_s32(vshrq_n_s32(s, 31), s, p->out_mult);
        r = vaddq_n_s32(vrshlq_n_s32(r, p->out_shift), p->out_offset);
        r = vminq_s32(vmaxq_s32(r, vdupq_n_s32(p->act_min)), vdupq_n_s32(p->act_max));
        vstrbq_p_s32(y + i, r, q);
    }
}

#if defined(TT_ADD_ASM)
/* The elements of a block in the order the narrowing leaves them (scatter offsets). */
static const uint8_t add_order[16] = {0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15};

/* s of four elements into x (u: scratch). AT: the loads' address tail, ", #4]" or, for the
 * block's last four (its first elements), "], #16" (post-increment); XB: xb = (xb + offb) << 20
 * into u. FOLD: e <= 3, n holds 1 (the VQDMLAH by 1 takes -[xb < 0]), va = 2^(19 + e),
 * ca = offa << (19 + e). LG: any e, va = 2^19, ca = offa << 19. */
#define ADD_FOLD(AT, XB)                                                                   \
    "vldrb.s32 %q[x], [%[pa]" AT "\n\t"                                                    \
    "vldrb.s32 %q[u], [%[pb]" AT "\n\t"                                                    \
    "vmlas.s32 %q[x], %q[va], %[ca]\n\t" XB                                                \
    "vqdmlah.s32 %q[x], %q[u], %[n]\n\t"                                                   \
    "vqrdmlah.s32 %q[x], %q[u], %[bm]\n\t"                                                 \
    "vrshl.s32 %q[x], %[nbe]\n\t"
#define ADD_LG(AT, XB)                                                                     \
    "vldrb.s32 %q[u], [%[pb]" AT "\n\t" XB                                                 \
    "vshr.s32 %q[x], %q[u], #31\n\t"                                                       \
    "vqrdmlah.s32 %q[x], %q[u], %[bm]\n\t"                                                 \
    "vrshl.s32 %q[x], %[nbe]\n\t"                                                          \
    "vldrb.s32 %q[u], [%[pa]" AT "\n\t"                                                    \
    "vmlas.s32 %q[u], %q[va], %[ca]\n\t"                                                   \
    "vadd.i32 %q[x], %q[x], %q[u]\n\t"
/* xb: one VMLAS against 2^20 lanes, or (a clamp, its bounds in that register) two */
#define ADD_XB_MLAS "vmlas.s32 %q[u], %q[v20], %[cb]\n\t"
#define ADD_XB_SHL "vshl.i32 %q[u], %q[u], #20\n\tvadd.i32 %q[u], %q[u], %[cb]\n\t"
/* the output's rescale of s, narrowed into the bottom (B) or top (T) halves of D */
#define ADD_OUT(BT, D)                                                                     \
    "vshr.s32 %q[u], %q[x], #31\n\t"                                                       \
    "vqrdmlah.s32 %q[u], %q[x], %[om]\n\t"                                                 \
    "vrshl.s32 %q[u], %[noe]\n\t"                                                          \
    "vqmovn" BT ".s32 %q[" D "], %q[u]\n\t"
#define ADD_CLAMP                                                                          \
    "vmin.s8 %q[x], %q[x], %q[hi]\n\t"                                                     \
    "vmax.s8 %q[x], %q[x], %q[lo]\n\t"
#define ADD_BODY(SUM, XB, INIT, CLAMP)                                                     \
    "dls lr, %[n]\n\t" INIT "\n"                                                           \
    "1:\n\t" SUM(", #4]", XB) ADD_OUT("t", "e") SUM(", #8]", XB) ADD_OUT("b", "o")         \
    SUM(", #12]", XB) ADD_OUT("t", "o") SUM("], #16", XB) ADD_OUT("b", "e")                \
    "vqadd.s16 %q[e], %q[e], %[off]\n\t"                                                   \
    "vqadd.s16 %q[o], %q[o], %[off]\n\t"                                                   \
    "vqmovnb.s16 %q[x], %q[e]\n\t"                                                         \
    "vqmovnt.s16 %q[x], %q[o]\n\t" CLAMP                                                   \
    "vstrb.8 %q[x], [%[py], %q[ord]]\n\t"                                                  \
    "add %[py], %[py], #16\n\t"                                                            \
    "le lr, 1b"
/* Eleven general registers (GCC finds no twelfth at -Og with a frame pointer), VLDRB.S32's
 * base among r0-r7 ("l"); all eight vector registers for a clamp. */
#define ADD_OUTS                                                                           \
    [x] "=&w"(x), [u] "=&w"(u), [e] "=&w"(e), [o] "=&w"(o), [pa] "+l"(a), [pb] "+l"(b),    \
        [py] "+r"(y), [n] "+r"(nb)
#define ADD_INS                                                                            \
    [ca] "r"(ca), [cb] "r"(cb), [bm] "r"(bm), [nbe] "r"(-be), [om] "r"(p->out_mult),        \
        [noe] "r"(p->out_shift), [off] "r"(p->out_offset), [va] "w"(va), [ord] "w"(ord)
#define ADD_ASM(SUM, INIT)                                                                 \
    do {                                                                                   \
        if (p->act_min != -128 || p->act_max != 127) {                                     \
            const int8x16_t lo = vdupq_n_s8((int8_t)p->act_min);                           \
            const int8x16_t hi = vdupq_n_s8((int8_t)p->act_max);                           \
            __asm__ volatile(ADD_BODY(SUM, ADD_XB_SHL, INIT, ADD_CLAMP)                    \
                             : ADD_OUTS                                                    \
                             : ADD_INS, [lo] "w"(lo), [hi] "w"(hi)                         \
                             : "lr", "memory");                                            \
        } else {                                                                           \
            const int32x4_t v20 = vdupq_n_s32(1 << 20);                                    \
            __asm__ volatile(ADD_BODY(SUM, ADD_XB_MLAS, INIT, "")                          \
                             : ADD_OUTS                                                    \
                             : ADD_INS, [v20] "w"(v20)                                     \
                             : "lr", "memory");                                            \
        }                                                                                  \
    } while (0)

/* nb >= 1 blocks of sixteen; swap: a is p's b, the linear one. Not inlined: in its caller
 * GCC 12 finds the assembly's constraints impossible at -O1..-O3. */
__attribute__((noinline)) static void add_blocks(int8_t *y, const int8_t *a, const int8_t *b,
                                                 int32_t nb, const tt_q8_add *p, int swap)
{
    const int32_t aoff = swap ? p->b_offset : p->a_offset;
    const int32_t cb = (int32_t)((uint32_t)(swap ? p->a_offset : p->b_offset) << 20);
    const int lb = add_lin(p->a_mult, p->a_shift) && add_lin(p->b_mult, p->b_shift);
    const int32_t bm = lb ? 0x7FFFFFFF : (swap ? p->a_mult : p->b_mult);
    const int32_t be = lb ? 1 : -(swap ? p->a_shift : p->b_shift);
    const int32_t sa = be <= 3 ? 19 + be : 19, ca = (int32_t)((uint32_t)aoff << sa);
    const int32x4_t va = vdupq_n_s32(1 << sa);
    const uint8x16_t ord = vldrbq_u8(add_order);
    int32x4_t x, u;
    int16x8_t e, o;

    if (be <= 3) {
        ADD_ASM(ADD_FOLD, "mov %[n], #1");
    } else {
        ADD_ASM(ADD_LG, "");
    }
}
#endif

/* an input's offset and rescale in the accepted range (see the top) */
static int add_in_ok(int32_t off, int32_t mult, int32_t shift)
{
    return (uint32_t)off + 255u <= 510u &&
           (add_lin(mult, shift) || (mult >= 0 && (uint32_t)shift + 31u <= 30u));
}

int tt_q8_add_mve(int8_t *y, const int8_t *a, const int8_t *b, int32_t n, const tt_q8_add *p)
{
    if (!(p->left_shift == 20 && add_in_ok(p->a_offset, p->a_mult, p->a_shift) &&
          add_in_ok(p->b_offset, p->b_mult, p->b_shift) && p->out_mult >= 0 &&
          (uint32_t)p->out_shift + 31u <= 30u && (uint32_t)p->out_offset + 128u <= 255u &&
          p->act_min >= -128 && p->act_min <= p->act_max && p->act_max <= 127)) {
        return 0;
    }
#if defined(TT_ADD_ASM)
    if (n >= 16) {
        const int32_t m = n & ~15;
        if (add_lin(p->a_mult, p->a_shift)) {
            add_blocks(y, a, b, n >> 4, p, 0);
        } else if (add_lin(p->b_mult, p->b_shift)) { /* the sum is symmetric */
            add_blocks(y, b, a, n >> 4, p, 1);
        } else {
            add_lanes(y, a, b, n, p);
            return 1;
        }
        y += m;
        a += m;
        b += m;
        n -= m;
    }
#endif
    if (n > 0) {
        add_lanes(y, a, b, n, p);
    }
    return 1;
}
#endif
