"""Leader election decisions on a coordination.k8s.io/v1 Lease (core/lease.py, pure)."""

from ironic_shard_operator.controller.runner import Settings
from ironic_shard_operator.core.lease import LEASE_DURATION, Observed, claim


def lease(holder, renew="2026-01-01T00:00:00.000000Z", transitions=0, rv="7"):
    return {"metadata": {"name": "ironic-shard-operator", "namespace": "ops", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10, "renewTime": renew,
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


def test_settings_from_environment():
    settings = Settings.from_env({"WATCH_NAMESPACES": " nova, ops ,", "POD_NAMESPACE": "ops",
                                  "POD_NAME": "op-1", "METRICS_PORT": "0"})
    assert settings.namespaces == ("nova", "ops")
    assert (settings.pod_namespace, settings.identity) == ("ops", "op-1")
    assert (settings.metrics_port, settings.health_port) == (0, 8081)
    assert Settings.from_env({}).namespaces == ()
