"""Preflight's questions to the cloud: Ironic, Nova, Placement and the image's registry.
Talks, decides nothing: every answer goes to core/preflight.py as plain data.

Ironic and Nova are asked through their adapters' own checks (IronicAdapter.check,
NovaAdapter.check: endpoint, version, credentials) and the same HTTP path
(openstack_http.send_once); nothing here is a second client. The one request that could
write, the shard-update probe, is a PATCH whose only operation addresses a path below
/shard: Ironic checks baremetal:node:update:shard for it and then fails to apply it (a shard
is never a container), so the node is never written (core/preflight.SHARD_PROBE_PATH).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlencode

from ironic_shard_operator.adapters.ironic import (
    MICROVERSION_HEADER, SHARD_MICROVERSION, IronicAdapter, IronicAuthError, IronicConfigError,
    IronicEndpointError, IronicError, IronicTooOld, IronicUnavailable, selector_filters,
)
from ironic_shard_operator.adapters.nova import (
    NovaAdapter, NovaAuthError, NovaError, NovaNotConfigured, NovaTooOld, NovaUnavailable,
)
from ironic_shard_operator.adapters.openstack_http import (
    Transient, endpoint_for, error_text, format_version, parse_version, send_once, version_document,
)
from ironic_shard_operator.core import preflight
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.preflight import Check, HttpAnswer, ServiceAnswer

REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Inputs:
    """What preflight checks: the cloud (clouds.yaml text and cloud name), the pool's node
    selection, the base nova.conf, the handover nova.conf (`handover` says whether one is
    configured) and the member image."""

    clouds_yaml: str | None
    cloud_name: str
    nova_conf: str | None
    selector: Selector = Selector()
    handover: bool = False
    handover_nova_conf: str | None = None
    image: str | None = None
    check_image: bool = True


def run_checks(inputs: Inputs) -> list[Check]:
    """Every check, in the order a user fixes them: the cloud, Nova, the files, the image."""
    checks: list[Check] = []
    if inputs.clouds_yaml is None:
        checks.append(preflight.failed("ironic-reachable", "no clouds.yaml given",
                                       "create the Secret of spec.cloud (or pass --clouds-yaml FILE)"))
    else:
        checks += cloud_checks(inputs.clouds_yaml, inputs.cloud_name, inputs.selector)
    checks += preflight.nova_conf_checks(inputs.nova_conf)
    handover = preflight.handover_conf_check(inputs.handover_nova_conf, inputs.handover)
    if handover is not None:
        checks.append(handover)
    if inputs.check_image:
        checks.append(preflight.image_check(inputs.image, registry_answer(inputs.image)
                                            if inputs.image else None))
    return checks


def cloud_checks(clouds_yaml: str, cloud_name: str, selector: Selector = Selector()) -> list[Check]:
    """Ironic (reachable, version, shard listing, shard-update policy), Nova and Placement."""
    try:
        adapter = IronicAdapter.from_clouds_yaml(clouds_yaml, cloud_name, selector=selector,
                                                 request_timeout=REQUEST_TIMEOUT, retry_attempts=1)
    except IronicError as error:
        return [preflight.failed("ironic-reachable", str(error),
                                 "fix the cloud's entry in clouds.yaml (auth_type, auth, endpoint override)")]
    answer = _ironic_answer(adapter)
    if answer.failure is not None:
        return preflight.ironic_checks(answer, None)
    checks = preflight.ironic_checks(answer, _ironic_get(adapter, "/nodes", {
        **selector_filters(selector), "shard": "ironic-shard-operator-preflight", "fields": "uuid,shard",
        "limit": 1}))
    node = _probe_node(adapter, selector)
    probe = None if node is None else _ironic_send(adapter, "PATCH", f"/nodes/{node}",
                                                   [{"op": "remove", "path": preflight.SHARD_PROBE_PATH}])
    checks.append(preflight.shard_update_check(probe, node))
    checks.append(preflight.nova_check(_nova_answer(adapter)))
    checks.append(preflight.placement_check(_placement_answer(adapter)))
    return checks


def _ironic_answer(adapter: IronicAdapter) -> ServiceAnswer:
    kinds = ((IronicConfigError, "config"), (IronicUnavailable, "unavailable"),
             (IronicEndpointError, "endpoint"), (IronicAuthError, "auth"), (IronicTooOld, "too_old"))
    try:
        return ServiceAnswer(version=adapter.check())
    except IronicError as error:
        kind = next((k for cls, k in kinds if isinstance(error, cls)), "request")
        return ServiceAnswer(failure=kind, message=str(error))


def _probe_node(adapter: IronicAdapter, selector: Selector) -> str | None:
    """A node of the selection that is not in a state transition (the probe's target)."""
    answer = _ironic_get(adapter, "/nodes", {**selector_filters(selector),
                                             "fields": "uuid,target_provision_state,reservation",
                                             "limit": 50})
    if answer.status != 200:
        return None
    nodes = json.loads(answer.text).get("nodes") or []
    idle = [n for n in nodes if not n.get("target_provision_state") and not n.get("reservation")]
    return (idle or nodes or [{}])[0].get("uuid")


def _ironic_get(adapter: IronicAdapter, path: str, params: dict) -> HttpAnswer:
    return _ironic_send(adapter, "GET", f"{path}?{urlencode(params, safe=',')}", None)


def _ironic_send(adapter: IronicAdapter, method: str, path: str, body: object) -> HttpAnswer:
    """One request at Ironic's shard microversion through the adapter's session; a GET's
    answer carries its body, any other its error text."""
    try:
        response = send_once(adapter.connection.session, method, f"{adapter.endpoint}/v1{path}", json=body,
                             headers={MICROVERSION_HEADER: format_version(SHARD_MICROVERSION)},
                             timeout=REQUEST_TIMEOUT, cloud=adapter.cloud, refused=IronicAuthError)
    except Transient as failure:
        return HttpAnswer(None, failure.reason)
    except IronicAuthError as error:
        return HttpAnswer(401, str(error))
    if method == "GET" and response.status_code == 200:
        return HttpAnswer(200, response.text)
    return HttpAnswer(response.status_code, error_text(response))


def _nova_answer(adapter: IronicAdapter) -> ServiceAnswer:
    kinds = ((NovaNotConfigured, "not_configured"), (NovaUnavailable, "unavailable"),
             (NovaAuthError, "auth"), (NovaTooOld, "too_old"))
    nova = NovaAdapter(adapter.connection, cloud_name=adapter.cloud, request_timeout=REQUEST_TIMEOUT,
                       retry_attempts=1)
    try:
        return ServiceAnswer(version=nova.check())
    except NovaError as error:
        kind = next((k for cls, k in kinds if isinstance(error, cls)), "request")
        return ServiceAnswer(failure=kind, message=str(error))


class _NoPlacement(Exception):
    pass


def _placement_answer(adapter: IronicAdapter) -> ServiceAnswer:
    """Placement's root document (its version list), through the cloud's session."""
    session = adapter.connection.session
    try:
        url = endpoint_for(adapter.connection, session, "placement", adapter.cloud, missing=_NoPlacement,
                           refused=_NoPlacement, unreachable=_NoPlacement)
    except _NoPlacement as error:
        return ServiceAnswer(failure="not_configured", message=str(error))
    try:
        response = send_once(session, "GET", url + "/", json=None, headers={}, timeout=REQUEST_TIMEOUT,
                             cloud=adapter.cloud, refused=_NoPlacement)
    except (Transient, _NoPlacement) as failure:
        return ServiceAnswer(failure="unavailable",
                             message=f"Placement at {url} is not answering: {getattr(failure, 'reason', failure)}")
    document = version_document(response, "v1.0")
    if document is None:
        return ServiceAnswer(failure="not_configured", message=f"{url} (placement endpoint of cloud "
                             f"'{adapter.cloud}') answered HTTP {response.status_code} but is not the Placement API")
    return ServiceAnswer(version=parse_version(document.get("max_version") or "1.0"))


# --- the image's registry ---------------------------------------------------------------

_MANIFESTS = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json"))


def split_image(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference, Docker's defaults
    applied (docker.io, library/, latest)."""
    name, reference = image, "latest"
    if "@" in name:
        name, reference = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, reference = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = "registry-1.docker.io", name
    if registry == "registry-1.docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository, reference


def registry_answer(image: str, timeout: float = REQUEST_TIMEOUT, scheme: str = "https") -> HttpAnswer:
    """HEAD of the image's manifest, anonymous (with the registry's anonymous bearer token when
    it asks for one): 200 exists, 404 does not, 401/403 needs credentials, None status when
    the registry could not be reached."""
    registry, repository, reference = split_image(image)
    url = f"{scheme}://{registry}/v2/{repository}/manifests/{reference}"
    headers = {"Accept": _MANIFESTS}
    for _ in range(2):
        request = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return HttpAnswer(response.status)
        except urllib.error.HTTPError as error:
            challenge = error.headers.get("WWW-Authenticate", "")
            token = _anonymous_token(challenge, timeout) if error.code == 401 and "Authorization" not in headers \
                else None
            if token is None:
                return HttpAnswer(error.code, error.reason if isinstance(error.reason, str) else "")
            headers["Authorization"] = f"Bearer {token}"
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            return HttpAnswer(None, f"registry {registry} not reachable ({reason})")
    return HttpAnswer(401, "the registry refused its own anonymous token")


def _anonymous_token(challenge: str, timeout: float) -> str | None:
    """An anonymous pull token for a `Bearer realm=...,service=...,scope=...` challenge."""
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if "realm" not in fields:
        return None
    query = urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
    try:
        with urllib.request.urlopen(f"{fields['realm']}?{query}", timeout=timeout) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return body.get("token") or body.get("access_token")

