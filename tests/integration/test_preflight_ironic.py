"""`ironic-shard-operator preflight` as a user runs it, against the real Ironic: a good cloud
passes and the shard-update probe writes nothing; each bad input fails its own check with a
fix, and the exit status says so.

Not here: a 403 from Ironic's shard-update policy. Ironic enforces policy only with Keystone
(`auth_strategy = keystone`; ironic/common/policy.py authorize() returns True otherwise, even
with a policy file that denies the rule: docs/preflight.md says where and how it was tried);
tests/integration/test_shard_policy_keystone.py gets that 403 from a real Keystone and Ironic."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.ironic_service import IronicService, enrol_nodes, running_ironic, unique_resource_class

pytestmark = pytest.mark.integration

GOOD_CONF = """[DEFAULT]
compute_driver = ironic.IronicDriver
[ironic]
auth_type = http_basic
username = nova
password = pw
"""


def preflight(tmp_path: Path, clouds: dict, cloud: str, *extra: str, nova_conf: str = GOOD_CONF) -> tuple[int, dict]:
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": clouds}))
    (tmp_path / "nova.conf").write_text(nova_conf)
    done = subprocess.run([sys.executable, "-m", "ironic_shard_operator.cli", "preflight", "--json", "--skip-image",
                           "--clouds-yaml", str(tmp_path / "clouds.yaml"), "--cloud", cloud,
                           "--nova-conf", str(tmp_path / "nova.conf"), *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.stderr == "" or "Traceback" not in done.stderr, done.stderr
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_a_good_cloud_passes_and_the_shard_probe_writes_nothing(ironic_service: IronicService,
                                                                tmp_path: Path) -> None:
    resource_class = unique_resource_class("preflight")
    [node] = enrol_nodes(ironic_service, 1, resource_class=resource_class)
    before = ironic_service.request("GET", f"/nodes/{node}").json()
    status, checks = preflight(tmp_path, {"c": ironic_service.cloud}, "c", "--resource-class", resource_class)
    assert status == 0, checks
    for name in ("ironic-reachable", "ironic-api-version", "ironic-shard-list", "ironic-shard-update"):
        assert checks[name]["verdict"] == "pass", checks[name]
    assert node in checks["ironic-shard-update"]["message"]
    assert checks["nova"]["verdict"] == "warn"  # this cloud has no Nova: said, not failed
    after = ironic_service.request("GET", f"/nodes/{node}").json()
    assert after["updated_at"] == before["updated_at"] and after["shard"] == before["shard"]


def test_an_ironic_nobody_answers_fails_reachable(ironic_service: IronicService, tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    cloud = {**ironic_service.cloud, "baremetal_endpoint_override": f"http://127.0.0.1:{port}"}
    cloud["auth"] = {**cloud["auth"], "endpoint": f"http://127.0.0.1:{port}"}
    status, checks = preflight(tmp_path, {"c": cloud}, "c")
    assert status == 1
    assert checks["ironic-reachable"]["verdict"] == "fail"
    assert "is it running" in checks["ironic-reachable"]["message"] and checks["ironic-reachable"]["fix"]


def test_wrong_credentials_fail_reachable_and_say_so(ironic_service: IronicService, tmp_path: Path) -> None:
    cloud = ironic_service.cloud
    cloud["auth"]["password"] = "not-the-password"
    status, checks = preflight(tmp_path, {"c": cloud}, "c")
    assert status == 1
    assert "refused the credentials" in checks["ironic-reachable"]["message"]
    assert "not-the-password" not in json.dumps(checks)


def test_a_cloud_name_not_in_the_clouds_yaml_is_named(ironic_service: IronicService, tmp_path: Path) -> None:
    status, checks = preflight(tmp_path, {"c": ironic_service.cloud}, "other")
    assert status == 1 and "no cloud named 'other'" in checks["ironic-reachable"]["message"]


def test_an_ironic_older_than_1_82_fails_the_version_check(tmp_path: Path) -> None:
    with running_ironic(tmp_path / "zed", auth="noauth", pin_release="zed") as old:
        status, checks = preflight(tmp_path, {"c": old.cloud}, "c")
    assert status == 1
    assert checks["ironic-api-version"]["verdict"] == "fail" and "1.82" in checks["ironic-api-version"]["fix"]


def test_a_bad_nova_conf_fails_through_the_command(ironic_service: IronicService, tmp_path: Path) -> None:
    status, checks = preflight(tmp_path, {"c": ironic_service.cloud}, "c",
                               nova_conf="[DEFAULT]\ncompute_driver = libvirt.LibvirtDriver\n")
    assert status == 1
    assert checks["nova-conf-driver"]["verdict"] == "fail"
    assert checks["nova-conf-ironic-auth"]["verdict"] == "fail"


def test_the_operator_reports_preflight_when_a_pool_starts_and_when_its_secret_changes(
        kube_api, kube_namespace: str, ironic_service: IronicService, tmp_path: Path) -> None:
    import base64

    from testbed.operator_objects import create_secrets, install_crd
    from tests.support.operator_harness import (
        POOLS, OperatorProcess, condition, events, get_pool, pool_manifest, posted_events,
    )

    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    create_secrets(client, ns, ironic_service.clouds_yaml, GOOD_CONF.replace("ironic.IronicDriver", "fake.FakeDriver"))
    with OperatorProcess(kube_api, ns, "op-a", tmp_path):
        client.create(POOLS.format(ns=ns), pool_manifest("rack-p", cloud_name=ironic_service.cloud_name,
                                                         resource_class=unique_resource_class("preflight-op")))
        failed = wait(lambda: (c := condition(get_pool(client, ns, "rack-p"), "Preflight")) and c, timeout=60,
                      what="the Preflight condition")
        assert failed["status"] == "False" and failed["reason"] == "ChecksFailed"
        assert "nova-conf-driver" in failed["message"] and "fix: set compute_driver" in failed["message"]
        [warning] = posted_events(client, ns, "PreflightFailed")
        assert warning["type"] == "Warning" and warning["message"] == failed["message"]

        client.patch(f"/api/v1/namespaces/{ns}/secrets/nova-config", {"data": {
            "nova.conf": base64.b64encode(GOOD_CONF.encode()).decode()}})
        passed = wait(lambda: (c := condition(get_pool(client, ns, "rack-p"), "Preflight"))["status"] == "True" and c,
                      timeout=60, what="Preflight passing after the Secret is fixed")
        assert passed["reason"] == "PassedWithWarnings"  # no Nova in this cloud, an image no registry has
        # Passing with warnings is news: a Warning Event naming them (not a quiet PreflightPassed).
        [warned] = wait(lambda: events(client, ns, "PreflightWarnings"), timeout=30, what="PreflightWarnings")
        assert warned["type"] == "Warning" and warned["message"] == passed["message"]
        assert not events(client, ns, "PreflightPassed")
