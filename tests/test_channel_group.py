"""When passes/channel_group.py may run a channel-streamed sub-op once per group of channels.

Deferring a sub-op moves it after later channels' sub-ops and after the sub-ops that follow
it in a channel. The end-to-end tests (tests/test_stream.py) train grouped builds bit for bit
like plain ones; these pin the legality rule itself on the orders a region can have: a sink
reading row c of a weight and an update writing row c must keep their order within a
channel, and nothing else may share what a deferred sub-op writes. A region's source may run
early, for four channels at once, only when nothing in the region writes what it reads.
"""

from __future__ import annotations

from tinytrain.ir import Node
from tinytrain.passes.channel_group import _deferred, _hoistable

POINTWISE = {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "groups": 1}


def _sink(name: str, weight: str = "W", **attrs) -> Node:
    """A 1x1 input gradient: channel c's plane g times row c of the weight into dx."""
    return Node(name, "conv2d_backward_input_q8", ("g", weight), (f"{name}_dx",),
                {**POINTWISE, **attrs}, "backward")


def _update(name: str, weight: str = "W") -> Node:
    """A 1x1 int8 weight update: row c of the weight from plane g and x."""
    return Node(name, "conv2d_weight_sgd_q8", ("g", "x", weight, "rng_step"), (weight,),
                dict(POINTWISE), "backward")


def _bias(name: str) -> Node:
    return Node(name, "bias_sgd_q8", ("g", "b", "rng_step"), ("b",), {}, "backward")


def _region(*members: Node) -> tuple[Node, list[Node]]:
    node = Node("region", "channel_stream", (), (), {"_slots": {"g": 0}}, "backward")
    return node, list(members)


def test_sink_then_update_of_one_weight_defer_together():
    node, members = _region(_sink("s"), _update("u"), _bias("b"))
    assert _deferred(node, members, {"s", "u"}) == {"s", "u"}


def test_an_update_is_not_deferred_past_a_sink_after_it_that_stays():
    # the sink reads row c after row c's update: deferring only the update would feed it
    # the old row
    node, members = _region(_update("u"), _sink("s", master=True))
    assert _deferred(node, members, {"u"}) == set()


def test_a_sink_is_not_deferred_past_an_update_after_it_that_stays():
    # the sink must read row c before the update that comes after it in the channel
    node, members = _region(_sink("s"), _update("u"))
    assert _deferred(node, members, {"s"}) == set()


def test_a_sink_after_an_update_that_stays_may_be_deferred():
    # it reads row c after row c's update either way; other rows are not touched
    node, members = _region(_update("u"), _sink("s"))
    assert _deferred(node, members, {"s"}) == {"s"}


def test_other_weights_and_shared_reads_do_not_block():
    node, members = _region(_sink("s", weight="V"), _update("u"), _bias("b"))
    assert _deferred(node, members, {"u"}) == {"u"}  # rng_step is only read


def test_a_sub_op_writing_what_a_deferred_one_reads_blocks_it():
    writer = Node("w", "mask_backward", ("g", "x"), ("x",), {}, "backward")  # writes x
    node, members = _region(writer, _update("u"))
    assert _deferred(node, members, {"u"}) == set()


def _source(**attrs) -> Node:
    """The region's source: channel c of a 1x1 input gradient from the whole dy and weight P."""
    return Node("src", "conv2d_backward_input_q8", ("dy", "P"), ("g",), {**POINTWISE, **attrs},
                "backward")


def test_a_source_reading_what_no_sub_op_writes_is_hoisted():
    node, members = _region(_source(), _bias("b"), _sink("s"), _update("u"))
    assert _hoistable(node, members, "s8")


def test_a_sub_op_writing_the_source_weight_or_dy_blocks_it():
    for written in ("P", "dy"):
        writer = Node("w", "mask_backward", ("g", "x"), (written,), {}, "backward")
        node, members = _region(_source(), writer)
        assert not _hoistable(node, members, "s8"), written


def test_only_int8_plain_sources_are_hoisted():
    node, members = _region(_source(), _bias("b"))
    assert not _hoistable(node, members, "f32")  # the kernel gathers four int8 weights
    node, members = _region(_source(master=True), _bias("b"))
    assert not _hoistable(node, members, "s8")  # a 16-bit master: its own kernel
    node, members = _region(_sink("s"), _bias("b"))  # starts at a per-channel plane
    assert not _hoistable(node, members, "s8")
