"""Two pools named alike in two namespaces, on one cloud: their members would be the same Nova
compute hosts and Ironic shard keys (`<name>-<n>` is global to the cloud). The later pool is
refused with Conflict and writes nothing (no ConfigMap, no pod, no shard), even with selectors
that share no node; once the first is deleted, it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, get_pool, member_pods, pool_manifest, posted_events, settle,
)
from tests.support.operator_rbac import install_identity

pytestmark = pytest.mark.integration

POOL = "rack-a"


def test_a_namesake_in_another_namespace_on_the_same_cloud_is_refused(
        kube_api: KubeAPI, kube_namespace: str, kubelet, tmp_path: Path, ironic_service: IronicService) -> None:
    client, wait = kube_api.client, kube_api.wait_for
    east, west = kube_namespace, kube_api.create_namespace("west")
    install_crd(client)
    east_class, west_class = unique_resource_class("east"), unique_resource_class("west")
    seed_nodes_directly_in_db(ironic_service, 6, resource_class=east_class)
    seed_nodes_directly_in_db(ironic_service, 6, resource_class=west_class)
    for ns in (east, west):
        create_secrets(client, ns, ironic_service.clouds_yaml)
    # One operator watches both namespaces, with the chart's RBAC for both (start() installs
    # the identity of its own namespace again; the Roles in `west` stay).
    install_identity(client, east, f"watchNamespaces={{{east},{west}}}")
    operator = OperatorProcess(kube_api, east, "op-a", tmp_path, WATCH_NAMESPACES=f"{east},{west}")
    try:
        operator.start()
        client.create(POOLS.format(ns=east), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=east_class, replicas=2))
        wait(lambda: set(shards_of(ironic_service, east_class).values()) == {f"{POOL}-0", f"{POOL}-1"}
             or None, timeout=60, what="the first pool adopting its nodes")
        assert sorted(member_pods(client, east, POOL)) == [f"{POOL}-0", f"{POOL}-1"]

        # The namesake: another namespace, disjoint nodes, same cloud, created later.
        client.create(POOLS.format(ns=west), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=west_class, replicas=2))
        late = wait(lambda: (p := get_pool(client, west, POOL)) and
                    condition(p, "Conflict").get("status") == "True" and p,
                    timeout=30, what="Conflict on the later namesake")
        refused = condition(late, "Conflict")
        assert refused["reason"] == "SameName"
        assert refused["message"].startswith(f"pool {east}/{POOL} (created ")
        assert f"member identities {POOL}-<n> (the Nova compute hosts and Ironic shard keys)" in refused["message"]
        assert "global to the cloud" in refused["message"]
        assert condition(late, "Ready")["status"] == "False"
        assert [e["type"] for e in posted_events(client, west, "Conflict")] == ["Warning"]
        settle(6)  # more than a poll interval: it stays refused, and writes nothing
        assert not member_pods(client, west, POOL)
        assert not client.get(f"/api/v1/namespaces/{west}/configmaps",
                              labelSelector=f"ironicshards.io/pool={POOL}")["items"]
        assert set(shards_of(ironic_service, west_class).values()) == {None}
        assert condition(get_pool(client, east, POOL), "Conflict")["status"] == "False"

        # The first pool goes: the namesake is no longer refused and runs.
        client.delete(f"{POOLS.format(ns=east)}/{POOL}")
        wait(lambda: condition(get_pool(client, west, POOL), "Conflict").get("status") == "False" or None,
             timeout=60, what="the Conflict to clear")
        wait(lambda: sorted(member_pods(client, west, POOL)) == [f"{POOL}-0", f"{POOL}-1"] or None,
             timeout=30, what="the namesake's member pods")
        assert not operator.refused()
    finally:
        try:
            for ns in (east, west):
                for item in client.get(POOLS.format(ns=ns))["items"]:
                    client.delete(f"{POOLS.format(ns=ns)}/{item['metadata']['name']}")
        finally:
            operator.stop()
            print(f"----- operator -----\n{operator.log()[-20000:]}")
            kube_api.delete_namespace(west)
            kube_api.namespaces.remove(west)
