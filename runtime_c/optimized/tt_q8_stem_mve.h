/* Helium (MVE) kernel for the int8 3x3x3 "stem" conv (the first layer of MobileNetV2,
 * ProxylessNAS, MCUNet: cin 3, kernel 3x3, any stride and padding): declarations. Compiled
 * only where the core has MVE's integer lanes (TT_MVE, tt_mve.h); tt_q8_conv_opt.c calls it
 * for the geometries tt_q8_stem_mve_ok accepts. Bit-identical with tt_conv2d_s8_row for every
 * input and any requantisation parameters. */
#ifndef TT_Q8_STEM_MVE_H
#define TT_Q8_STEM_MVE_H

#include <stdint.h>

#include "tt_mve.h"
#include "tt_reference.h"

#if TT_MVE
/* Whether tt_q8_stem_mve takes a regular-conv geometry (groups 1): kh == kw == cin == 3,
 * dilation 1, an int8 input zero point, an activation range inside int8 */
int tt_q8_stem_mve_ok(const tt_conv_geom *g, const tt_q8_requant *q);
/* Output rows [oy0, oy1) (rings as tt_conv2d_s8_row; a whole tensor is a ring as tall as
 * the tensor); b may be NULL. Stack ~2.8 KB (a 1.5 KB column buffer, 16 channels' weights). */
void tt_q8_stem_mve(const tt_rows *y, const tt_rows *x, int32_t oy0, int32_t oy1,
                    const int8_t *w, const int32_t *b, const tt_conv_geom *g,
                    const tt_q8_requant *q);
#endif

#endif /* TT_Q8_STEM_MVE_H */
