"""2. What each op computes: one file per op (shape, numpy reference, gradient rule, C call,
MACs), the registry of them all (every op file contributes a module-level OPS tuple), and
interp.py, which runs a graph with the numpy references."""

from __future__ import annotations

from tinytrain.ops import (
    adam,
    add,
    add_q8,
    avg_pool2d,
    avg_pool2d_q8,
    channel_stream,
    clip,
    clip_mask,
    concat,
    concat_q8,
    conv2d,
    conv2d_q8,
    dense,
    dense_logits_q8,
    dense_q8,
    dequantize_q8,
    dw_partial,
    fleet_correction,
    fused_update,
    gather_channels,
    global_avg_pool,
    global_avg_pool_share,
    grad_q8,
    gru,
    hard_sigmoid,
    hard_sigmoid_q8,
    hard_swish,
    hard_swish_q8,
    leaky_relu,
    logistic_q8,
    lstm,
    max_pool2d,
    max_pool2d_q8,
    mean_q8,
    merge_channels,
    mul,
    mul_q8,
    pad,
    pad_q8,
    pooled_grad,
    q8_clamp_backward,
    q8_update,
    quantize_q8,
    reshape,
    rnn_recurrent_grad,
    row_stream,
    row_stream_backward,
    seq_step,
    sgd,
    sigmoid,
    softmax_ce,
    softmax_q8,
    tanh,
    transpose,
)
from tinytrain.ops.base import REGISTRY, OpDef, get_op

_MODULES = (conv2d, dense, clip, leaky_relu, sigmoid, tanh, hard_sigmoid, hard_swish, add, mul,
            avg_pool2d, max_pool2d, global_avg_pool, pad, concat, transpose, reshape,
            softmax_ce, sgd, gather_channels, fused_update, clip_mask)
# int8 (TFLite reference arithmetic forward, fp32 backward)
_MODULES += (conv2d_q8, dense_q8, dequantize_q8, q8_clamp_backward, q8_update, hard_sigmoid_q8)
_MODULES += (dense_logits_q8,)  # the loss's real-valued logits of an int8 head
_MODULES += (softmax_q8, logistic_q8, hard_swish_q8, add_q8, mul_q8, avg_pool2d_q8,
             max_pool2d_q8, mean_q8, pad_q8, concat_q8, quantize_q8, grad_q8)
_MODULES += (row_stream, merge_channels)  # frozen stem run row by row (passes/stream.py)
_MODULES += (channel_stream,)  # a backward region run channel by channel
_MODULES += (row_stream_backward,)  # a stem's backward run row by row
_MODULES += (global_avg_pool_share, pooled_grad)  # per-channel pool gradient (passes/pool_grad.py)
_MODULES += (dw_partial,)  # partial depthwise weight updates (passes/prune.py)
_MODULES += (lstm, gru, rnn_recurrent_grad, seq_step)  # recurrent layers, trained by BPTT
_MODULES += (fleet_correction,)  # the fleet's drift correction (passes/fleet_correction.py)
_MODULES += (adam,)  # Adam updates (--optimizer adam)

REGISTRY.update({op.name: op for m in _MODULES for op in m.OPS})
__all__ = ["REGISTRY", "OpDef", "get_op", "public_ops"]


def public_ops() -> list[OpDef]:
    return [op for op in REGISTRY.values() if op.public]
