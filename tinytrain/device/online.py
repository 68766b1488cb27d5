"""Online learning from Python (TinyOL's loop: predict, then learn, one sample at a time) on a
built program: the host build, a board's QEMU twin or the board itself.

    with tinytrain.connect("out/digits") as model:        # qemu=True / port="/dev/ttyACM0"
        probs = model.predict(x)                           # x in the model's own input layout
        step = model.learn(x, label)                       # one SGD step (batching as built)

Samples are real values in the model's own input layout, exactly as in the CLI's data files;
they are checked (tinytrain.device.samples) before they reach the device, and every mistake is a
TinyTrainError with one paragraph that says how to fix it. The parameter state is the one
`tinytrain run --save` writes and `--state` reads.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinytrain.device import state_file
from tinytrain.device.data import to_logical
from tinytrain.device.link.device import NP_TYPES, Device, LinkStats, state_mismatch
from tinytrain.device.runner import open_program
from tinytrain.device.samples import as_real_array, input_batch, label, n_classes, target
from tinytrain.errors import DataError, OptionError

__all__ = ["OnlineModel", "StepResult", "connect", "load_state"]


@dataclass(frozen=True)
class StepResult:
    """What one training step (`OnlineModel.learn`) reported.

    Attributes:
        loss: The sample's loss, computed before this step's update.
        pred: The arg-max class of that same forward pass (the prediction before learning from
            the sample, as `classify` would have returned it); None for an mse build.
        updated: True when this sample completed a batch and the parameters changed.
        skipped: True when the loss was not finite: nothing was accumulated or updated.
    """

    loss: float
    pred: int | None
    updated: bool
    skipped: bool = False


def connect(build_dir: str | Path, *, qemu: bool = False, port: str | None = None,
            timeout: float | None = None) -> OnlineModel:
    """Open the program built in `build_dir` (by `tinytrain build`) for online learning.

    With neither `qemu` nor `port`: the host build runs as a child process. `qemu=True`: a
    firmware build runs on its board's QEMU twin. `port`: the board on that serial port
    ("/dev/ttyACM0", "COM3", "socket://HOST:PORT"). `timeout` is the link's base reply timeout
    in seconds. Use the result as a context manager (or call `close()`): closing stops the
    host process or the twin."""
    where = "QEMU twin" if qemu else f"serial port {port}" if port else "host process"
    return OnlineModel(open_program(Path(build_dir), port=port, qemu=qemu, timeout=timeout),
                       Path(build_dir), where)


def load_state(path: str | Path) -> dict[str, np.ndarray]:
    """The parameters in an .npz written by `OnlineModel.save` or `tinytrain run --save`."""
    return state_file.read(path).params


class OnlineModel:
    """A running program, driven one sample at a time. Made by `tinytrain.connect`.

    Inputs are real values in the model's own input layout (`input_shape`), one sample or a
    batch with a leading N for `predict`/`classify`; an int8 model quantises them on the host
    exactly as TFLite's QUANTIZE does (int8 arrays are taken as its codes). `device` is the
    underlying link (tinytrain.device.link.device.Device) for what this class does not wrap.
    """

    def __init__(self, device: Device, build_dir: Path, connection: str = "") -> None:
        self.device = device
        self.build_dir = Path(build_dir)
        self.connection = connection  # "host process", "QEMU twin" or "serial port PORT"
        self.info: dict[str, Any] = device.info  # the build's program.json

    # ---- what the model is ----
    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample's shape in the model's own layout (its input without the batch axis)."""
        return tuple(int(d) for d in self.info["input_logical_shape"])

    @property
    def input_dtype(self) -> np.dtype:
        """The input's dtype on the device: float32, or int8 for an int8 model (which still
        takes real values here and quantises them on the host)."""
        return np.dtype(NP_TYPES[self.info.get("input_dtype", "f32")])

    @property
    def output_shape(self) -> tuple[int, ...]:
        """One sample's output shape in the model's own layout (what `predict` returns)."""
        return tuple(int(d) for d in self.info["output_logical_shape"])

    @property
    def classes(self) -> int | None:
        """Number of classes of a cross-entropy build; None for an mse build."""
        return n_classes(self.info)

    @property
    def loss(self) -> str:
        """The training loss the program was built with: "ce" or "mse"."""
        return str(self.info["loss"])

    @property
    def batch(self) -> int:
        """Samples per optimizer step (`tinytrain build --batch`)."""
        return int(self.device.device.batch)

    @property
    def board(self) -> str:
        """The board the program was built for ("host", "stm32f746", "nrf52840"); under
        `qemu=True` it runs on that board's twin (see `connection`)."""
        return str(self.info.get("board", "host"))

    @property
    def link_stats(self) -> LinkStats:
        """The host's link counters: requests, resends, NAKs, timeouts, corrupted replies."""
        return self.device.stats

    def device_stats(self) -> dict[str, int]:
        """The device's counters: steps, skipped non-finite steps, CRC errors, bad frames,
        duplicates, frames received and the checkpoint loaded at boot."""
        return self.device.device_stats()

    # ---- predict, then learn ----
    def predict(self, x: Any) -> np.ndarray:
        """The model's outputs for one sample (shape `output_shape`) or a batch (N, ...), after
        its final Softmax if it has one (class probabilities)."""
        out, single = self._outputs(x)
        return out[0] if single else out

    def classify(self, x: Any) -> int | np.ndarray:
        """The predicted class of one sample (an int), or of a batch (an int64 array (N,))."""
        if self.classes is None:
            raise OptionError("classify() needs a classifier; this program was built with "
                              "--loss mse: use predict() for its outputs")
        out, single = self._outputs(x)
        cls = out.reshape(len(out), -1).argmax(axis=1)
        return int(cls[0]) if single else cls

    def _outputs(self, x: Any) -> tuple[np.ndarray, bool]:
        """(N, output_shape) for the sample(s) x, and whether x was one sample."""
        ir, single = input_batch(x, self.info, codes=True)
        return to_logical(np.stack([self.device.infer(s) for s in ir]), self.info), single

    def learn(self, x: Any, y: Any) -> StepResult:
        """One training step on one sample: `y` is an integer class label (cross-entropy) or a
        target of `output_shape` (mse). The gradients accumulate until `batch` samples have
        been seen, then the parameters update (`StepResult.updated`); see `flush`."""
        ir, single = input_batch(x, self.info, codes=True)
        if not single:
            raise DataError(f"learn() takes one sample of shape {self.input_shape}, got a "
                            f"batch of {len(ir)}; call it once per sample, in stream order")
        t = label(y, self.info) if self.classes is not None else target(y, self.info)
        r = self.device.train_full(ir[0], t)
        return StepResult(float(r.loss), int(r.pred) if self.classes is not None else None,
                          r.updated, r.skipped)

    def flush(self) -> None:
        """Apply the gradients of a partial batch now (as `tinytrain run` does at the end of
        each epoch); nothing happens when no sample is pending."""
        self.device.apply_update()

    # ---- parameters ----
    def params(self) -> dict[str, np.ndarray]:
        """The trained parameters read back from the device, by name, in their full shapes."""
        return self.device.get_params()

    def load_params(self, params: Mapping[str, Any]) -> None:
        """Write parameters (as `params()` returns them) into the device. Every trained
        parameter of this build must be there, with its shape; integer (int8) parameters take
        integers in their range, float ones finite values."""
        self.device.set_params(check_state(params, self.info))

    def save(self, path: str | Path) -> Path:
        """Save the parameters and the training state (momentum buffers, gradients pending
        toward the next update, int8 shadow bytes, the rounding's step counter) to an .npz,
        written atomically: the format of `tinytrain run --save`, usable with `tinytrain
        run/infer --state` and `tinytrain export`. Returns the path written."""
        return state_file.write(path, self.params(), self.device.get_state())

    def load(self, path: str | Path) -> None:
        """Load what `save` or `tinytrain run --save` wrote: the parameters, and the training
        state when the file has this build's (learning then goes on exactly as if it had
        never stopped)."""
        saved = state_file.read(path)
        self.load_params(saved.params)
        if saved.state is not None and state_mismatch(self.info, saved.state) is None:
            self.device.set_state(saved.state)
        elif saved.state is not None:
            warnings.warn(f"{path}: its training state is not this build's; only the "
                          "parameters were loaded", stacklevel=2)

    # ---- received tensors (built with --receive) ----
    def received(self) -> dict[str, np.ndarray]:
        """The frozen tensors this build can receive, by name, as the device runs them now:
        the compiled-in values, or the last values `receive` committed (also after a reboot,
        from the checkpoint). Empty for a build without --receive."""
        return self.device.get_received()

    def receive(self, values: Mapping[str, Any]) -> int:
        """Replace the received tensors' values (all of them, as `received()` returns them:
        int8 builds take their own integer codes). They stream into flash; the model runs
        them from the commit on, which also checkpoints the parameters and the training state
        as they are (the checkpoint's sequence number is returned). A failure on the way
        leaves the device running the values it had."""
        return self.device.receive({k: np.asarray(v) for k, v in values.items()})

    def sgd(self, *, lr: float | None = None, momentum: float | None = None,
            weight_decay: float | None = None) -> dict[str, float]:
        """The SGD scalars in force on the device ({"lr", "momentum", "weight_decay"}), after
        setting the ones given: all or none, from the next update on (a learning-rate
        schedule, or lr 0 to pause learning). The device refuses values out of range and
        ones the build cannot use (momentum without momentum buffers; momentum or weight
        decay for int8 parameters) with a LinkError, changing nothing."""
        given = {k: float(v) for k, v in (("lr", lr), ("momentum", momentum),
                                          ("weight_decay", weight_decay)) if v is not None}
        return self.device.sgd(**given)

    def reset(self) -> None:
        """Back to the build's initial parameters; pending gradients are dropped."""
        self.device.reset()

    def checkpoint(self) -> int:
        """Save the parameters to the device's flash (kept across power loss, loaded at boot);
        returns the checkpoint's sequence number."""
        return self.device.checkpoint()

    def restore(self) -> int | None:
        """Load the newest valid checkpoint from flash; its sequence number, or None when
        there is none."""
        return self.device.restore()

    # ---- lifetime ----
    def close(self) -> None:
        """Stop the link (and the host process or QEMU twin behind it)."""
        self.device.close()

    def __enter__(self) -> OnlineModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        out = (f"{self.classes} classes" if self.classes is not None
               else f"mse {self.output_shape}")
        return (f"<OnlineModel {self.build_dir} ({self.board}, {self.connection}): input "
                f"{self.input_shape} {self.input_dtype}, {out}, batch {self.batch}>")


def check_state(params: Mapping[str, Any], info: dict[str, Any]) -> dict[str, np.ndarray]:
    """Parameters checked against the build's trainable table before they are written."""
    if not isinstance(params, Mapping):
        raise DataError(f"parameters must be a dict of arrays by name, got {type(params).__name__}")
    want = {p["name"]: p for p in info["trainable"]}
    missing = [n for n in want if n not in params]
    extra = sorted(set(params) - set(want))
    if missing or extra:
        parts = ([f"misses {', '.join(missing)}"] if missing else []) + \
            ([f"has {', '.join(extra)}, which this build does not train"] if extra else [])
        raise DataError(f"the state {' and '.join(parts)}; use the parameters params() or "
                        "`tinytrain run --save` wrote for this build")
    out = {}
    for name, p in want.items():
        a = as_real_array(params[name], f"parameter '{name}'", "parameters are numbers")
        if list(a.shape) != list(p["shape"]):
            raise DataError(f"parameter '{name}' has shape {tuple(a.shape)}, this build's is "
                            f"{tuple(p['shape'])}")
        dt = np.dtype(NP_TYPES[p.get("dtype", "f32")])
        if dt.kind == "f":
            if not np.isfinite(a).all():
                raise DataError(f"parameter '{name}' holds values that are not finite")
        elif a.dtype.kind not in "iu" or (a.size and (a.min() < np.iinfo(dt).min
                                                       or a.max() > np.iinfo(dt).max)):
            raise DataError(f"parameter '{name}' is {dt} on the device: it takes integers in "
                            f"[{np.iinfo(dt).min}, {np.iinfo(dt).max}], got {a.dtype}")
        out[name] = a.astype(dt)
    return out
