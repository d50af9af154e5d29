"""Credentials Ironic refuses the shard summary (`GET /v1/shards`, policy baremetal:shards:get)
but lets list nodes and set their shards, for real: a Keystone, an Ironic that enforces its
policy (tests/support/keystone.py), and a system admin who also holds NO_SHARD_SUMMARY_ROLE,
which that Ironic's policy override refuses the summary to.

Preflight warns of it (`ironic-shard-summary`, with the policy and the role that has it by
default), and the operator keeps managing the pool: every poll lists the pool in full instead
of asking the summary (core/observation.py), so it adopts the nodes, is not Degraded, and says
why once in its log and in its Preflight condition.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from testbed.ironic_service import IronicService, available_nodes, enrol_nodes, unique_resource_class
from tests.integration.test_shard_policy_keystone import NOVA_CONF, preflight
from tests.support.keystone import NO_SHARD_SUMMARY_ROLE, KeystoneService

pytestmark = pytest.mark.integration

POLICY_403 = "Access was denied to the following resource: baremetal:shards:get"


def summary_blind(keystone: KeystoneService, ironic: IronicService) -> dict:
    """A system admin (shards may be set) whom the policy refuses GET /v1/shards."""
    return keystone.user_cloud(ironic, "summary-blind", role="admin", system=True, also=(NO_SHARD_SUMMARY_ROLE,))


def test_preflight_warns_of_a_refused_shard_summary_and_names_the_policy(
        keystone_service: KeystoneService, keystone_ironic: IronicService, tmp_path: Path) -> None:
    resource_class = unique_resource_class("summary-preflight")
    enrol_nodes(keystone_ironic, 1, resource_class=resource_class)
    blind = summary_blind(keystone_service, keystone_ironic)
    session = IronicService(keystone_ironic.state_dir, keystone_ironic.url,
                            yaml.safe_dump({"clouds": {"b": blind}}), "b")
    with pytest.raises(AssertionError) as refusal:
        session.request("GET", "/shards")
    assert "HTTP 403" in str(refusal.value) and POLICY_403 in str(refusal.value)

    status, checks = preflight(tmp_path / "blind", blind, resource_class)

    summary = checks["ironic-shard-summary"]
    assert summary["verdict"] == "warn", summary
    assert "HTTP 403" in summary["message"] and POLICY_403 in summary["message"], summary
    assert "every poll" in summary["message"], summary
    assert "baremetal:shards:get" in summary["fix"] and "--system all" in summary["fix"], summary
    assert "reader" in summary["fix"], summary
    assert checks["ironic-shard-update"]["verdict"] == "pass" and checks["ironic-shard-list"]["verdict"] == "pass"
    assert status == 0, checks  # a warning: the operator works, at a cost

    status, checks = preflight(tmp_path / "admin", keystone_ironic.cloud, resource_class)

    assert checks["ironic-shard-summary"]["verdict"] == "pass", checks["ironic-shard-summary"]


def test_the_operator_manages_the_pool_listing_in_full_and_says_why(
        kube_api, kube_namespace: str, kubelet, keystone_service: KeystoneService, keystone_ironic: IronicService,
        tmp_path: Path) -> None:
    from testbed.operator_objects import create_secrets, install_crd
    from tests.support.operator_harness import POOLS, OperatorProcess, condition, events, get_pool, pool_manifest

    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    resource_class = unique_resource_class("summary-op")
    nodes = available_nodes(keystone_ironic, 3, resource_class)  # free nodes to adopt: no instance, no shard
    install_crd(client)
    create_secrets(client, ns, yaml.safe_dump({"clouds": {"metal": summary_blind(keystone_service, keystone_ironic)}}),
                   NOVA_CONF)

    def shards() -> dict[str, str | None]:
        return {n: keystone_ironic.request("GET", f"/nodes/{n}?fields=shard").json()["shard"] for n in nodes}

    with OperatorProcess(kube_api, ns, "op-summary", tmp_path) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest("rack-s", cloud_name="metal", resource_class=resource_class,
                                                         replicas=1))
        wait(lambda: set(shards().values()) == {"rack-s-0"}, timeout=120, what="every node owned by rack-s-0")
        # Every poll lists in full, so each moves status.nodes.observedAt (a poll by need would not).
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            pool = get_pool(client, ns, "rack-s")
            seen.add(((pool.get("status") or {}).get("nodes") or {}).get("observedAt"))
            time.sleep(1)
        preflight_condition = wait(lambda: (c := condition(get_pool(client, ns, "rack-s"), "Preflight")) and c,
                                   timeout=60, what="the Preflight condition")
        assert preflight_condition["reason"] == "PassedWithWarnings", preflight_condition
        pool = get_pool(client, ns, "rack-s")
        warned = wait(lambda: events(client, ns, "PreflightWarnings"), timeout=30, what="a PreflightWarnings Event")
        log = operator.log_path.read_text()

    assert len(seen - {None}) >= 3, seen
    assert shards() == {n: "rack-s-0" for n in nodes}
    degraded = condition(pool, "Degraded")
    assert degraded is None or degraded["status"] == "False", degraded
    counted = pool["status"]["nodes"]
    assert (counted["total"], counted["unassigned"], counted["pendingMoves"]) == (3, 0, 0), counted
    assert preflight_condition["status"] == "True" and preflight_condition["reason"] == "PassedWithWarnings"
    assert "ironic-shard-summary" in preflight_condition["message"], preflight_condition
    assert "baremetal:shards:get" in preflight_condition["message"], preflight_condition
    assert any("ironic-shard-summary" in e["message"] and e["type"] == "Warning"
               for e in warned), warned  # told by an Event too, not only in the condition
    said = [line for line in log.splitlines() if "every poll lists the pool in full" in line]
    assert len(said) == 1 and "WARNING" in said[0] and "HTTP 403" in said[0], said
