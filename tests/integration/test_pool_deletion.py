"""Deleting a pool, or the CRD, needs no operator (docs/operating.md, Upgrade).

A pool carries no finalizer, so with the operator stopped or uninstalled a `kubectl delete`
of the pool completes at once, and the API server's garbage collector removes the member
pods and ConfigMaps (owner references). Pools made by an earlier version carry the finalizer
`ironicshards.io/operator`: the upgraded operator removes it, and only it.

Each test starts a pool the way an earlier version left it (the old finalizer, next to a
finalizer of someone else that must survive), runs the real operator until it has removed
the old finalizer and runs the members, stops the operator, and then deletes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, get_pool, pool_manifest, ready_members, settle,
)

pytestmark = pytest.mark.integration

LEGACY_FINALIZER = "ironicshards.io/operator"
OTHER_FINALIZER = "example.com/backup"  # someone else's: the operator must leave it alone
MEMBERS = ["rack-d-0", "rack-d-1"]


def pool_objects(api: KubeAPI, namespace: str) -> list[str]:
    """The member pods and ConfigMaps of pool rack-d that exist (terminating ones included)."""
    selector = "ironicshards.io/pool=rack-d"
    return sorted(f"{kind}/{item['metadata']['name']}"
                  for kind in ("pods", "configmaps")
                  for item in api.client.get(f"/api/v1/namespaces/{namespace}/{kind}",
                                             labelSelector=selector)["items"])


def pool_left_by_an_old_version(api: KubeAPI, namespace: str, ironic: IronicService,
                                tmp_path: Path) -> str:
    """A running pool that an earlier version created (old finalizer), taken over by this
    operator, which is then stopped; returns the pool's path."""
    resource_class = unique_resource_class("deletion")
    seed_nodes_directly_in_db(ironic, 4, resource_class=resource_class)
    create_secrets(api.client, namespace, ironic.clouds_yaml)
    manifest = pool_manifest("rack-d", cloud_name=ironic.cloud_name, resource_class=resource_class,
                             replicas=len(MEMBERS))
    manifest["metadata"]["finalizers"] = [OTHER_FINALIZER, LEGACY_FINALIZER]
    api.client.create(POOLS.format(ns=namespace), manifest)
    path = f"{POOLS.format(ns=namespace)}/rack-d"

    with OperatorProcess(api, namespace, "op-upgraded", tmp_path) as operator:
        api.wait_for(lambda: ready_members(api.client, namespace, "rack-d") == MEMBERS, timeout=60,
                     what=f"members {MEMBERS} Ready")
        api.wait_for(lambda: get_pool(api.client, namespace, "rack-d")["metadata"].get("finalizers")
                     == [OTHER_FINALIZER], timeout=30,
                     what=f"the operator to remove {LEGACY_FINALIZER} (only it) from the pool")
        settle(3)  # a few more cycles: the finalizer does not come back
        assert get_pool(api.client, namespace, "rack-d")["metadata"]["finalizers"] == [OTHER_FINALIZER]
        assert operator.stop() == 0, operator.log()  # SIGTERM: the pool loops end, kopf exits
    api.client.patch(path, {"metadata": {"finalizers": None}})  # its owner lets go of it
    assert pool_objects(api, namespace) == sorted(
        [f"pods/{m}" for m in MEMBERS] + [f"configmaps/{m}-config" for m in MEMBERS])
    return path


def test_a_pool_is_deleted_with_its_members_while_no_operator_runs(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    install_crd(kube_api.client)
    path = pool_left_by_an_old_version(kube_api, kube_namespace, ironic_service, tmp_path)

    kube_api.client.delete(path)
    kube_api.wait_for(lambda: not kube_api.client.exists(path), timeout=10, what="the pool to be deleted")
    kube_api.wait_for(lambda: not pool_objects(kube_api, kube_namespace), timeout=60,
                      what="the garbage collector to remove the pool's pods and ConfigMaps")


def test_deleting_the_crd_deletes_pools_and_members_while_no_operator_runs(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService,
        tmp_path: Path) -> None:
    if kube_api.plane is None:
        pytest.skip("deletes the CRD, and with it every pool of the cluster: the test bed's own control plane only")
    install_crd(kube_api.client)
    path = pool_left_by_an_old_version(kube_api, kube_namespace, ironic_service, tmp_path)
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ironiccomputeshards.ironicshards.io"
    try:
        kube_api.client.delete(crd_path)
        kube_api.wait_for(lambda: not kube_api.client.exists(crd_path), timeout=30,
                          what="the CRD to be deleted (its pools first)")
        kube_api.wait_for(lambda: not pool_objects(kube_api, kube_namespace), timeout=60,
                          what="the garbage collector to remove the pools' pods and ConfigMaps")
    finally:
        install_crd(kube_api.client)  # for the tests that follow on this API server
    assert not kube_api.client.exists(path)
