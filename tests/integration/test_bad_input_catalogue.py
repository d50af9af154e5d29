"""The bad-input catalogue: malformed pools, Secrets and clouds, as users
write them.

Each case ends one of two ways, and the table says which:
- REFUSED: the API server refuses the pool at admission (the CRD's OpenAPI schema or its CEL
  rules). The status code and the message the user sees are asserted; no pool exists after.
- REPORTED: the API server admits the pool, and its input cannot be used (a Secret missing or
  without its key, a clouds.yaml that is not one, a cloud that is not Ironic or refuses the
  credentials, a selector another pool already holds). The operator says so with a named
  condition (type, reason, message) and a Warning Event carrying the same message, and writes
  nothing: no node's shard changes in the real Ironic (not even its `updated_at`), no Nova
  service of the real Nova changes, and no pod or ConfigMap is created.

Every REPORTED pool runs at once, each with its own nodes and Secrets, under one operator.
The REFUSED messages are those a real API server gives (field path and rule); the tests pass
against a real cluster too.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, unique_resource_class
from testbed.kube_client import KubeAPIError
from testbed.nova_stack import NovaStack
from testbed.operator_objects import install_crd
from tests.support.kube_api import KubeAPI
from tests.support.manifest_edits import delete_at, set_at
from tests.support.operator_harness import POOLS, OperatorProcess, condition, get_pool, pool_manifest, settle

pytestmark = pytest.mark.integration

NODES_PER_POOL = 2


# --- REFUSED at admission ------------------------------------------------------------------


_set, _drop = set_at, delete_at


def _autoscale(**settings: Any) -> Callable[[dict[str, Any]], None]:
    def change(pool: dict[str, Any]) -> None:
        del pool["spec"]["replicas"]
        pool["spec"]["autoscale"] = settings
    return change


# id -> (change to a valid pool, what the refusal says: every fragment appears in its message)
REFUSED: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "negative replicas": (_set("spec.replicas", -1),
                          ("spec.replicas", "should be greater than or equal to 0")),
    "replicas beyond 1000": (_set("spec.replicas", 1001),
                             ("spec.replicas", "should be less than or equal to 1000")),
    "replicas as a string": (_set("spec.replicas", "3"), ("spec.replicas", "must be of type integer")),
    "replicas and autoscale": (_set("spec.autoscale", {"maxReplicas": 5}), ("mutually exclusive",)),
    "neither replicas nor autoscale": (_drop("spec.replicas"), ("set spec.replicas",)),
    "minReplicas above maxReplicas": (_autoscale(minReplicas=6, maxReplicas=5),
                                      ("spec.autoscale", "minReplicas must not exceed")),
    "stabilization beyond an hour": (_autoscale(scaleDownStabilizationSeconds=3601),
                                     ("scaleDownStabilizationSeconds", "less than or equal to 3600")),
    "unknown fencing mode": (_set("spec.failover", {"fencing": {"mode": "Yolo"}}),
                             ("spec.failover.fencing.mode", "Unsupported value", "Yolo")),
    "ForceAfter without its seconds": (_set("spec.failover", {"fencing": {"mode": "ForceAfter"}}),
                                       ("forceAfterSeconds is required when mode is ForceAfter",)),
    "force seconds without ForceAfter": (_set("spec.failover", {"fencing": {"forceAfterSeconds": 60}}),
                                         ("applies only to mode ForceAfter",)),
    "name longer than 52": (_set("metadata.name", "r" * 53), ("metadata.name must be at most 52",)),
    "name with a dot": (_set("metadata.name", "rack.a"), ("metadata.name must be at most 52",)),
    "missing image": (_drop("spec.image"), ("spec.image", "Required value")),
    "image with a space": (_set("spec.image", "quay.io/nova compute:1"), ("no spaces or other whitespace",)),
    "nova.conf Secret without a name": (_set("spec.novaConfig", {"secretRef": {}}),
                                        ("spec.novaConfig.secretRef.name", "Required value")),
    "no cloud": (_drop("spec.cloud"), ("spec.cloud", "Required value")),
    "one Secret key for both files": (
        _set("spec.cloud", {"secretRef": {"name": "nova-config", "key": "nova.conf"},
                            "cloudName": "ironic"}), ("same Secret key",)),
    "poll interval of 1 s": (_set("spec.ironic", {"pollIntervalSeconds": 1}),
                             ("spec.ironic.pollIntervalSeconds", "should be greater than or equal to 5")),
    "65 concurrent writes": (_set("spec.ironic", {"maxConcurrentWrites": 65}),
                             ("spec.ironic.maxConcurrentWrites", "should be less than or equal to 64")),
    # An exclusive bound (writesPerSecond > 0) is worded without "or equal to", as a real server words it.
    "zero writes per second": (_set("spec.ironic", {"writesPerSecond": 0}),
                               ("spec.ironic.writesPerSecond", "in body should be greater than 0")),
    "uppercase conductor group": (_set("spec.selector", {"conductorGroup": "Rack-A"}),
                                  ("spec.selector.conductorGroup", "should match")),
    "env value and valueFrom": (
        _set("spec.env", [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        ("value or valueFrom, not both",)),
    "bad pull policy": (_set("spec.imagePullPolicy", "Sometimes"),
                        ("spec.imagePullPolicy", "Unsupported value", "Sometimes")),
}


def _valid_pool() -> dict[str, Any]:
    return pool_manifest("catalogue", cloud_name="ironic", resource_class="baremetal")


@pytest.fixture(scope="module")
def crd_installed(kube_api: KubeAPI) -> KubeAPI:
    install_crd(kube_api.client)
    return kube_api


def test_the_valid_pool_the_refusals_start_from_is_admitted(crd_installed: KubeAPI, kube_namespace: str) -> None:
    """Each refusal below is the change it makes, not something else wrong with the pool."""
    client = crd_installed.client
    created = client.create(POOLS.format(ns=kube_namespace), _valid_pool(), dryRun="All")
    assert created["spec"]["replicas"] == 3


@pytest.mark.parametrize("change, says", REFUSED.values(), ids=REFUSED.keys())
def test_a_malformed_pool_is_refused_at_admission(crd_installed: KubeAPI, kube_namespace: str,
                                                 change: Callable[[dict[str, Any]], None],
                                                 says: tuple[str, ...]) -> None:
    client = crd_installed.client
    pool = _valid_pool()
    change(pool)
    with pytest.raises(KubeAPIError) as refused:
        client.create(POOLS.format(ns=kube_namespace), pool)
    assert refused.value.status == 422 and refused.value.reason == "Invalid", refused.value
    message = refused.value.body["message"]
    for fragment in says:
        assert fragment in message, message
    assert not client.get(POOLS.format(ns=kube_namespace))["items"]


def test_a_changed_selector_is_refused(crd_installed: KubeAPI, kube_namespace: str) -> None:
    """The selector decides which nodes a pool owns: it is fixed once the pool exists."""
    client = crd_installed.client
    pools = POOLS.format(ns=kube_namespace)
    client.create(pools, _valid_pool())
    with pytest.raises(KubeAPIError) as refused:
        client.patch(f"{pools}/catalogue", {"spec": {"selector": {"resourceClass": "other"}}})
    assert refused.value.status == 422
    assert "spec.selector" in refused.value.body["message"] and "immutable" in refused.value.body["message"]
    assert get_pool(client, kube_namespace, "catalogue")["spec"]["selector"] == {"resourceClass": "baremetal"}


SECRETS_REFUSED = {  # id -> (Secret data, what the refusal says): the API server's own rules
    "a key with a space": ({"nova conf": "[DEFAULT]\n"}, ('data[nova conf]', "a valid config key must consist of")),
    "a key with a slash": ({"etc/nova.conf": "[DEFAULT]\n"}, ("a valid config key must consist of",)),
    "a nova.conf over 1 MiB": ({"nova.conf": "#" * (1024 * 1024 + 1)}, ("data", "Too long: may not be more than 1048576 bytes")),
}


@pytest.mark.parametrize("data, says", SECRETS_REFUSED.values(), ids=SECRETS_REFUSED.keys())
def test_a_malformed_secret_is_refused_at_admission(crd_installed: KubeAPI, kube_namespace: str,
                                                   data: dict[str, str], says: tuple[str, ...]) -> None:
    client = crd_installed.client
    with pytest.raises(KubeAPIError) as refused:
        client.create(f"/api/v1/namespaces/{kube_namespace}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-config"}, "stringData": data})
    assert refused.value.status == 422, refused.value
    for fragment in says:
        assert fragment in refused.value.body["message"], refused.value.body["message"]


def test_string_data_is_stored_as_data(crd_installed: KubeAPI, kube_namespace: str) -> None:
    """As users write Secrets (examples/secrets.yaml): stringData is write-only, and lands in data."""
    client = crd_installed.client
    created = client.create(f"/api/v1/namespaces/{kube_namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nova-config"},
        "data": {"nova.conf": base64.b64encode(b"old").decode(), "other": base64.b64encode(b"kept").decode()},
        "stringData": {"nova.conf": "[DEFAULT]\n"}})
    assert "stringData" not in created
    assert {k: base64.b64decode(v).decode() for k, v in created["data"].items()} == {
        "nova.conf": "[DEFAULT]\n", "other": "kept"}


# --- REPORTED by the operator --------------------------------------------------------------


@dataclass(frozen=True)
class Peers:
    """What the cases build their files from: the real Ironic and Nova of this session."""

    ironic: IronicService
    nova: NovaStack
    closed_url: str  # a port where nothing listens
    kube_url: str  # the Kubernetes API server of the tests

    @property
    def cloud(self) -> dict[str, Any]:
        """The Ironic cloud's clouds.yaml entry, with the real Nova as its compute endpoint."""
        return {**self.ironic.cloud, "compute_endpoint_override": self.nova.compute_url}

    def clouds_yaml(self, **entry: Any) -> str:
        return yaml.safe_dump({"clouds": {"ironic": {**self.cloud, **entry}}})


@dataclass(frozen=True)
class Reported:
    """A pool the API server admits and the operator cannot use.

    `nova_conf` / `clouds_yaml`: the Secret's key and text (None: no such Secret), built from
    the session's peers. `spec`: changes to the pool's spec. What the operator says:
    `condition` True (Degraded, or Conflict), its `reason`, and `says` in its message;
    `preflight`: what the Preflight condition's message says too, when it is about the same input."""

    condition: str
    reason: str
    says: str
    nova_conf: Callable[[Peers], tuple[str, str] | None] = lambda peers: ("nova.conf", "[DEFAULT]\n")
    clouds_yaml: Callable[[Peers], tuple[str, str] | None] = lambda peers: ("clouds.yaml", peers.clouds_yaml())
    spec: dict[str, Any] = field(default_factory=dict)
    preflight: str = ""


def _ironic_password(peers: Peers, password: str) -> str:
    entry = json.loads(json.dumps(peers.cloud))
    entry["auth"]["password"] = password
    return yaml.safe_dump({"clouds": {"ironic": entry}})


REPORTED: dict[str, Reported] = {
    "no nova.conf Secret": Reported(
        "Degraded", "ConfigurationMissing", "Secret {pool}-nova not found in namespace {ns} (spec.novaConfig",
        nova_conf=lambda peers: None),
    "nova.conf Secret without its key": Reported(
        "Degraded", "ConfigurationMissing", "Secret {pool}-nova has no key nova.conf (the base nova.conf)",
        nova_conf=lambda peers: ("nova-compute.conf", "[DEFAULT]\n")),
    "nova.conf under a key the pool does not name": Reported(
        "Degraded", "ConfigurationMissing", "Secret {pool}-nova has no key compute.conf",
        spec={"novaConfig": {"secretRef": {"name": "{pool}-nova", "key": "compute.conf"}}}),
    "no clouds.yaml Secret": Reported(
        "Degraded", "ConfigurationMissing", "Secret {pool}-cloud not found in namespace {ns} (spec.cloud",
        clouds_yaml=lambda peers: None),
    "clouds.yaml Secret without its key": Reported(
        "Degraded", "ConfigurationMissing", "Secret {pool}-cloud has no key clouds.yaml",
        clouds_yaml=lambda peers: ("cloud.yaml", peers.clouds_yaml())),
    "clouds.yaml that is not YAML": Reported(
        "Degraded", "CloudConfigInvalid", "the clouds.yaml is not valid YAML",
        clouds_yaml=lambda peers: ("clouds.yaml", "clouds:\n  ironic: {auth: [\n"),
        preflight="ironic-reachable: the clouds.yaml is not valid YAML"),
    "empty clouds.yaml": Reported(
        "Degraded", "CloudConfigInvalid", "the clouds.yaml is empty",
        clouds_yaml=lambda peers: ("clouds.yaml", "")),
    "clouds.yaml that is a list": Reported(
        "Degraded", "CloudConfigInvalid", "the clouds.yaml is a list, not a mapping",
        clouds_yaml=lambda peers: ("clouds.yaml", "- ironic\n")),
    "clouds.yaml without clouds:": Reported(
        "Degraded", "CloudConfigInvalid", "has no 'clouds:' key (top-level keys there: ironic)",
        clouds_yaml=lambda peers: ("clouds.yaml", yaml.safe_dump({"ironic": peers.cloud}))),
    "clouds: as a list": Reported(
        "Degraded", "CloudConfigInvalid", "'clouds:' in the clouds.yaml is a list",
        clouds_yaml=lambda peers: ("clouds.yaml", yaml.safe_dump({"clouds": [peers.cloud]})),
        preflight="ironic-reachable: 'clouds:' in the clouds.yaml is a list"),
    "cloud name not in the clouds.yaml": Reported(
        "Degraded", "CloudConfigInvalid", "has no cloud named 'ironic' (clouds there: metal)",
        clouds_yaml=lambda peers: ("clouds.yaml", yaml.safe_dump({"clouds": {"metal": peers.cloud}})),
        preflight="ironic-reachable: the clouds.yaml has no cloud named 'ironic' (clouds there: metal)"),
    "cloud entry that is a string": Reported(
        "Degraded", "CloudConfigInvalid", "cloud 'ironic' in the clouds.yaml is a string",
        clouds_yaml=lambda peers: ("clouds.yaml", yaml.safe_dump({"clouds": {"ironic": "http://ironic"}}))),
    "unknown auth_type": Reported(
        "Degraded", "CloudConfigInvalid", "has auth_type 'kerberos-ish', which is no authentication plugin",
        clouds_yaml=lambda peers: ("clouds.yaml", peers.clouds_yaml(auth_type="kerberos-ish"))),
    "Ironic refuses the password": Reported(
        "Degraded", "IronicAuthFailed", "refused the credentials of cloud 'ironic'",
        clouds_yaml=lambda peers: ("clouds.yaml", _ironic_password(peers, "not-the-password"))),
    "baremetal endpoint that is Nova": Reported(
        "Degraded", "IronicEndpointWrong", "is not the Ironic API root",
        clouds_yaml=lambda peers: ("clouds.yaml", peers.clouds_yaml(baremetal_endpoint_override=peers.nova.compute_url))),
    "baremetal endpoint that is the Kubernetes API": Reported(  # it refuses Ironic's credentials: 401
        "Degraded", "IronicEndpointWrong", "(a Kubernetes API server: ",
        clouds_yaml=lambda peers: ("clouds.yaml", peers.clouds_yaml(baremetal_endpoint_override=peers.kube_url,
                                                                    insecure=True))),
    "baremetal endpoint where nothing listens": Reported(
        "Degraded", "IronicUnavailable", "Ironic",
        clouds_yaml=lambda peers: ("clouds.yaml", peers.clouds_yaml(baremetal_endpoint_override=peers.closed_url))),
    "selector an earlier pool holds": Reported(
        "Conflict", "OverlappingPool", "pool {ns}/cat-00 (created ", spec={"selector": "cat-00"}),
}


def _closed_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _formatted(value: Any, **names: str) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _formatted(v, **names) for k, v in value.items()}
    return value


def _secret(name: str, key_and_text: tuple[str, str]) -> dict[str, Any]:
    key, text = key_and_text
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {key: base64.b64encode(text.encode()).decode()}}


def _ironic_nodes(ironic: IronicService, classes: list[str]) -> dict[str, tuple[Any, Any]]:
    """Every node of `classes` as Ironic shows it: uuid -> (shard, updated_at). A shard write,
    even of the same value, changes updated_at."""
    nodes = {}
    for resource_class in classes:
        listing = ironic.request("GET", "/nodes/detail", params={"resource_class": resource_class}).json()
        nodes.update({n["uuid"]: (n["shard"], n["updated_at"]) for n in listing["nodes"]})
    return nodes


def _nova_services(nova: NovaStack) -> dict[str, tuple[Any, ...]]:
    """What an operator could write in Nova: which services exist, forced_down, enabled."""
    return {host: (s["id"], s["forced_down"], s["status"]) for host, s in nova.compute_services().items()}


def test_unusable_input_is_reported_by_condition_and_event_and_nothing_is_written(
        crd_installed: KubeAPI, kube_namespace: str, tmp_path: Path, ironic_service: IronicService,
        nova_stack: NovaStack) -> None:
    client, ns = crd_installed.client, kube_namespace
    server = yaml.safe_load(crd_installed.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    peers = Peers(ironic_service, nova_stack, _closed_url(), server)
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    pools = {f"cat-{i:02}": case for i, case in enumerate(REPORTED.values(), start=1)}
    classes = {pool: unique_resource_class(pool) for pool in pools}
    # The earlier pool the Conflict case meets: valid, paused (it writes nothing either), first.
    classes["cat-00"] = unique_resource_class("cat-00")
    for resource_class in classes.values():
        seed_nodes_directly_in_db(ironic_service, NODES_PER_POOL, resource_class=resource_class)
    ironic_before, nova_before = _ironic_nodes(ironic_service, list(classes.values())), _nova_services(nova_stack)

    def create_pool(pool: str, case: Reported) -> None:
        for suffix, content in (("nova", case.nova_conf(peers)), ("cloud", case.clouds_yaml(peers))):
            if content is not None:
                client.create(secrets, _secret(f"{pool}-{suffix}", content))
        spec = _formatted(case.spec, pool=pool, ns=ns)
        selector = classes[spec.pop("selector", pool)]
        manifest = pool_manifest(pool, cloud_name="ironic", resource_class=selector, replicas=2,
                                 novaConfig={"secretRef": {"name": f"{pool}-nova"}},
                                 cloud={"secretRef": {"name": f"{pool}-cloud"}, "cloudName": "ironic"})
        manifest["spec"].update(spec)
        client.create(POOLS.format(ns=ns), manifest)

    with OperatorProcess(crd_installed, ns, "op-a", tmp_path) as operator:
        create_pool("cat-00", Reported("", "", "", spec={"paused": True}))
        crd_installed.wait_for(lambda: condition(get_pool(client, ns, "cat-00"), "Ready") or None,
                               timeout=60, what="the earlier pool reported")
        for pool, case in pools.items():
            create_pool(pool, case)

        def reported(pool: str, case: Reported) -> dict[str, Any] | None:
            said = condition(get_pool(client, ns, pool), case.condition)
            return said if said.get("status") == "True" else None

        for pool, case in pools.items():
            said = crd_installed.wait_for(lambda: reported(pool, case), timeout=90,
                                          what=f"{pool} ({case.says!r}) reported")
            assert said["reason"] == case.reason, (pool, said)
            assert _formatted(case.says, pool=pool, ns=ns) in said["message"], (pool, said)
            assert condition(get_pool(client, ns, pool), "Ready")["status"] == "False", pool
            if case.preflight:  # the same input named by preflight, not "no clouds.yaml given"
                crd_installed.wait_for(lambda: case.preflight in condition(get_pool(client, ns, pool), "Preflight")
                                       .get("message", "") or None, timeout=60, what=f"{pool}: Preflight names it")
        settle(6)  # beyond a poll interval: still nothing written
        events = client.get(f"/api/v1/namespaces/{ns}/events")["items"]
        for pool, case in pools.items():
            said = condition(get_pool(client, ns, pool), case.condition)
            warned = [e for e in events if e["involvedObject"]["name"] == pool and e["reason"] == case.condition]
            assert [(e["type"], e["message"]) for e in warned][-1:] == [("Warning", said["message"])], (pool, warned)
        assert not operator.refused()

    assert _ironic_nodes(ironic_service, list(classes.values())) == ironic_before
    assert _nova_services(nova_stack) == nova_before
    for kind in ("pods", "configmaps"):
        made = client.get(f"/api/v1/namespaces/{ns}/{kind}", labelSelector="ironicshards.io/pool")["items"]
        assert not made, [m["metadata"]["name"] for m in made]
