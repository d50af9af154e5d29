"""The write rule of a shard write: a planned move or a handover against the fresh read of
its node, decided without Ironic (the adapter's integration tests show it applied)."""

import pytest
from hypothesis import given, strategies as st

from ironic_shard_operator.core.model import Member, Move, Node
from ironic_shard_operator.core.shard_write import (
    PlacementState, Verdict, asks_placement, guarded_owners, guarded_verdict, handover_verdict, is_guarded,
    live_owners, move_verdict, split_blind, waits_for_placement,
)
from tests.unit.nova_records import service

UUID = "node-1"
ADOPT = Move(UUID, None, "rack-0")      # an unassigned node given to rack-0
REBALANCE = Move(UUID, "rack-1", "rack-0")
HANDOVER = Move(UUID, "rack-1", "rack-0")  # a misplaced node to its instance's host


@pytest.mark.parametrize("move", [ADOPT, REBALANCE])
def test_a_free_node_still_at_the_source_is_written(move):
    assert move_verdict(move, Node(UUID, shard=move.source, provision_state="available")) \
        is Verdict.WRITE


@pytest.mark.parametrize("move", [ADOPT, REBALANCE])
def test_a_node_already_at_the_target_is_not_written_again(move):
    assert move_verdict(move, Node(UUID, shard="rack-0")) is Verdict.AT_TARGET
    # Even when it is pinned meanwhile: it is where the plan wanted it.
    assert move_verdict(move, Node(UUID, shard="rack-0", instance_uuid="i")) is Verdict.AT_TARGET


@pytest.mark.parametrize("claimed", [
    Node(UUID, shard="rack-1", instance_uuid="instance-1"),      # Nova deployed on it
    Node(UUID, shard="rack-1", provision_state="cleaning"),      # a workflow runs
    Node(UUID, shard="rack-1", target_provision_state="active"),  # a workflow starts
    Node(UUID, shard="rack-1", reservation="conductor-1"),       # a conductor holds the lock
], ids=["instance", "provisioning", "target-state", "lock"])
def test_a_node_claimed_since_the_observation_is_never_moved(claimed):
    assert move_verdict(REBALANCE, claimed) is Verdict.CLAIMED


def test_a_claimed_node_that_also_changed_shard_counts_as_claimed():
    assert move_verdict(REBALANCE, Node(UUID, shard="rack-2", instance_uuid="i")) is Verdict.CLAIMED


@pytest.mark.parametrize("move,current", [
    (REBALANCE, None),                          # deleted or out of the pool's selector
    (REBALANCE, Node(UUID, shard="rack-2")),    # someone gave it another shard
    (REBALANCE, Node(UUID, shard=None)),        # someone unassigned it
    (ADOPT, Node(UUID, shard="rack-2")),        # adopted elsewhere meanwhile
], ids=["gone", "other-shard", "unassigned", "adopted-elsewhere"])
def test_a_node_gone_or_moved_by_someone_else_is_not_written(move, current):
    assert move_verdict(move, current) is Verdict.CHANGED


def test_a_handover_writes_a_node_that_still_carries_the_instance_seen():
    node = Node(UUID, shard="rack-1", instance_uuid="instance-1", provision_state="active")
    assert handover_verdict(HANDOVER, node, "instance-1") is Verdict.WRITE


def test_a_handover_of_a_node_already_at_the_target_writes_nothing():
    node = Node(UUID, shard="rack-0", instance_uuid="instance-1")
    assert handover_verdict(HANDOVER, node, "instance-1") is Verdict.AT_TARGET


@pytest.mark.parametrize("current,seen", [
    (None, "instance-1"),                                            # gone
    (Node(UUID, shard="rack-2", instance_uuid="instance-1"), "instance-1"),  # shard changed
    (Node(UUID, shard="rack-1"), "instance-1"),                      # its instance left
    (Node(UUID, shard="rack-1", instance_uuid="instance-2"), "instance-1"),  # another instance
    (Node(UUID, shard="rack-1", instance_uuid="instance-1"), None),  # the audit saw none
], ids=["gone", "other-shard", "instance-left", "instance-changed", "none-seen"])
def test_a_handover_of_a_node_that_changed_is_not_written(current, seen):
    assert handover_verdict(HANDOVER, current, seen) is Verdict.CHANGED


SHARDS = st.sampled_from([None, "rack-0", "rack-1", "rack-2"])
NODES = st.builds(Node, st.just(UUID), shard=SHARDS,
                  instance_uuid=st.sampled_from([None, "instance-1", "instance-2"]),
                  provision_state=st.sampled_from([None, "available", "active", "cleaning"]),
                  target_provision_state=st.sampled_from([None, "active"]),
                  reservation=st.sampled_from([None, "conductor-1"]))
MOVES = st.builds(Move, st.just(UUID), SHARDS, st.sampled_from(["rack-0", "rack-1", "rack-2"]))


@given(MOVES, st.none() | NODES)
def test_a_planned_move_writes_only_a_free_node_from_its_source(move, current):
    if move_verdict(move, current) is Verdict.WRITE:
        assert current is not None and not current.pinned
        assert current.shard == move.source != move.target


@given(MOVES, st.none() | NODES, st.sampled_from([None, "instance-1", "instance-2"]))
def test_a_handover_writes_only_from_its_source_with_the_same_instance(move, current, seen):
    if handover_verdict(move, current, seen) is Verdict.WRITE:
        assert current is not None and current.shard == move.source != move.target
        assert current.instance_uuid is not None and current.instance_uuid == seen


# --- guarded moves: a free node leaving a live owner ------------------------------------


def test_live_owners_are_the_members_that_count_as_ready():
    """Ready, or within the grace: their nova-compute may still take a build. A member past
    its grace, or never ready, takes none: moves away from it need no guard."""
    members = [Member("rack-0", ready=True, since=0.0), Member("rack-1", ready=False, since=95.0),
               Member("rack-2", ready=False, since=10.0), Member("rack-3")]
    assert live_owners(members, now=100.0, rebalance_after_seconds=60.0) == {"rack-0", "rack-1"}


def test_a_member_past_its_grace_whose_nova_service_is_still_up_is_guarded_until_forced_down():
    """Invariant 13: a failing readiness probe, or a Kubernetes node cut off from the API
    server but not from RabbitMQ, keeps nova-compute heartbeating and the scheduler placing
    builds there: its free nodes leave it only guarded, until it is forced down (then Nova
    reports it down: the fast path). Nova unknown this cycle: every member identity."""
    members = [Member("rack-0", ready=True, since=0.0), Member("rack-1", ready=False, since=10.0),
               Member("rack-2", ready=False, since=10.0)]
    identities = ["rack-0", "rack-1", "rack-2"]
    nova = {"rack-0": service("rack-0"), "rack-1": service("rack-1"),
            "rack-2": service("rack-2", forced_down=True), "stranger": service("stranger", up=False)}
    assert guarded_owners(members, 100.0, 60.0, nova, identities) == {"rack-0", "rack-1"}
    assert guarded_owners(members, 100.0, 60.0, None, identities) == {"rack-0", "rack-1", "rack-2"}
    assert guarded_owners(members, 100.0, 60.0, {**nova, "rack-1": service("rack-1", up=False)},
                          identities) == {"rack-0"}


def test_a_guarded_move_of_a_node_held_in_placement_is_claimed():
    free = Node(UUID, shard="rack-1", provision_state="available")
    assert guarded_verdict(REBALANCE, free, claimed_in_placement=True) is Verdict.CLAIMED
    assert guarded_verdict(REBALANCE, free, claimed_in_placement=False) is Verdict.WRITE


@given(shard=st.sampled_from([None, "rack-0", "rack-1", "rack-2"]), instance=st.sampled_from([None, "i"]),
       claimed=st.booleans())
def test_a_guard_only_ever_holds_back_what_the_write_rule_lets_through(shard, instance, claimed):
    """The guard adds a reason not to write, never a reason to write."""
    current = Node(UUID, shard=shard, instance_uuid=instance, provision_state="available")
    said = guarded_verdict(REBALANCE, current, claimed)
    plain = move_verdict(REBALANCE, current)
    assert said is plain or (plain is Verdict.WRITE and said is Verdict.CLAIMED and claimed)


def test_a_move_is_guarded_when_it_leaves_a_guarded_owner_and_only_then_is_placement_asked():
    guarded = frozenset({"rack-1"})
    assert is_guarded(REBALANCE, guarded)
    assert not is_guarded(ADOPT, guarded)  # an unassigned node leaves no one
    assert not is_guarded(Move(UUID, "rack-2", "rack-0"), guarded)
    assert asks_placement([ADOPT, REBALANCE], guarded)
    assert not asks_placement([ADOPT], guarded)
    assert not asks_placement([], guarded)


@pytest.mark.parametrize(("placement", "waits"), [
    (PlacementState.ANSWERS, False), (PlacementState.ABSENT, False), (PlacementState.NOT_ANSWERING, True),
])
def test_a_guarded_move_is_never_written_blind(placement, waits):
    """A cloud whose Placement does not answer keeps its guarded moves where they are; one
    without Placement (no Nova schedules there) leaves them to Ironic's reads."""
    guarded = frozenset({"rack-1"})
    assert waits_for_placement(REBALANCE, guarded, placement) is waits
    assert not waits_for_placement(ADOPT, guarded, placement)  # unguarded moves never wait
    tried, waiting = split_blind([ADOPT, REBALANCE], guarded, placement)
    assert (tried, waiting) == (([ADOPT], [REBALANCE]) if waits else ([ADOPT, REBALANCE], []))
