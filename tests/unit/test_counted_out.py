"""Certain failures count a member out at once (core/fencing.py::counted_out_why): each signal,
the ambiguous case that keeps the grace, and what being counted out does to the ring, the
forced_down flag, the guard of free nodes and the status. No rule of a move is weakened: a
counted-out member whose service is up stays guarded until Nova lists it forced down, and its
pinned nodes never move by the ring."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ironic_shard_operator.core.fencing import (
    CRASH_LOOP_RESTARTS, OUT_OF_SERVICE_TAINT, NodeView, counted_out_why, counts_as_ready, forced_down_changes,
    grace_left, past_grace,
)
from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from ironic_shard_operator.core.pods import PodView, member_readiness, read_node
from ironic_shard_operator.core.shard_write import guarded_owners
from ironic_shard_operator.core.spec import Fencing
from ironic_shard_operator.core.pool_memory import since_of
from ironic_shard_operator.core.status import CycleFacts, build_status
from tests.unit.nova_records import service, services

NOW = 1_800_000_000.0
GRACE = 120.0
WAIT = Fencing("Wait")


def pod(**kw):
    values = dict(name="rack-1", member="rack-1", uid="u1", phase="Running", ready=False, node_name="k1")
    values.update(kw)
    return PodView(**values)


def node(**kw):
    return {"k1": NodeView("k1", **kw)}


# --- the signals -------------------------------------------------------------------------


@pytest.mark.parametrize("the_pod", [pod(), pod(deleting=True, deletion_since=NOW - 5)], ids=["not Ready", "deleting"])
def test_a_pod_on_a_node_with_the_out_of_service_taint_is_counted_out(the_pod):
    why = counted_out_why(the_pod, node(reachable=False, out_of_service=True), WAIT, NOW)
    assert why is not None and OUT_OF_SERVICE_TAINT in why and "k1" in why


def test_a_pod_whose_kubernetes_node_was_deleted_is_counted_out():
    assert "k1 was deleted" in counted_out_why(pod(), {}, WAIT, NOW)


def test_a_pod_the_garbage_collector_removed_from_a_node_declared_gone_is_counted_out_by_its_last_node():
    """The pod garbage collector removes a node's pods once it is declared gone: the member's
    last Kubernetes node (the last status's) still says where it failed."""
    assert OUT_OF_SERVICE_TAINT in counted_out_why(None, node(reachable=False, out_of_service=True), WAIT, NOW,
                                                   last_node="k1")
    assert "k1 was deleted" in counted_out_why(None, {}, WAIT, NOW, last_node="k1")
    replacement = pod(uid="u2", phase="Pending", node_name=None)
    assert "k1 was deleted" in counted_out_why(replacement, {}, WAIT, NOW, last_node="k1")
    assert counted_out_why(None, node(), WAIT, NOW, last_node="k1") is None
    assert counted_out_why(pod(ready=True, node_name="k2"), {}, WAIT, NOW, last_node="k1") is None


def test_a_pod_the_fencing_mode_forgets_is_counted_out():
    """ForceAfter: once the node has been unreachable that long, the verdict is FORCE."""
    fencing = Fencing("ForceAfter", force_after_seconds=60)
    deleting = pod(deleting=True, deletion_since=NOW - 100)
    assert "provably gone" in counted_out_why(deleting, node(reachable=False, unreachable_since=NOW - 61),
                                              fencing, NOW)
    assert counted_out_why(deleting, node(reachable=False, unreachable_since=NOW - 59), fencing, NOW) is None


def test_a_crash_looping_container_is_counted_out_at_the_bound_not_before():
    looping = pod(crash_looping=True, restarts=CRASH_LOOP_RESTARTS)
    assert "crash-loops" in counted_out_why(looping, node(), WAIT, NOW)
    assert counted_out_why(replace(looping, restarts=CRASH_LOOP_RESTARTS - 1), node(), WAIT, NOW) is None
    assert counted_out_why(replace(looping, crash_looping=False), node(), WAIT, NOW) is None


def test_a_fenced_member_is_counted_out_even_with_its_pod_ready_or_gone():
    assert "spec.fencedMembers" in counted_out_why(pod(ready=True), node(), WAIT, NOW, fenced=True)
    assert "spec.fencedMembers" in counted_out_why(None, {}, WAIT, NOW, fenced=True)


# --- the ambiguous case: the grace decides -----------------------------------------------


@pytest.mark.parametrize("the_pod, nodes", [
    (pod(), node()),                                                         # not Ready on a healthy node
    (pod(), node(reachable=False, unreachable_since=NOW - 300)),             # node NotReady / unreachable
    (pod(deleting=True, deletion_since=NOW - 5), node()),                    # being deleted, kubelet answers
    (pod(deleting=True, deletion_since=NOW - 5), node(reachable=False, unreachable_since=NOW - 300)),  # Wait
    (pod(ready=True), {}),                                                   # Ready: never, whatever its node
    (pod(ready=True, crash_looping=True, restarts=9), node()),
    (None, {}),                                                              # no pod: a replacement follows
], ids=["not-ready", "node-unreachable", "deleting", "deleting-on-lost-node-wait", "ready", "ready-restarted",
        "no-pod"])
def test_nothing_certain_leaves_the_member_to_its_grace(the_pod, nodes):
    assert counted_out_why(the_pod, nodes, WAIT, NOW) is None


def test_the_out_of_service_taint_is_read_from_the_node_object():
    raw = {"metadata": {"name": "k1"}, "spec": {"taints": [{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}]},
           "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert counted_out_why(pod(), {"k1": read_node(raw)}, WAIT, NOW) is not None


# --- what counted out means --------------------------------------------------------------


def test_a_counted_out_member_is_past_its_grace_at_once():
    fresh = Member("rack-1", ready=False, since=NOW - 1, counted_out="its Kubernetes node k1 was deleted")
    assert not counts_as_ready(fresh, NOW, GRACE) and past_grace(fresh, NOW, GRACE)
    assert grace_left(fresh, NOW, GRACE) is None
    assert past_grace(replace(fresh, since=None), NOW, GRACE)  # never seen ready: still certain
    fenced = Member("rack-1", ready=True, since=NOW - 1000, counted_out="fenced by spec.fencedMembers")
    assert not counts_as_ready(fenced, NOW, GRACE) and past_grace(fenced, NOW, GRACE)


def test_counted_out_stays_until_the_member_is_ready_again():
    """The pod on the deleted node is garbage-collected and a replacement starts: still counted out,
    still on the node it was on; a Ready pod clears it."""
    first = member_readiness("rack-1", pod(), Member("rack-1", True, NOW - 500), NOW, "its Kubernetes node k1 was deleted")
    assert first.counted_out and first.kubernetes_node == "k1"
    gone = member_readiness("rack-1", None, first, NOW + 20)
    assert gone.counted_out == first.counted_out and gone.kubernetes_node == "k1" and gone.since == first.since
    pending = member_readiness("rack-1", pod(uid="u2", phase="Pending", node_name="k2"), gone, NOW + 30)
    assert pending.counted_out == first.counted_out and pending.kubernetes_node == "k2"
    back = member_readiness("rack-1", pod(uid="u2", ready=True, ready_since=NOW + 40, node_name="k2"), pending,
                            NOW + 41)
    assert back.ready and back.counted_out is None


def _three_members_with_nodes(rack_1: Member):
    """A converged pool of three members (as the planner leaves it), rack-1 with 4 pinned nodes."""
    spec = PoolSpec("rack", replicas=3, rebalance_after_seconds=GRACE)
    members = (Member("rack-0", True, 0.0), Member("rack-1", True, 0.0), Member("rack-2", True, 0.0))
    pinned = [Node(f"10000000-0000-0000-0000-{i:012d}", shard="rack-1", instance_uuid=f"i-{i}") for i in range(4)]
    fresh = Observation(spec, members, (*(Node(f"00000000-0000-0000-0000-{i:012d}") for i in range(30)), *pinned), NOW)
    owners = owners_after(fresh.nodes, plan(fresh).moves)
    nodes = tuple(replace(n, shard=owners[n.uuid]) if not n.pinned else n for n in fresh.nodes)
    return Observation(spec, (members[0], rack_1, members[2]), nodes, NOW)


def test_a_counted_out_member_loses_its_free_nodes_at_once_and_keeps_its_pinned_ones():
    """Seconds into the grace, not Ready: nothing moves; counted out: every free node of it moves
    to the others at once, and no pinned node moves (only a handover moves those)."""
    within = Member("rack-1", False, NOW - 5)
    assert plan(_three_members_with_nodes(within)).moves == ()
    observation = _three_members_with_nodes(replace(within, counted_out="its Kubernetes node k1 was deleted"))
    result = plan(observation)
    pinned = {n.uuid for n in observation.nodes if n.pinned}
    assert {m.node_uuid for m in result.moves} == {n.uuid for n in observation.nodes
                                                  if n.shard == "rack-1" and not n.pinned}
    assert not {m.node_uuid for m in result.moves} & pinned
    assert result.ring_members == ("rack-0", "rack-2")


def test_a_counted_out_member_is_forced_down_at_once_and_never_cleared_while_counted_out():
    out = Member("rack-1", ready=False, since=NOW - 5, counted_out="its container crash-loops (3 restarts)")
    (change,) = forced_down_changes([out], services("rack-1"), GRACE, NOW, frozenset())
    assert change.forced_down and "at once" in change.message and "crash-loops" in change.message
    assert forced_down_changes([replace(out, since=NOW - 5)], services("rack-1"), GRACE, NOW, frozenset()) != ()
    fenced_ready = Member("rack-1", ready=True, since=NOW - 500, counted_out="fenced by spec.fencedMembers")
    forced = {"rack-1": service("rack-1", forced_down=True)}
    assert forced_down_changes([fenced_ready], forced, GRACE, NOW, frozenset({"rack-1"})) == ()


def test_a_counted_out_member_whose_service_is_up_stays_guarded_until_nova_lists_it_forced_down():
    """Invariant 13 unchanged: out of the ring at once, but a free node leaves it unguarded only
    once Nova lists its service forced down (or down)."""
    members = [Member("rack-0", True, 0.0), Member("rack-1", False, NOW - 5, counted_out="its Kubernetes node "
                                                                                          "k1 was deleted")]
    identities = {"rack-0", "rack-1"}
    assert guarded_owners(members, NOW, GRACE, services("rack-0", "rack-1"), identities) == identities
    assert guarded_owners(members, NOW, GRACE, None, identities) == identities
    forced = services("rack-0", "rack-1", changed=[service("rack-1", forced_down=True)])
    assert guarded_owners(members, NOW, GRACE, forced, identities) == {"rack-0"}


def test_status_shows_why_and_where_and_posts_member_counted_out_once():
    members = (Member("rack-0", True, NOW - 900, kubernetes_node="k0"),
               Member("rack-1", False, NOW - 5, counted_out="its Kubernetes node k1 was deleted", kubernetes_node="k1"))
    facts = CycleFacts(generation=1, members=members, now=NOW)
    status, events = build_status(facts, None)
    entry = status["members"][1]
    assert (entry["countedOut"], entry["kubernetesNode"]) == ("its Kubernetes node k1 was deleted", "k1")
    (event,) = [e for e in events if e.reason == "MemberCountedOut"]
    assert event.type == "Warning" and "rack-1" in event.message and "k1 was deleted" in event.message
    again, events = build_status(facts, status)
    assert not [e for e in events if e.reason == "MemberCountedOut"] and again["members"] == status["members"]
    assert since_of(status)["rack-1"] == members[1]
