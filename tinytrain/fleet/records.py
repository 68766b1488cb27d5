"""tinytrain's rounds as Flower records: the tensors in an ArrayRecord (names and dtypes
kept: int8 stays int8), what a device trains and its sample count beside them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from tinytrain.fleet import tensors as tt
from tinytrain.fleet.aggregate import Reply

ARRAYS, CONFIG, METRICS, PLAN = "arrays", "config", "metrics", "plan"
RECEIVED = "received"  # beside PLAN in a query's answer: what the device can be sent
SAMPLES = "num-examples"  # Flower's key for the weight of a reply
STATE = "tinytrain-state"  # context.state: the device's training state between rounds
# SCAFFOLD (fleet/correction.py): the server's control variate in a train message, the
# device's change of its own in the reply, and its own between rounds in context.state
CONTROL, OWN_CONTROL = "control", "tinytrain-control"


def to_arrays(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    rec = ArrayRecord()
    for name, a in arrays.items():
        rec[name] = Array.from_numpy_ndarray(np.ascontiguousarray(a))
    return rec


def from_arrays(rec: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in rec.items()}


def plan_content(arrays: Mapping[str, np.ndarray], plan: list[tt.Trained],
                 received: list[tt.Trained] | None = None) -> RecordDict:
    """Tensors and what the device trains: a query's answer (with the tensors it can be
    sent, a build with --receive), the start of a round's reply."""
    config = ConfigRecord({PLAN: tt.dumps(plan)})
    if received:
        config[RECEIVED] = tt.dumps(received)
    return RecordDict({ARRAYS: to_arrays(arrays), PLAN: config})


def read_plan(content: RecordDict) -> tuple[dict[str, np.ndarray], list[tt.Trained]]:
    return from_arrays(content[ARRAYS]), tt.loads(str(content[PLAN][PLAN]))


def read_received(content: RecordDict) -> list[tt.Trained]:
    """The tensors a query's answer says the device can be sent ([]: none, or an older
    tinytrain's device)."""
    plan = content[PLAN]
    return tt.loads(str(plan[RECEIVED])) if RECEIVED in plan else []


def reply_content(parts: Mapping[str, np.ndarray], plan: list[tt.Trained], samples: int,
                  loss: float, control: Mapping[str, np.ndarray] | None = None) -> RecordDict:
    content = plan_content(parts, plan)
    content[METRICS] = MetricRecord({SAMPLES: samples, "train-loss": loss})
    if control is not None:
        content[CONTROL] = to_arrays(control)
    return content


def read_reply(content: RecordDict) -> Reply:
    parts, plan = read_plan(content)
    control = from_arrays(content[CONTROL]) if CONTROL in content else None
    return Reply(parts, plan, int(content[METRICS][SAMPLES]), control)


def payload_bytes(arrays: Mapping[str, np.ndarray]) -> int:
    """Bytes of tensor data (what a device's radio carries, before Flower's framing)."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))
