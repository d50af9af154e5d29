"""No adapter error quotes a credential, against the real Ironic service: a distinctive
password in every place a clouds.yaml can hold one (auth.password, application credential
secret, URLs with userinfo in auth_url, auth.endpoint and the endpoint overrides), and every
failure mode the adapters name (unreachable, credentials refused, not Ironic, Keystone
unreachable, an unusable entry, Nova unreachable or not Nova)."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import yaml

from ironic_shard_operator.adapters.ironic import (
    IronicAdapter, IronicAuthError, IronicConfigError, IronicEndpointError, IronicUnavailable,
)
from ironic_shard_operator.adapters.nova import NovaAdapter, NovaError, NovaNotConfigured, NovaUnavailable
from ironic_shard_operator.core.model import Selector
from testbed.ironic_service import IronicService

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
