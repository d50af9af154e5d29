"""Status and conditions: counts, members, ring generation, stable transitions, events."""

from ironic_shard_operator.core import autoscale, model, nova_policy, planner
from ironic_shard_operator.core.pods import MemberState
from ironic_shard_operator.core.pool_memory import autoscale_history_of, since_of
from ironic_shard_operator.core.status import CycleFacts, build_status, moves_event

NOW = 1_800_000_000.0


def plan(**kw):
    values = dict(
        desired_replicas=2, ring_members=("p-0", "p-1"), moves=(), members_to_create=(),
        members_to_delete=(), scale_down_blocked={},
        loads=(model.MemberLoad("p-0", 50, 5, True), model.MemberLoad("p-1", 50, 3, True)),
        counts=model.NodeCounts(total=100, free=92, pinned=8),
    )
    values.update(kw)
    return model.Plan(**values)


def facts(**kw):
    values = dict(
        generation=3,
        members=(model.Member("p-0", True, NOW - 100), model.Member("p-1", True, NOW - 90)),
        states=(MemberState("p-0", "Ready"), MemberState("p-1", "Ready")),
        plan=plan(), pods_existing=2, pods_ready=2, selector="ironicshards.io/pool=p", now=NOW,
    )
    values.update(kw)
    return CycleFacts(**values)


def conditions(status):
    return {c["type"]: c for c in status["conditions"]}


def test_converged_pool_reports_ready_and_counts():
    status, events = build_status(facts(), None)
    assert status["observedGeneration"] == 3
    assert status["replicas"] == 2 and status["readyReplicas"] == 2
    assert status["selector"] == "ironicshards.io/pool=p"
    assert status["nodes"] == {"total": 100, "free": 92, "pinned": 8, "unassigned": 0,
                               "pendingMoves": 0, "misplaced": 0}
    assert status["members"][0] == {"name": "p-0", "phase": "Ready", "ready": True, "nodes": 50,
                                    "pinnedNodes": 5, "since": "2027-01-15T07:58:20Z"}
    assert status["ring"]["members"] == ["p-0", "p-1"] and status["ring"]["generation"] == 1
    cond = conditions(status)
    assert cond["Ready"]["status"] == "True"
    assert cond["Progressing"]["status"] == "False" and cond["Degraded"]["status"] == "False"
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert [e.reason for e in events] == ["Ready"]


def test_same_facts_give_an_identical_status_and_no_event():
    first, _ = build_status(facts(), None)
    again, events = build_status(facts(now=NOW + 30), first)
    assert again == first
    assert events == []


def test_transition_time_moves_only_with_the_status_and_ring_generation_with_membership():
    first, _ = build_status(facts(), None)
    moving = plan(ring_members=("p-0",), moves=(model.Move("n1", "p-1", "p-0"),),
                  counts=model.NodeCounts(total=100, free=92, pinned=8, pending_moves=1))
    second, _ = build_status(facts(plan=moving, now=NOW + 60), first)
    cond, before = conditions(second), conditions(first)
    assert cond["Progressing"]["status"] == "True" and cond["Progressing"]["reason"] == "MovingNodes"
    assert cond["Progressing"]["lastTransitionTime"] != before["Progressing"]["lastTransitionTime"]
    assert cond["Degraded"]["lastTransitionTime"] == before["Degraded"]["lastTransitionTime"]
    assert second["ring"]["generation"] == 2


def test_scale_down_blocked_names_members_and_counts_and_emits_once():
    blocked = plan(desired_replicas=1, scale_down_blocked={"p-1": 3})
    status, events = build_status(facts(plan=blocked), None)
    cond = conditions(status)["ScaleDownBlocked"]
    assert cond["status"] == "True" and cond["reason"] == "PinnedNodes"
    assert "p-1 owns 3 pinned nodes" in cond["message"]
    assert [e.type for e in events if e.reason == "ScaleDownBlocked"] == ["Warning"]
    _, again = build_status(facts(plan=blocked), status)
    assert again == []
    _, cleared = build_status(facts(), status)
    assert [e.reason for e in cleared] == ["ScaleDownBlockedCleared"]


def test_conflict_blocks_ready_and_progress():
    status, events = build_status(facts(plan=None, conflict="overlaps nova/rack-b (created first)"), None)
    cond = conditions(status)
    assert cond["Conflict"]["status"] == "True" and "rack-b" in cond["Conflict"]["message"]
    assert cond["Ready"]["status"] == "False" and cond["Ready"]["reason"] == "Conflict"
    assert any(e.reason == "Conflict" and e.type == "Warning" for e in events)


def test_failing_member_degrades_and_paused_stops_progress():
    states = (MemberState("p-0", "Ready"), MemberState("p-1", "Fencing", "node k2 unreachable"))
    status, _ = build_status(facts(states=states, pods_ready=1, paused=True), None)
    cond = conditions(status)
    assert cond["Degraded"]["status"] == "True" and "p-1: Fencing" in cond["Degraded"]["message"]
    assert cond["Progressing"]["reason"] == "Paused"
    assert cond["Ready"]["reason"] == "MembersNotReady" and cond["Ready"]["message"] == "1/2 members ready"


def test_error_keeps_last_ownership_report():
    first, _ = build_status(facts(), None)
    status, _ = build_status(facts(plan=None, error="Ironic unreachable: connection refused",
                                   error_reason="IronicUnavailable"), first)
    assert status["nodes"] == first["nodes"] and status["members"] == first["members"]
    assert conditions(status)["Degraded"]["reason"] == "IronicUnavailable"


def test_move_batch_event_and_since_round_trip():
    moves = (model.Move("a", None, "p-0"), model.Move("b", "p-1", "p-0"), model.Move("c", None, "p-1"))
    event = moves_event(moves, 3)
    assert event.message == "Set the Ironic shard of 3 of 3 nodes (2 to p-0, 1 to p-1)"
    assert moves_event(moves, 0) is None
    status, _ = build_status(facts(), None)
    assert since_of(status)["p-0"] == model.Member("p-0", True, NOW - 100)


def nova_section(state="Enabled", message="Nova lists every node under the compute of its owner",
                 waiting=(), **found):
    return nova_policy.status_section(state, message, nova_policy.AuditReport(
        findings=tuple(nova_policy.Finding(kind, f"n{i}", f"{kind} {i}")
                       for kind, n in found.items() for i in range(n)),
        waiting=dict(w.split(": ", 1) for w in waiting)))


def test_nova_findings_degrade_the_pool_until_an_audit_clears_them():
    findings = nova_section(message="Nova audit: 1 misplaced: node n0 has an instance on p-1", misplaced=1)
    status, events = build_status(facts(nova=findings), None)
    assert status["nova"] == findings
    degraded = conditions(status)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NovaOutOfSync")
    assert "node n0 has an instance on p-1" in degraded["message"]
    assert "Degraded" in [e.reason for e in events]

    kept, events = build_status(facts(nova=None, now=NOW + 5), status)  # Nova not asked this cycle
    assert kept == status and events == []

    clear, _ = build_status(facts(nova=nova_section(), now=NOW + 60), kept)
    assert conditions(clear)["Degraded"]["status"] == "False"


def test_a_member_whose_host_is_not_mapped_degrades_the_pool_before_the_audits_findings():
    mapping = {"members": [
        {"member": "p-0", "service": "s-0", "state": "Mapped", "message": "Nova lists nodes under p-0"},
        {"member": "p-1", "service": "s-1", "state": "NotMapped", "reason": "HostNotMapped",
         "message": "Nova says host p-1 is not mapped to any cell: map it"}]}
    findings = nova_section(message="Nova audit: 1 unmapped: member p-1 ...", unmapped=1)
    status, events = build_status(facts(nova=findings, host_mapping=mapping), None)
    degraded = conditions(status)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "HostNotMapped") and "p-1" in degraded["message"]
    assert status["hostMapping"] == mapping and "Degraded" in [e.reason for e in events]

    kept, events = build_status(facts(nova=None, host_mapping=None, now=NOW + 5), status)  # not decided
    assert kept == status and events == []

    mapped = {"members": [dict(mapping["members"][0]), {**mapping["members"][1], "state": "Mapped"}]}
    clear, _ = build_status(facts(nova=nova_section(), host_mapping=mapped, now=NOW + 60), kept)
    assert conditions(clear)["Degraded"]["status"] == "False"


def test_nova_unavailable_degrades_and_disabled_does_not():
    status, _ = build_status(facts(nova=nova_section("Unavailable", "HTTP 503")), None)
    degraded = conditions(status)["Degraded"]
    assert (degraded["reason"], "HTTP 503" in degraded["message"]) == ("NovaUnavailable", True)
    status, _ = build_status(facts(nova=nova_section("Disabled", "the cloud has no compute endpoint")), None)
    assert conditions(status)["Degraded"]["status"] == "False"


def test_nova_refusing_to_delete_a_removed_members_service_blocks_scale_down():
    refused = f"p-2: {nova_policy.REFUSED}: Unable to delete compute service that is hosting instances"
    status, events = build_status(facts(nova=nova_section(waiting=[refused])), None)
    blocked = conditions(status)["ScaleDownBlocked"]
    assert (blocked["status"], blocked["reason"]) == ("True", "NovaServiceInUse")
    assert "p-2" in blocked["message"] and "hosting instances" in blocked["message"]
    assert "ScaleDownBlocked" in [e.reason for e in events]
    passing = "p-2: Nova still lists 3 of the pool's nodes under p-2"  # transient: not a block
    status, _ = build_status(facts(nova=nova_section(waiting=[passing])), None)
    assert conditions(status)["ScaleDownBlocked"]["status"] == "False"


# --- the member count and why (status.desiredReplicas, status.desiredReason) ----------------


def autoscaled(nodes, minimum=1, maximum=10, per_member=500):
    decision = autoscale.decide(model.Autoscale(minimum, maximum, per_member), nodes)
    return plan(desired_replicas=decision.desired, autoscale=decision,
                counts=model.NodeCounts(total=nodes, free=nodes))


def test_desired_replicas_and_why_are_written_for_replicas_and_autoscale():
    status, _ = build_status(facts(), None)
    assert (status["desiredReplicas"], status["desiredReason"]) == (2, "spec.replicas: 2")

    status, _ = build_status(facts(plan=plan(desired_replicas=1, retiring=("p-0",))), None)
    assert status["desiredReason"] == "spec.replicas: 1; retiring p-0"  # kubectl ics retire p-0 shows here

    status, _ = build_status(facts(plan=autoscaled(1234)), None)
    assert status["desiredReplicas"] == 3
    assert status["desiredReason"] == "autoscale: 1,234 nodes / 500 per member -> 3 (min 1, max 10)"

    status, _ = build_status(facts(plan=autoscaled(6000)), None)
    assert status["desiredReplicas"] == 10
    assert status["desiredReason"] == "autoscale: 6,000 nodes / 500 per member -> 12, capped at maxReplicas 10"

    status, _ = build_status(facts(plan=autoscaled(0, minimum=2)), None)
    assert status["desiredReplicas"] == 2
    assert status["desiredReason"] == "autoscale: 0 nodes / 500 per member -> 0, raised to minReplicas 2"


def test_desired_replicas_are_kept_while_ironic_cannot_be_read():
    first, _ = build_status(facts(plan=autoscaled(1234)), None)
    status, _ = build_status(facts(plan=None, error="Ironic unreachable", error_reason="IronicUnavailable"), first)
    assert (status["desiredReplicas"], status["desiredReason"]) == (first["desiredReplicas"], first["desiredReason"])


def test_a_held_autoscale_count_says_until_when_and_its_history_survives_a_restart():
    rule = model.Autoscale(1, 10, 500, 300)
    earlier = autoscale.decide(rule, 2400, model.AutoscaleHistory(), NOW - 100.5)
    held = autoscale.decide(rule, 1234, earlier.history, NOW)
    status, _ = build_status(facts(plan=plan(desired_replicas=held.desired, autoscale=held)), None)
    assert status["desiredReplicas"] == 5
    assert status["desiredReason"] == (
        "autoscale: 1,234 nodes / 500 per member -> 3 (min 1, max 10); held at 5 until 2027-01-15T08:05:00Z: "
        "scale-down waits until the lower count has held for 300s (scaleDownStabilizationSeconds)")
    assert status["autoscale"] == {"recommendation": 3,
                                   "peaks": [{"replicas": 5, "lastWanted": "2027-01-15T08:00:00Z"}]}
    assert autoscale_history_of(status) == held.history  # what a restarted operator reads back
    assert autoscale_history_of({}) == model.AutoscaleHistory()
    assert autoscale_history_of({"autoscale": {"peaks": "garbage"}}) == model.AutoscaleHistory()


def test_autoscale_history_times_round_up_so_a_round_trip_never_shortens_the_window():
    rule = model.Autoscale(1, 10, 500, 300)
    earlier = autoscale.decide(rule, 2400, model.AutoscaleHistory(), NOW - 10)
    held = autoscale.decide(rule, 1234, earlier.history, NOW + 0.25)
    status, _ = build_status(facts(plan=plan(desired_replicas=held.desired, autoscale=held), now=NOW + 0.25), None)
    (peak,) = autoscale_history_of(status).peaks
    assert peak.last_wanted == NOW + 1


def test_turning_autoscale_off_removes_its_history_once():
    decision = autoscale.decide(model.Autoscale(), 1234)
    with_autoscale, _ = build_status(facts(plan=plan(desired_replicas=3, autoscale=decision)), None)
    without, _ = build_status(facts(), with_autoscale)
    assert without["autoscale"] is None  # a merge patch removes the field
    again, _ = build_status(facts(), without)
    assert again == without
    assert "autoscale" not in build_status(facts(), None)[0]


# --- no member in the ring: scaled to zero, starting, lost ------------------------------------


def no_ring(**kw):
    return plan(ring_members=(), loads=(), counts=model.NodeCounts(total=20, free=15, pinned=5), **kw)


def test_replicas_zero_is_not_ready_and_says_what_it_means_for_the_nodes():
    status, events = build_status(facts(plan=no_ring(desired_replicas=0), members=(), states=(),
                                        pods_existing=0, pods_ready=0), None)
    cond = conditions(status)
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("False", "ScaledToZero")
    assert cond["Ready"]["message"] == (
        "no member is wanted (spec.replicas: 0): no nova-compute serves the pool's 20 Ironic nodes, 5 of them "
        "pinned (an instance or work in progress); they keep their shard and are served again once members run")
    assert (cond["Degraded"]["status"], cond["Degraded"]["reason"]) == ("False", "ScaledToZero")
    assert cond["Progressing"]["message"] == "nothing to do: no member is wanted (spec.replicas: 0)"
    assert [e for e in events if e.type == "Warning"] == []


def test_a_pool_without_nodes_at_zero_members_is_ready():
    empty = plan(desired_replicas=0, ring_members=(), loads=(), counts=model.NodeCounts())
    status, _ = build_status(facts(plan=empty, members=(), states=(), pods_existing=0, pods_ready=0), None)
    assert conditions(status)["Ready"]["status"] == "True"


def starting(now, created, phases=("Creating", "Starting", "Starting")):
    names = [f"p-{i}" for i in range(len(phases))]
    return facts(plan=no_ring(desired_replicas=len(phases)), now=now, pods_ready=0, pods_existing=2,
                 members=tuple(model.Member(n, False, None) for n in names),
                 states=tuple(MemberState(n, phase, "pod is Pending") for n, phase in zip(names, phases)),
                 oldest_pod_created=created, start_timeout_seconds=300.0)


def test_the_first_start_of_a_pool_posts_no_warning_within_the_start_time():
    first, events = build_status(starting(NOW, None, phases=("Creating", "Creating", "Creating")), None)
    degraded = conditions(first)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("False", "MembersStarting")
    assert [e for e in events if e.type == "Warning"] == []
    status = first
    for now in (NOW + 5, NOW + 60, NOW + 299):
        status, events = build_status(starting(now, NOW + 1), status)
        assert conditions(status)["Degraded"]["status"] == "False"
        assert [e for e in events if e.type == "Warning"] == []
    ready = facts(now=NOW + 300)  # a member became Ready: the pool converges with no Warning on the way
    _, events = build_status(ready, status)
    assert [e.type for e in events] == ["Normal"]


def test_a_first_start_that_takes_too_long_is_a_warning():
    status, _ = build_status(starting(NOW, NOW - 10), None)
    late, events = build_status(starting(NOW + 291, NOW - 10), status)
    degraded = conditions(late)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NoReadyMember")
    assert "no member has become Ready within failover.podPendingTimeoutSeconds, 300s" in degraded["message"]
    assert [(e.reason, e.type) for e in events] == [("Degraded", "Warning")]


def test_members_that_were_ready_and_are_lost_are_a_warning_at_once():
    lost = facts(plan=no_ring(), pods_ready=0, now=NOW,
                 members=(model.Member("p-0", False, NOW - 5), model.Member("p-1", False, NOW - 5)),
                 states=(MemberState("p-0", "Starting", "pod is Pending"), MemberState("p-1", "Starting")),
                 oldest_pod_created=NOW - 3)
    status, events = build_status(lost, build_status(facts(), None)[0])
    degraded = conditions(status)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NoReadyMember")
    assert degraded["message"] == "no member is ready: free nodes stay with their current owner"
    assert ("Degraded", "Warning") in [(e.reason, e.type) for e in events]


def test_a_member_failing_during_the_first_start_is_a_warning():
    failing = starting(NOW, NOW - 10, phases=("Starting", "Replacing"))
    status, events = build_status(failing, None)
    assert conditions(status)["Degraded"]["reason"] == "MemberFailing"
    assert ("Degraded", "Warning") in [(e.reason, e.type) for e in events]


def test_ready_members_nova_cannot_schedule_to_yet_are_neither_no_ready_member_nor_all_ready() -> None:
    """A pool whose Ready members all wait for their host mapping: Ready False MembersAwaitingNova,
    Degraded False with the same reason while the mapping runs, HostNotMapped when Nova says the
    host is not mapped and nobody maps it (the fix is what the user must read, not NoReadyMember)."""
    members = (model.Member("p-0", True, 0.0), model.Member("p-1", True, 0.0))
    waiting = planner.plan(model.Observation(model.PoolSpec("p", replicas=2), members,
                                             (model.Node("n-1"), model.Node("n-2")), NOW,
                                             awaiting_nova=frozenset({"p-0", "p-1"})))
    assert waiting.ring_members == () and waiting.awaiting_nova == ("p-0", "p-1")

    def with_mapping(state: str, **entry: str) -> dict:
        section = {"members": [{"member": m, "service": f"id-{m}", "state": state, "message": f"host {m}", **entry}
                               for m in ("p-0", "p-1")]}
        return conditions(build_status(facts(plan=waiting, members=members, host_mapping=section), None)[0])

    found = with_mapping("Mapping")
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "MembersAwaitingNova")
    assert (found["Degraded"]["status"], found["Degraded"]["reason"]) == ("False", "MembersAwaitingNova")
    found = with_mapping("NotMapped", reason="HostNotMapped")
    assert (found["Degraded"]["status"], found["Degraded"]["reason"]) == ("True", "HostNotMapped")
    assert "p-0" in found["Degraded"]["message"]
