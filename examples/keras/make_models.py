"""Write the float TFLite example models: untrained Keras builds of the MLPerf Tiny reference
networks (and two tiny ones for fast tests), converted by TensorFlow's own TFLite converter.

Run with TensorFlow installed (it is not a tinytrain dependency; use a separate venv):

    python3.11 -m venv /work/tfenv
    /work/tfenv/bin/pip install tensorflow-cpu==2.21.0 numpy
    /work/tfenv/bin/python examples/keras/make_models.py --out examples/keras

Every model is initialised from `keras.utils.set_random_seed(0)` (re-seeded before each build),
its BatchNormalization statistics and affine parameters are then set to small deterministic
random values (so that the converter's folding of BN into the preceding conv/dense is not the
identity), and it is converted with `tf.lite.TFLiteConverter.from_keras_model(model)` with
default settings: float32, no optimizations, no quantization. Beside each `<name>.tflite` the
script writes `<name>.npz` (compressed) with 8 deterministic samples: `x` (float32, batch first;
images are k/255 pixels, features standard normal), `y` (int64 class ids; for the autoencoder
y = x) and `out` (the TFLite interpreter's output on `x`, float32).

It then reads each file back with tf.lite.Interpreter, checks that it runs on the 8 samples and
matches the Keras model within 1e-4, and prints a table of sizes, parameters, builtin operators
and input/output shapes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import warnings
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.lite.python import schema_py_generated as schema  # noqa: E402
from tensorflow.lite.tools import flatbuffer_utils  # noqa: E402

# tf.lite.Interpreter warns that it moves to ai_edge_litert; it is still what TF 2.21 ships.
warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")

keras = tf.keras
layers = keras.layers

SEED = 0
N_SAMPLES = 8
TOLERANCE = 1e-4


# ----------------------------------------------------------------------------------------------
# Architectures
# ----------------------------------------------------------------------------------------------


def ds_cnn_kws() -> keras.Model:
    """MLPerf Tiny keyword spotting reference (DS-CNN small): 49x10 MFCC -> 12 classes."""
    inputs = keras.Input(shape=(49, 10, 1), name="mfcc")
    x = layers.Conv2D(64, (10, 4), strides=(2, 2), padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.Dropout(0.2)(x)
    for _ in range(4):
        x = layers.DepthwiseConv2D((3, 3), padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.Conv2D(64, (1, 1), padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
    x = layers.Dropout(0.4)(x)
    x = layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]))(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(12, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="ds_cnn_kws")


def mobilenet_v1_025_96() -> keras.Model:
    """MLPerf Tiny visual wake words reference: MobileNetV1, alpha 0.25, 96x96x3 -> 2 classes."""
    alpha = 0.25

    def conv_bn(x, filters, kernel, strides):
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU(6.0)(x)

    def dw_separable(x, filters, strides):
        x = layers.DepthwiseConv2D(3, strides=strides, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU(6.0)(x)
        return conv_bn(x, filters, 1, 1)

    inputs = keras.Input(shape=(96, 96, 3), name="image")
    x = conv_bn(inputs, int(32 * alpha), 3, 2)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
              (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    for filters, strides in blocks:
        x = dw_separable(x, int(filters * alpha), strides)
    x = layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]))(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(2, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="mobilenet_v1_025_96")


def resnet8_cifar() -> keras.Model:
    """MLPerf Tiny image classification reference: ResNet-8 for 32x32x3 CIFAR-10 -> 10 classes."""

    def conv(x, filters, kernel, strides):
        return layers.Conv2D(filters, kernel, strides=strides, padding="same",
                             kernel_initializer="he_normal")(x)

    inputs = keras.Input(shape=(32, 32, 3), name="image")
    x = conv(inputs, 16, 3, 1)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    for filters, strides in [(16, 1), (32, 2), (64, 2)]:
        y = conv(x, filters, 3, strides)
        y = layers.BatchNormalization()(y)
        y = layers.Activation("relu")(y)
        y = conv(y, filters, 3, 1)
        y = layers.BatchNormalization()(y)
        if strides != 1:
            x = conv(x, filters, 1, strides)  # projection shortcut, no BN (as the reference)
        x = layers.Add()([x, y])
        x = layers.Activation("relu")(x)
    x = layers.AveragePooling2D(pool_size=int(min(x.shape[1:3])))(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(10, activation="softmax", kernel_initializer="he_normal")(x)
    return keras.Model(inputs, outputs, name="resnet8_cifar")


def dense_autoencoder() -> keras.Model:
    """MLPerf Tiny anomaly detection reference: 640 -> 128x4 -> 8 -> 128x4 -> 640 autoencoder."""

    def dense_bn_relu(x, units):
        x = layers.Dense(units)(x)
        x = layers.BatchNormalization()(x)
        return layers.Activation("relu")(x)

    inputs = keras.Input(shape=(640,), name="log_mel")
    x = inputs
    for units in [128, 128, 128, 128, 8, 128, 128, 128, 128]:
        x = dense_bn_relu(x, units)
    outputs = layers.Dense(640)(x)
    return keras.Model(inputs, outputs, name="dense_autoencoder")


def tiny_keras_cnn() -> keras.Model:
    """A small 2-D CNN for fast unit tests: 8x8x1 -> 3 classes, with a Normalization layer."""
    inputs = keras.Input(shape=(8, 8, 1), name="image")
    x = layers.Normalization(mean=0.5, variance=0.25)(inputs)
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(8, 1)(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(3, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="tiny_keras_cnn")


def tiny_keras_conv1d() -> keras.Model:
    """A small 1-D CNN for fast unit tests: a 32-step, 3-channel time series -> 4 classes."""
    inputs = keras.Input(shape=(32, 3), name="series")
    x = layers.Conv1D(8, 5, padding="same", activation="relu")(inputs)
    x = layers.Conv1D(8, 3, strides=2, activation="relu")(x)  # padding "valid": 32 -> 15 steps
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(4, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="tiny_keras_conv1d")


# name -> (builder, number of classes or None for the autoencoder, sample kind)
MODELS = {
    "ds_cnn_kws": (ds_cnn_kws, 12, "normal"),
    "mobilenet_v1_025_96": (mobilenet_v1_025_96, 2, "image"),
    "resnet8_cifar": (resnet8_cifar, 10, "image"),
    "dense_autoencoder": (dense_autoencoder, None, "normal"),
    "tiny_keras_cnn": (tiny_keras_cnn, 3, "image"),
    "tiny_keras_conv1d": (tiny_keras_conv1d, 4, "normal"),
}


# ----------------------------------------------------------------------------------------------
# Build, convert, check
# ----------------------------------------------------------------------------------------------


def randomise_batchnorm(model: keras.Model, rng: np.random.Generator) -> None:
    """Give every BatchNormalization layer small non-trivial statistics and affine parameters."""
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.gamma.assign(rng.uniform(0.8, 1.2, n).astype(np.float32))
            layer.beta.assign(rng.normal(0.0, 0.1, n).astype(np.float32))
            layer.moving_mean.assign(rng.normal(0.0, 0.1, n).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, n).astype(np.float32))


def samples(model: keras.Model, classes: int | None, kind: str, rng: np.random.Generator):
    shape = (N_SAMPLES, *model.input_shape[1:])
    if kind == "image":  # 8-bit pixels scaled to [0, 1], as the MLPerf Tiny references feed them
        x = (rng.integers(0, 256, shape) / 255.0).astype(np.float32)
    else:  # MFCC / log-mel / time-series features
        x = rng.normal(0.0, 1.0, shape).astype(np.float32)
    y = x.copy() if classes is None else rng.integers(0, classes, N_SAMPLES).astype(np.int64)
    return x, y


def _enum_names(enum) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def operators(content: bytes) -> Counter:
    """Builtin operators of the flatbuffer's subgraphs, as 'OP' or 'OP+FUSED_ACTIVATION'."""
    names = _enum_names(schema.BuiltinOperator)
    activations = _enum_names(schema.ActivationFunctionType)
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    ops = Counter()
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = names[max(code.builtinCode, code.deprecatedBuiltinCode)]
            if name == "CUSTOM":
                name = f"CUSTOM({code.customCode.decode()})"
            fused = getattr(op.builtinOptions, "fusedActivationFunction", 0)
            ops[name if not fused else f"{name}+{activations[fused]}"] += 1
    return ops


def run_tflite(content: bytes, x: np.ndarray):
    """Run the flatbuffer on batch x; its operators, input and output details, and its output."""
    interpreter = tf.lite.Interpreter(model_content=content)
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    ops = operators(content)
    interpreter.resize_tensor_input(inp["index"], list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    return ops, inp, out, interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def make(name: str, out_dir: Path) -> dict:
    builder, classes, kind = MODELS[name]
    keras.backend.clear_session()  # layer names (kept in the flatbuffer) restart for each model
    keras.utils.set_random_seed(SEED)
    model = builder()
    rng = np.random.default_rng(SEED)
    x, y = samples(model, classes, kind, rng)
    model(x[:1], training=False)  # build every weight before touching BN
    randomise_batchnorm(model, rng)
    expected = model(x, training=False).numpy()

    with contextlib.redirect_stdout(io.StringIO()):  # Keras's "Saved artifact at ..." listing
        content = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    ops, inp, out, got = run_tflite(content, x)
    diff = float(np.max(np.abs(got - expected)))
    if diff > TOLERANCE:
        raise SystemExit(f"{name}: TFLite output differs from Keras by {diff:.3g} > {TOLERANCE}")

    (out_dir / f"{name}.tflite").write_bytes(content)
    np.savez_compressed(out_dir / f"{name}.npz", x=x, y=y, out=got.astype(np.float32))
    return {
        "name": name,
        "bytes": len(content),
        "params": model.count_params(),
        "ops": ops,
        "input": [int(d) for d in inp["shape_signature"]],
        "output": [int(d) for d in out["shape_signature"]],
        "diff": diff,
        "sha256": hashlib.sha256(content).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent,
                        help="directory for the .tflite and .npz files (default: beside this)")
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"models to write (default: all): {', '.join(MODELS)}")
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)

    rows = [make(name, args.out) for name in (args.models or MODELS)]

    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, numpy {np.__version__}")
    print()
    print("| model | bytes | params | input | output | max abs diff vs Keras | sha256 |")
    print("| --- | ---: | ---: | --- | --- | ---: | --- |")
    for r in rows:
        print(f"| `{r['name']}.tflite` | {r['bytes']:,} | {r['params']:,} | {r['input']} "
              f"| {r['output']} | {r['diff']:.2e} | {r['sha256']} |")
    print()
    print("| model | builtin operators (+fused activation) x count |")
    print("| --- | --- |")
    for r in rows:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r["ops"].items()))
        print(f"| `{r['name']}` | {ops} |")
    print()
    print("operator set:", ", ".join(sorted({op.split("+")[0] for r in rows for op in r["ops"]})))


if __name__ == "__main__":
    main()
