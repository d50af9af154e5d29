"""Autoscale end to end: the real operator, the real Ironic, the fake API server and kubelet.

The member count follows the managed node count (spec.autoscale), up at once and down only
once the lower count has held for scaleDownStabilizationSeconds, a window that an operator
restart does not reset (it is kept in status.autoscale). `kubectl get ics -o wide` shows
the count the operator steers towards (column TARGET, status.desiredReplicas).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.operator_objects import create_secrets, install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, get_pool, lease_holder, member_pods, pool_manifest, ready_members, settle,
)

pytestmark = pytest.mark.integration

POOL = "auto"
PER_MEMBER = 10
WINDOW = 30  # spec.autoscale.scaleDownStabilizationSeconds in this test


def set_resource_class_directly_in_db(ironic: IronicService, nodes: list[str], resource_class: str) -> None:
    """SETUP SHORTCUT: move nodes in or out of the pool's selector (resourceClass) at once,
    as enrolling or retiring a rack would, without Ironic's state rules for the field."""
    with sqlite3.connect(ironic.database, timeout=30) as db:
        db.executemany("UPDATE nodes SET resource_class = ? WHERE uuid = ?", ((resource_class, n) for n in nodes))


def target_column(api: KubeAPI, namespace: str) -> str:
    """The TARGET cell of the pool's row in `kubectl get ics -o wide`."""
    header, row = api.kubectl("get", "ics", POOL, "-n", namespace, "-o", "wide").stdout.splitlines()
    return row[header.index("TARGET"):].split()[0]


def status(api: KubeAPI, namespace: str) -> dict:
    return get_pool(api.client, namespace, POOL).get("status") or {}


def test_autoscale_holds_a_lower_count_for_the_window_across_a_restart_and_scales_up_at_once(
        kube_api: KubeAPI, kube_namespace: str, kubelet, ironic_service: IronicService, tmp_path: Path) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class("autoscale")
    nodes = seed_nodes_directly_in_db(ironic_service, 3 * PER_MEMBER, resource_class=resource_class)
    create_secrets(client, ns, ironic_service.clouds_yaml)
    manifest = pool_manifest(POOL, cloud_name=ironic_service.cloud_name, resource_class=resource_class,
                             autoscale={"maxNodesPerMember": PER_MEMBER, "scaleDownStabilizationSeconds": WINDOW})
    del manifest["spec"]["replicas"]
    members3, members2 = [f"{POOL}-{i}" for i in range(3)], [f"{POOL}-{i}" for i in range(2)]
    operators = [OperatorProcess(kube_api, ns, "op-a", tmp_path).start()]
    try:
        # 30 nodes, 10 per member: three members, and the count shows in `kubectl get -o wide`.
        client.create(POOLS.format(ns=ns), manifest)
        wait(lambda: ready_members(client, ns, POOL) == members3, timeout=60, what="three Ready members")
        wait(lambda: status(kube_api, ns).get("desiredReplicas") == 3, timeout=30, what="desiredReplicas 3")
        assert status(kube_api, ns)["desiredReason"] == \
            "autoscale: 30 nodes / 10 per member -> 3 (min 1, max 10)"
        assert target_column(kube_api, ns) == "3"
        wait(lambda: set(shards_of(ironic_service, resource_class).values()) == set(members3), timeout=60,
             what="every node owned by one of the three")

        # 10 nodes leave the pool: two members' worth. The third stays for the window.
        set_resource_class_directly_in_db(ironic_service, nodes[:PER_MEMBER], resource_class + "-gone")
        left_at = time.time()
        held = wait(lambda: (s := status(kube_api, ns)).get("autoscale", {}).get("recommendation") == 2 and s,
                    timeout=30, what="the operator to see 20 nodes")
        assert held["desiredReplicas"] == 3
        assert "-> 2 (min 1, max 10); held at 3 until" in held["desiredReason"]
        assert [p["replicas"] for p in held["autoscale"]["peaks"]] == [3]
        owned_by_last = {n for n, s in shards_of(ironic_service, resource_class).items() if s == members3[2]}

        # The operator restarts within the window: the new one keeps the third member.
        operators[0].stop()
        operators.append(OperatorProcess(kube_api, ns, "op-b", tmp_path).start())
        wait(lambda: lease_holder(client, ns) == "op-b", timeout=30, what="op-b to lead")
        settle(8)  # more than a poll interval of the new leader
        assert time.time() - left_at < WINDOW, "too slow to test within the window"
        assert ready_members(client, ns, POOL) == members3
        assert status(kube_api, ns)["desiredReplicas"] == 3
        assert {n for n, s in shards_of(ironic_service, resource_class).items() if s == members3[2]} == owned_by_last

        # Once the lower count has held for the window, the third member retires.
        wait(lambda: status(kube_api, ns).get("desiredReplicas") == 2, timeout=WINDOW + 30,
             what="desiredReplicas 2 after the window")
        assert time.time() - left_at >= WINDOW
        wait(lambda: sorted(member_pods(client, ns, POOL)) == members2, timeout=60, what="the third member retired")
        assert target_column(kube_api, ns) == "2"

        # The nodes come back: up at once, no window.
        set_resource_class_directly_in_db(ironic_service, nodes[:PER_MEMBER], resource_class)
        back_at = time.monotonic()
        wait(lambda: ready_members(client, ns, POOL) == members3, timeout=WINDOW - 5, what="the third member again")
        assert time.monotonic() - back_at < WINDOW - 5
    finally:
        for item in client.get(POOLS.format(ns=ns))["items"]:
            client.delete(f"{POOLS.format(ns=ns)}/{item['metadata']['name']}")
        for operator in operators:
            operator.stop()
            print(f"----- operator {operator.identity} -----\n{operator.log()[-20000:]}")
