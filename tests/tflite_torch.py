"""A float .tflite run by PyTorch: the file's operators as torch.nn.functional calls on its own
weights (read with the `tflite` package, not with tinytrain's importer), so PyTorch autograd is
the gradient oracle for float TFLite models. NHWC activations are kept NCHW inside.

    net = TFLiteTorch(path)                    # parameters: the file's float weight tensors
    logits = net(x_nhwc)                       # the input of the final SOFTMAX, if it has one

Each conv's and dense layer's weight and bias is its own parameter (`weights["<op>_<input>"]`,
`tensor_of` names the file's tensor), also where the converter stored one constant for several
layers (Keras's zero biases are deduplicated): as tinytrain does, each layer trains its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tflite
import torch
import torch.nn.functional as F

B = tflite.BuiltinOperator
ACT = tflite.ActivationFunctionType
OPTIONS = {B.CONV_2D: tflite.Conv2DOptions, B.DEPTHWISE_CONV_2D: tflite.DepthwiseConv2DOptions,
           B.FULLY_CONNECTED: tflite.FullyConnectedOptions, B.ADD: tflite.AddOptions,
           B.MUL: tflite.MulOptions, B.SUB: tflite.SubOptions, B.DIV: tflite.DivOptions,
           B.AVERAGE_POOL_2D: tflite.Pool2DOptions, B.MAX_POOL_2D: tflite.Pool2DOptions,
           B.CONCATENATION: tflite.ConcatenationOptions, B.MEAN: tflite.ReducerOptions,
           B.LEAKY_RELU: tflite.LeakyReluOptions}
NP = {tflite.TensorType.FLOAT32: np.float32, tflite.TensorType.INT32: np.int32,
      tflite.TensorType.INT64: np.int64}


def _opts(op, cls):
    t = op.BuiltinOptions()
    if t is None:
        return None
    o = cls()
    o.Init(t.Bytes, t.Pos)
    return o


def _same(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: the extra row or column goes after."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _act(y: torch.Tensor, fused: int) -> torch.Tensor:
    if fused == ACT.RELU:
        return F.relu(y)
    if fused == ACT.RELU6:
        return torch.clamp(y, 0.0, 6.0)
    if fused == ACT.RELU_N1_TO_1:
        return torch.clamp(y, -1.0, 1.0)
    if fused == ACT.TANH:
        return torch.tanh(y)
    assert fused == ACT.NONE, fused
    return y


# an LSTM's trainable inputs: input weights (i, f, c, o), recurrent weights, gate biases
LSTM_WEIGHTS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15)


def _lstm(x: torch.Tensor, w: list[torch.Tensor], o) -> torch.Tensor:
    """UNIDIRECTIONAL_SEQUENCE_LSTM (batch-major, tanh, no peephole or projection) from a
    zero state, with its cell clip (hardtanh: no gradient where it holds)."""
    wx, wh, b = w[0:4], w[4:8], w[8:12]
    h = x.new_zeros(x.shape[0], wx[0].shape[0])
    c = torch.zeros_like(h)
    clip = float(o.CellClip())
    ys = []
    for t in range(x.shape[1]):
        g = [x[:, t] @ wx[q].T + h @ wh[q].T + b[q] for q in range(4)]
        i, f, u, og = torch.sigmoid(g[0]), torch.sigmoid(g[1]), torch.tanh(g[2]), \
            torch.sigmoid(g[3])
        c = f * c + i * u
        if clip > 0:
            c = F.hardtanh(c, -clip, clip)
        h = og * torch.tanh(c)
        ys.append(h)
    return torch.stack(ys, 1)


def _strided_slice(a: torch.Tensor, op, consts: list[torch.Tensor]) -> torch.Tensor:
    o = _opts(op, tflite.StridedSliceOptions)
    begin, end, strides = ([int(v) for v in c.reshape(-1)] for c in consts)
    index: list = []
    for axis in range(a.dim()):
        if o.ShrinkAxisMask() >> axis & 1:
            index.append(begin[axis])
        else:
            index.append(slice(None if o.BeginMask() >> axis & 1 else begin[axis],
                               None if o.EndMask() >> axis & 1 else end[axis], strides[axis]))
    return a[tuple(index)]


def _nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1)


class TFLiteTorch(torch.nn.Module):
    def __init__(self, path: Path) -> None:
        super().__init__()
        buf = Path(path).read_bytes()
        self.m = tflite.Model.GetRootAsModel(buf, 0)
        self.sg = self.m.Subgraphs(0)
        self.consts: dict[int, torch.Tensor] = {}
        self.weights = torch.nn.ParameterDict()  # trainable: conv/dense weights and biases
        self.tensor_of: dict[str, int] = {}
        trainable: dict[int, list[str]] = {}  # tensor -> the layers' inputs it initialises
        for k in range(self.sg.OperatorsLength()):
            op = self.sg.Operators(k)
            if self._code(op) in (B.CONV_2D, B.DEPTHWISE_CONV_2D, B.FULLY_CONNECTED,
                                  B.UNIDIRECTIONAL_SEQUENCE_LSTM):
                for j, i in enumerate(op.InputsAsNumpy()[1:], start=1):
                    if int(i) >= 0 and (self._code(op) != B.UNIDIRECTIONAL_SEQUENCE_LSTM
                                        or j in LSTM_WEIGHTS):
                        trainable.setdefault(int(i), []).append(f"{k}_{j}")
        for i in range(self.sg.TensorsLength()):
            t = self.sg.Tensors(i)
            raw = self.m.Buffers(t.Buffer()).DataAsNumpy()
            if isinstance(raw, int) or not raw.size or t.Type() not in NP:
                continue
            shape = [int(s) for s in t.ShapeAsNumpy()] if t.ShapeLength() else []
            a = torch.from_numpy(np.frombuffer(raw.tobytes(), NP[t.Type()]).reshape(shape).copy())
            for key in trainable.get(i, []):
                self.weights[key] = torch.nn.Parameter(a.double().clone())
                self.tensor_of[key] = i
            if i not in trainable:
                self.consts[i] = a.double() if a.is_floating_point() else a

    def _code(self, op) -> int:
        oc = self.m.OperatorCodes(op.OpcodeIndex())
        return max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))

    def tensor_name(self, i: int) -> str:
        return self.sg.Tensors(i).Name().decode()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env: dict[int, torch.Tensor] = {int(self.sg.Inputs(0)): x.double()}

        def val(i: int, k: int = -1, j: int = 0) -> torch.Tensor:
            if i in env:
                return env[i]
            if f"{k}_{j}" in self.weights:
                return self.weights[f"{k}_{j}"]
            return self.consts[i]

        out = int(self.sg.Outputs(0))
        for k in range(self.sg.OperatorsLength()):
            op = self.sg.Operators(k)
            code = self._code(op)
            ins = [int(i) for i in op.InputsAsNumpy()]
            y_i = int(op.Outputs(0))
            o = _opts(op, OPTIONS[code]) if code in OPTIONS else None
            fused = o.FusedActivationFunction() if o is not None and \
                hasattr(o, "FusedActivationFunction") else ACT.NONE
            if code == B.STRIDED_SLICE and ins[0] in env:  # one step of a sequence
                env[y_i] = _strided_slice(env[ins[0]], op, [val(i) for i in ins[1:]])
                continue
            if code in (B.SHAPE, B.STRIDED_SLICE, B.PACK):
                continue  # a dynamic batch's Flatten: RESHAPE takes its stored output shape
            a = val(ins[0])
            if code in (B.CONV_2D, B.DEPTHWISE_CONV_2D):
                w = val(ins[1], k, 1)
                b = val(ins[2], k, 2) if len(ins) > 2 and ins[2] >= 0 else None
                dw = code == B.DEPTHWISE_CONV_2D
                w = w.permute(3, 0, 1, 2) if dw else w.permute(0, 3, 1, 2)  # -> OIHW
                kh, kw = w.shape[2], w.shape[3]
                s, d = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
                xin = _nchw(a)
                if o.Padding() == tflite.Padding.SAME:
                    pt, pb = _same(xin.shape[2], kh, s[0], d[0])
                    pl, pr = _same(xin.shape[3], kw, s[1], d[1])
                    xin = F.pad(xin, (pl, pr, pt, pb))
                y = F.conv2d(xin, w, b, s, 0, d, groups=xin.shape[1] if dw else 1)
                y = _act(_nhwc(y), fused)
            elif code == B.FULLY_CONNECTED:
                w = val(ins[1], k, 1)
                b = val(ins[2], k, 2) if len(ins) > 2 and ins[2] >= 0 else None
                y = _act(F.linear(a.reshape(a.shape[0], -1), w, b), fused)
            elif code in (B.ADD, B.MUL, B.SUB, B.DIV):
                f = {B.ADD: torch.add, B.MUL: torch.mul, B.SUB: torch.sub, B.DIV: torch.div}
                y = _act(f[code](a, val(ins[1])), fused)
            elif code == B.SQUARED_DIFFERENCE:
                y = (a - val(ins[1])) ** 2
            elif code == B.RSQRT:
                y = torch.rsqrt(a)
            elif code == B.SQRT:
                y = torch.sqrt(a)
            elif code in (B.AVERAGE_POOL_2D, B.MAX_POOL_2D):
                k_, s = (o.FilterHeight(), o.FilterWidth()), (o.StrideH(), o.StrideW())
                xin = _nchw(a)
                pads = (0, 0, 0, 0)
                if o.Padding() == tflite.Padding.SAME:
                    pt, pb = _same(xin.shape[2], k_[0], s[0], 1)
                    pl, pr = _same(xin.shape[3], k_[1], s[1], 1)
                    pads = (pl, pr, pt, pb)
                if code == B.MAX_POOL_2D:
                    y = F.max_pool2d(F.pad(xin, pads, value=-float("inf")), k_, s)
                else:  # TFLite averages over the valid inputs of each window
                    ones = F.pad(torch.ones_like(xin[:, :1]), pads)
                    y = F.avg_pool2d(F.pad(xin, pads), k_, s) / \
                        F.avg_pool2d(ones, k_, s)
                y = _act(_nhwc(y), fused)
            elif code == B.MEAN:
                axes = [int(v) for v in val(ins[1]).reshape(-1)]
                keep = bool(o.KeepDims()) if o is not None else False
                y = a.mean(dim=axes, keepdim=keep)
            elif code in (B.RESHAPE, B.SQUEEZE, B.EXPAND_DIMS):
                shape = [int(v) for v in self.sg.Tensors(y_i).ShapeAsNumpy()]
                y = a.reshape([a.shape[0], *shape[1:]])
            elif code in (B.PAD, B.PADV2):
                p = val(ins[1]).reshape(-1, 2).tolist()
                flat = [int(v) for pair in reversed(p) for v in pair]
                y = F.pad(a, flat)
            elif code == B.CONCATENATION:
                y = _act(torch.cat([val(i) for i in ins], dim=o.Axis()), fused)
            elif code == B.RELU:
                y = F.relu(a)
            elif code == B.RELU6:
                y = torch.clamp(a, 0.0, 6.0)
            elif code == B.LOGISTIC:
                y = torch.sigmoid(a)
            elif code == B.TANH:
                y = torch.tanh(a)
            elif code == B.HARD_SWISH:
                y = F.hardswish(a)
            elif code == B.LEAKY_RELU:
                y = F.leaky_relu(a, float(o.Alpha()))
            elif code == B.UNIDIRECTIONAL_SEQUENCE_LSTM:
                y = _lstm(a, [val(ins[j], k, j) for j in LSTM_WEIGHTS],
                          _opts(op, tflite.UnidirectionalSequenceLSTMOptions))
            elif code == B.SOFTMAX:
                assert y_i == out, "a SOFTMAX before the output"
                return a  # the logits: the loss applies the softmax
            else:
                raise NotImplementedError(f"operator {code}")
            env[y_i] = y
        return env[out]

    def tensor(self, index: int) -> np.ndarray:
        """A trainable tensor's current value in the file's layout (its first layer's)."""
        key = next(k for k, i in self.tensor_of.items() if i == index)
        return self.weights[key].detach().numpy()

    def train_only(self, tensors: set[int]) -> list[torch.nn.Parameter]:
        """Let the layers' parameters made from these file tensors learn, and no others."""
        for key, p in self.weights.items():
            p.requires_grad_(self.tensor_of[key] in tensors)
        return [p for key, p in self.weights.items() if self.tensor_of[key] in tensors]


def sgd(net: TFLiteTorch, x: np.ndarray, y: np.ndarray, lr: float, trained: set[int],
        loss: str = "ce") -> list[float]:
    """Plain SGD, one sample a step, on the layers' parameters made from the file tensors
    `trained`; returns each step's loss ("ce" over class ids, or "mse": the mean over the
    outputs, as `--loss mse`)."""
    opt = torch.optim.SGD(net.train_only(trained), lr=lr)
    out = []
    for k in range(len(x)):
        pred = net(torch.from_numpy(x[k:k + 1]))
        if loss == "ce":
            value = F.cross_entropy(pred, torch.from_numpy(y[k:k + 1]))
        else:
            value = ((pred - torch.from_numpy(y[k:k + 1]).double()) ** 2).mean()
        opt.zero_grad()
        value.backward()
        opt.step()
        out.append(float(value.detach()))
    return out
