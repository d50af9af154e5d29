"""Fencing: the grace rule, the fence verdict for a pod on a Kubernetes node, forced_down."""

from hypothesis import given, strategies as st

from tests.unit.nova_records import service, services
from ironic_shard_operator.core.fencing import (
    FenceAction, NodeView, clear_when_ready_after, clear_when_ready_written, counts_as_ready, fence_verdict, forced_down_changes, grace_left,
    grace_ends_within, past_grace,
)
from ironic_shard_operator.core.model import Member
from ironic_shard_operator.core.pods import PodView
from ironic_shard_operator.core.spec import Fencing

NOW = 1_800_000_000.0
GRACE = 30.0
MEMBERS = ("rack-0", "rack-1", "rack-2")


# ---- the grace rule -------------------------------------------------------------------------


def test_a_member_counts_as_ready_until_its_grace_ends():
    assert counts_as_ready(Member("rack-0", ready=True, since=NOW), NOW, GRACE)
    within = Member("rack-1", ready=False, since=NOW - GRACE + 1)
    assert counts_as_ready(within, NOW, GRACE) and not past_grace(within, NOW, GRACE)
    assert grace_left(within, NOW, GRACE) == 1.0
    ended = Member("rack-1", ready=False, since=NOW - GRACE)
    assert not counts_as_ready(ended, NOW, GRACE) and past_grace(ended, NOW, GRACE)
    assert grace_left(ended, NOW, GRACE) is None


def test_a_member_never_ready_has_no_grace_and_is_not_past_one():
    never = Member("rack-2", ready=False, since=None)
    assert not counts_as_ready(never, NOW, GRACE)
    assert not past_grace(never, NOW, GRACE)
    assert grace_left(never, NOW, GRACE) is None


def test_a_grace_ends_within_seconds_only_for_a_member_within_one():
    ending = Member("rack-1", ready=False, since=NOW - GRACE + 8)
    assert grace_ends_within([Member("rack-0", ready=True, since=NOW), ending], NOW, GRACE, 8.0)
    assert not grace_ends_within([ending], NOW, GRACE, 7.9)
    over = Member("rack-1", ready=False, since=NOW - GRACE)  # past its grace: the failover is under way
    never = Member("rack-2", ready=False, since=None)
    assert not grace_ends_within([over, never], NOW, GRACE, 1000.0)


@given(ready=st.booleans(), lost=st.one_of(st.none(), st.integers(0, 1000)), grace=st.integers(0, 500))
def test_every_member_is_ready_within_its_grace_or_past_it_or_never_was_ready(ready, lost, grace):
    member = Member("rack-0", ready=ready, since=None if lost is None else NOW - lost)
    left = grace_left(member, NOW, grace)
    within = not ready and left is not None
    assert counts_as_ready(member, NOW, grace) == (ready or within)
    assert past_grace(member, NOW, grace) == (not ready and lost is not None and not within)
    assert left is None or 0 < left <= grace


# ---- the fence verdict ----------------------------------------------------------------------


def pod(**kw):
    values = dict(name="rack-1", member="rack-1", uid="u1", phase="Running", ready=False, node_name="k2")
    values.update(kw)
    return PodView(**values)


def lost_node(**kw):
    return {"k2": NodeView("k2", reachable=False, unreachable_since=NOW - 60, **kw)}


def test_a_ready_pod_or_one_on_a_reachable_node_needs_no_fencing():
    assert fence_verdict(pod(ready=True), lost_node(), Fencing(), NOW) is None
    assert fence_verdict(pod(), {"k2": NodeView("k2")}, Fencing(), NOW) is None
    assert fence_verdict(pod(node_name=None), {}, Fencing(), NOW) is None


def test_a_pod_on_an_unreachable_node_is_deleted_gracefully_first_whatever_the_mode():
    for mode in ("Wait", "OutOfServiceTaint", "ForceAfter"):
        verdict = fence_verdict(pod(), lost_node(), Fencing(mode=mode, force_after_seconds=1), NOW)
        assert (verdict.action, verdict.phase) == (FenceAction.DELETE, "Replacing")
        assert f"fencing mode {mode} decides when it is forgotten" in verdict.event
    # a node the operator could not read counts as unreachable
    assert fence_verdict(pod(), {}, Fencing(), NOW).action is FenceAction.DELETE


def test_a_pod_being_deleted_on_a_reachable_node_is_waited_for():
    verdict = fence_verdict(pod(deleting=True), {"k2": NodeView("k2")}, Fencing(mode="ForceAfter",
                            force_after_seconds=0), NOW)
    assert (verdict.action, verdict.phase) == (FenceAction.WAIT, "Terminating")


def test_wait_never_forgets_a_pod():
    for later in (0, 3600, 86400 * 30):
        verdict = fence_verdict(pod(deleting=True), lost_node(out_of_service=True), Fencing(mode="Wait"),
                                NOW + later)
        assert (verdict.action, verdict.phase) == (FenceAction.WAIT, "Fencing")
        assert "an administrator to delete the pod" in verdict.message


def test_out_of_service_taint_forgets_a_pod_only_with_the_taint():
    mode = Fencing(mode="OutOfServiceTaint")
    assert fence_verdict(pod(deleting=True), lost_node(), mode, NOW).action is FenceAction.WAIT
    verdict = fence_verdict(pod(deleting=True), lost_node(out_of_service=True), mode, NOW)
    assert (verdict.action, verdict.phase) == (FenceAction.FORCE, "Fencing")
    assert "node.kubernetes.io/out-of-service" in verdict.event


def test_force_after_forgets_a_pod_n_seconds_after_the_node_went_away_and_asks_for_a_wakeup():
    mode = Fencing(mode="ForceAfter", force_after_seconds=120)
    early = fence_verdict(pod(deleting=True), lost_node(), mode, NOW)
    assert (early.action, early.wake_after) == (FenceAction.WAIT, 60)
    late = fence_verdict(pod(deleting=True), lost_node(), mode, NOW + 60)
    assert late.action is FenceAction.FORCE and late.wake_after is None
    # no node to read: counted from the pod's deletion
    assert fence_verdict(pod(deleting=True, deletion_since=NOW - 100), {}, mode, NOW).wake_after == 20


@given(mode=st.sampled_from(["Wait", "OutOfServiceTaint", "ForceAfter"]), deleting=st.booleans(),
       ready=st.booleans(), reachable=st.booleans(), out_of_service=st.booleans(),
       gone=st.integers(0, 1000), force_after=st.integers(0, 1000))
def test_a_pod_is_forgotten_only_where_the_mode_allows_it(mode, deleting, ready, reachable, out_of_service,
                                                         gone, force_after):
    node = NodeView("k2", reachable=reachable, unreachable_since=NOW - gone, out_of_service=out_of_service)
    verdict = fence_verdict(pod(deleting=deleting, ready=ready), {"k2": node},
                            Fencing(mode=mode, force_after_seconds=force_after), NOW)
    if verdict is not None and verdict.action is FenceAction.FORCE:
        assert deleting and not reachable and mode != "Wait"
        assert mode != "OutOfServiceTaint" or out_of_service
        assert mode != "ForceAfter" or gone >= force_after


# ---- forced_down ----------------------------------------------------------------------------


def test_forced_down_is_set_only_once_the_grace_has_run_out():
    nova = services(*MEMBERS)
    within = [Member("rack-1", ready=False, since=NOW - GRACE + 1)]
    assert forced_down_changes(within, nova, GRACE, NOW, set()) == ()
    outlasted = [Member("rack-1", ready=False, since=NOW - GRACE)]
    change, = forced_down_changes(outlasted, nova, GRACE, NOW, set())
    assert (change.member, change.forced_down, change.service.id) == ("rack-1", True, "id-rack-1")
    assert "not been ready for 30s" in change.message


def test_forced_down_is_cleared_as_soon_as_the_member_is_ready_and_never_repeated():
    forced = services(*MEMBERS, changed=[service("rack-1", forced_down=True)])
    change, = forced_down_changes([Member("rack-1", ready=True, since=NOW)], forced, GRACE, NOW, {"rack-1"})
    assert change.forced_down is False
    # already forced: nothing to write; never ready (since None) or no service: nothing either
    assert forced_down_changes([Member("rack-1", ready=False, since=NOW - 999)], forced, GRACE, NOW, {"rack-1"}) == ()
    assert forced_down_changes([Member("rack-0", ready=False, since=None)], forced, GRACE, NOW, {"rack-1"}) == ()
    assert forced_down_changes([Member("rack-7", ready=False, since=NOW - 999)], forced, GRACE, NOW, {"rack-1"}) == ()


def test_forced_down_of_a_member_a_handover_holds_is_never_cleared():
    """Nodes of it are in flight (a Job runs, Nova moved nodes Ironic does not show moved): a
    pod of its name that became Ready meanwhile does not clear the flag nova-manage needs."""
    forced = services(*MEMBERS, changed=[service("rack-1", forced_down=True)])
    back = [Member("rack-1", ready=True, since=NOW)]
    assert forced_down_changes(back, forced, GRACE, NOW, {"rack-1"}, held={"rack-1"}) == ()
    assert forced_down_changes(back, forced, GRACE, NOW, {"rack-1"}, held=set())[0].forced_down is False


@given(ready=st.booleans(), forced=st.booleans(), lost=st.integers(0, 1000), grace=st.integers(0, 500))
def test_forced_down_decisions_are_a_fixed_point(ready, forced, lost, grace):
    """Applying the decided change once leaves nothing to decide (no write on the next cycle)."""
    member = Member("rack-0", ready=ready, since=NOW - lost)
    nova = {"rack-0": service("rack-0", forced_down=forced)}
    ours = clear_when_ready_after((), [member], nova)
    changes = forced_down_changes([member], nova, grace, NOW, ours)
    after = {"rack-0": service("rack-0", forced_down=changes[0].forced_down)} if changes else nova
    assert forced_down_changes([member], after, grace, NOW, clear_when_ready_after(ours, [member], after)) == ()
    # within the grace: untouched; a flag first seen on a ready member: someone else's, kept
    expected = forced if ready else (True if lost >= grace else forced)
    assert after["rack-0"].forced_down == expected


@given(lost=st.integers(0, 1000), grace=st.integers(0, 500))
def test_a_service_is_forced_down_exactly_when_the_planner_takes_its_member_out_of_the_ring(lost, grace):
    member = Member("rack-0", ready=False, since=NOW - lost)
    forced = bool(forced_down_changes([member], services("rack-0"), grace, NOW, set()))
    assert forced == (not counts_as_ready(member, NOW, grace))


def left_alone(nova, clear_when_ready) -> set[str]:
    """The members status.nova reports as forced down by someone else (nova_policy.left_forced_down)."""
    from ironic_shard_operator.core.nova_policy import ENABLED, left_forced_down, status_section

    forced = sorted(host for host, s in nova.items() if s.forced_down)
    return left_forced_down(status_section(ENABLED, "", forced_down=forced, clear_when_ready=clear_when_ready))


def test_a_failures_flag_is_cleared_when_the_member_is_back_and_an_administrators_flag_is_left_alone():
    """The operator clears only a flag that belongs to a failure: seen while the member was
    not ready. A flag set on a ready member (an administrator keeping Nova off it) stays, in
    every later cycle, and is reported as left alone."""
    failed, back = Member("rack-1", ready=False, since=NOW - 999), Member("rack-1", ready=True, since=NOW)
    forced = services(*MEMBERS, changed=[service("rack-1", forced_down=True)])
    ours = clear_when_ready_after((), [failed], forced)
    assert ours == {"rack-1"}
    ours = clear_when_ready_after(ours, [back], forced)  # still recorded once it is ready
    change, = forced_down_changes([back], forced, GRACE, NOW, ours)
    assert change.forced_down is False and left_alone(forced, ours) == set()
    cleared = services(*MEMBERS)
    assert clear_when_ready_after(ours, [back], cleared) == frozenset()  # the flag gone: forgotten

    admins = clear_when_ready_after((), [back], forced)  # first seen on a ready member
    assert admins == frozenset()
    assert forced_down_changes([back], forced, GRACE, NOW, admins) == ()
    assert left_alone(forced, admins) == {"rack-1"}
    # The same member failing later makes the flag a failure's: cleared when it is back.
    assert clear_when_ready_after(admins, [failed], forced) == {"rack-1"}


@given(steps=st.lists(st.tuples(st.booleans(), st.sampled_from([None, True, False])), min_size=1, max_size=16))
def test_the_operator_clears_a_flag_exactly_when_it_was_seen_during_a_failure(steps):
    """Cycles of one member: before each, an administrator may set or clear the flag; then the
    operator's cycle (record, decide, apply). A flag is cleared by the operator only if some
    cycle since it was set saw the member not ready, and always then once the member is ready."""
    forced, ours, seen_failing = False, frozenset(), False
    for ready, admin in steps:
        if admin is not None:
            if admin and not forced:
                seen_failing = False  # a new flag, set by the administrator
            forced = admin
        member = Member("rack-0", ready=ready, since=NOW if ready else NOW - 999)
        nova = {"rack-0": service("rack-0", forced_down=forced)}
        ours = clear_when_ready_after(ours, [member], nova)
        seen_failing = seen_failing or (forced and not ready)
        changes = forced_down_changes([member], nova, GRACE, NOW, ours)
        for change in changes:
            if not change.forced_down:
                assert seen_failing, "cleared an administrator's flag"
            forced = change.forced_down
            seen_failing = forced  # the operator's own flag belongs to a failure
        ours = clear_when_ready_written(ours, changes, {"rack-0"} if forced else set())
        if ready and seen_failing:
            assert not forced, "left a failure's flag on a ready member"
