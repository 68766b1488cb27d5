/* Helium (Arm M-profile Vector Extension, MVE) kernels for the int8 forward: declarations.
 * Compiled only where the core has MVE's integer lanes (TT_MVE, tt_mve.h); elsewhere the
 * DSP-extension kernels of tt_q8_conv_opt.c run. Each
 * kernel is bit-identical with its reference kernel for every input: integer sums are exact
 * modulo 2^32 in any order, and the requantisation (tt_q8_mve_rq4 in tt_q8_mve.c) is
 * gemmlowp's double rounding lane for lane. */
#ifndef TT_Q8_MVE_H
#define TT_Q8_MVE_H

#include <stdint.h>

#include "tt_mve.h"
#include "tt_reference.h"

#if TT_MVE
/* Pointwise conv of npx pixels, y (npx x cout) from x (npx x cin) and w (cout x cin), as
 * tt_conv2d_s8 with kh == kw == 1, stride 1, no padding; b may be NULL. One output channel and
 * four pixels at a time, sixteen input channels per VMLADAV. */
void tt_q8_pw_mve(int8_t *y, const int8_t *x, int32_t npx, const int8_t *w, const int32_t *b,
                  int32_t cin, int32_t cout, const tt_q8_requant *q);
/* Whether tt_q8_dw_mve takes a depthwise geometry (one tt_conv2d_s8_dw accepts) */
int tt_q8_dw_mve_ok(const tt_conv_geom *g, const tt_q8_requant *q);
/* Depthwise conv, output rows [oy0, oy1) (rings as tt_conv2d_s8_row), as tt_conv2d_s8 with
 * groups == cin == cout and dilation 1; b may be NULL. One channel at a time, a window of up
 * to 64 taps in one to four VMLADAVs. */
void tt_q8_dw_mve(const tt_rows *y, const tt_rows *x, int32_t oy0, int32_t oy1,
                  const int8_t *w, const int32_t *b, const tt_conv_geom *g,
                  const tt_q8_requant *q);
#endif

#endif /* TT_Q8_MVE_H */
