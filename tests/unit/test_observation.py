"""Observation by need (core/observation.py): when a poll must list the pool in full."""

from __future__ import annotations

from ironic_shard_operator.core.model import Node
from ironic_shard_operator.core.observation import (
    UNSHARDED, CheapAnswers, FullObservation, reason_before_asking, reason_from_answers,
)

POOL = "rack"
RING = ("rack-0", "rack-1")
# rack-0 and rack-1 own the pool's nodes; rack-2 failed and keeps a node with an instance;
# "legacy" (a stranger) keeps a node being cleaned; other-0 is another pool's member.
NODES = (
    Node("n1", shard="rack-0"), Node("n2", shard="rack-0"), Node("n3", shard="rack-1"),
    Node("n4", shard="rack-2", instance_uuid="i4"),
    Node("n5", shard="legacy", provision_state="cleaning"),
)
SUMMARY = {"rack-0": 2, "rack-1": 1, "rack-2": 1, "legacy": 3, "other-0": 40, UNSHARDED: 7}


def last(**changes) -> FullObservation:
    fields = dict(nodes=NODES, observed_at=1000.0, ring_members=RING, summary=SUMMARY)
    return FullObservation(**(fields | changes))


def answers(summary=SUMMARY, unsharded=False, unassociated=None) -> CheapAnswers:
    return CheapAnswers(summary=summary, unsharded=unsharded,
                        unassociated=unassociated if unassociated is not None else {
                            "legacy": (NODES[4],), "rack-2": ()})


def test_a_poll_with_nothing_changed_needs_no_full_listing():
    assert reason_before_asking(last(), RING, now=1599.0, full_resync_seconds=600) is None
    assert reason_from_answers(POOL, last(), answers(), RING) is None


def test_the_first_poll_after_a_restart_lists_in_full():
    assert reason_before_asking(None, RING, now=0.0, full_resync_seconds=600) == "no full listing yet"


def test_a_ring_change_own_writes_or_the_slow_timer_list_in_full():
    assert "ring changed" in reason_before_asking(last(), ("rack-0",), 1001.0, 600)
    assert "ring changed" in reason_before_asking(last(), ("rack-0", "rack-1", "rack-3"), 1001.0, 600)
    assert "written" in reason_before_asking(last(wrote_since=True), RING, 1001.0, 600)
    assert "fullResyncSeconds" in reason_before_asking(last(), RING, 1600.0, 600)


def test_the_owners_probed_are_those_outside_the_ring_that_still_own_nodes():
    assert last().owners_outside(RING) == ("legacy", "rack-2")
    assert last().owners_outside(("rack-0", "rack-1", "rack-2")) == ("legacy",)


def test_a_node_freed_on_an_owner_outside_the_ring_lists_in_full():
    freed = {"rack-2": (Node("n4", shard="rack-2"),), "legacy": (NODES[4],)}
    assert "rack-2, which is outside the ring, are free" in reason_from_answers(
        POOL, last(), answers(unassociated=freed), RING)
    cleaned = {"rack-2": (), "legacy": (Node("n5", shard="legacy", provision_state="available"),)}
    assert "legacy" in reason_from_answers(POOL, last(), answers(unassociated=cleaned), RING)


def test_an_unsharded_node_in_the_selector_lists_in_full():
    assert "no shard" in reason_from_answers(POOL, last(), answers(unsharded=True), RING)


def test_with_no_ring_member_unsharded_nodes_already_seen_do_not_list_again():
    seen = last(nodes=NODES + (Node("n6"),), ring_members=())
    assert reason_from_answers(POOL, seen, answers(unsharded=True), ()) is None
    more = SUMMARY | {UNSHARDED: 8}  # one more unsharded node somewhere in Ironic
    assert "no shard" in reason_from_answers(POOL, seen, answers(more, unsharded=True), ())
    assert "no shard" in reason_from_answers(POOL, last(ring_members=()), answers(unsharded=True), ())


def test_a_moved_count_of_a_pool_identity_or_of_an_owner_of_its_nodes_lists_in_full():
    for name, count in (("rack-0", 1), ("rack-1", 2), ("legacy", 4), ("rack-2", 0)):
        moved = SUMMARY | {name: count}
        reason = reason_from_answers(POOL, last(), answers(moved), RING)
        assert reason and name in reason, name
    gone = {k: v for k, v in SUMMARY.items() if k != "rack-1"}
    assert "rack-1 went from 1 to 0" in reason_from_answers(POOL, last(), answers(gone), RING)
    # a member identity of this pool that owned none of its nodes at the last listing
    appeared = SUMMARY | {"rack-5": 0}
    assert "rack-5" in reason_from_answers(POOL, last(summary=appeared), answers(appeared | {"rack-5": 1}), RING)


def test_a_new_shard_value_anywhere_lists_in_full():
    new = SUMMARY | {"preset-by-enrolment": 1}
    assert "new" in reason_from_answers(POOL, last(), answers(new), RING)


def test_another_pools_activity_and_the_global_unsharded_count_do_not_list():
    busy = SUMMARY | {"other-0": 10, UNSHARDED: 100}
    assert reason_from_answers(POOL, last(), answers(busy), RING) is None
    emptied = {k: v for k, v in SUMMARY.items() if k != "other-0"}
    assert reason_from_answers(POOL, last(), answers(emptied), RING) is None
