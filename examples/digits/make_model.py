"""Write the bundled example model: a small untrained CNN for 8x8 digits, as plain ONNX.

Built with onnx.helper and numpy only (no deep-learning framework needed), with seeded He
initialisation so the file is reproducible: `python examples/digits/make_model.py`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).with_name("digits_cnn.onnx")


def he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def main() -> None:
    rng = np.random.default_rng(2026)
    inits = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(x, name, cin, cout, k, groups=1, pad=1):
        w = const(f"{name}.weight", he(rng, (cout, cin // groups, k, k), k * k * cin // groups))
        b = const(f"{name}.bias", np.zeros(cout))
        return helper.make_node("Conv", [x, w, b], [name], name=name, kernel_shape=[k, k],
                                pads=[pad] * 4, group=groups)

    nodes = [
        conv("x", "stem", 1, 8, 3),
        helper.make_node("Relu", ["stem"], ["stem_r"], name="stem_relu"),
        conv("stem_r", "dw", 8, 8, 3, groups=8),
        helper.make_node("Clip", ["dw", "lo", "hi"], ["dw_r"], name="dw_relu6"),
        conv("dw_r", "pw", 8, 16, 1, pad=0),
        helper.make_node("Relu", ["pw"], ["pw_r"], name="pw_relu"),
        helper.make_node("MaxPool", ["pw_r"], ["pool"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        conv("pool", "conv2", 16, 32, 3),
        helper.make_node("Relu", ["conv2"], ["conv2_r"], name="conv2_relu"),
        helper.make_node("GlobalAveragePool", ["conv2_r"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    const("lo", 0.0)
    const("hi", 6.0)
    const("fc.weight", he(rng, (10, 32), 32))
    const("fc.bias", np.zeros(10))
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tinytrain-example")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(OUT))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
