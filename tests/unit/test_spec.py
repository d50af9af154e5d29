"""Reading an IronicComputeShard body into typed settings, and refusing bad ones clearly."""

import pytest

from ironic_shard_operator.core.claims import cloud_identity
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.spec import JOB_GRACE_SECONDS, MEMBER_GRACE_SECONDS, InvalidSpec, read_pool


def body(**spec):
    base = {
        "image": "quay.io/example/nova-compute:2024.1",
        "novaConfig": {"secretRef": {"name": "nova-conf"}},
        "cloud": {"secretRef": {"name": "ironic-cloud"}},
        "replicas": 3,
    }
    base.update(spec)
    return {
        "apiVersion": "ironicshards.io/v1alpha1",
        "kind": "IronicComputeShard",
        "metadata": {"name": "rack-a", "namespace": "nova", "uid": "u-1", "generation": 4,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": base,
    }


def test_defaults_fill_every_optional_field():
    pool = read_pool(body())
    assert pool.key == "nova/rack-a"
    assert pool.generation == 4
    assert pool.spec.replicas == 3 and pool.spec.autoscale is None
    assert pool.nova_config.key == "nova.conf"
    assert pool.cloud.key == "clouds.yaml" and pool.cloud_name == "ironic"
    assert pool.spec.rebalance_after_seconds == 120
    assert pool.spec.rebalance_after_seconds == 120
    assert pool.failover.pod_pending_timeout_seconds == 300
    assert pool.failover.fencing.mode == "Wait"
    assert pool.ironic.poll_interval_seconds == 30
    assert pool.ironic.max_concurrent_writes == 4
    assert not pool.paused


def test_autoscale_replaces_replicas():
    pool = read_pool(body(replicas=None, autoscale={"minReplicas": 2, "maxReplicas": 8, "maxNodesPerMember": 300}))
    assert pool.spec.autoscale.max_nodes_per_member == 300
    assert pool.spec.autoscale.min_replicas == 2
    assert pool.spec.autoscale.scale_down_stabilization_seconds == 300


def test_autoscale_scale_down_stabilization_is_read():
    pool = read_pool(body(replicas=None, autoscale={"scaleDownStabilizationSeconds": 0}))
    assert pool.spec.autoscale.scale_down_stabilization_seconds == 0


def test_rebalance_grace_reaches_the_planner_spec():
    pool = read_pool(body(failover={"rebalanceAfterSeconds": 7}))
    assert pool.spec.rebalance_after_seconds == 7


@pytest.mark.parametrize(("spec", "field"), [
    ({"image": ""}, "spec.image"),
    ({"image": "   "}, "spec.image"),
    ({"image": " quay.io/example/nova-compute:2024.1"}, "spec.image"),
    ({"replicas": -1}, "spec.replicas"),
    ({"replicas": None}, "spec"),
    ({"autoscale": {}}, "spec"),
    ({"replicas": "3"}, "spec.replicas"),
    ({"replicas": None, "autoscale": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscale"),
    ({"replicas": None, "autoscale": {"scaleDownStabilizationSeconds": -1}},
     "spec.autoscale.scaleDownStabilizationSeconds"),
    ({"failover": {"fencing": {"mode": "Shoot"}}}, "spec.failover.fencing.mode"),
    ({"failover": {"fencing": {"mode": "ForceAfter"}}}, "spec.failover.fencing.forceAfterSeconds"),
    ({"failover": {"fencing": {"mode": "Wait", "forceAfterSeconds": 5}}}, "spec.failover.fencing.forceAfterSeconds"),
    ({"ironic": {"pollIntervalSeconds": 0}}, "spec.ironic.pollIntervalSeconds"),
    ({"novaConfig": None}, "spec.novaConfig.secretRef"),
    ({"cloud": {"secretRef": {}}}, "spec.cloud.secretRef.name"),
    ({"command": "nova-compute"}, "spec.command"),
    ({"paused": "yes"}, "spec.paused"),
    ({"imagePullPolicy": "Sometimes"}, "spec.imagePullPolicy"),
    ({"retireMembers": ["rack-b-1"]}, "spec.retireMembers"),
    ({"retireMembers": "rack-a-1"}, "spec.retireMembers"),
    ({"fencedMembers": ["rack-a-x"]}, "spec.fencedMembers"),
    ({"imagePullSecrets": [{}]}, "spec.imagePullSecrets[0].name"),
    ({"volumes": [{"name": "member-conf", "emptyDir": {}}]}, "spec.volumes[0].name"),
    ({"volumes": [{"name": "a"}, {"name": "a"}]}, "spec.volumes[1].name"),
    ({"volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}, "spec.volumeMounts[0].name"),
    ({"volumes": [{"name": "ca"}], "volumeMounts": [{"name": "ca", "mountPath": "/etc/nova/member.conf"}]},
     "spec.volumeMounts[0].mountPath"),
    ({"topologySpreadConstraints": {"maxSkew": 1}}, "spec.topologySpreadConstraints"),
    ({"podSecurityContext": "restricted"}, "spec.podSecurityContext"),
    ({"terminationGracePeriodSeconds": 0}, "spec.terminationGracePeriodSeconds"),
    ({"terminationGracePeriodSeconds": 3601}, "spec.terminationGracePeriodSeconds"),
    ({"terminationGracePeriodSeconds": 30.5}, "spec.terminationGracePeriodSeconds"),
    ({"handover": {"novaManageConfig": {"secretRef": {"name": "m"}}, "jobTerminationGracePeriodSeconds": 0}},
     "spec.handover.jobTerminationGracePeriodSeconds"),
    ({"handover": {"novaManageConfig": {"secretRef": {"name": "m"}}, "jobTerminationGracePeriodSeconds": "60"}},
     "spec.handover.jobTerminationGracePeriodSeconds"),
])
def test_bad_values_name_the_field(spec, field):
    with pytest.raises(InvalidSpec) as caught:
        read_pool(body(**spec))
    assert str(caught.value).startswith(field + ":")


def test_termination_grace_periods_default_to_the_measured_values_and_are_read():
    """Members get MEMBER_GRACE_SECONDS and handover Jobs JOB_GRACE_SECONDS unless the spec says
    otherwise (how they were chosen: docs/design.md, "Termination grace periods")."""
    handover = {"novaManageConfig": {"secretRef": {"name": "m"}}}
    pool = read_pool(body(handover=handover))
    assert (pool.pod.grace_seconds, pool.handover.job_grace_seconds) == (MEMBER_GRACE_SECONDS, JOB_GRACE_SECONDS)
    pool = read_pool(body(terminationGracePeriodSeconds=400,
                          handover={**handover, "jobTerminationGracePeriodSeconds": 45}))
    assert (pool.pod.grace_seconds, pool.handover.job_grace_seconds) == (400, 45)


def test_members_to_retire_first_and_fenced_members_are_read():
    pool = read_pool(body(retireMembers=["rack-a-2", "rack-a-0"], fencedMembers=["rack-a-1"]))
    assert pool.spec.retire_first == ("rack-a-2", "rack-a-0")  # the planner's, in the order given
    assert pool.fenced_members == ("rack-a-1",)
    assert read_pool(body()).spec.retire_first == () and read_pool(body()).fenced_members == ()


def test_bad_pool_name_is_refused():
    bad = body()
    bad["metadata"]["name"] = "Rack_A"
    with pytest.raises(InvalidSpec, match="metadata.name"):
        read_pool(bad)


def test_selectors_overlap_unless_a_set_field_differs():
    assert Selector().overlaps(Selector(conductor_group="a"))
    assert Selector("a", None).overlaps(Selector("a", "gold"))
    assert not Selector("a", None).overlaps(Selector("b", None))
    assert not Selector("a", "gold").overlaps(Selector("a", "silver"))


def test_cloud_identity_ignores_credentials_but_not_the_endpoint():
    one = "clouds:\n  ironic:\n    auth: {endpoint: 'http://127.0.0.1:6385/'}\n    auth_type: none\n"
    same = "clouds:\n  ironic:\n    auth: {endpoint: 'http://127.0.0.1:6385'}\n    auth_type: http_basic\n"
    other = "clouds:\n  ironic:\n    auth: {endpoint: 'http://10.0.0.9:6385'}\n"
    assert cloud_identity(one, "ironic") == cloud_identity(same, "ironic")
    assert cloud_identity(one, "ironic") != cloud_identity(other, "ironic")
    with pytest.raises(InvalidSpec, match="no cloud named 'other'"):
        cloud_identity(one, "other")


def test_the_later_of_two_overlapping_pools_is_the_one_refused():
    from ironic_shard_operator.core.claims import PoolClaim, earlier_overlap

    a = PoolClaim("nova/a", "2026-01-01T00:00:00Z", Selector(conductor_group="g1"), cloud="c1")
    b = PoolClaim("nova/b", "2026-01-02T00:00:00Z", Selector(), cloud="c1")
    other_cloud = PoolClaim("nova/c", "2026-01-03T00:00:00Z", Selector(), cloud="c2")
    disjoint = PoolClaim("nova/d", "2026-01-04T00:00:00Z", Selector(conductor_group="g2"), cloud="c1")
    claims = [a, b, other_cloud, disjoint]
    assert earlier_overlap(a, claims) is None
    assert earlier_overlap(b, claims) == a
    assert earlier_overlap(other_cloud, claims) is None
    assert earlier_overlap(disjoint, claims) == b  # b selects every conductor group
    unknown = PoolClaim("nova/e", "2026-01-05T00:00:00Z", Selector(conductor_group="g1"), cloud=None)
    assert earlier_overlap(unknown, claims) == a
