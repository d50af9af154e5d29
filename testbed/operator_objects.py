"""The Kubernetes objects the operator needs before it runs a pool, created as a user creates
them: the project's CRD (served before `install_crd` returns) and a pool's two Secrets."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from testbed.kube_client import KubeAPIError, KubeClient
from testbed.waiting import wait_for

CRD_FILE = Path(__file__).resolve().parents[1] / "crds" / "ironicshards.io_ironiccomputeshards.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# A base nova.conf for pools whose members never run a real nova-compute.
NOVA_CONF = "[DEFAULT]\ncompute_driver = ironic.IronicDriver\n"


def install_crd(client: KubeClient) -> None:
    """Create (or update) the project's CRD and wait until its resource is served."""
    client.create_or_replace(CRDS, yaml.safe_load(CRD_FILE.read_text()))

    def served() -> bool:
        try:
            client.get("/apis/ironicshards.io/v1alpha1/ironiccomputeshards")
            return True
        except KubeAPIError:
            return False
    wait_for(served, timeout=30, what="the IronicComputeShard resource to be served")


def create_secrets(client: KubeClient, namespace: str, clouds_yaml: str, nova_conf: str = NOVA_CONF) -> None:
    """The Secrets a pool's spec names: nova-config (key nova.conf) and openstack-cloud (key
    clouds.yaml)."""
    for name, key, text in (("nova-config", "nova.conf", nova_conf),
                            ("openstack-cloud", "clouds.yaml", clouds_yaml)):
        client.create(f"/api/v1/namespaces/{namespace}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {key: base64.b64encode(text.encode()).decode()}})
