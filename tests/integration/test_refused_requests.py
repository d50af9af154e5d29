"""Requests the API server refuses, as a real one refuses them: a pod create over a ResourceQuota
(403 "exceeded quota"), a pod with an invalid pass-through probe or affinity (422 Invalid), a
Secret read the operator's RBAC does not allow (403). Each becomes the pool's Degraded condition
(reason PodCreateRefused / SecretReadRefused, naming the object and quoting the API's message)
and one Warning Event, and the Ironic side of the cycle goes on: the free nodes of members that
are not Ready move to Ready ones. Before, the refusal raised out of the cycle before anything
was reported or written to Ironic: the pool stopped, silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, member_pods, patch_spec, pool_manifest, posted_events,
    ready_members, settle,
)
from tests.support.operator_rbac import install_identity

pytestmark = pytest.mark.integration

GRACE = 3  # failover.rebalanceAfterSeconds: a member not Ready this long loses its free nodes
NODES = 12


@pytest.fixture
def operator(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path):
    install_crd(kube_api.client)
    process = OperatorProcess(kube_api, kube_namespace, "op-a", tmp_path).start()
    yield process
    pools = POOLS.format(ns=kube_namespace)
    try:
        for item in kube_api.client.get(pools)["items"]:
            kube_api.client.delete(f"{pools}/{item['metadata']['name']}")
    finally:
        process.stop()
        print(f"----- operator -----\n{process.log()[-20000:]}")


def start_pool(kube_api: KubeAPI, ns: str, ironic: IronicService, name: str, replicas: int) -> str:
    resource_class = unique_resource_class(name)
    seed_nodes_directly_in_db(ironic, NODES, resource_class=resource_class)
    create_secrets(kube_api.client, ns, ironic.clouds_yaml)
    kube_api.client.create(POOLS.format(ns=ns), pool_manifest(
        name, cloud_name=ironic.cloud_name, resource_class=resource_class, replicas=replicas,
        failover={"rebalanceAfterSeconds": GRACE}))
    return resource_class


def degraded_by(kube_api: KubeAPI, ns: str, name: str, reason: str, text: str) -> dict[str, Any]:
    return kube_api.wait_for(
        lambda: (c := condition(get_pool(kube_api.client, ns, name), "Degraded")) and c["status"] == "True"
        and c["reason"] == reason and text in c["message"] and c, timeout=45, what=f"Degraded {reason}: {text}")


def owners(ironic: IronicService, resource_class: str) -> set[str | None]:
    return set(shards_of(ironic, resource_class).values())


def test_a_pod_create_over_quota_is_reported_and_ironic_goes_on(
        kube_api: KubeAPI, kube_namespace: str, kubelet, operator: OperatorProcess,
        ironic_service: IronicService) -> None:
    client, ns, name = kube_api.client, kube_namespace, "rack-q"
    quotas = f"/api/v1/namespaces/{ns}/resourcequotas"
    client.create(quotas, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods-quota"},
                           "spec": {"hard": {"pods": "2"}}})
    resource_class = start_pool(kube_api, ns, ironic_service, name, replicas=3)

    refused = degraded_by(kube_api, ns, name, "PodCreateRefused", f"refused to create Pod {name}-2")
    assert refused["message"].startswith(
        f'the API server refused to create Pod {name}-2 (HTTP 403): pods "{name}-2" is forbidden: '
        "exceeded quota: pods-quota, requested: pods=1, used: pods=2, limited: pods=2")
    assert condition(get_pool(client, ns, name), "Ready")["reason"] == "PodCreateRefused"
    # The members that could be created run, and every node goes to them.
    kube_api.wait_for(lambda: ready_members(client, ns, name) == [f"{name}-0", f"{name}-1"] or None,
                      timeout=30, what="the two members the quota allows")
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {f"{name}-0", f"{name}-1"} or None,
                      timeout=45, what="every node owned by a Ready member")
    settle(6)  # refused again every cycle: still one Event
    warnings = events(client, ns, "PodCreateRefused")
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert f"refused to create Pod {name}-2 (HTTP 403)" in warnings[0]["message"]

    client.delete(f"{quotas}/pods-quota")
    kube_api.wait_for(lambda: ready_members(client, ns, name) == [f"{name}-{i}" for i in range(3)] or None,
                      timeout=45, what="the third member once the quota is gone")
    kube_api.wait_for(lambda: condition(get_pool(client, ns, name), "Degraded").get("status") == "False" or None,
                      timeout=45, what="Degraded cleared")


def test_an_invalid_pass_through_probe_or_affinity_is_reported_and_ironic_goes_on(
        kube_api: KubeAPI, kube_namespace: str, kubelet, operator: OperatorProcess,
        ironic_service: IronicService) -> None:
    client, ns, name = kube_api.client, kube_namespace, "rack-p"
    resource_class = start_pool(kube_api, ns, ironic_service, name, replicas=2)
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {f"{name}-0", f"{name}-1"} or None,
                      timeout=60, what="nodes spread over two Ready members")

    # A probe the API refuses (httpGet needs a port): the roll deletes one member's pod, and
    # its new pod is refused.
    patch_spec(client, ns, name, {"readinessProbe": {"httpGet": {"path": "/healthz"}}})
    refused = degraded_by(kube_api, ns, name, "PodCreateRefused", "refused to create Pod")
    victim = refused["message"].split("refused to create Pod ", 1)[1].split(" ", 1)[0]
    assert victim in (f"{name}-0", f"{name}-1")
    assert (f'(HTTP 422): Pod "{victim}" is invalid: spec.containers[0].readinessProbe.httpGet.port'
            in refused["message"])
    survivor = ({f"{name}-0", f"{name}-1"} - {victim}).pop()
    # The Ironic side goes on: past the grace, the member without a pod loses its free nodes.
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {survivor} or None,
                      timeout=45, what=f"every node owned by {survivor}")
    assert [e["type"] for e in posted_events(client, ns, "PodCreateRefused")] == ["Warning"]

    # A valid probe, but an affinity the API refuses (a match expression needs an operator).
    patch_spec(client, ns, name, {"readinessProbe": None, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]}}}})
    refused = degraded_by(kube_api, ns, name, "PodCreateRefused", "nodeAffinity")
    assert (f'(HTTP 422): Pod "{victim}" is invalid: spec.affinity.nodeAffinity.'
            "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator"
            in refused["message"])
    assert not member_pods(client, ns, name).get(victim)

    patch_spec(client, ns, name, {"affinity": None})
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {f"{name}-0", f"{name}-1"} or None,
                      timeout=90, what="both members back, with nodes")
    kube_api.wait_for(lambda: condition(get_pool(client, ns, name), "Degraded").get("status") == "False" or None,
                      timeout=45, what="Degraded cleared")


def test_a_forbidden_secret_read_is_reported_and_ironic_goes_on(
        kube_api: KubeAPI, kube_namespace: str, kubelet, operator: OperatorProcess,
        ironic_service: IronicService) -> None:
    client, ns, name = kube_api.client, kube_namespace, "rack-s"
    resource_class = start_pool(kube_api, ns, ironic_service, name, replicas=2)
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {f"{name}-0", f"{name}-1"} or None,
                      timeout=60, what="nodes spread over two Ready members")

    # The chart installed with rbac.secretNames naming only the clouds.yaml Secret.
    install_identity(client, ns, "rbac.secretNames={openstack-cloud}")
    refused = degraded_by(kube_api, ns, name, "SecretReadRefused", "refused to read Secret nova-config")
    assert refused["message"].startswith(
        'the API server refused to read Secret nova-config (HTTP 403): secrets "nova-config" is forbidden: '
        f'User "system:serviceaccount:{ns}:{operator.service_account}" cannot get resource "secrets"')
    assert "member pods are left as they are" in refused["message"]
    assert [e["type"] for e in posted_events(client, ns, "SecretReadRefused")] == ["Warning"]

    # A member fails: its pod is left as it is (its replacement needs the nova.conf), but the
    # Ironic side re-owns its free nodes past the grace.
    failed_uid = kubelet.fail(f"{name}-1")["metadata"]["uid"]
    kube_api.wait_for(lambda: owners(ironic_service, resource_class) == {f"{name}-0"} or None,
                      timeout=45, what=f"every node owned by {name}-0")
    assert member_pods(client, ns, name)[f"{name}-1"]["metadata"]["uid"] == failed_uid

    install_identity(client, ns)  # the chart's default: every Secret of the namespace
    kube_api.wait_for(lambda: ready_members(client, ns, name) == [f"{name}-0", f"{name}-1"] or None,
                      timeout=60, what="the failed member replaced")
    kube_api.wait_for(lambda: condition(get_pool(client, ns, name), "Degraded").get("status") == "False" or None,
                      timeout=45, what="Degraded cleared")
