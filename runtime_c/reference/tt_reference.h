/*
 * tinytrain's portable reference kernels (this folder, runtime_c/reference/).
 *
 * These kernels are the specification: the optimised Cortex-M kernels
 * (runtime_c/optimized/, named *_opt) replace them for some geometries and
 * must give identical results. Nothing here includes an optimised header. Conventions:
 *   - outputs first, then inputs, then dimensions;
 *   - activations are stored per sample (no batch axis), image tensors as HWC;
 *   - conv weights are OHWI: (Cout, KH, KW, Cin / groups);
 *   - dense weights are (OUT, IN): y[o] = sum_i w[o*IN + i] * x[i] + b[o];
 *   - "general" shapes are rank 4, left-padded with 1s, with element strides
 *     (a stride of 0 broadcasts that axis);
 *   - kernels named *_backward_weight / tt_bias_backward_f32 ACCUMULATE (+=)
 *     into their output so a batch is gradient accumulation; every other
 *     kernel overwrites its output.
 * Only <stdint.h>, <stddef.h>, <string.h> and <math.h> are used.
 */
#ifndef TT_REFERENCE_H
#define TT_REFERENCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* TT_F32_FMA (the build's -DTT_F32_FMA=1, `tinytrain build --fp32-mac fused`): the sums of the
 * channel-streamed 1x1 backward (input gradient source and sinks, weight gradients: the
 * kernels tt_cs_fmac marks) round each multiply-add once, as Helium's VFMA does. Cores with
 * Helium's float lanes build so (boards' `fp32_fma`): a separate VMUL and VADD cost twice
 * the instructions. Everything else, and every build without it, rounds product and sum.
 * A library exported from a fused build (tinytrain export-lib) has this default set to 1:
 * its runtime computes the build's bits whatever the project's flags. */
#ifndef TT_F32_FMA
#define TT_F32_FMA 0
#endif

/* acc + a * b in the channel-streamed 1x1 sums: fused under TT_F32_FMA, else rounded twice.
 * On an FPU with VFMA the instruction itself, at every optimisation level: GCC calls the
 * library's fmaf at -O0, and newlib's goes through double, rounding twice. */
static inline float tt_cs_fmac(float acc, float a, float b)
{
#if TT_F32_FMA && defined(__arm__) && defined(__ARM_FEATURE_FMA) && defined(__ARM_FP) && \
    (__ARM_FP & 4)
    __asm__("vfma.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
#elif TT_F32_FMA
    return fmaf(a, b, acc);
#else
    return acc + a * b;
#endif
}

/* Geometry of a 2-D convolution or pooling window, precomputed at compile time. */
typedef struct {
    int32_t h, w, cin;      /* input H, W, C */
    int32_t oh, ow, cout;   /* output H, W, C */
    int32_t kh, kw;         /* kernel size */
    int32_t sh, sw;         /* strides */
    int32_t pt, pl;         /* top / left zero padding (bottom / right implied by oh, ow) */
    int32_t dh, dw;         /* dilations */
    int32_t groups;         /* conv groups (cin and cout divisible); 1 for pools */
} tt_conv_geom;

/* The rows of an HWC tensor kept in a ring (row streaming, see tinytrain/passes/stream.py):
 * row r lives at base + (r % rows) * row_bytes. A whole tensor is a ring with rows == H. */
typedef struct {
    int8_t *base;
    int32_t rows;
    int32_t row_bytes;
} tt_rows;

static inline int8_t *tt_row(const tt_rows *t, int32_t r)
{
    return t->base + (r % t->rows) * t->row_bytes;
}

#define TT_MAX_KH 64 /* tallest kernel a row kernel accepts (the compiler checks) */

/* ---- convolution (regular, grouped, depthwise, pointwise) ---- */
void tt_conv2d_f32(float *y, const float *x, const float *w, const float *b,
                   const tt_conv_geom *g);
/* dx (h,w,cin) = transposed convolution of dy with w (overwrites dx). */
void tt_conv2d_backward_input_f32(float *dx, const float *dy, const float *w,
                                  const tt_conv_geom *g);
/* dw (cout,kh,kw,cin/groups) += correlation of x with dy. */
void tt_conv2d_backward_weight_f32(float *dw, const float *dy, const float *x,
                                   const tt_conv_geom *g);
/* db[c] += sum over rows of dy (rows x c, channel-last). */
void tt_bias_backward_f32(float *db, const float *dy, int32_t rows, int32_t c);

/* ---- dense ---- */
void tt_dense_f32(float *y, const float *x, const float *w, const float *b,
                  int32_t in, int32_t out);
void tt_dense_backward_input_f32(float *dx, const float *dy, const float *w,
                                 int32_t in, int32_t out);
/* dw[o*in+i] += dy[o] * x[i] */
void tt_dense_backward_weight_f32(float *dw, const float *dy, const float *x,
                                  int32_t in, int32_t out);

/* ---- recurrent layers (tt_rnn_f32.c): the recurrence over a precomputed input projection
 * xproj (steps x gates*hidden, W x_t + Wb); R is (gates*hidden, hidden) row-major. Optional
 * pointers (Rb, h0, c0) may be NULL (zero). LSTM gates i, o, f, c; GRU z, r, n. ---- */
/* gates: steps x 4*hidden (i, o, f, u = tanh(g_c)), may be xproj itself (in place); y and
 * cells (c_t, clamped to [-cell_clip, cell_clip] when cell_clip > 0): steps x hidden */
void tt_lstm_f32(float *gates, float *y, float *cells, const float *xproj, const float *R,
                 const float *Rb, const float *h0, const float *c0, int32_t steps,
                 int32_t hidden, float cell_clip);
/* dg (steps x 4*hidden): the gate pre-activations' gradients, by BPTT over all steps */
void tt_lstm_backward_f32(float *dg, const float *dy, const float *gates, const float *cells,
                          const float *R, const float *c0, int32_t steps, int32_t hidden,
                          float cell_clip);
/* gates: steps x 3*hidden (z, r, n), may be xproj itself (in place); y and pn (p_n =
 * R_n h + Rb_n): steps x hidden */
void tt_gru_f32(float *gates, float *y, float *pn, const float *xproj, const float *R,
                const float *Rb, const float *h0, int32_t steps, int32_t hidden);
/* dx (steps x 3*hidden): the input projection's gradients, by BPTT over all steps */
void tt_gru_backward_f32(float *dx, const float *dy, const float *gates, const float *pn,
                         const float *y, const float *R, const float *h0, int32_t steps,
                         int32_t hidden);
/* The recurrent projection's gradients dhp: dx itself for an LSTM; for a GRU (reset = its
 * gates, steps x 3*hidden) dx with the n rows times r, computed on the fly.
 * dR[g*hidden + j] += sum_t dhp[t][g] * h_{t-1}[j], h_{-1} = h0 (or 0) */
void tt_rnn_backward_recurrent_f32(float *dR, const float *dx, const float *y, const float *h0,
                                   const float *reset, int32_t steps, int32_t gates,
                                   int32_t hidden);
/* the same gradient applied to R by SGD element by element as it is summed (batch 1) */
void tt_rnn_recurrent_sgd_f32(float *R, float *m, const float *dx, const float *y,
                              const float *h0, const float *reset, int32_t steps, int32_t gates,
                              int32_t hidden, float lr, float momentum, float wd);
/* a GRU's Rb: db[g] += sum_t dhp[t][g]; and fused with SGD */
void tt_gru_bias_backward_f32(float *db, const float *dx, const float *gates, int32_t steps,
                              int32_t hidden);
void tt_gru_bias_sgd_f32(float *b, float *m, const float *dx, const float *gates, int32_t steps,
                         int32_t hidden, float lr, float momentum, float wd);

/* ---- elementwise activations: y = f(x); backward dx = dy * f'(.) ---- */
void tt_clip_f32(float *y, const float *x, int32_t n, float lo, float hi);
/* gradient passes where lo < x < hi (strict, as PyTorch's relu/hardtanh) */
void tt_clip_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                          float lo, float hi);
void tt_leaky_relu_f32(float *y, const float *x, int32_t n, float alpha);
void tt_leaky_relu_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                                float alpha);
void tt_sigmoid_f32(float *y, const float *x, int32_t n);
/* uses the saved output y: dx = dy * y * (1 - y) */
void tt_sigmoid_backward_f32(float *dx, const float *dy, const float *y, int32_t n);
void tt_tanh_f32(float *y, const float *x, int32_t n);
/* uses the saved output y: dx = dy * (1 - y*y) */
void tt_tanh_backward_f32(float *dx, const float *dy, const float *y, int32_t n);
/* y = max(0, min(1, alpha*x + beta)) */
void tt_hard_sigmoid_f32(float *y, const float *x, int32_t n, float alpha, float beta);
void tt_hard_sigmoid_backward_f32(float *dx, const float *dy, const float *x, int32_t n,
                                  float alpha, float beta);
/* y = x * max(0, min(1, x/6 + 1/2)) */
void tt_hard_swish_f32(float *y, const float *x, int32_t n);
/* d/dx: 0 for x <= -3, 1 for x >= 3, x/3 + 1/2 between (PyTorch's convention at the edges) */
void tt_hard_swish_backward_f32(float *dx, const float *dy, const float *x, int32_t n);

/* ---- broadcasting binary ops over rank-4 shapes ----
 * y is contiguous with shape `shape`; a and b are read through element strides. */
void tt_add_f32(float *y, const float *a, const float *b, const int32_t shape[4],
                const int32_t astr[4], const int32_t bstr[4]);
void tt_mul_f32(float *y, const float *a, const float *b, const int32_t shape[4],
                const int32_t astr[4], const int32_t bstr[4]);
/* Sum src (contiguous, `shape`) into dst addressed by dstr (0 = reduced axis).
 * dst is overwritten (zeroed first, dst_n elements). */
void tt_reduce_to_f32(float *dst, int32_t dst_n, const float *src, const int32_t shape[4],
                      const int32_t dstr[4]);
/* dst = src (n elements); used for fan-out gradients that need a private copy */
void tt_copy_f32(float *dst, const float *src, int32_t n);
/* dst += src */
void tt_accumulate_f32(float *dst, const float *src, int32_t n);

/* ---- pooling (geometry as conv with cin == cout) ---- */
/* count_include_pad: 1 divides by kh*kw, 0 by the number of in-bounds taps */
void tt_avg_pool2d_f32(float *y, const float *x, const tt_conv_geom *g,
                       int32_t count_include_pad);
void tt_avg_pool2d_backward_f32(float *dx, const float *dy, const tt_conv_geom *g,
                                int32_t count_include_pad);
/* padding taps are ignored (never selected) */
void tt_max_pool2d_f32(float *y, const float *x, const tt_conv_geom *g);
/* routes each dy to the first maximal tap of its window (recomputed from x) */
void tt_max_pool2d_backward_f32(float *dx, const float *dy, const float *x,
                                const tt_conv_geom *g);
/* y[c] = mean over rows of x (rows x c) */
void tt_global_avg_pool_f32(float *y, const float *x, int32_t rows, int32_t c);
void tt_global_avg_pool_backward_f32(float *dx, const float *dy, int32_t rows, int32_t c);

/* ---- layout ---- */
/* y (out_shape) = constant pad of x (in_shape) with `before` leading pads per axis */
void tt_pad_f32(float *y, const float *x, const int32_t in_shape[4],
                const int32_t out_shape[4], const int32_t before[4], float value);
/* dx (in_shape) = the window of dy (out_shape) starting at `before` */
void tt_crop_f32(float *dx, const float *dy, const int32_t in_shape[4],
                 const int32_t out_shape[4], const int32_t before[4]);
/* y[perm-ordered] = x: y has shape in_shape[perm[i]] */
void tt_transpose_f32(float *y, const float *x, const int32_t in_shape[4],
                      const int32_t perm[4]);
/* copy x (outer x inner_x) into y (outer x inner_y) at column offset `offset` */
void tt_concat_part_f32(float *y, const float *x, int32_t outer, int32_t inner_x,
                        int32_t inner_y, int32_t offset);
/* reverse of tt_concat_part_f32: dx = the columns [offset, offset+inner_x) of dy */
void tt_slice_part_f32(float *dx, const float *dy, int32_t outer, int32_t inner_x,
                       int32_t inner_y, int32_t offset);

/* ---- math (tt_math_f32.c): the same bits on the host and every Cortex-M, unlike libm ---- */
float tt_expf(float x);
float tt_logf(float x);

/* ---- losses and heads ---- */
void tt_softmax_f32(float *y, const float *x, int32_t n);
void tt_log_softmax_f32(float *y, const float *x, int32_t n);
/* Softmax cross-entropy on an integer label. Writes dlogits = scale*(softmax - onehot),
 * returns the loss, and *pred = argmax(logits) (first maximum). */
float tt_softmax_ce_f32(float *dlogits, const float *logits, int32_t n, int32_t label,
                        float scale, int32_t *pred);
/* the same on logits scaled by 1 - damp[i] (FedRS's restricted softmax, tt_loss_f32.c) */
float tt_softmax_ce_damped_f32(float *dlogits, const float *logits, int32_t n, int32_t label,
                               float scale, int32_t *pred, const float *damp);
/* Mean squared error over n outputs: loss = mean((y-t)^2); dy = scale*2*(y-t)/n. */
float tt_mse_f32(float *dy, const float *y, const float *target, int32_t n, float scale);

/* ---- optimizer ----
 * PyTorch SGD semantics on the accumulated gradient g (then zeroes g):
 *   g' = g*grad_scale + wd*p;  m = momentum*m + g' (if m != NULL);  p -= lr * (m or g') */
void tt_sgd_f32(float *p, float *g, float *m, int32_t n, float lr, float momentum,
                float wd, float grad_scale);

/* One SGD element update with PyTorch semantics on an already scaled gradient g:
 *   g' = g + wd*p;  m = momentum*m + g' (if m != NULL);  returns p - lr * (m or g'). */
static inline float tt_sgd_elem(float p, float g, float *m, float lr, float momentum, float wd)
{
    const float gi = g + wd * p;
    float step = gi;
    if (m != NULL) {
        *m = momentum * *m + gi;
        step = *m;
    }
    return p - lr * step;
}

/* ---- sparse and fused updates ----
 * idx lists the trained input channels of a partial update (NULL: channels 0..k-1). */
static inline int32_t tt_channel(const int32_t *idx, int32_t j) /* channel j of the update */
{
    return idx != NULL ? idx[j] : j;
}

/* The first element of row (o, j) in the walk over a parameter's trained elements (outer x k
 * x inner, channel j = tt_channel(idx, j) of n_ch; tt_fleet.c, tt_adam_f32.c) */
static inline size_t tt_walk_row(int32_t o, int32_t n_ch, int32_t inner, const int32_t *idx,
                                 int32_t j)
{
    return ((size_t)o * (size_t)n_ch + (size_t)tt_channel(idx, j)) * (size_t)inner;
}

/* y (rows x k) = the idx channels of x (rows x c) */
void tt_gather_channels_f32(float *y, const float *x, int32_t rows, int32_t c,
                            const int32_t *idx, int32_t k);
/* the inverse: y[r * c + idx[j]] = x[r * k + j] (other channels of y untouched) */
void tt_scatter_channels_f32(float *y, const float *x, int32_t rows, int32_t c,
                             const int32_t *idx, int32_t k);
/* SGD on the idx channels of p (rows x c) from g, m (rows x k); then zeroes g. */
void tt_sgd_channels_f32(float *p, float *g, float *m, int32_t rows, int32_t c,
                         const int32_t *idx, int32_t k, float lr, float momentum, float wd,
                         float grad_scale);
/* Weight gradient fused with its SGD update (batch 1): each gradient element is summed in
 * the same order as tt_conv2d_backward_weight_f32 and applied at once, so the gradient
 * tensor never exists. x has g->cin channels (the trained ones); w has w_cin input
 * channels per group; x channel j updates w channel idx[j]. m is shaped like the gradient. */
void tt_conv2d_backward_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                                       const tt_conv_geom *g, int32_t w_cin,
                                       const int32_t *idx, float lr, float momentum,
                                       float wd);
/* dense: x has k (trained) inputs, w is (out, w_in) */
void tt_dense_backward_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                                      int32_t k, int32_t out, int32_t w_in,
                                      const int32_t *idx, float lr, float momentum, float wd);
void tt_bias_backward_sgd_f32(float *b, float *m, const float *dy, int32_t rows, int32_t c,
                              float lr, float momentum, float wd);

/* ---- 1-bit activation masks (ReLU/ReLU6 backward without the saved activation) ---- */
/* bit i of mask = (lo < x[i] < hi); mask has (n + 7) / 8 bytes */
void tt_clip_mask_f32(uint8_t *mask, const float *x, int32_t n, float lo, float hi);
/* dx = dy where the mask bit is set, else 0 */
void tt_mask_backward_f32(float *dx, const float *dy, const uint8_t *mask, int32_t n);

/* ---- int8 (tt_q8_core.c): TFLite reference arithmetic forward, fp32 backward ---- */
#include "tt_q8.h"

/* Requantisation of an int32 accumulator to int8, per output channel (TFLite semantics):
 * y = clamp(MultiplyByQuantizedMultiplier(acc, mult[c], shift[c]) + out_offset). */
typedef struct {
    int32_t in_offset;      /* -input zero point */
    int32_t out_offset;     /* output zero point */
    int32_t act_min, act_max; /* fused activation range in the output's int8 domain */
    const int32_t *mult;
    const int32_t *shift;
} tt_q8_requant;

enum { TT_Q8_STOCHASTIC = 0, TT_Q8_SHADOW = 1, TT_Q8_TRUNCATE = 2 };

/* How an int8/int32 parameter takes a real-valued step (see tt_q8_core.c). */
typedef struct {
    int32_t mode;   /* TT_Q8_* */
    uint32_t salt;  /* per parameter, for stochastic rounding */
    uint32_t step;  /* training-step counter, for stochastic rounding */
    int32_t packed; /* 1: the weight holds only its trained input channels, packed (a split
                     * partial update); indices into the whole weight still seed the rounding */
    float lr_scale; /* the run-time learning rate over the build's (model's set_lr): every
                     * per-channel step is multiplied by it; exactly 1.0f by default, so an
                     * unchanged rate gives the build's results bit for bit */
} tt_q8_update;

/* step[c] (the build's lr / scale, or lr * scale without QAS) at the run-time learning rate */
static inline float tt_q8_lr_step(const float *step, int32_t c, const tt_q8_update *u)
{
    return step[c] * u->lr_scale;
}

extern uint32_t tt_q8_saturations; /* int32 bias updates that had to saturate */

void tt_gather_channels_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t c,
                           const int32_t *idx, int32_t k);
/* the inverse: y[r * c + idx[j]] = x[r * k + j] (other channels of y untouched) */
void tt_scatter_channels_s8(int8_t *y, const int8_t *x, int32_t rows, int32_t c,
                            const int32_t *idx, int32_t k);
void tt_quantize_input_s8(int8_t *y, const float *x, int32_t n, float scale, int32_t zp);
void tt_dequantize_s8(float *y, const int8_t *x, int32_t n, float scale, int32_t zp);
void tt_conv2d_s8(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b,
                  const tt_conv_geom *g, const tt_q8_requant *q);
/* one output row oy of tt_conv2d_s8, reading the input rows under it from a ring */
void tt_conv2d_s8_row(const tt_rows *y, const tt_rows *x, int32_t oy, const int8_t *w,
                      const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);
void tt_dense_s8(int8_t *y, const int8_t *x, const int8_t *w, const int32_t *b, int32_t in,
                 int32_t out, const tt_q8_requant *q);
/* an int8 head's logits as reals, (float)acc * scale[o] (tt_q8_logits.c; shadow: the master) */
void tt_dense_s8_logits(float *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                        const int32_t *b, int32_t in, int32_t out, int32_t in_offset,
                        const float *scale);
/* straight-through gradient of a saturating int8 output: dx = dy where lo < y < hi */
void tt_q8_clamp_backward(float *dx, const float *dy, const int8_t *y, int32_t n, int32_t lo,
                          int32_t hi);
/* mask bit i = lo < y[i] < hi (read by tt_mask_backward_f32) */
void tt_q8_clamp_mask(uint8_t *mask, const int8_t *y, int32_t n, int32_t lo, int32_t hi);
void tt_conv2d_backward_input_s8(float *dx, const float *dy, const int8_t *w,
                                 const float *w_scale, const tt_conv_geom *g);
/* tt_conv2d_backward_input_s8 in place for a depthwise, stride-1 conv whose dx has dy's
 * shape: g is dy on entry, dx on return; (pb + 1) * w <= TT_DW_LINE (the compiler checks). */
#define TT_DW_LINE 256
void tt_dw_backward_input_inplace_s8(float *g, const int8_t *w, const float *w_scale,
                                     const tt_conv_geom *geo);
void tt_conv2d_backward_weight_s8(float *dw, const float *dy, const int8_t *x, float x_scale,
                                  int32_t x_zp, const tt_conv_geom *g);
/* Row kernels of a backward region run row by row (tt_row_backward.c): row iy of a depthwise
 * conv's input gradient from a ring of its output gradient's rows (float rows); and a bias
 * gradient's running per-channel sum over one row of pixels (the same sums, in the same
 * order, as the whole-tensor kernels) */
void tt_dw_backward_input_s8_row(float *dx, const tt_rows *dy, int32_t iy, const int8_t *w,
                                 const float *w_scale, const tt_conv_geom *g);
void tt_bias_grad_row_f32(float *sum, const float *dy, int32_t pixels, int32_t c);
void tt_dense_backward_input_s8(float *dx, const float *dy, const int8_t *w,
                                const float *w_scale, int32_t in, int32_t out);
void tt_dense_backward_weight_s8(float *dw, const float *dy, const int8_t *x, float x_scale,
                                 int32_t x_zp, int32_t in, int32_t out);
/* --rounding master (tt_q8_master.c): the four kernels above that read a trained weight, here
 * reading its 16-bit master 256 * w[i] + shadow[i] */
void tt_conv2d_s8_master(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                         const int32_t *b, const tt_conv_geom *g, const tt_q8_requant *q);
void tt_dense_s8_master(int8_t *y, const int8_t *x, const int8_t *w, const uint8_t *shadow,
                        const int32_t *b, int32_t in, int32_t out, const tt_q8_requant *q);
void tt_conv2d_backward_input_s8_master(float *dx, const float *dy, const int8_t *w,
                                        const uint8_t *shadow, const float *w_scale,
                                        const tt_conv_geom *g);
void tt_dense_backward_input_s8_master(float *dx, const float *dy, const int8_t *w,
                                       const uint8_t *shadow, const float *w_scale, int32_t in,
                                       int32_t out);
/* channel streaming's 1x1 input gradients (tt_cs_pw_input_s8, tt_cs_pw_input_add_s8, below)
 * reading the master */
void tt_cs_pw_input_s8_master(float *plane, const float *dy, const int8_t *w,
                              const uint8_t *shadow, const float *w_scale, int32_t n,
                              int32_t cout, int32_t cin, int32_t c);
void tt_cs_pw_input_add_s8_master(float *dx, const float *dy, const int8_t *w,
                                  const uint8_t *shadow, const float *w_scale, int32_t n,
                                  int32_t dx_c, const int32_t *idx, int32_t k, int32_t c);
/* fused weight gradient + int8 update; shadow (NULL unless TT_Q8_SHADOW) is shaped like the
 * trained slice; step[oc] = lr / w_scale[oc] with QAS, lr * w_scale[oc] without */
void tt_conv2d_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                             float x_scale, int32_t x_zp, const tt_conv_geom *g,
                             int32_t w_cin, const int32_t *idx, const float *step,
                             const tt_q8_update *u);
void tt_dense_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, int32_t k, int32_t out, int32_t w_in,
                            const int32_t *idx, const float *step, const tt_q8_update *u);
void tt_bias_sgd_s32(int32_t *b, const float *dy, int32_t rows, int32_t c, const float *step,
                     const tt_q8_update *u);
/* batch updates from accumulated real-valued gradients (then zeroes g) */
void tt_sgd_s8(int8_t *p, float *g, uint8_t *shadow, int32_t rows, int32_t c,
               const int32_t *idx, int32_t k, int32_t rows_per_channel, const float *step,
               float grad_scale, const tt_q8_update *u);
void tt_sgd_s32(int32_t *p, float *g, int32_t n, const float *step, float grad_scale,
                const tt_q8_update *u);

/* one int8 weight element's update by a real-valued step delta (LSBs); idx: its index in the
 * whole weight (the stochastic-rounding seed); shadow: its fraction byte, or NULL */
int8_t tt_q8_step_s8(int8_t w, uint8_t *shadow, float delta, const tt_q8_update *u,
                     uint32_t idx);
/* the same for one int32 bias element (idx: its channel) */
int32_t tt_q8_step_s32(int32_t b, float delta, const tt_q8_update *u, uint32_t idx);

/* ---- fleet drift correction (tt_fleet.c): p[e] -= lr * (mu * p[e] + b[e]) over the
 * trained elements, b in the order the link hands them out (see tt_fleet.c) ---- */
void tt_fleet_correct_f32(float *p, const float *b, int32_t outer, int32_t n_ch, int32_t inner,
                          const int32_t *idx, int32_t k, float lr, float mu);
void tt_fleet_correct_s8(int8_t *p, uint8_t *shadow, const float *b, int32_t outer,
                         int32_t n_ch, int32_t inner, const int32_t *idx, int32_t k, float lr,
                         float mu, const tt_q8_update *u);
void tt_fleet_correct_s32(int32_t *p, const float *b, int32_t outer, int32_t n_ch,
                          int32_t inner, const int32_t *idx, int32_t k, float lr, float mu,
                          const tt_q8_update *u);

/* ---- Adam (tt_adam_f32.c): PyTorch's torch.optim.Adam over a parameter's trained
 * elements (the walk of tt_fleet.c); b and gsum: a fleet build's correction and gradient sum
 * (NULL otherwise) ---- */
typedef struct {
    float lr, beta1, beta2, eps, wd;
    float grad_scale; /* 1 / the samples accumulated */
} tt_adam_hyper;
/* the model's step counter t, advanced once before each step's updates (saturating) */
void tt_adam_tick(int32_t *t);
void tt_adam_f32(float *p, float *g, float *m, float *v, int32_t outer, int32_t n_ch,
                 int32_t inner, const int32_t *idx, int32_t k, const tt_adam_hyper *h,
                 int32_t t, const float *b, float mu, float *gsum);

/* ---- channel streaming (tt_channel_stream.c, tinytrain/passes/channel_stream.py) ----
 * Channel c's share of a backward sub-op. A plane is one channel of an HWC tensor stored
 * contiguously (n = H * W floats); whole tensors are HWC with `ch` channels. */
/* plane = channel c of a 1x1 conv's input gradient: sum over o of dy[:, o] * w[o, c] */
void tt_cs_pw_input_s8(float *plane, const float *dy, const int8_t *w, const float *w_scale,
                       int32_t n, int32_t cout, int32_t cin, int32_t c);
/* the same for cnt channels c0.., channel c0 + i into the plane planes + i * ps (a region's
 * source run once per group of channels: passes/channel_group.py) */
void tt_cs_pw_input_s8_g(float *planes, int32_t ps, const float *dy, const int8_t *w,
                         const float *w_scale, int32_t n, int32_t cout, int32_t cin, int32_t c0,
                         int32_t cnt);
void tt_cs_pw_input_f32(float *plane, const float *dy, const float *w, int32_t n, int32_t cout,
                        int32_t cin, int32_t c);
/* out = in where channel c of the mask / int8 y (lo < y < hi) / x (lo < x < hi) passes */
void tt_cs_mask(float *out, const float *in, const uint8_t *mask, int32_t n, int32_t ch,
                int32_t c);
void tt_cs_q8_clamp(float *out, const float *in, const int8_t *y, int32_t n, int32_t ch,
                    int32_t c, int32_t lo, int32_t hi);
void tt_cs_clip_f32(float *out, const float *in, const float *x, int32_t n, int32_t ch,
                    int32_t c, float lo, float hi);
/* depthwise conv: dx plane (h x w) of channel c from its dy plane (oh x ow) */
void tt_cs_dw_input_s8(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                       const tt_conv_geom *g, int32_t c);
void tt_cs_dw_input_f32(float *dx, const float *dy, const float *w, const tt_conv_geom *g,
                        int32_t c);
/* depthwise weight row c from its dy plane and channel c of x (h, w, g->cin), updated */
void tt_cs_dw_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, const tt_conv_geom *g, int32_t c,
                            const float *step, const tt_q8_update *u);
void tt_cs_dw_weight_sgd_f32(float *w, float *m, const float *dy, const float *x,
                             const tt_conv_geom *g, int32_t c, float lr, float momentum,
                             float wd);
/* bias c from its dy plane, updated */
void tt_cs_bias_sgd_s32(int32_t *b, const float *dy, int32_t n, int32_t c, const float *step,
                        const tt_q8_update *u);
void tt_cs_bias_sgd_f32(float *b, float *m, const float *dy, int32_t n, int32_t c, float lr,
                        float momentum, float wd);
/* 1x1 conv with dy plane = its output channel c: dx[:, idx[j]] += dy * w[c, j], j < k (w has
 * k input channels per row; idx NULL: j) */
void tt_cs_pw_input_add_s8(float *dx, const float *dy, const int8_t *w, const float *w_scale,
                           int32_t n, int32_t dx_c, const int32_t *idx, int32_t k, int32_t c);
/* the same for cnt channels c0.. in increasing c, channel c0 + i from the plane dy + i * ds
 * (passes/channel_group.py) */
void tt_cs_pw_input_add_s8_g(float *dx, const float *dy, int32_t ds, const int8_t *w,
                             const float *w_scale, int32_t n, int32_t dx_c, const int32_t *idx,
                             int32_t k, int32_t c0, int32_t cnt);
void tt_cs_pw_input_add_f32(float *dx, const float *dy, const float *w, int32_t n,
                            int32_t dx_c, const int32_t *idx, int32_t k, int32_t c);
/* its weight row c from the dy plane and x (n x k: the trained input channels), updated as
 * tt_conv2d_weight_sgd_s8 / tt_conv2d_backward_weight_sgd_f32 do (w_cin, idx, packed) */
void tt_cs_pw_weight_sgd_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                            float x_scale, int32_t x_zp, int32_t n, int32_t k, int32_t w_cin,
                            const int32_t *idx, int32_t c, const float *step,
                            const tt_q8_update *u);
/* the same for cnt rows c0.. at once, row c0 + i from the plane dy + i * ds (a region whose
 * plane of each channel is kept until a group of them is complete: passes/channel_group.py) */
void tt_cs_pw_weight_sgd_s8_g(int8_t *w, uint8_t *shadow, const float *dy, int32_t ds,
                              const int8_t *x, float x_scale, int32_t x_zp, int32_t n,
                              int32_t k, int32_t w_cin, const int32_t *idx, int32_t c0,
                              int32_t cnt, const float *step, const tt_q8_update *u);
void tt_cs_pw_weight_sgd_f32(float *w, float *m, const float *dy, const float *x, int32_t n,
                             int32_t k, int32_t w_cin, const int32_t *idx, int32_t c, float lr,
                             float momentum, float wd);
/* the same from xf = (float)(x - x_zp), converted once per region by tt_cs_x_float_s8 when
 * the planner finds the bytes free (bit-identical: the reference converts each use alike) */
void tt_cs_x_float_s8(float *xf, const int8_t *x, int32_t n, int32_t x_zp);
void tt_cs_pw_weight_sgd_s8f(int8_t *w, uint8_t *shadow, const float *dy, const float *xf,
                             float x_scale, int32_t n, int32_t k, int32_t w_cin,
                             const int32_t *idx, int32_t c, const float *step,
                             const tt_q8_update *u);

/* ---- partial updates of a depthwise conv (tt_dw_partial.c) ----
 * Weight rows idx[0..k-1] (NULL: 0..k-1) of a (C, kh, kw, 1) depthwise weight learn. g is the
 * conv over the k trained channels (cin = cout = groups = k; x holds them); dy is the whole
 * output gradient, dy_c channels, channel idx[j] read. Gradients/state are (k, kh, kw). */
void tt_dw_backward_weight_partial_f32(float *dw, const float *dy, const float *x,
                                       const tt_conv_geom *g, int32_t dy_c,
                                       const int32_t *idx);
void tt_dw_weight_sgd_partial_f32(float *w, float *m, const float *dy, const float *x,
                                  const tt_conv_geom *g, int32_t dy_c, const int32_t *idx,
                                  float lr, float momentum, float wd);
/* SGD on rows idx[j] (n elements each) of p from g, m (k x n); then zeroes g */
void tt_sgd_rows_f32(float *p, float *g, float *m, int32_t n, const int32_t *idx, int32_t k,
                     float lr, float momentum, float wd, float grad_scale);
void tt_dw_backward_weight_partial_s8(float *dw, const float *dy, const int8_t *x,
                                      float x_scale, int32_t x_zp, const tt_conv_geom *g,
                                      int32_t dy_c, const int32_t *idx);
/* step[c] per channel of the whole weight; shadow (or NULL) is (k, kh, kw) */
void tt_dw_weight_sgd_partial_s8(int8_t *w, uint8_t *shadow, const float *dy, const int8_t *x,
                                 float x_scale, int32_t x_zp, const tt_conv_geom *g,
                                 int32_t dy_c, const int32_t *idx, const float *step,
                                 const tt_q8_update *u);
void tt_sgd_rows_s8(int8_t *p, float *g, uint8_t *shadow, int32_t n, const int32_t *idx,
                    int32_t k, const float *step, float grad_scale, const tt_q8_update *u);

/* ---- gradients read from a global average pool's per-channel gradient (tt_pooled_grad.c,
 * tinytrain/passes/pool_grad.py): dy (h, w, c) is never stored; element i of channel ch is
 * v[ch] where the gate lets the gradient through, else 0. Each kernel adds the same floats in
 * the same order as its plain counterpart reading a materialised dy. ---- */
enum { TT_POOLED_ALL = 0, TT_POOLED_MASK = 1, TT_POOLED_S8 = 2, TT_POOLED_F32 = 3 };

typedef struct {
    const float *v;   /* c floats: dL/d(pool output) / (h * w) */
    const void *on;   /* the gate: NULL, a 1-bit mask, the saved int8 or float activation */
    int32_t gate;     /* TT_POOLED_*: ALL passes everything; MASK where the bit is set */
    int32_t lo8, hi8; /* S8: passes where lo8 < y < hi8 */
    float lo, hi;     /* F32: passes where lo < y < hi */
} tt_pooled;

/* out[p * nq + q] = dy element (px0 + p, channel oc + q), p < npx, q < nq (c channels):
 * channels oc.. of a run of pixels materialised, as the optimised kernels read them */
void tt_pooled_slab(float *out, const tt_pooled *dy, int32_t c, int32_t px0, int32_t npx,
                    int32_t oc, int32_t nq);
/* v[ch] = dy[ch] / rows: the pool's gradient per channel (may run in place) */
void tt_global_avg_pool_share_f32(float *v, const float *dy, int32_t rows, int32_t c);
void tt_conv2d_backward_input_pooled_f32(float *dx, const tt_pooled *dy, const float *w,
                                         const tt_conv_geom *g);
void tt_conv2d_backward_weight_pooled_f32(float *dw, const tt_pooled *dy, const float *x,
                                          const tt_conv_geom *g);
void tt_conv2d_backward_weight_sgd_pooled_f32(float *w, float *m, const tt_pooled *dy,
                                              const float *x, const tt_conv_geom *g,
                                              int32_t w_cin, const int32_t *idx, float lr,
                                              float momentum, float wd);
void tt_bias_backward_pooled_f32(float *db, const tt_pooled *dy, int32_t rows, int32_t c);
void tt_bias_backward_sgd_pooled_f32(float *b, float *m, const tt_pooled *dy, int32_t rows,
                                     int32_t c, float lr, float momentum, float wd);
void tt_conv2d_backward_input_pooled_s8(float *dx, const tt_pooled *dy, const int8_t *w,
                                        const float *w_scale, const tt_conv_geom *g);
void tt_conv2d_backward_weight_pooled_s8(float *dw, const tt_pooled *dy, const int8_t *x,
                                         float x_scale, int32_t x_zp, const tt_conv_geom *g);
void tt_conv2d_weight_sgd_pooled_s8(int8_t *w, uint8_t *shadow, const tt_pooled *dy,
                                    const int8_t *x, float x_scale, int32_t x_zp,
                                    const tt_conv_geom *g, int32_t w_cin, const int32_t *idx,
                                    const float *step, const tt_q8_update *u);
void tt_bias_sgd_pooled_s32(int32_t *b, const tt_pooled *dy, int32_t rows, int32_t c,
                            const float *step, const tt_q8_update *u);

#include "tt_q8_ops.h" /* int8 softmax, add, pools, ... */

#endif /* TT_REFERENCE_H */
