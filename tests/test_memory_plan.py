"""The memory planner: no two live buffers share bytes, placement is deterministic."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytrain.passes.memory_plan import (
    ALIGN,
    Buffer,
    check_overlaps,
    lifetimes,
    plan_buffers,
)
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model

buffers = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(-1, 40), st.integers(0, 40)),
    min_size=1, max_size=40,
).map(lambda xs: [Buffer(f"b{k}", size, min(a, b), max(a, b, 0))
                  for k, (size, a, b) in enumerate(xs)])


@settings(max_examples=300, deadline=None)
@given(buffers)
def test_random_lifetimes_never_overlap(bs):
    offsets, size = plan_buffers(bs)
    assert check_overlaps(bs, offsets) == []
    assert all(offsets[b.name] % ALIGN == 0 for b in bs)
    assert all(offsets[b.name] + b.size <= size for b in bs)
    # never worse than giving every buffer its own slot, never better than the peak live bytes
    assert size <= sum(-(-b.size // ALIGN) * ALIGN for b in bs)
    steps = range(min(b.first for b in bs), max(b.last for b in bs) + 1)
    peak = max(sum(b.size for b in bs if b.first <= s <= b.last) for s in steps)
    assert size >= peak


@given(buffers)
def test_planning_is_deterministic(bs):
    assert plan_buffers(bs) == plan_buffers(list(reversed(bs)))


def test_overlap_checker_catches_a_clash():
    bs = [Buffer("a", 64, 0, 3), Buffer("b", 64, 2, 5)]
    assert check_overlaps(bs, {"a": 0, "b": 32}) == [("a", "b")]
    assert check_overlaps(bs, {"a": 0, "b": 64}) == []
    assert check_overlaps([Buffer("a", 64, 0, 1), Buffer("b", 64, 2, 5)], {"a": 0, "b": 0}) == []


def test_model_plan_has_no_overlaps_and_views_share_storage(tmp_path):
    import torch

    from tests.test_torch_parity import MODELS, export

    torch.manual_seed(0)
    path = export(MODELS["cnn"](), tmp_path / "cnn.onnx")
    g, plan = compile_model(path, Options(sgd=SGDConfig(batch=4, momentum=0.9)))
    bs, views = lifetimes(g)
    assert check_overlaps(bs, plan.offsets) == []
    for view, root in views.items():
        assert plan.offset(view) == plan.offset(root)
    # the arena is far smaller than keeping every buffer alive at once
    assert plan.arena_size < 0.7 * sum(b.size for b in bs)
    # batch size changes no buffer size (gradient accumulation); batch 1 fuses instead
    g1, plan1 = compile_model(path, Options(sgd=SGDConfig(batch=2, momentum=0.9)))
    assert plan1.arena_size == plan.arena_size
    assert np.isclose(sum(t.nbytes for t in g1.tensors.values()),
                      sum(t.nbytes for t in g.tensors.values()))
