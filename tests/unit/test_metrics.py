"""The operator's /metrics, read the way Prometheus reads them: scraped text, parsed."""

from __future__ import annotations

import urllib.request

import pytest
import requests
from keystoneauth1 import exceptions as ksa_exceptions
from openstack import exceptions as sdk_exceptions
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ironic_shard_operator.controller.metrics import IRONIC_ERROR_KINDS, OperatorMetrics, classify_ironic_error
from ironic_shard_operator.core.model import (
    Member, MemberLoad, Move, NodeCounts, Observation, Plan, PoolSpec,
)


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
    assert value(found, "ironic_shard_members_desired", pool="rack-a") == 3
    assert value(found, "ironic_shard_members_ready", pool="rack-a") == 1
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
    metrics.record_ironic_error("rack-a", ksa_exceptions.ConnectFailure("refused"))
    found = samples(metrics)
    assert value(found, "ironic_shard_seconds_since_last_ironic_observation", pool="rack-a") == 300
    assert value(found, "ironic_shard_ironic_api_errors_total", pool="rack-a",
                 kind="connection") == 1


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
    metrics.record_ironic_error("rack-a", "timeout")
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
    with pytest.raises(ValueError, match="timeout"):
        metrics.record_ironic_error("rack-a", "cosmic-rays")


def http_error(cls: type[sdk_exceptions.HttpException], status: int) -> Exception:
    """The exception openstacksdk raises for an HTTP answer with `status`."""
    response = requests.Response()
    response.status_code = status
    return cls(response=response)


@pytest.mark.parametrize(("error", "kind"), [
    (ksa_exceptions.ConnectTimeout("slow"), "timeout"),
    (ksa_exceptions.ConnectFailure("refused"), "connection"),
    (http_error(sdk_exceptions.ConflictException, 409), "conflict"),
    (http_error(sdk_exceptions.NotFoundException, 404), "not_found"),
    (http_error(sdk_exceptions.ForbiddenException, 403), "auth"),
    (http_error(sdk_exceptions.BadRequestException, 400), "client"),
    (http_error(sdk_exceptions.HttpException, 503), "server"),
    (TimeoutError(), "timeout"),
    (RuntimeError("what"), "other"),
])
def test_ironic_errors_are_classified_into_few_kinds(error, kind):
    assert classify_ironic_error(error) == kind
    assert kind in IRONIC_ERROR_KINDS


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
