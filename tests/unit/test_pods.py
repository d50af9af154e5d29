"""Member lifecycle decisions: replacement, fencing, rolling, scale-down, readiness."""

from dataclasses import replace

from hypothesis import given, strategies as st

from ironic_shard_operator.core import model
from ironic_shard_operator.core.fencing import NodeView
from ironic_shard_operator.core.pods import (
    DeletePod, PodActionKind, PodView, decide, member_readiness, read_node, read_pod,
)
from ironic_shard_operator.core.spec import Failover, Fencing

NOW = 1_000_000.0
HASH = {f"p-{i}": f"h{i}" for i in range(6)}


def pod(member, **kw):
    values = dict(name=member, member=member, uid=f"uid-{member}", phase="Running", ready=True,
                  created=NOW - 600, node_name="k1", config_hash=HASH[member])
    values.update(kw)
    return PodView(**values)


def run(pods, *, keep=("p-0", "p-1", "p-2"), retire=(), nodes=None, failover=Failover(), now=NOW):
    return decide(keep=keep, retire=retire, pods={p.member: p for p in pods},
                  nodes=nodes or {"k1": NodeView("k1")},
                  configmaps_current={m: True for m in keep}, wanted_hash=HASH,
                  failover=failover, now=now)


def healthy():
    return [pod("p-0"), pod("p-1"), pod("p-2")]


def test_a_healthy_pool_needs_no_action():
    decision = run(healthy())
    assert decision.writes == 0 and not decision.events
    assert [s.phase for s in decision.states] == ["Ready"] * 3


def test_missing_pod_is_created_with_its_configmap_first():
    decision = decide(keep=["p-0"], retire=[], pods={}, nodes={}, configmaps_current={},
                      wanted_hash=HASH, failover=Failover(), now=NOW)
    assert decision.configmaps == ("p-0",)
    assert [c.member for c in decision.creates] == ["p-0"]
    assert decision.creates[0].event.reason == "CreatedPod"
    assert decision.creates[0].kind is PodActionKind.CREATE


def test_failed_or_evicted_pod_is_deleted_by_uid_and_not_recreated_in_the_same_cycle():
    decision = run([pod("p-0"), pod("p-1", phase="Failed", reason="Evicted", ready=False), pod("p-2")])
    assert decision.deletes == (
        DeletePod("p-1", "uid-p-1", "ReplacingPod", PodActionKind.REPLACE, force=False),)
    assert not decision.creates
    assert "was evicted" in decision.deletes[0].event.message


def test_terminating_pod_on_a_live_node_is_waited_for():
    decision = run([pod("p-0"), pod("p-1", ready=False, deleting=True, deletion_since=NOW - 5), pod("p-2")])
    assert decision.writes == 0
    assert decision.states[1].phase == "Terminating"


def test_crash_loop_is_replaced_only_after_some_restarts():
    early = run([pod("p-0"), pod("p-1", ready=False, crash_looping=True, restarts=1), pod("p-2")])
    assert not early.deletes
    late = run([pod("p-0"), pod("p-1", ready=False, crash_looping=True, restarts=5), pod("p-2")])
    assert [d.member for d in late.deletes] == ["p-1"]
    assert [(d.reason, d.kind) for d in late.deletes] == [("ReplacingPod", PodActionKind.REPLACE)]


def test_pending_pod_is_replaced_after_the_timeout_and_a_wakeup_is_asked_before():
    failover = Failover(pod_pending_timeout_seconds=300)
    young = pod("p-1", phase="Pending", ready=False, node_name=None, created=NOW - 100)
    decision = run([pod("p-0"), young, pod("p-2")], failover=failover)
    assert not decision.deletes and decision.wake_after == 200
    old = pod("p-1", phase="Pending", ready=False, node_name=None, created=NOW - 301)
    assert [(d.reason, d.kind) for d in run([pod("p-0"), old, pod("p-2")], failover=failover).deletes] == [
        ("ReplacingPod", PodActionKind.REPLACE)]


def test_pod_on_an_unreachable_node_is_deleted_gracefully_first():
    lost = pod("p-1", ready=False, node_name="k2")
    decision = run([pod("p-0"), lost, pod("p-2")],
                   nodes={"k1": NodeView("k1"), "k2": NodeView("k2", reachable=False, unreachable_since=NOW - 10)})
    assert decision.deletes == (
        DeletePod("p-1", "uid-p-1", "NodeUnreachable", PodActionKind.REPLACE, force=False),)


def fenced(mode, *, out_of_service=False, since=NOW - 60, force_after=None, now=NOW):
    stuck = pod("p-1", ready=False, node_name="k2", deleting=True, deletion_since=since)
    node = NodeView("k2", reachable=False, unreachable_since=since, out_of_service=out_of_service)
    return run([pod("p-0"), stuck, pod("p-2")], nodes={"k1": NodeView("k1"), "k2": node}, now=now,
               failover=Failover(fencing=Fencing(mode=mode, force_after_seconds=force_after)))


def test_fencing_wait_never_forgets_the_pod():
    for later in (0, 3600, 86400 * 30):
        decision = fenced("Wait", out_of_service=True, force_after=1, now=NOW + later)
        assert decision.writes == 0
        assert decision.states[1].phase == "Fencing"


def test_fencing_out_of_service_taint_forces_only_with_the_taint():
    assert fenced("OutOfServiceTaint").writes == 0
    decision = fenced("OutOfServiceTaint", out_of_service=True)
    assert decision.deletes == (DeletePod("p-1", "uid-p-1", "FencedPod", PodActionKind.FENCE, force=True),)
    assert not decision.creates


def test_fencing_force_after_waits_n_seconds_from_the_node_loss():
    early = fenced("ForceAfter", force_after=120, since=NOW - 60)
    assert early.writes == 0 and early.wake_after == 60
    late = fenced("ForceAfter", force_after=120, since=NOW - 121)
    assert late.deletes == (DeletePod("p-1", "uid-p-1", "FencedPod", PodActionKind.FENCE, force=True),)


def test_rolling_restarts_one_stale_member_at_a_time():
    stale = [pod(m, config_hash="old") for m in ("p-0", "p-1", "p-2")]
    decision = run(stale)
    assert [d.member for d in decision.deletes] == ["p-0"]
    assert (decision.deletes[0].reason, decision.deletes[0].kind) == ("RollingUpdate", PodActionKind.ROLL)
    # p-0 restarted with the new hash but is not Ready yet: nobody else goes.
    waiting = run([pod("p-0", ready=False), stale[1], stale[2]])
    assert waiting.writes == 0
    # p-0 Ready again: next one.
    assert [d.member for d in run([pod("p-0"), stale[1], stale[2]]).deletes] == ["p-1"]


def test_rolling_takes_a_stale_member_that_is_not_ready_first_and_waits_for_creations():
    decision = run([pod("p-0", config_hash="old"), pod("p-1", config_hash="old", ready=False), pod("p-2")])
    assert [d.member for d in decision.deletes] == ["p-1"]
    assert run([pod("p-0", config_hash="old"), pod("p-1")]).deletes == ()  # p-2 being created


def test_scale_down_deletes_retired_pods_then_their_configmaps():
    decision = run(healthy(), keep=("p-0", "p-1"), retire=("p-2",))
    assert [(d.member, d.reason, d.kind) for d in decision.deletes] == [
        ("p-2", "ScalingDown", PodActionKind.SCALE_DOWN)]
    assert decision.configmap_deletes == ()
    gone = run(healthy()[:2], keep=("p-0", "p-1"), retire=("p-2",))
    assert gone.configmap_deletes == ("p-2",)


def test_a_fenced_member_has_its_pod_stopped_and_none_created_until_unfenced():
    """`kubectl ics fence p-2` (spec.fencedMembers): its pod is deleted gracefully, no pod is
    created for it while it stays fenced, its ConfigMap (its identity) stays; unfenced, it is
    a kept member again and gets its pod."""
    decision = decide(keep=["p-0", "p-1"], retire=[], pods={p.member: p for p in healthy()},
                      nodes={"k1": NodeView("k1")}, configmaps_current={"p-0": True, "p-1": True},
                      wanted_hash=HASH, failover=Failover(), now=NOW, fenced=["p-2"])
    assert [(d.member, d.reason, d.kind, d.force) for d in decision.deletes] == [
        ("p-2", "StoppingFencedMember", PodActionKind.STOP, False)]
    assert decision.creates == () and decision.configmap_deletes == ()
    assert {s.name: s.phase for s in decision.states}["p-2"] == "Fenced"
    gone = decide(keep=["p-0", "p-1"], retire=[], pods={p.member: p for p in healthy()[:2]},
                  nodes={}, configmaps_current={"p-0": True, "p-1": True}, wanted_hash=HASH,
                  failover=Failover(), now=NOW, fenced=["p-2"])
    assert gone.writes == 0 and {s.name: s.phase for s in gone.states}["p-2"] == "Fenced"
    unfenced = run(healthy()[:2])
    assert [c.member for c in unfenced.creates] == ["p-2"]


pod_states = st.builds(
    PodView,
    name=st.just(""), member=st.sampled_from(["p-0", "p-1", "p-2"]), uid=st.text(min_size=1, max_size=3),
    phase=st.sampled_from(["Pending", "Running", "Failed", "Succeeded"]),
    ready=st.booleans(), created=st.floats(NOW - 1000, NOW), deleting=st.booleans(),
    deletion_since=st.floats(NOW - 1000, NOW), node_name=st.sampled_from([None, "k1", "k2"]),
    crash_looping=st.booleans(), restarts=st.integers(0, 9), config_hash=st.sampled_from(["h0", "x"]),
)


@given(st.lists(pod_states, max_size=3, unique_by=lambda p: p.member),
       st.sampled_from(["Wait", "OutOfServiceTaint", "ForceAfter"]), st.booleans(), st.booleans())
def test_never_two_live_pods_with_one_identity(pods, mode, reachable, out_of_service):
    nodes = {"k1": NodeView("k1"), "k2": NodeView("k2", reachable=reachable, unreachable_since=NOW - 500,
                                                   out_of_service=out_of_service)}
    failover = Failover(fencing=Fencing(mode=mode, force_after_seconds=100))
    decision = run(pods, nodes=nodes, failover=failover)
    existing = {p.member: p for p in pods}
    # A pod is created only where no pod object carries the identity...
    assert not {c.member for c in decision.creates} & set(existing)
    # ...and forgotten without the kubelet's word only where the fencing mode allows it.
    for delete in decision.deletes:
        victim = existing[delete.member]
        assert delete.uid == victim.uid
        assert delete.force == (delete.kind is PodActionKind.FENCE)  # only fencing forgets a pod
        if delete.force:
            assert victim.deleting and victim.node_name == "k2" and not reachable
            assert mode != "Wait"
            assert mode != "OutOfServiceTaint" or out_of_service
    # At most one member is taken down for a roll per cycle.
    assert sum(d.reason == "RollingUpdate" for d in decision.deletes) <= 1


def test_readiness_keeps_since_across_pod_replacement():
    lost_at = NOW - 50
    previous = model.Member("p-1", ready=False, since=lost_at)
    replacement = pod("p-1", ready=False, ready_since=NOW - 2, uid="new")
    assert member_readiness("p-1", replacement, previous, NOW) == replace(previous, kubernetes_node="k1")
    assert member_readiness("p-1", None, previous, NOW) == previous


def test_readiness_transitions_take_the_pod_time():
    was_ready = model.Member("p-1", ready=True, since=NOW - 1000)
    lost = member_readiness("p-1", pod("p-1", ready=False, ready_since=NOW - 7), was_ready, NOW)
    assert lost == model.Member("p-1", ready=False, since=NOW - 7, kubernetes_node="k1")
    gone = member_readiness("p-1", None, was_ready, NOW)
    assert gone == model.Member("p-1", ready=False, since=NOW)
    back = member_readiness("p-1", pod("p-1", ready=True, ready_since=NOW - 1), lost, NOW)
    assert back == model.Member("p-1", ready=True, since=NOW - 1, kubernetes_node="k1")
    terminating = member_readiness("p-1", pod("p-1", ready=True, deleting=True), back, NOW)
    assert not terminating.ready
    assert member_readiness("p-9", pod("p-1", ready=False), None, NOW).since is None


def test_read_pod_and_node_from_api_objects():
    raw_pod = {
        "metadata": {"name": "p-1", "uid": "u", "labels": {"ironicshards.io/member": "p-1"},
                     "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:01:00Z",
                     "annotations": {"ironicshards.io/config-hash": "abc"}},
        "spec": {"nodeName": "k1"},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:30Z"}],
            "containerStatuses": [{"restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    }
    view = read_pod(raw_pod)
    assert view.ready and view.deleting and view.crash_looping and view.restarts == 4
    assert view.deletion_since - view.created == 60 and view.ready_since - view.created == 30
    assert view.config_hash == "abc" and view.node_name == "k1"
    node = read_node({"metadata": {"name": "k2"}, "spec": {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
        {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not node.reachable and node.out_of_service and node.unreachable_since == view.created
    assert read_node({"metadata": {"name": "k1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}).reachable
