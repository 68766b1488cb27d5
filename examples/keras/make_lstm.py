"""Write `tiny_keras_lstm.tflite`: two stacked Keras LSTMs over a 32-step, 3-channel window and
a softmax classifier, as TensorFlow's converter fuses them into UNIDIRECTIONAL_SEQUENCE_LSTM;
and `tiny_keras_lstm_int8.tflite`, the same model with full integer quantisation (int8
activations and weights, the converter's int16 cell state).

The converter fuses an LSTM only when it comes from Keras 2 (the `tf_keras` package, selected
with TF_USE_LEGACY_KERAS=1) and the batch size is fixed; from Keras 3, or with a dynamic batch,
it writes a WHILE loop, which tinytrain does not import. Run in the TensorFlow venv of
make_models.py, with tf_keras added:

    /work/tfenv/bin/pip install tf_keras~=2.21.0
    /work/tfenv/bin/python examples/keras/make_lstm.py --out examples/keras

Beside the float model it writes `tiny_keras_lstm.npz`: 8 standard-normal windows `x` (8, 32,
3), class ids `y`, and `out`, LiteRT's output for each window with the LSTM state reset before
each (the state tensors are TFLite variables that persist across invokes otherwise). The int8
model is calibrated on 64 more standard-normal windows (seed 1); its own outputs are not
stored, since tests run LiteRT's reference kernels on it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from make_models import operators  # noqa: E402  (this folder's script)

NAME = "tiny_keras_lstm"
SEED = 0
N_SAMPLES = 8
TOLERANCE = 1e-4  # LiteRT's fused kernel vs Keras's unrolled loop, fp32


def build() -> tf.keras.Model:
    keras = tf.keras
    inputs = keras.Input(shape=(32, 3), batch_size=1, name="series")
    x = keras.layers.LSTM(8, return_sequences=True)(inputs)
    x = keras.layers.LSTM(8)(x)
    outputs = keras.layers.Dense(4, activation="softmax")(x)
    return keras.Model(inputs, outputs, name=NAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    tf.keras.utils.set_random_seed(SEED)
    model = build()
    rng = np.random.default_rng(SEED)
    x = rng.normal(0.0, 1.0, (N_SAMPLES, 32, 3)).astype(np.float32)
    y = rng.integers(0, 4, N_SAMPLES).astype(np.int64)
    with contextlib.redirect_stdout(io.StringIO()):
        content = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    interpreter = tf.lite.Interpreter(model_content=content)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    got = []
    for k in range(N_SAMPLES):
        interpreter.reset_all_variables()
        interpreter.set_tensor(inp["index"], x[k:k + 1])
        interpreter.invoke()
        got.append(interpreter.get_tensor(out["index"])[0])
    got = np.stack(got)
    expected = np.concatenate([model(x[k:k + 1]).numpy() for k in range(N_SAMPLES)])
    diff = float(np.max(np.abs(got - expected)))
    if diff > TOLERANCE:
        raise SystemExit(f"{NAME}: TFLite output differs from Keras by {diff:.3g}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.tflite").write_bytes(content)
    np.savez_compressed(args.out / f"{NAME}.npz", x=x, y=y, out=got.astype(np.float32))
    print(f"{NAME}.tflite: {len(content):,} bytes, {model.count_params():,} parameters, "
          f"operators {dict(operators(content))}, max abs diff vs Keras {diff:.2e} "
          f"(tensorflow {tf.__version__})")

    calib = np.random.default_rng(1).normal(0.0, 1.0, (64, 1, 32, 3)).astype(np.float32)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([c] for c in calib)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    with contextlib.redirect_stdout(io.StringIO()):
        int8 = converter.convert()
    (args.out / f"{NAME}_int8.tflite").write_bytes(int8)
    print(f"{NAME}_int8.tflite: {len(int8):,} bytes, operators {dict(operators(int8))}")


if __name__ == "__main__":
    main()
