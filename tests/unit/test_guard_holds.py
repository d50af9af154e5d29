"""status.guard (core/guard_holds.py): the free nodes the shard-write guard holds back for
Placement allocations are listed with since when, and one held longer than
spec.nova.leakedAllocationSeconds is reported once as a leaked allocation, never waited on
silently."""

from ironic_shard_operator.core.guard_holds import LISTED, guard_section as guard_section_from_memory, held_by_guard
from ironic_shard_operator.core.pool_memory import memory_of
from ironic_shard_operator.core.shard_write import GuardHold
from ironic_shard_operator.core.status import format_time

NOW = 1_800_000_000.0
BOUND = 600.0


def guard_section(previous, *args):
    """guard_section from the last status.guard `previous`, read back as a cycle reads it."""
    return guard_section_from_memory(memory_of({"guard": previous}).guard, *args)


def test_a_held_node_is_listed_with_its_consumers_and_keeps_its_clock_while_held():
    held = [GuardHold("n1", ("build-1",))]
    first, events = guard_section(None, held, {"n1"}, NOW, BOUND)
    assert first == {"held": 1, "leaked": 0, "nodes": [
        {"node": "n1", "consumers": ["build-1"], "since": format_time(NOW), "leaked": False}]}
    assert events == []
    later, events = guard_section(first, held, {"n1"}, NOW + 100, BOUND)
    assert later == first and events == []  # nothing new: the status is not rewritten


def test_a_node_held_past_the_bound_is_reported_as_leaked_once_with_the_fix():
    held = [GuardHold("n1", ("build-1",))]
    first, _ = guard_section(None, held, {"n1"}, NOW, BOUND)
    leaked, events = guard_section(first, held, {"n1"}, NOW + BOUND, BOUND)
    assert leaked["leaked"] == 1 and leaked["nodes"][0]["leaked"]
    (event,) = events
    assert event.type == "Warning" and event.reason == "LeakedAllocation"
    assert "openstack resource provider allocation delete build-1" in event.message
    again, events = guard_section(leaked, held, {"n1"}, NOW + 2 * BOUND, BOUND)
    assert again == leaked and events == []  # said once


def test_a_node_no_longer_held_leaves_unless_its_move_was_not_tried_this_cycle():
    first, _ = guard_section(None, [GuardHold("n1", ("b",)), GuardHold("n2", ("c",))], {"n1", "n2"}, NOW, BOUND)
    # n1 moved (no longer planned); n2 was not tried (the writes stopped early): it stays as it was
    after, _ = guard_section(first, [], {"n2"}, NOW + 50, BOUND)
    assert [e["node"] for e in after["nodes"]] == ["n2"] and after["nodes"][0]["since"] == format_time(NOW)
    assert guard_section(after, [], set(), NOW + 60, BOUND)[0] == {"held": 0, "leaked": 0, "nodes": []}


def test_every_held_node_is_counted_and_the_first_are_listed():
    held = [GuardHold(f"n{i:03d}", ("b",)) for i in range(LISTED + 5)]
    section, _ = guard_section(None, held, {h.node_uuid for h in held}, NOW, BOUND)
    assert section["held"] == LISTED + 5 and len(section["nodes"]) == LISTED


def test_a_retire_held_by_the_guard_says_so_in_its_handover_message():
    """A retiring source whose last free nodes the guard holds for Placement allocations would
    sit in MovingFreeNodes saying only that free nodes still move: its message names the guard,
    status.guard and, for an allocation reported leaked, the Event that says how to remove it."""
    from ironic_shard_operator.core.handover import MOVING_FREE, SCALE_DOWN, decide
    from tests.unit.nova_records import nova_view
    from ironic_shard_operator.core.model import Member, Node, pinned_by_owner
    from ironic_shard_operator.core.spec import Handover, SecretKeyRef
    from tests.unit.nova_records import services

    leaked, _ = guard_section(None, [GuardHold("n1", ("build-1",))], {"n1"}, NOW - BOUND, BOUND)
    leaked, _ = guard_section(leaked, [GuardHold("n1", ("build-1",))], {"n1"}, NOW, BOUND)
    held = held_by_guard(memory_of({"guard": leaked}).guard, [GuardHold("n2", ("build-2",))])
    assert held == {"n1": True, "n2": False}
    nodes = [Node(f"n{i}", shard="rack-2") for i in (1, 2, 3)] + [Node("i", shard="rack-2", instance_uuid="x")]
    members = [Member(f"rack-{i}", ready=True, since=0.0) for i in range(3)]
    step = decide(settings=Handover(SecretKeyRef("m", "nova.conf")), members=members,
                  found={"rack-2": SCALE_DOWN}, ring_members=["rack-0", "rack-1"], pods=["rack-0", "rack-1", "rack-2"],
                  nodes=nodes, owned=pinned_by_owner(nodes), nova=nova_view(services("rack-0", "rack-1", "rack-2"), {}), jobs=(), now=NOW,
                  guard_held=held)
    (progress,) = step.progress
    assert progress.phase == MOVING_FREE
    assert progress.message.startswith("3 free nodes still move to other members first; 2 of them are held by "
                                       "the guard: Placement holds allocations on them")
    assert "status.guard lists them, 1 reported as leaked allocations: Event LeakedAllocation" in progress.message
