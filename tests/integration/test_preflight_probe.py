"""Preflight's shard-update probe (a PATCH that Ironic's policy checks and no JSON patch can
apply: it never writes) addresses only a node the pool may own, and is not sent at all while
the pool is in Conflict. Before, it addressed the first node of the selection, which for a pool
in Conflict is another pool's node: a write request to a node the pool must leave alone.

Every request reaches the real Ironic through a proxy that keeps each request line, so the
tests see exactly which PATCHes were sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironic_shard_operator.adapters.preflight import cloud_checks
from ironic_shard_operator.core.model import Selector
from testbed.ironic_service import (
    IronicService, assign_shards_directly_in_db, seed_nodes_directly_in_db, unique_resource_class,
)
from testbed.operator_objects import create_secrets, install_crd
from tests.integration.test_preflight_ironic import GOOD_CONF
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, OperatorProcess, condition, get_pool, pool_manifest
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.integration


def patches(proxy: SwitchableProxy) -> list[str]:
    return [line for line in proxy.request_lines if line.startswith("PATCH ")]


def test_the_probe_addresses_only_a_node_the_pool_may_own(ironic_service: IronicService) -> None:
    resource_class = unique_resource_class("probe-own")
    theirs = seed_nodes_directly_in_db(ironic_service, 3, resource_class=resource_class)
    assign_shards_directly_in_db(ironic_service, {node: "rack-o-0" for node in theirs})
    with SwitchableProxy(ironic_service.url) as proxy:
        clouds_yaml = ironic_service.clouds_yaml.replace(ironic_service.url, proxy.url(ironic_service.url))
        selector = Selector(resource_class=resource_class)

        checks = {c.name: c for c in cloud_checks(clouds_yaml, ironic_service.cloud_name, selector,
                                                  pool_name="rack-p")}
        unproved = checks["ironic-shard-update"]
        assert unproved.verdict.value == "warn"
        assert "every node of the pool's selection these credentials list (3) has another pool's member" \
            in unproved.message
        assert not patches(proxy)

        # One node of the pool's own (a member's shard), one unsharded: either may be probed.
        [own, free] = seed_nodes_directly_in_db(ironic_service, 2, resource_class=resource_class)
        assign_shards_directly_in_db(ironic_service, {own: "rack-p-1"})
        checks = {c.name: c for c in cloud_checks(clouds_yaml, ironic_service.cloud_name, selector,
                                                  pool_name="rack-p")}
        assert checks["ironic-shard-update"].verdict.value == "pass", checks["ironic-shard-update"]
        [probe] = patches(proxy)
        assert probe.split()[1].rsplit("/", 1)[-1] in (own, free), probe


def test_a_pool_in_conflict_sends_no_probe(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path,
                                           ironic_service: IronicService) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    resource_class = unique_resource_class("probe-conflict")
    seed_nodes_directly_in_db(ironic_service, 3, resource_class=resource_class)
    with SwitchableProxy(ironic_service.url) as proxy, \
            OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        create_secrets(client, ns, ironic_service.clouds_yaml.replace(ironic_service.url,
                                                                      proxy.url(ironic_service.url)),
                       nova_conf=GOOD_CONF)  # nothing fails, so the condition lists the warnings
        # The earlier pool: paused (it writes no shard), its own preflight done.
        client.create(POOLS.format(ns=ns), pool_manifest(
            "rack-e", cloud_name=ironic_service.cloud_name, resource_class=resource_class, paused=True))
        wait(lambda: condition(get_pool(client, ns, "rack-e"), "Preflight") or None, timeout=90,
             what="rack-e's preflight verdict")
        before = patches(proxy)

        # The later pool selects the same nodes: Conflict, and its preflight sends no PATCH.
        client.create(POOLS.format(ns=ns), pool_manifest(
            "rack-l", cloud_name=ironic_service.cloud_name, resource_class=resource_class))
        wait(lambda: condition(get_pool(client, ns, "rack-l"), "Conflict").get("status") == "True" or None,
             timeout=60, what="rack-l in Conflict")
        said = wait(lambda: (c := condition(get_pool(client, ns, "rack-l"), "Preflight")) and c, timeout=90,
                    what="rack-l's preflight verdict")
        assert ("ironic-shard-update: not probed: the pool is in Conflict (its selection holds another "
                "pool's nodes); no request that could write a node was sent") in said["message"]
        assert patches(proxy) == before
        assert not operator.refused()
