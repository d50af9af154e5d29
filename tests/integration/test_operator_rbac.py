"""The chart's RBAC is the operator's least privilege: the real operator, authenticated as the
chart's ServiceAccount and authorized by the chart's rendered Roles and ClusterRoles (as every
operator of the harness is), goes through everything it ever asks Kubernetes for, and then

- it was refused nothing (a verb the chart lacks would be a 403 here), and
- every (resource, verb) the chart grants was used by at least one request: the list of granted
  pairs that no request used must be empty.

One scenario test holds both checks, so the verdict does not depend on which other tests ran
or on how pytest-xdist spread them over processes (each has its own API server and record).
The real API server's audit log (testbed/audit_log.py) tells both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_rbac import is_handover_grant
from tests.support.operator_harness import (
    POOLS, OperatorProcess, get_pool, member_pods, patch_spec, pool_manifest, ready_members,
)

pytestmark = pytest.mark.integration

POOL = "least"
LEGACY_FINALIZER = "ironicshards.io/operator"  # put on pools by versions before 0.1 (handlers.py)


def test_the_chart_grants_the_operator_exactly_what_it_uses(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService, tmp_path: Path) -> None:
    if kube_api.audit is None:
        pytest.skip("reads the test bed API server's audit log")
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class("rbac")
    seed_nodes_directly_in_db(ironic_service, 12, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    configmaps = f"/api/v1/namespaces/{ns}/configmaps"
    # A pool an older version created, with its finalizer: the operator takes it off (a patch).
    manifest = pool_manifest(POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class,
                             replicas=2)
    manifest["metadata"]["finalizers"] = [LEGACY_FINALIZER]
    client.create(POOLS.format(ns=ns), manifest)

    operator = OperatorProcess(kube_api, ns, "op-a", tmp_path).start()
    try:
        # Start: the Lease, kopf's watches, pods and ConfigMaps created, Secrets read, status, Events.
        wait(lambda: ready_members(client, ns, POOL) == [f"{POOL}-0", f"{POOL}-1"], timeout=60,
             what="two Ready members")
        wait(lambda: set(shards_of(ironic_service, resource_class).values()) == {f"{POOL}-0", f"{POOL}-1"},
             timeout=60, what="the nodes adopted")
        wait(lambda: not get_pool(client, ns, POOL)["metadata"].get("finalizers"), timeout=30,
             what="the legacy finalizer removed")
        # A member fails: its node is read (fencing), the pod deleted and created again.
        old_uid = kubelet.fail(f"{POOL}-1")["metadata"]["uid"]
        wait(lambda: (p := member_pods(client, ns, POOL).get(f"{POOL}-1")) and p["metadata"]["uid"] != old_uid,
             timeout=30, what="the failed member replaced")
        # A member's ConfigMap edited by hand is put back (the existing ConfigMap is patched).
        written = client.get(f"{configmaps}/{POOL}-0-config")["data"]
        client.patch(f"{configmaps}/{POOL}-0-config", {"data": {key: "edited\n" for key in written}})
        wait(lambda: client.get(f"{configmaps}/{POOL}-0-config")["data"] == written, timeout=30,
             what="the member ConfigMap restored")
        # Scale down: the retired member's pod and ConfigMap are deleted.
        patch_spec(client, ns, POOL, {"replicas": 1})
        wait(lambda: set(member_pods(client, ns, POOL)) == {f"{POOL}-0"}, timeout=60, what="member 1 retired")
        selector = f"ironicshards.io/pool={POOL}"
        wait(lambda: [c["metadata"]["name"] for c in client.get(configmaps, labelSelector=selector)["items"]]
             == [f"{POOL}-0-config"], timeout=30, what="member 1's ConfigMap deleted")
    finally:
        code = operator.stop()  # releases the Lease
        print(f"----- operator op-a -----\n{operator.log()[-20000:]}")
    assert code == 0
    assert operator.refused() == [], "the operator was refused requests the chart should allow"
    unused = kube_api.audit.unused_grants(client, ns, operator.service_account)
    # Handover Jobs and their logs need a real Nova (nova-manage): the real-Nova handover
    # scenario, run as the same chart identity, must use them (tests/nova/test_handover_failure_scenario.py).
    unused = [grant for grant in unused if not is_handover_grant(grant)]
    assert unused == [], "the chart grants what the operator never used:\n" + "\n".join(unused)
