"""The operator's /metrics, read the way Prometheus reads them: scraped text, parsed."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ironic_shard_operator.adapters import ironic
from ironic_shard_operator.controller.metrics import IRONIC_ERROR_KINDS, OperatorMetrics, classify_ironic_error
from ironic_shard_operator.core.model import (
    Member, MemberLoad, Move, NodeCounts, Observation, Plan, PoolSpec,
)
from ironic_shard_operator.core.pool_signals import signals


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition text."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def samples(metrics: OperatorMetrics) -> dict:
    return scrape(generate_latest(metrics.registry).decode())


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def cycle(members: dict[str, tuple[int, int]], ready: set[str], *, moves: int = 0,
          unassigned: int = 0, desired: int | None = None, now: float = 1000.0
          ) -> tuple[Observation, Plan]:
    """An observation and plan for a pool 'rack-a' whose members own (nodes, pinned)."""
    observation = Observation(
        spec=PoolSpec(name="rack-a", replicas=len(members)),
        members=tuple(Member(name=m, ready=m in ready) for m in members),
        nodes=(), now=now)
    plan = Plan(
        desired_replicas=len(members) if desired is None else desired,
        ring_members=tuple(sorted(ready)),
        moves=tuple(Move(f"n{i}", None, "rack-a-0") for i in range(moves)),
        members_to_create=(), members_to_delete=(),
        scale_down_blocked={},
        loads=tuple(MemberLoad(m, n, p, m in ready) for m, (n, p) in members.items()),
        counts=NodeCounts(total=sum(n for n, _ in members.values()), unassigned=unassigned,
                          pending_moves=moves))
    return observation, plan


def test_a_cycle_is_visible_per_pool_and_member():
    metrics = OperatorMetrics(clock=lambda: 1012.5)
    observation, plan = cycle({"rack-a-0": (10, 2), "rack-a-1": (7, 0)}, ready={"rack-a-0"},
                              moves=3, unassigned=4, desired=3)
    metrics.record_cycle("rack-a", observation, plan, duration_seconds=0.7)

    found = samples(metrics)
    assert value(found, "ironic_shard_members_in_ring", pool="rack-a") == 1
    assert value(found, "ironic_shard_member_nodes", pool="rack-a", member="rack-a-0") == 10
    assert value(found, "ironic_shard_member_nodes", pool="rack-a", member="rack-a-1") == 7
    assert value(found, "ironic_shard_member_pinned_nodes", pool="rack-a", member="rack-a-0") == 2
    assert value(found, "ironic_shard_unassigned_nodes", pool="rack-a") == 4
    assert value(found, "ironic_shard_pending_moves", pool="rack-a") == 3
    assert value(found, "ironic_shard_reconcile_duration_seconds_count", pool="rack-a") == 1
    assert value(found, "ironic_shard_reconcile_duration_seconds_bucket",
                 pool="rack-a", le="1.0") == 1
    assert value(found, "ironic_shard_reconcile_duration_seconds_bucket",
                 pool="rack-a", le="0.5") == 0
    assert value(found, "ironic_shard_seconds_since_last_ironic_observation",
                 pool="rack-a") == pytest.approx(12.5)


def test_seconds_since_last_observation_keeps_growing_while_no_cycle_completes():
    now = [1000.0]
    metrics = OperatorMetrics(clock=lambda: now[0])
    metrics.record_cycle("rack-a", *cycle({"rack-a-0": (1, 0)}, {"rack-a-0"}, now=1000.0), 0.1)
    now[0] = 1300.0
    metrics.record_ironic_error("rack-a", ironic.IronicUnavailable("Ironic at http://ironic:6385 refused"))
    found = samples(metrics)
    assert value(found, "ironic_shard_seconds_since_last_ironic_observation", pool="rack-a") == 300
    assert value(found, "ironic_shard_ironic_api_errors_total", pool="rack-a",
                 kind="unavailable") == 1


def test_a_removed_member_and_a_deleted_pool_leave_no_stale_series():
    metrics = OperatorMetrics()
    metrics.record_cycle("rack-a", *cycle({"rack-a-0": (5, 0), "rack-a-1": (5, 1)},
                                          {"rack-a-0", "rack-a-1"}), 0.1)
    metrics.record_cycle("rack-a", *cycle({"rack-a-0": (10, 1)}, {"rack-a-0"}), 0.1)
    found = samples(metrics)
    assert ("ironic_shard_member_nodes", (("member", "rack-a-1"), ("pool", "rack-a"))) not in found
    assert value(found, "ironic_shard_member_nodes", pool="rack-a", member="rack-a-0") == 10

    metrics.record_moves("rack-a", 2)
    metrics.record_fence("rack-a", "OutOfServiceTaint")
    metrics.record_ironic_error("rack-a", "unavailable")
    metrics.record_status("rack-a", signals(BODY, {"readyReplicas": 1, "conditions": [DEGRADED],
                                                   "nova": {"forcedDown": ["rack-a-1"]}}))
    metrics.record_refusals("rack-a", ["PodCreateRefused"])
    metrics.forget_pool("rack-a")
    leftover = [key for key in samples(metrics) if ("pool", "rack-a") in key[1]]
    assert leftover == []


def test_counters_count_what_the_operator_did():
    metrics = OperatorMetrics()
    metrics.record_moves("rack-a", 5)
    metrics.record_moves("rack-a", 2)
    metrics.record_replacement("rack-a")
    metrics.record_fence("rack-a", "ForceAfter")
    metrics.record_fence("rack-a", "ForceAfter")
    metrics.set_leader(True)
    found = samples(metrics)
    assert value(found, "ironic_shard_node_moves_total", pool="rack-a") == 7
    assert value(found, "ironic_shard_member_replacements_total", pool="rack-a") == 1
    assert value(found, "ironic_shard_member_fences_total", pool="rack-a", mode="ForceAfter") == 2
    assert value(found, "ironic_shard_leader") == 1


def test_unknown_labels_are_refused_with_the_allowed_values():
    metrics = OperatorMetrics()
    with pytest.raises(ValueError, match="OutOfServiceTaint"):
        metrics.record_fence("rack-a", "Sometimes")
    with pytest.raises(ValueError, match="unavailable"):
        metrics.record_ironic_error("rack-a", "cosmic-rays")
    with pytest.raises(ValueError, match="PodCreateRefused"):
        metrics.record_refusals("rack-a", ["the API server refused to create Pod rack-a-0"])


@pytest.mark.parametrize(("error", "kind"), [
    (ironic.IronicUnavailable("Ironic at http://ironic:6385 did not answer"), "unavailable"),
    (ironic.IronicKeystoneUnavailable("the token request to Keystone at http://ks:5000 failed"),
     "keystone_unavailable"),
    (ironic.IronicAuthError("Ironic refused the credentials"), "auth"),
    (ironic.IronicEndpointError("http://nova:8774 is not the Ironic API root"), "endpoint"),
    (ironic.IronicTooOld("Ironic offers API 1.80 at most"), "too_old"),
    (ironic.IronicConfigError("no cloud 'ironic' in clouds.yaml"), "config"),
    (ironic.IronicRequestError("Ironic refused to list nodes: 400"), "request"),
    (RuntimeError("what"), "other"),
])
def test_an_ironic_error_is_counted_by_the_adapter_class_that_raised_it(error, kind):
    """The kind is the adapter's own exception class, never `other` for one of them."""
    assert classify_ironic_error(error) == kind
    metrics = OperatorMetrics()
    metrics.record_ironic_error("ns/rack-a", error)
    assert value(samples(metrics), "ironic_shard_ironic_api_errors_total", pool="ns/rack-a", kind=kind) == 1
    assert set(IRONIC_ERROR_KINDS) == {cls.kind for cls in vars(ironic).values()
                                       if isinstance(cls, type) and issubclass(cls, ironic.IronicError)}


BODY = {"metadata": {"name": "rack-a", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": 3}}
DEGRADED = {"type": "Degraded", "status": "True", "reason": "IronicUnavailable", "message": "no answer"}
CREATED = 1767225600.0  # 2026-01-01T00:00:00Z


def test_a_pool_that_never_saw_ironic_has_its_gauges_from_its_first_status():
    """Keystone unresolvable: no observation ever completes, yet the pool shows what it should
    have, what it has, its conditions, and the time since its creation as time unobserved."""
    metrics = OperatorMetrics(clock=lambda: CREATED + 400)
    # the cycle's Ironic side fails before its status is written
    metrics.record_ironic_error("ns/rack-a", ironic.IronicKeystoneUnavailable("keystone.invalid: unknown host"))
    ready = {"type": "Ready", "status": "False", "reason": "IronicUnavailable", "message": "no answer"}
    metrics.record_status("ns/rack-a", signals(BODY, {"readyReplicas": 0, "conditions": [ready, DEGRADED]}))
    found = samples(metrics)
    assert value(found, "ironic_shard_members_desired", pool="ns/rack-a") == 3
    assert value(found, "ironic_shard_members_ready", pool="ns/rack-a") == 0
    assert value(found, "ironic_shard_seconds_since_last_ironic_observation", pool="ns/rack-a") == 400
    assert value(found, "ironic_shard_condition", pool="ns/rack-a", condition="Ready", reason="IronicUnavailable") == 0
    assert value(found, "ironic_shard_condition", pool="ns/rack-a", condition="Degraded",
                 reason="IronicUnavailable") == 1
    # every counter of a known label set is there at 0, so increase() sees the first event
    assert value(found, "ironic_shard_ironic_api_errors_total", pool="ns/rack-a", kind="keystone_unavailable") == 1
    assert value(found, "ironic_shard_ironic_api_errors_total", pool="ns/rack-a", kind="other") == 0
    assert value(found, "ironic_shard_member_fences_total", pool="ns/rack-a", mode="ForceAfter") == 0
    assert value(found, "ironic_shard_kube_api_refusals_total", pool="ns/rack-a", reason="SecretReadRefused") == 0
    # no node gauge: nothing is known of the nodes, and 0 would be a lie
    assert not [key for key in found if key[0] == "ironic_shard_managed_nodes"]


def test_an_autoscaled_pool_wants_its_minimum_until_a_plan_says_more_and_an_observation_resets_the_clock():
    now = [CREATED + 100]
    metrics = OperatorMetrics(clock=lambda: now[0])
    body = dict(BODY, spec={"autoscale": {"minReplicas": 2, "maxReplicas": 9}})
    metrics.record_status("ns/rack-a", signals(body, {}))
    assert value(samples(metrics), "ironic_shard_members_desired", pool="ns/rack-a") == 2
    metrics.record_cycle("ns/rack-a", *cycle({"rack-a-0": (1, 0)}, {"rack-a-0"}, now=CREATED + 90), 0.1)
    metrics.record_status("ns/rack-a", signals(body, {"desiredReplicas": 5}))  # the plan's count wins
    found = samples(metrics)
    assert value(found, "ironic_shard_members_desired", pool="ns/rack-a") == 5
    assert value(found, "ironic_shard_seconds_since_last_ironic_observation", pool="ns/rack-a") == 10


def test_a_restarted_operator_counts_unobserved_time_from_the_last_full_listing_the_status_records():
    metrics = OperatorMetrics(clock=lambda: CREATED + 7200)
    metrics.record_status("ns/rack-a", signals(BODY, {"nodes": {"observedAt": "2026-01-01T01:59:00Z"}}))
    assert value(samples(metrics), "ironic_shard_seconds_since_last_ironic_observation", pool="ns/rack-a") == 60


def test_a_condition_whose_reason_changes_leaves_no_series_behind_and_nova_and_handover_show_once_known():
    metrics = OperatorMetrics()
    metrics.record_status("ns/rack-a", signals(BODY, {"conditions": [DEGRADED]}))
    found = samples(metrics)
    assert not [key for key in found if key[0] in ("ironic_shard_nova_forced_down_members",
                                                   "ironic_shard_handover_nodes_in_flight")]
    fixed = {"type": "Degraded", "status": "False", "reason": "AllMembersReady", "message": ""}
    metrics.record_status("ns/rack-a", signals(BODY, {
        "conditions": [fixed], "nova": {"forcedDown": ["rack-a-1", "rack-a-2"]},
        "handover": {"sources": [{"member": "rack-a-1", "inFlight": 3}, {"member": "rack-a-2", "inFlight": 1}]}}))
    found = samples(metrics)
    conditions = {dict(key[1])["reason"]: v for key, v in found.items() if key[0] == "ironic_shard_condition"}
    assert conditions == {"AllMembersReady": 0}
    assert value(found, "ironic_shard_nova_forced_down_members", pool="ns/rack-a") == 2
    assert value(found, "ironic_shard_handover_nodes_in_flight", pool="ns/rack-a") == 4


def test_refused_requests_and_lease_transitions_are_counted():
    metrics = OperatorMetrics()
    metrics.record_refusals("ns/rack-a", ["PodCreateRefused", "PodCreateRefused", "SecretReadRefused"])
    metrics.set_lease_transitions(4)
    found = samples(metrics)
    assert value(found, "ironic_shard_kube_api_refusals_total", pool="ns/rack-a", reason="PodCreateRefused") == 2
    assert value(found, "ironic_shard_kube_api_refusals_total", pool="ns/rack-a", reason="SecretReadRefused") == 1
    assert value(found, "ironic_shard_lease_transitions") == 4


def test_two_instances_do_not_share_series():
    first, second = OperatorMetrics(), OperatorMetrics()
    first.record_moves("rack-a", 1)
    assert ("ironic_shard_node_moves_total", (("pool", "rack-a"),)) not in samples(second)


def test_serve_exposes_metrics_over_http():
    metrics = OperatorMetrics()
    metrics.record_moves("rack-a", 3)
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert value(scrape(text), "ironic_shard_node_moves_total", pool="rack-a") == 3


def test_serve_on_a_taken_port_says_which():
    metrics = OperatorMetrics()
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        with pytest.raises(OSError, match=f"127.0.0.1:{server.server_port}"):
            OperatorMetrics().serve(server.server_port, addr="127.0.0.1")
    finally:
        server.shutdown()
        server.server_close()


def test_nova_failures_are_counted_by_kind_and_forgotten_with_the_pool():
    metrics = OperatorMetrics()
    metrics.record_nova_error("rack-a", "unavailable")
    metrics.record_nova_error("rack-a", "unavailable")
    metrics.record_nova_error("rack-a", "disabled")
    found = samples(metrics)
    assert value(found, "ironic_shard_nova_api_errors_total", pool="rack-a", kind="unavailable") == 2
    assert value(found, "ironic_shard_nova_api_errors_total", pool="rack-a", kind="disabled") == 1
    with pytest.raises(ValueError):
        metrics.record_nova_error("rack-a", "NovaUnavailable: http://nova:8774 refused")
    metrics.forget_pool("rack-a")
    assert not [key for key in samples(metrics) if key[0] == "ironic_shard_nova_api_errors_total"]


def test_handovers_are_counted_by_trigger_and_failed_jobs_by_reason_and_forgotten_with_the_pool():
    metrics = OperatorMetrics()
    metrics.record_handover_nodes("rack-a", "ScaleDown", 5)
    metrics.record_handover_nodes("rack-a", "Failure", 2)
    metrics.record_handover_job_failure("rack-a", "database")
    metrics.record_handover_durations("rack-a", "Failure", [12.0, 45.0])
    found = samples(metrics)
    assert value(found, "ironic_shard_handover_duration_seconds_count", pool="rack-a", trigger="Failure") == 2
    assert value(found, "ironic_shard_handover_duration_seconds_bucket", pool="rack-a", trigger="Failure",
                 le="20.0") == 1
    assert value(found, "ironic_shard_handover_nodes_total", pool="rack-a", trigger="ScaleDown") == 5
    assert value(found, "ironic_shard_handover_nodes_total", pool="rack-a", trigger="Failure") == 2
    assert value(found, "ironic_shard_handover_job_failures_total", pool="rack-a", reason="database") == 1
    with pytest.raises(ValueError):
        metrics.record_handover_nodes("rack-a", "rack-a-2", 1)
    with pytest.raises(ValueError):
        metrics.record_handover_durations("rack-a", "rack-a-2", [1.0])
    with pytest.raises(ValueError):
        metrics.record_handover_job_failure("rack-a", "Can't connect to MySQL server on 10.0.0.5")
    metrics.forget_pool("rack-a")
    assert not [key for key in samples(metrics) if key[0].startswith("ironic_shard_handover")]


def test_full_listings_are_counted_by_reason_and_forgotten_with_the_pool():
    """How often and why a pool lists Ironic in full (~100 requests at 100,000 nodes), with
    the reason a fixed word: a cycle's sentence (numbers, shard values) is refused as a label."""
    metrics = OperatorMetrics()
    for reason in ("no_listing_yet", "resync_timer", "resync_timer", "unlisted_source"):
        metrics.record_full_listing("rack-a", reason)
    metrics.record_full_listing("rack-b", "summary_refused")
    found = samples(metrics)
    assert value(found, "ironic_shard_full_listings_total", pool="rack-a", reason="resync_timer") == 2
    assert value(found, "ironic_shard_full_listings_total", pool="rack-a", reason="no_listing_yet") == 1
    assert value(found, "ironic_shard_full_listings_total", pool="rack-a", reason="unlisted_source") == 1
    assert value(found, "ironic_shard_full_listings_total", pool="rack-b", reason="summary_refused") == 1
    with pytest.raises(ValueError, match="resync_timer"):
        metrics.record_full_listing("rack-a", "the last full listing is older than fullResyncSeconds (600s)")
    metrics.forget_pool("rack-a")
    left = [dict(key[1]) for key in samples(metrics) if key[0] == "ironic_shard_full_listings_total"]
    assert left == [{"pool": "rack-b", "reason": "summary_refused"}]
