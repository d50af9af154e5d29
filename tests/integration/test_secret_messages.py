"""What a pool says when a Secret it names cannot be used: a Secret that does not exist (the API
answers 404) is named as missing, a Secret without the key as missing that key. Before, both
read "Secret X has no key nova.conf", which sent the user looking inside a Secret that was not
there."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService, unique_resource_class
from testbed.operator_objects import install_crd
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, OperatorProcess, condition, get_pool, member_pods, pool_manifest

pytestmark = pytest.mark.integration

POOL = "rack-m"


def secret(name: str, key: str, text: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {key: base64.b64encode(text.encode()).decode()}}


def test_a_missing_secret_is_named_missing_not_keyless(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path,
                                                       ironic_service: IronicService) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    secrets = f"/api/v1/namespaces/{ns}/secrets"

    def ready_says(text: str) -> dict:
        return wait(lambda: (c := condition(get_pool(client, ns, POOL), "Ready")) and text in c.get("message", "")
                    and c, timeout=30, what=f"Ready to say {text!r}")

    with OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=ironic_service.cloud_name, resource_class=unique_resource_class("secrets")))

        # Neither Secret exists: the first one is named, as missing, with what to do.
        missing = ready_says(f"Secret nova-config not found in namespace {ns}")
        assert missing["status"] == "False" and missing["reason"] == "ConfigurationMissing"
        assert missing["message"] == (
            f"Secret nova-config not found in namespace {ns} (spec.novaConfig.secretRef): create it with "
            "key nova.conf (the base nova.conf); member pods cannot start")
        assert "has no key" not in missing["message"]

        # It exists, without the key: that is what is said now.
        client.create(secrets, secret("nova-config", "other.conf", "[DEFAULT]\n"))
        keyless = ready_says("Secret nova-config has no key nova.conf")
        assert keyless["message"] == ("Secret nova-config has no key nova.conf (the base nova.conf): "
                                      "member pods cannot start")

        # nova.conf fixed: the missing clouds.yaml Secret is named next.
        client.patch(f"{secrets}/nova-config",
                     {"data": {"nova.conf": base64.b64encode(b"[DEFAULT]\n").decode()}})
        cloud = ready_says(f"Secret openstack-cloud not found in namespace {ns}")
        assert cloud["message"] == (
            f"Secret openstack-cloud not found in namespace {ns} (spec.cloud.secretRef): create it with "
            "key clouds.yaml (clouds.yaml); the operator cannot reach Ironic")
        assert not member_pods(client, ns, POOL)

        client.create(secrets, secret("openstack-cloud", "wrong-key", ironic_service.clouds_yaml))
        ready_says("Secret openstack-cloud has no key clouds.yaml (clouds.yaml): the operator cannot reach Ironic")
        assert not operator.refused()


def test_preflight_says_what_is_wrong_with_a_clouds_yaml_it_cannot_use(
        kube_api: KubeAPI, kube_namespace: str, tmp_path: Path, ironic_service: IronicService) -> None:
    """A clouds.yaml that is not YAML, names no such cloud, or has `clouds:` as a list: the
    pool's Preflight condition names that, as its Degraded condition does, instead of "no
    clouds.yaml given" (the Secret and its key are there)."""
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    install_crd(client)
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    client.create(secrets, secret("nova-config", "nova.conf", "[DEFAULT]\n"))
    client.create(secrets, secret("openstack-cloud", "clouds.yaml", "clouds:\n  ironic: {auth: [\n"))
    cases = {  # clouds.yaml -> what both conditions say
        "clouds:\n  ironic: {auth: [\n": "the clouds.yaml is not valid YAML",
        "clouds:\n- ironic\n": "'clouds:' in the clouds.yaml is a list",
        "clouds:\n  metal: {auth_type: none}\n": "the clouds.yaml has no cloud named 'ironic' (clouds there: metal)",
    }

    def preflight_says(text: str) -> dict:
        return wait(lambda: (c := condition(get_pool(client, ns, POOL), "Preflight")) and text in c.get("message", "")
                    and c, timeout=60, what=f"Preflight to say {text!r}")

    with OperatorProcess(kube_api, ns, "op-a", tmp_path) as operator:
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name="ironic", resource_class=unique_resource_class("clouds")))
        for clouds_yaml, says in cases.items():
            client.patch(f"{secrets}/openstack-cloud",
                         {"data": {"clouds.yaml": base64.b64encode(clouds_yaml.encode()).decode()}})
            said = preflight_says(f"ironic-reachable: {says}")
            assert said["status"] == "False" and said["reason"] == "ChecksFailed"
            assert "no clouds.yaml given" not in said["message"]
            degraded = condition(get_pool(client, ns, POOL), "Degraded")
            assert degraded["reason"] == "CloudConfigInvalid" and says in degraded["message"]
        assert not operator.refused()
