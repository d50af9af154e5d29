"""No adapter error quotes a credential, against the real Ironic service: a distinctive
password in every place a clouds.yaml can hold one (auth.password, application credential
secret, URLs with userinfo in auth_url, auth.endpoint and the endpoint overrides), and every
failure mode the adapters name (unreachable, credentials refused, not Ironic, Keystone
unreachable, an unusable entry, Nova unreachable or not Nova)."""

from __future__ import annotations

import base64
import json
import re
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import yaml

from ironic_shard_operator.adapters.ironic import (
    IronicAdapter, IronicAuthError, IronicConfigError, IronicEndpointError, IronicUnavailable,
)
from ironic_shard_operator.adapters.nova import NovaAdapter, NovaError, NovaNotConfigured, NovaUnavailable
from ironic_shard_operator.core.model import Selector
from testbed.ironic_service import IronicService, unique_resource_class
from testbed.operator_objects import install_crd
from testbed.ports import free_port
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, get_pool, http_get, pool_manifest, settle,
)

pytestmark = pytest.mark.integration

PW = "Zq7-Redact!Me-91"
ENCODED = "Zq7-Redact%21Me-91"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def with_userinfo(url: str, password: str = ENCODED) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://admin:{password}@{parts.netloc}{parts.path}"


def adapter(cloud: dict[str, Any]) -> IronicAdapter:
    return IronicAdapter.from_clouds_yaml(yaml.safe_dump({"clouds": {"c": cloud}}), "c", retry_attempts=1,
                                          backoff_seconds=0.01, selector=Selector(resource_class="none"))


def basic(url: str, password: str = PW) -> dict[str, Any]:
    """http_basic with `password`, and the same password in the endpoint URLs."""
    return {"auth_type": "http_basic",
            "auth": {"username": "admin", "password": password, "endpoint": with_userinfo(url, quote(password))},
            "baremetal_endpoint_override": with_userinfo(url, quote(password))}


def keystone(auth_url: str, **auth: str) -> dict[str, Any]:
    return {"auth_type": "password",
            "auth": {"auth_url": with_userinfo(auth_url), "username": "admin", "password": PW,
                     "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default",
                     **auth}}


def raised(call, kind: type[Exception], password: str = PW) -> str:
    with pytest.raises(kind) as caught:
        call()
    message = str(caught.value)
    assert password not in message and quote(password) not in message, \
        f"{kind.__name__} quotes the password: {message}"
    return message


def test_ironic_errors_quote_no_password(ironic_service: IronicService):
    nowhere = f"http://127.0.0.1:{closed_port()}"
    url = ironic_service.url

    unreachable = raised(adapter(basic(nowhere)).check, IronicUnavailable)
    assert f"Ironic at http://admin:***@{nowhere[7:]} (cloud 'c') is not answering" in unreachable
    refused = raised(adapter(basic(url)).check, IronicAuthError)
    assert "refused the credentials of cloud 'c'" in refused and "http://admin:***@" in refused
    real = ironic_service.cloud["auth"]["password"]  # Ironic checks credentials before paths
    not_ironic = raised(adapter(basic(url + "/not-ironic", real)).check, IronicEndpointError, real)
    assert "answered HTTP 404 but is not the Ironic API root" in not_ironic
    raised(adapter(keystone(nowhere + "/v3")).check, IronicUnavailable)  # Keystone unreachable
    raised(adapter({"auth_type": "v3applicationcredential",
                    "auth": {"auth_url": with_userinfo(nowhere + "/v3"), "application_credential_id": "id",
                             "application_credential_secret": PW}}).check, IronicUnavailable)
    raised(lambda: adapter({"auth_type": "v3token", "auth": {"token": PW, "password": PW}}), IronicConfigError)
    raised(lambda: adapter({"auth_type": "http_basic", "auth": PW}), IronicConfigError)


def test_nova_errors_quote_no_password(ironic_service: IronicService):
    nowhere = f"http://127.0.0.1:{closed_port()}"
    for compute, kind in ((nowhere, NovaUnavailable), (ironic_service.url, NovaNotConfigured)):
        cloud = ironic_service.cloud
        cloud["compute_endpoint_override"] = with_userinfo(compute)
        cloud["auth"]["endpoint"] = with_userinfo(ironic_service.url, ironic_service.cloud["auth"]["password"])
        nova = NovaAdapter(adapter(cloud).connection, cloud_name="c", retry_attempts=1, backoff_seconds=0.01)
        message = raised(nova.check, kind)
        assert "http://admin:***@" in message
    nova = NovaAdapter(adapter(keystone(nowhere + "/v3")).connection, cloud_name="c", retry_attempts=1)
    raised(nova.compute_services, NovaError)


# ---- the operator: status, Events, log and metrics --------------------------------------

NOVA_CONF = f"""\
[DEFAULT]
compute_driver = ironic.IronicDriver
transport_url = rabbit://nova:{PW}@10.0.0.1:5672,nova:{PW}@10.0.0.2:5672/
[database]
connection = mysql+pymysql://nova:{PW}@db.example/nova
[ironic]
auth_type = http_basic
username = admin
password = {PW}
[keystone_authtoken]
password = {PW}
"""


def test_the_operator_writes_no_password_anywhere(kube_api: KubeAPI, kube_namespace: str, tmp_path: Path,
                                                   ironic_service: IronicService):
    """One pool per failure mode, each with the password in its clouds.yaml and nova.conf:
    the status, the Events, the operator's log and its metrics hold no password; the messages
    still say what is wrong and where."""
    client, ns = kube_api.client, kube_namespace
    install_crd(client)
    nowhere = f"http://127.0.0.1:{closed_port()}"
    real = ironic_service.cloud["auth"]["password"]
    working_ironic = ironic_service.cloud
    working_ironic["compute_endpoint_override"] = with_userinfo(nowhere, real)  # Nova unreachable
    clouds = {  # pool -> (clouds.yaml text, the Degraded reason it gets)
        "unreachable": (yaml.safe_dump({"clouds": {"c": basic(nowhere)}}), "IronicUnavailable"),
        "refused": (yaml.safe_dump({"clouds": {"c": basic(ironic_service.url)}}), "IronicAuthFailed"),
        "keystone": (yaml.safe_dump({"clouds": {"c": keystone(nowhere + "/v3")}}), "IronicUnavailable"),
        "notyaml": (f"clouds:\n  c:\n    auth:\n      password: {PW}: x\n", "CloudConfigInvalid"),
        "authtype": (yaml.safe_dump({"clouds": {"c": {**basic(nowhere), "auth_type": "passwrod"}}}),
                     "CloudConfigInvalid"),
        "nova": (yaml.safe_dump({"clouds": {"c": working_ironic}}), "NovaUnavailable"),
    }
    for name, (clouds_yaml, _) in clouds.items():
        for secret, key, text in ((f"cloud-{name}", "clouds.yaml", clouds_yaml),
                                  (f"nova-{name}", "nova.conf", NOVA_CONF)):
            client.create(f"/api/v1/namespaces/{ns}/secrets", {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
                "data": {key: base64.b64encode(text.encode()).decode()}})
    metrics_port = free_port()
    operator = OperatorProcess(kube_api, ns, "op-redact", tmp_path, METRICS_PORT=str(metrics_port)).start()
    try:
        for name in clouds:
            client.create(POOLS.format(ns=ns), pool_manifest(
                name, cloud_name="c", resource_class=unique_resource_class(name), replicas=1,
                cloud={"secretRef": {"name": f"cloud-{name}"}, "cloudName": "c"},
                novaConfig={"secretRef": {"name": f"nova-{name}"}}))

        def reported() -> dict[str, dict[str, Any]] | None:
            pools = {name: get_pool(client, ns, name) for name in clouds}
            reasons = {name: condition(pool, "Degraded").get("reason") for name, pool in pools.items()}
            return pools if reasons == {name: reason for name, (_, reason) in clouds.items()} else None

        kube_api.wait_for(reported, timeout=120, interval=1, what="every pool's failure reported")
        settle(12)  # a few more cycles of each pool: every one writes, posts and logs alike
        pools = reported()
        assert pools is not None
        metrics = http_get(metrics_port, "/metrics")
    finally:
        operator.stop()
        for name in clouds:
            client.delete(f"{POOLS.format(ns=ns)}/{name}")
    log = operator.log()
    written = {
        "status": json.dumps({name: pool.get("status") for name, pool in pools.items()}),
        "Events": json.dumps(client.get(f"/api/v1/namespaces/{ns}/events")["items"]),
        "log": log,
        "metrics": metrics,
    }
    for where, text in written.items():
        for secret in (PW, ENCODED, real, quote(real, safe="")):
            assert secret not in text, f"a password is in the operator's {where}"
    assert "ironic_shard" in metrics and "Failed to discover" in log, "the places looked at are the real ones"
    unreachable = condition(pools["unreachable"], "Degraded")["message"]
    assert f"Ironic at http://admin:***@{nowhere[7:]} (cloud 'c') is not answering" in unreachable
    assert "not valid YAML: mapping values are not allowed here at line 4" in \
        condition(pools["notyaml"], "Degraded")["message"]
    assert "Nova at http://admin:***@" in pools["nova"]["status"]["nova"]["message"]
    said = [line for line in log.splitlines() if "auth_type 'passwrod'" in line]
    changes = [m.group(1) for line in said if (m := re.search(r"pool \S+/authtype: (\w+) is ", line))]
    assert len(said) - len(changes) == 1, "an unusable clouds.yaml is logged once, not per cycle"
    assert len(changes) == len(set(changes)), "a condition change is logged once, not per cycle"
