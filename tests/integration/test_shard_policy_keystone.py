"""Ironic's own refusal of `baremetal:node:update:shard`, for real: a Keystone, an Ironic with
`auth_strategy = keystone` (the only mode in which Ironic enforces its policy) and its shipped
scoped defaults, where the shard needs a system-scoped admin.

The refused user is a system-scoped `member`: Ironic lets it list every node (SYSTEM_READER)
and even update nodes (SYSTEM_MEMBER), and refuses it only the shard (SYSTEM_ADMIN), so the 403
is precisely the shard policy. The admin is Keystone's bootstrap admin, system-scoped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.ironic_service import IronicService, available_nodes, enrol_nodes, unique_resource_class
from tests.support.keystone import KeystoneService

pytestmark = pytest.mark.integration

NOVA_CONF = """[DEFAULT]
compute_driver = ironic.IronicDriver
[ironic]
auth_type = password
auth_url = http://keystone.example/v3
username = nova
password = pw
user_domain_name = Default
project_name = service
project_domain_name = Default
"""
POLICY_403 = "Access was denied to the following resource: baremetal:node:update:shard"


def preflight(tmp_path: Path, cloud: dict, resource_class: str) -> tuple[int, dict]:
    """`ironic-shard-operator preflight --json` as a user runs it with a clouds.yaml of `cloud`."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"metal": cloud}}))
    (tmp_path / "nova.conf").write_text(NOVA_CONF)
    done = subprocess.run([sys.executable, "-m", "ironic_shard_operator.cli", "preflight", "--json", "--skip-image",
                           "--clouds-yaml", str(tmp_path / "clouds.yaml"), "--cloud", "metal",
                           "--nova-conf", str(tmp_path / "nova.conf"), "--resource-class", resource_class],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def shard_and_updated_at(ironic: IronicService, node: str) -> tuple[str | None, str | None]:
    """What any write to a node changes: its updated_at (and here its shard)."""
    body = ironic.request("GET", f"/nodes/{node}").json()
    return body["shard"], body["updated_at"]


def test_preflight_fails_a_user_ironic_refuses_shards_and_writes_nothing(
        keystone_service: KeystoneService, keystone_ironic: IronicService, tmp_path: Path) -> None:
    resource_class = unique_resource_class("policy-preflight")
    [node] = enrol_nodes(keystone_ironic, 1, resource_class=resource_class)
    before = keystone_ironic.request("GET", f"/nodes/{node}").json()
    member = keystone_service.user_cloud(keystone_ironic, "system-member", role="member", system=True)

    status, checks = preflight(tmp_path / "member", member, resource_class)

    assert status == 1, checks
    assert checks["ironic-reachable"]["verdict"] == "pass" and checks["ironic-shard-list"]["verdict"] == "pass"
    refused = checks["ironic-shard-update"]
    assert refused["verdict"] == "fail", refused
    assert "HTTP 403" in refused["message"] and POLICY_403 in refused["message"], refused
    assert "system-scoped admin" in refused["fix"], refused
    after = keystone_ironic.request("GET", f"/nodes/{node}").json()
    assert (after["updated_at"], after["shard"]) == (before["updated_at"], before["shard"])

    status, checks = preflight(tmp_path / "admin", keystone_ironic.cloud, resource_class)

    assert checks["ironic-shard-update"]["verdict"] == "pass", checks["ironic-shard-update"]
    assert status == 0, checks
    after = keystone_ironic.request("GET", f"/nodes/{node}").json()
    assert (after["updated_at"], after["shard"]) == (before["updated_at"], before["shard"])


def test_preflight_says_why_a_service_user_sees_no_node(
        keystone_service: KeystoneService, keystone_ironic: IronicService, tmp_path: Path) -> None:
    """A user reusing a nova-compute's credentials (role `service` in project `service`) lists
    no node under Ironic's scoped defaults: preflight warns that it saw none and says that
    project-scoped credentials see only their project's nodes and that the operator needs a
    system-scoped admin, instead of only asking to enrol a node that is already there."""
    resource_class = unique_resource_class("policy-service")
    [node] = enrol_nodes(keystone_ironic, 1, resource_class=resource_class)
    service = keystone_service.user_cloud(keystone_ironic, "nova-like", role="service", project="service")

    status, checks = preflight(tmp_path / "service", service, resource_class)

    unseen = checks["ironic-shard-update"]
    assert unseen["verdict"] == "warn", unseen
    assert "list no node" in unseen["message"], unseen
    assert "project-scoped credentials" in unseen["fix"] and "system-scoped admin" in unseen["fix"], unseen
    assert keystone_ironic.request("GET", f"/nodes/{node}?fields=shard").json()["shard"] is None
    assert status == 0, checks  # warnings only: the operator would run, and see no node


def test_the_refusal_is_the_shard_policy_alone(keystone_service: KeystoneService,
                                               keystone_ironic: IronicService) -> None:
    """The same user may list the node and change its other fields: only the shard is refused,
    with Ironic's own words naming the rule."""
    resource_class = unique_resource_class("policy-precise")
    [node] = enrol_nodes(keystone_ironic, 1, resource_class=resource_class)
    member = keystone_service.user_cloud(keystone_ironic, "system-member", role="member", system=True)
    session = IronicService(keystone_ironic.state_dir, keystone_ironic.url,
                            yaml.safe_dump({"clouds": {"m": member}}), "m")

    listed = session.request("GET", f"/nodes?resource_class={resource_class}&fields=uuid").json()["nodes"]
    assert [n["uuid"] for n in listed] == [node]
    session.request("PATCH", f"/nodes/{node}", json=[{"op": "add", "path": "/extra/seen", "value": "yes"}])
    with pytest.raises(AssertionError) as refusal:
        session.request("PATCH", f"/nodes/{node}", json=[{"op": "add", "path": "/shard", "value": "rack-0"}])
    assert "HTTP 403" in str(refusal.value) and POLICY_403 in str(refusal.value)
    assert keystone_ironic.request("GET", f"/nodes/{node}?fields=shard").json()["shard"] is None


def test_the_operator_reports_the_refusal_and_moves_no_node(
        kube_api, kube_namespace: str, kubelet, keystone_service: KeystoneService, keystone_ironic: IronicService,
        tmp_path: Path) -> None:
    from testbed.operator_objects import create_secrets, install_crd
    from tests.support.operator_harness import POOLS, OperatorProcess, condition, events, get_pool, pool_manifest

    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    resource_class = unique_resource_class("policy-op")
    nodes = available_nodes(keystone_ironic, 3, resource_class)  # free nodes to adopt: no instance, no shard
    before = {n: shard_and_updated_at(keystone_ironic, n) for n in nodes}
    member = keystone_service.user_cloud(keystone_ironic, "system-member", role="member", system=True)
    install_crd(client)
    create_secrets(client, ns, yaml.safe_dump({"clouds": {"metal": member}}), NOVA_CONF)

    with OperatorProcess(kube_api, ns, "op-policy", tmp_path):
        client.create(POOLS.format(ns=ns), pool_manifest("rack-k", cloud_name="metal", resource_class=resource_class,
                                                         replicas=1))
        degraded = wait(lambda: (c := condition(get_pool(client, ns, "rack-k"), "Degraded"))
                        and c.get("reason") == "IronicAuthFailed" and c, timeout=90,
                        what="Degraded IronicAuthFailed")
        preflight_condition = wait(lambda: (c := condition(get_pool(client, ns, "rack-k"), "Preflight")) and c,
                                   timeout=60, what="the Preflight condition")
        warnings = wait(lambda: [e for e in events(client, ns, "Degraded") + events(client, ns, "PreflightFailed")
                                 if e["type"] == "Warning"] or None, timeout=30, what="Warning Events")

    assert degraded["status"] == "True"
    assert "does not allow (policy)" in degraded["message"] and "HTTP 403" in degraded["message"], degraded
    assert POLICY_403 in degraded["message"] and "to set the shard of node" in degraded["message"], degraded
    assert preflight_condition["status"] == "False", preflight_condition
    assert "ironic-shard-update" in preflight_condition["message"] and "system-scoped admin" in preflight_condition["message"]
    assert {e["reason"] for e in warnings if "baremetal:node:update:shard" in e["message"]} >= {"Degraded", "PreflightFailed"}
    after = {n: shard_and_updated_at(keystone_ironic, n) for n in nodes}
    assert after == before
