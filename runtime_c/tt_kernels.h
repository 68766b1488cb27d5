/*
 * tinytrain's runtime: the one header generated code includes.
 *
 * reference/tt_reference.h declares the portable kernels, the specification;
 * optimized/tt_kernels_opt.h the Cortex-M kernels (suffix _opt) that the code
 * generator picks for the geometries they handle, with the same results. A build
 * copies both folders flat into its runtime/ directory, so includes name files only.
 */
#ifndef TT_KERNELS_H
#define TT_KERNELS_H

#include "tt_reference.h"   /* portable kernels, types, int8 arithmetic */
#include "tt_kernels_opt.h" /* optimised kernels, bit-exact (int8) with the reference */

#endif /* TT_KERNELS_H */
