"""status.members while Ironic has not been read (it hangs, refuses, or is not configured): the
members' own state is what the pods show, never the last report's; only their node counts are
the last ones known."""

from ironic_shard_operator.core import model
from ironic_shard_operator.core.pods import MemberState
from ironic_shard_operator.core.status import CycleFacts, build_status

NOW = 1_800_000_000.0
PLAN = model.Plan(
    desired_replicas=2, ring_members=("p-0", "p-1"), moves=(), members_to_create=(), members_to_delete=(),
    scale_down_blocked={}, loads=(model.MemberLoad("p-0", 50, 5, True), model.MemberLoad("p-1", 50, 3, True)),
    counts=model.NodeCounts(total=100, free=92, pinned=8))
READY = (model.Member("p-0", True, NOW - 100), model.Member("p-1", True, NOW - 90))


def facts(**kw) -> CycleFacts:
    values = dict(generation=3, members=READY, states=(MemberState("p-0", "Ready"), MemberState("p-1", "Ready")),
                  plan=PLAN, pods_existing=2, pods_ready=2, now=NOW)
    values.update(kw)
    return CycleFacts(**values)


def test_a_member_being_replaced_shows_so_without_a_plan():
    first, _ = build_status(facts(), None)
    failing = (READY[0], model.Member("p-1", False, NOW))
    states = (MemberState("p-0", "Ready"), MemberState("p-1", "Replacing", "pod Failed (Error)"))
    status, _ = build_status(facts(plan=None, members=failing, states=states, pods_ready=1,
                                   error="Ironic at http://x (cloud 'c') is not answering",
                                   error_reason="IronicUnavailable"), first)
    assert status["members"][0] == first["members"][0]
    replaced = status["members"][1]
    assert (replaced["phase"], replaced["ready"], replaced["message"]) == ("Replacing", False, "pod Failed (Error)")
    assert (replaced["nodes"], replaced["pinnedNodes"]) == (50, 3)  # the last counts known
    assert status["nodes"] == first["nodes"] and status["ring"] == first["ring"]


def test_a_member_the_last_report_did_not_know_has_no_nodes_yet():
    first, _ = build_status(facts(), None)
    members = (*READY, model.Member("p-2", False, None))
    status, _ = build_status(facts(plan=None, members=members, states=(MemberState("p-2", "Creating"),)), first)
    assert [(m["name"], m["phase"], m["nodes"]) for m in status["members"]] == [
        ("p-0", "Ready", 50), ("p-1", "Ready", 50), ("p-2", "Creating", 0)]


def test_without_observed_members_the_last_report_stays():
    first, _ = build_status(facts(), None)
    status, _ = build_status(CycleFacts(generation=4, error="spec.image: bad", error_reason="InvalidSpec",
                                        now=NOW), first)
    assert status["members"] == first["members"]
