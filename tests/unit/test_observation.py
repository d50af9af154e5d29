"""Observation by need (core/observation.py): when a poll must list the pool in full."""

from __future__ import annotations

import pytest

from ironic_shard_operator.core.model import Move, Node
from ironic_shard_operator.core.observation import (
    EVERY_CYCLE, FULL_LISTING_KINDS, UNSHARDED, CheapAnswers, FullObservation, ListingReason, SummaryRefused,
    merged, reason_before_asking, reason_from_answers, unlisted_sources,
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


def answers(summary=SUMMARY, unsharded=(), owners=None) -> CheapAnswers:
    return CheapAnswers(summary=summary, unsharded=unsharded,
                        owners=owners if owners is not None else {"legacy": (NODES[4],), "rack-2": (NODES[3],)})


def test_a_poll_with_nothing_changed_needs_no_full_listing():
    assert reason_before_asking(last(), RING, now=1599.0, full_resync_seconds=600) is None
    assert reason_from_answers(POOL, last(), answers()) is None
    assert set(merged(last(), answers())) == set(NODES)


def test_the_first_poll_after_a_restart_lists_in_full():
    assert reason_before_asking(None, RING, now=0.0, full_resync_seconds=600).text == "no full listing yet"


def test_a_member_joining_own_writes_or_the_slow_timer_list_in_full():
    assert "gained rack-3" in reason_before_asking(last(), ("rack-0", "rack-1", "rack-3"), 1001.0, 600).text
    assert "written" in reason_before_asking(last(wrote_since=True), RING, 1001.0, 600).text
    assert "fullResyncSeconds" in reason_before_asking(last(), RING, 1600.0, 600).text


def test_a_member_leaving_needs_only_its_own_nodes_listed():
    assert reason_before_asking(last(), ("rack-0",), 1001.0, 600) is None
    assert last().owners_outside(("rack-0",)) == ("legacy", "rack-1", "rack-2")
    fresh = {"rack-1": (Node("n3", shard="rack-1"),), "legacy": (NODES[4],), "rack-2": (NODES[3],)}
    moves = (Move("n3", "rack-1", "rack-0"),)
    assert unlisted_sources(moves, answers(owners=fresh)) is None


def test_the_owners_listed_are_those_outside_the_ring_that_still_own_nodes():
    assert last().owners_outside(RING) == ("legacy", "rack-2")
    assert last().owners_outside(("rack-0", "rack-1", "rack-2")) == ("legacy",)


def test_fresh_lists_replace_the_last_listings_nodes_of_those_owners_and_the_unsharded():
    freed = Node("n4", shard="rack-2")
    new = Node("n9")
    nodes = merged(last(nodes=NODES + (Node("n8"),)), answers(unsharded=(new,), owners={"rack-2": (freed,)}))
    assert len(nodes) == 6 and set(nodes) == {*NODES[:3], NODES[4], freed, new}


def test_moves_are_written_only_from_sources_listed_in_this_cycle():
    listed = answers(owners={"rack-2": ()})
    assert unlisted_sources((Move("n9", None, "rack-0"), Move("n4", "rack-2", "rack-1")), listed) is None
    reason = unlisted_sources((Move("n1", "rack-0", "rack-1"),), listed)
    assert reason and "rack-0" in reason.text and "full listing" in reason.text


def test_a_moved_count_of_a_pool_identity_or_of_an_owner_of_its_nodes_lists_in_full():
    for name, count in (("rack-0", 1), ("rack-1", 2), ("legacy", 4), ("rack-2", 0)):
        moved = SUMMARY | {name: count}
        reason = reason_from_answers(POOL, last(), answers(moved))
        assert reason and name in reason.text, name
    gone = {k: v for k, v in SUMMARY.items() if k != "rack-1"}
    assert "0 nodes with shard rack-1" in reason_from_answers(POOL, last(), answers(gone)).text


def test_nodes_carrying_the_pools_identities_outside_its_listing_list_in_full():
    """The pool's identities are unique per cloud: a node carrying one that the pool did not
    list left its selector, or is entering it, and is seen at once, not on the slow timer."""
    out_of_selector = SUMMARY | {"rack-0": 3}
    seen_then = last(summary=out_of_selector)
    assert "3 nodes with shard rack-0" in reason_from_answers(POOL, seen_then, answers(out_of_selector)).text
    assert "rack-5" in reason_from_answers(POOL, last(), answers(SUMMARY | {"rack-5": 1})).text


def test_a_new_shard_value_anywhere_lists_in_full():
    new = SUMMARY | {"preset-by-enrolment": 1}
    assert "new" in reason_from_answers(POOL, last(), answers(new)).text


def test_another_pools_activity_and_the_global_unsharded_count_do_not_list():
    busy = SUMMARY | {"other-0": 10, UNSHARDED: 100}
    assert reason_from_answers(POOL, last(), answers(busy)) is None
    emptied = {k: v for k, v in SUMMARY.items() if k != "other-0"}
    assert reason_from_answers(POOL, last(), answers(emptied)) is None


def test_status_says_when_the_counts_were_listed_and_a_steady_poll_rewrites_nothing():
    """A poll planned from the last full listing reports that listing's time, so its counts
    are never presented as fresher than they are, and its status is the last one, byte for
    byte (no status write, invariant 6)."""
    from ironic_shard_operator.core.model import Member, Observation, PoolSpec
    from ironic_shard_operator.core.planner import plan
    from ironic_shard_operator.core.status import CycleFacts, build_status, format_time

    members = (Member("rack-0", True, 0.0), Member("rack-1", True, 0.0))

    def status_at(now: float, previous=None):
        decision = plan(Observation(PoolSpec(POOL, replicas=2), members, NODES[:3], now=now,
                                    nodes_observed_at=1000.0))
        facts = CycleFacts(generation=1, members=members, plan=decision, now=now,
                           pods_existing=2, pods_ready=2)
        return build_status(facts, previous)

    listed, _ = status_at(1000.0)
    assert listed["nodes"]["observedAt"] == format_time(1000.0)
    steady, events = status_at(1570.0, listed)
    assert steady == listed and events == []


REFUSED = SummaryRefused("Ironic at http://ironic does not allow (policy) the credentials of cloud 'metal' to "
                         "read the shard summary: HTTP 403: Access was denied to the following resource: "
                         "baremetal:shards:get")


def test_a_refused_summary_makes_every_poll_list_in_full_and_says_why():
    """Credentials without baremetal:shards:get: the pool is listed in full every poll (as
    before observation by need) instead of failing, whatever else holds."""
    for poll in (last(summary=REFUSED), last(summary=REFUSED, wrote_since=True)):
        reason = reason_before_asking(poll, RING, now=1001.0, full_resync_seconds=600)
        assert "every poll lists the pool in full" in reason.text and "baremetal:shards:get" in reason.text
        assert "HTTP 403" in reason.text
    assert "baremetal:shards:get" in reason_from_answers(POOL, last(), answers(summary=REFUSED)).text


def test_a_summary_answered_again_brings_polls_by_need_back():
    """The listing after a refusal asks the summary again: once Ironic answers it, the next
    poll asks the cheap questions instead of listing."""
    assert reason_before_asking(last(summary=REFUSED), RING, 1001.0, 600) is not None
    assert reason_before_asking(last(summary=SUMMARY), RING, 1001.0, 600) is None


def test_every_reason_for_a_full_listing_has_its_own_kind_for_the_metric():
    """The metric's reason label: each rule names its own fixed kind with its sentence,
    every kind is reached, and a shard value that quotes another rule's words does not
    change the kind."""
    moved = answers(SUMMARY | {"legacy": 4})
    reasons = {
        "no_memory": EVERY_CYCLE,
        "no_listing_yet": reason_before_asking(None, RING, 0.0, 600),
        "summary_refused": reason_before_asking(last(summary=REFUSED), RING, 1001.0, 600),
        "own_writes": reason_before_asking(last(wrote_since=True), RING, 1001.0, 600),
        "resync_timer": reason_before_asking(last(), RING, 1600.0, 600),
        "ring_gained": reason_before_asking(last(), (*RING, "rack-3"), 1001.0, 600),
        "identity_count": reason_from_answers(POOL, last(), answers(SUMMARY | {"rack-0": 3})),
        "new_shard": reason_from_answers(POOL, last(), answers(SUMMARY | {"preset": 1})),
        "owner_count": reason_from_answers(POOL, last(), moved),
        "unlisted_source": unlisted_sources((Move("n1", "rack-0", "rack-1"),), answers()),
    }
    assert {kind: reason.kind for kind, reason in reasons.items()} == {k: k for k in reasons}
    assert set(FULL_LISTING_KINDS) == set(reasons)
    assert reason_from_answers(POOL, last(), answers(summary=REFUSED)) == reasons["summary_refused"]
    tricky = ("the ring gained rack-9", "x went from 1 to 2 nodes in Ironic's shard summary", "Ironic counts 5")
    for name in tricky:
        assert reason_from_answers(POOL, last(), answers(SUMMARY | {name: 1})).kind == "new_shard"
    owned = last(nodes=(*NODES, Node("n6", shard=tricky[1])), summary=SUMMARY | {tricky[1]: 1})
    assert reason_from_answers(POOL, owned, answers(SUMMARY | {tricky[1]: 2})).kind == "owner_count"


def test_a_reason_of_no_known_kind_is_refused():
    """The metric's label set stays bounded: a reason cannot be made with a kind outside it."""
    with pytest.raises(ValueError, match="not one of"):
        ListingReason("a sentence no rule wrote", "why")
