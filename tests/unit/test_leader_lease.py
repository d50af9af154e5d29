"""Leader election decisions on a coordination.k8s.io/v1 Lease (core/lease.py, pure)."""

from ironic_shard_operator.controller.runner import Settings
from ironic_shard_operator.core.lease import (
    LEASE_DURATION, RENEW_DEADLINE, RETRY, WRITE_MARGIN, Observed, claim, may_write,
)


def lease(holder, renew="2026-01-01T00:00:00.000000Z", transitions=0, rv="7"):
    return {"metadata": {"name": "ironic-shard-operator", "namespace": "ops", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(LEASE_DURATION),
                     "renewTime": renew,
                     "leaseTransitions": transitions}}


def test_no_lease_is_created_for_me():
    wanted = claim(None, "a", Observed(), mono=0.0, wall=1_800_000_000.0)
    assert wanted["spec"]["holderIdentity"] == "a"
    assert wanted["spec"]["leaseTransitions"] == 0
    assert wanted["metadata"] == {"name": "ironic-shard-operator"}


def test_holder_renews_with_the_resource_version_it_read():
    wanted = claim(lease("a"), "a", Observed(), mono=0.0, wall=1_800_000_000.0)
    assert wanted["metadata"]["resourceVersion"] == "7"  # optimistic concurrency: 409 if stale
    assert wanted["spec"]["renewTime"] != "2026-01-01T00:00:00.000000Z"
    assert wanted["spec"]["leaseTransitions"] == 0


def test_standby_waits_a_full_lease_of_unchanged_record_on_its_own_clock():
    seen = Observed()
    # The record's timestamps are from another clock and may be far off: only changes count.
    assert claim(lease("a"), "b", seen, mono=100.0, wall=0.0) is None
    assert claim(lease("a"), "b", seen, mono=100.0 + LEASE_DURATION - 0.1, wall=0.0) is None
    # The holder renewed: the wait starts over.
    renewed = lease("a", renew="2026-01-01T00:00:08.000000Z")
    assert claim(renewed, "b", seen, mono=109.0, wall=0.0) is None
    assert claim(renewed, "b", seen, mono=109.0 + LEASE_DURATION - 0.1, wall=0.0) is None
    taken = claim(renewed, "b", seen, mono=109.0 + LEASE_DURATION + 0.1, wall=0.0)
    assert taken["spec"]["holderIdentity"] == "b"
    assert taken["spec"]["leaseTransitions"] == 1


def test_a_released_lease_is_taken_at_once():
    taken = claim(lease(""), "b", Observed(), mono=0.0, wall=0.0)
    assert taken["spec"]["holderIdentity"] == "b"


def test_the_holder_writes_only_within_its_renew_deadline():
    assert may_write(last_renewed=100.0, now=100.0)
    assert may_write(last_renewed=100.0, now=100.0 + RENEW_DEADLINE - 0.01)
    # A leader frozen past its deadline (SIGSTOP, a paused VM) wakes up unable to write.
    assert not may_write(last_renewed=100.0, now=100.0 + RENEW_DEADLINE)
    assert not may_write(last_renewed=100.0, now=100.0 + 3600.0)
    assert not may_write(last_renewed=None, now=100.0)  # never held
    assert not may_write(last_renewed=100.0, now=99.0)  # a clock that went back proves nothing


def test_no_instant_where_the_holder_may_write_and_a_standby_may_take_over():
    """The holder's renewal begins at 50 on its clock; the standby first sees it `seen_after`
    later; both clocks run at the same rate from the same origin here."""
    assert RENEW_DEADLINE + WRITE_MARGIN == LEASE_DURATION
    assert WRITE_MARGIN >= 2 * RETRY  # a write checked at the deadline has seconds to land
    for seen_after in (0.0, 0.3, 1.9):
        seen = Observed()
        assert claim(lease("a", renew="r1"), "b", seen, mono=50.0 + seen_after, wall=0.0) is None
        last_write = max(t / 10 for t in range(0, 1000) if may_write(50.0, t / 10))
        first_takeover = min(t / 10 for t in range(0, 1000)
                             if t / 10 >= 50.0 + seen_after
                             and claim(lease("a", renew="r1"), "b", seen, mono=t / 10, wall=0.0))
        assert first_takeover - last_write >= WRITE_MARGIN


def test_settings_from_environment():
    settings = Settings.from_env({"WATCH_NAMESPACES": " nova, ops ,", "POD_NAMESPACE": "ops",
                                  "POD_NAME": "op-1", "METRICS_PORT": "0"})
    assert settings.namespaces == ("nova", "ops")
    assert (settings.pod_namespace, settings.identity) == ("ops", "op-1")
    assert (settings.metrics_port, settings.health_port) == (0, 8081)
    assert Settings.from_env({}).namespaces == ()


def test_handover_and_repair_shard_writes_ask_the_lease_before_each_write():
    """Invariant 10 for the writes of pinned nodes' shards: the stop flag the
    Ironic adapter asks before each PATCH turns on the moment the Lease check fails, not once per
    handover step."""
    from ironic_shard_operator.controller.handover import HandoverWork

    holds = [True]
    stop = HandoverWork(kube=None, may_write=lambda: holds[0]).write_stop()
    assert not stop.is_set()
    holds[0] = False
    assert stop.is_set()
