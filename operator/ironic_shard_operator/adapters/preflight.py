"""Preflight's questions to the cloud: Ironic, Nova, Placement and the image's registry.
Talks, decides nothing: core/preflight.py::questions selects what is asked, and every answer
goes back to core/preflight.py as plain data.

Ironic and Nova are asked through their adapters' own checks (IronicReader.check,
NovaAdapter.check: endpoint, version, credentials) and the same HTTP path
(openstack_http.send_once); nothing here is a second client. The one request that could
write, the shard-update probe, is a PATCH whose only operation addresses a path below
/shard: Ironic checks baremetal:node:update:shard for it and then fails to apply it (a shard
is never a container), so the node is never written (core/preflight.SHARD_PROBE_PATH). Even so
it addresses only a node the pool may own (core/preflight.probe_target: none of another pool's
members' nodes), and none at all while the pool is in Conflict (`Inputs.may_probe`).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlencode

from ironic_shard_operator.adapters.ironic import (
    MICROVERSION_HEADER, NODE_FIELDS, SHARD_MICROVERSION, IronicAuthError, IronicConfigError, IronicEndpointError,
    IronicError, IronicKeystoneUnavailable, IronicReader, IronicTooOld, IronicUnavailable, node_from_api,
    selector_filters,
)
from ironic_shard_operator.adapters.nova import (
    NovaAdapter, NovaAuthError, NovaError, NovaNotConfigured, NovaTooOld, NovaUnavailable,
)
from ironic_shard_operator.adapters.openstack_http import (
    Transient, endpoint_for, error_text, format_version, not_answering, parse_version, send_once, version_document,
    with_retries,
)
from ironic_shard_operator.core import preflight
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.preflight import Check, HttpAnswer, Inputs, ServiceAnswer

REQUEST_TIMEOUT = 10.0
# A service (or Keystone for it) that gave no answer is asked once more, this long after, before
# its check fails: one dropped connection (a keep-alive connection the server closed as the
# request went out) is no verdict, and a verdict stands until the next run (5 minutes for a
# failed one in the operator). A service that really is down costs one more timeout.
ASK_AGAIN_AFTER_SECONDS = 1.0


# The client libraries preflight asks through; they log their own view of what preflight's
# table already says (keystoneauth: "Failed to discover available identity versions ...").
CLIENT_LOGGERS = ("keystoneauth", "keystoneauth1", "openstack", "os_client_config", "stevedore", "urllib3")


def quiet_client_logs() -> None:
    """For a command run by a person (not the operator, whose log keeps them, redacted): the
    client libraries' own log lines are dropped, so nothing trails after preflight's table,
    which already says what failed and where."""
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def run_checks(inputs: Inputs) -> list[Check]:
    """Every check core/preflight.py::questions selects, in the order a user fixes them: the
    cloud, Nova, the files, the image."""
    asked = preflight.questions(inputs)
    checks = cloud_checks(inputs.clouds_yaml, inputs.cloud_name, inputs.selector, pool_name=inputs.pool_name,
                          may_probe=asked.probe) if asked.cloud else [preflight.no_clouds_yaml()]
    checks += preflight.file_checks(inputs)
    if asked.image:
        checks.append(preflight.image_check(inputs.image, registry_answer(inputs.image) if asked.registry else None))
    return checks


def cloud_checks(clouds_yaml: str, cloud_name: str, selector: Selector = Selector(), *,
                 pool_name: str | None = None, may_probe: bool = True) -> list[Check]:
    """Ironic (reachable, version, shard listing, shard summary, shard-update policy), Nova and
    Placement. The shard-update probe addresses only a node `pool_name` may own, and is not sent
    without `may_probe`."""
    try:
        adapter = IronicReader.from_clouds_yaml(clouds_yaml, cloud_name, selector=selector,
                                                request_timeout=REQUEST_TIMEOUT, retry_attempts=1)
    except IronicError as error:
        return [preflight.clouds_yaml_unusable(str(error), cloud_name)]
    answer = _ironic_answer(adapter)
    if not preflight.asks_beyond_ironic(answer):
        return preflight.ironic_checks(answer, None)
    checks = preflight.ironic_checks(answer, _ironic_get(adapter, "/nodes", {
        **selector_filters(selector), "shard": "ironic-shard-operator-preflight", "fields": "uuid,shard",
        "limit": 1}))
    checks.append(preflight.shard_summary_check(_ironic_get(adapter, "/shards", {})))
    if may_probe:
        node, others = _probe_node(adapter, selector, pool_name)
        probe = None if node is None else _ironic_send(adapter, "PATCH", f"/nodes/{node}",
                                                       [{"op": "remove", "path": preflight.SHARD_PROBE_PATH}])
        checks.append(preflight.shard_update_check(probe, node, others=others))
    else:
        checks.append(preflight.probe_in_conflict())
    checks.append(preflight.nova_check(_nova_answer(adapter)))
    checks.append(preflight.placement_check(_placement_answer(adapter)))
    return checks


def _ironic_answer(adapter: IronicReader) -> ServiceAnswer:
    return _checked(adapter.check, IronicError, (
        (IronicConfigError, "config"), (IronicKeystoneUnavailable, "keystone"), (IronicUnavailable, "unavailable"),
        (IronicEndpointError, "endpoint"), (IronicAuthError, "auth"), (IronicTooOld, "too_old")))


def _checked(check: Callable[[], tuple[int, int]], errors: type[Exception],
             kinds: tuple[tuple[type[Exception], str], ...]) -> ServiceAnswer:
    """The service's version from its adapter's `check`, or the failure's kind (the first of
    `kinds` the error is an instance of; "request" for none) and message. A check that got no
    answer (core/preflight.py::ASKED_AGAIN) is made once more, ASK_AGAIN_AFTER_SECONDS later."""
    for attempt in range(2):
        if attempt:
            time.sleep(ASK_AGAIN_AFTER_SECONDS)
        try:
            return ServiceAnswer(version=check())
        except errors as error:
            kind = next((k for cls, k in kinds if isinstance(error, cls)), "request")
            answer = ServiceAnswer(failure=kind, message=str(error))
            if kind not in preflight.ASKED_AGAIN:
                break
    return answer


def _probe_node(adapter: IronicReader, selector: Selector, pool_name: str | None) -> tuple[str | None, int]:
    """The probe's target among the selection's first nodes (core/preflight.probe_target), and
    how many of those were left out as another pool's."""
    answer = _ironic_get(adapter, "/nodes", {**selector_filters(selector),
                                             "fields": ",".join(NODE_FIELDS), "limit": 50})
    if answer.status != 200:
        return None, 0
    nodes = [node_from_api(item) for item in json.loads(answer.text).get("nodes") or []]
    target = preflight.probe_target(nodes, pool_name)
    return target, (len(nodes) if target is None else 0)


def _ironic_get(adapter: IronicReader, path: str, params: dict) -> HttpAnswer:
    query = f"?{urlencode(params, safe=',')}" if params else ""
    return _ironic_send(adapter, "GET", f"{path}{query}", None)


def _ironic_send(adapter: IronicReader, method: str, path: str, body: object) -> HttpAnswer:
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


def _nova_answer(adapter: IronicReader) -> ServiceAnswer:
    nova = NovaAdapter(adapter.connection, cloud_name=adapter.cloud, request_timeout=REQUEST_TIMEOUT,
                       retry_attempts=1)
    return _checked(nova.check, NovaError, ((NovaNotConfigured, "not_configured"), (NovaUnavailable, "unavailable"),
                                            (NovaAuthError, "auth"), (NovaTooOld, "too_old")))


class _NoPlacement(Exception):
    pass


def _placement_answer(adapter: IronicReader) -> ServiceAnswer:
    """Placement's root document (its version list), through the cloud's session."""
    session = adapter.connection.session
    try:
        url = endpoint_for(adapter.connection, session, "placement", adapter.cloud, missing=_NoPlacement,
                           refused=_NoPlacement, unreachable=_NoPlacement)
    except _NoPlacement as error:
        return ServiceAnswer(failure="not_configured", message=str(error))
    try:
        response = with_retries(lambda: send_once(session, "GET", url + "/", json=None, headers={},
                                                  timeout=REQUEST_TIMEOUT, cloud=adapter.cloud, refused=_NoPlacement),
                                attempts=2, backoff_seconds=ASK_AGAIN_AFTER_SECONDS, retry_status=frozenset(),
                                gave_up=lambda failure: failure)
    except Transient as failure:
        return ServiceAnswer(failure="unavailable", message=not_answering(
            "Placement", url, adapter.cloud, failure, "is it running, and is its endpoint right?"))
    except _NoPlacement as refused:
        return ServiceAnswer(failure="unavailable", message=f"Placement at {url} cannot be asked: {refused}")
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


# What OpenSSL reports when the peer answers a TLS ClientHello in plain text (an HTTP
# server's "HTTP/1.1 400" read as a TLS record): WRONG_VERSION_NUMBER up to OpenSSL 3.1
# (3.0 here, seen against the real registry served without TLS); OpenSSL 3.2 and later end the
# same failure with RECORD_LAYER_FAILURE after PACKET_LENGTH_TOO_LONG, and Python names the
# last error; HTTP_REQUEST where the peer's bytes read as an HTTP request line.
_NO_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                             "HTTP_REQUEST"})


class _NoAnswer(Exception):
    """Nothing HTTP answered; `reason` is what the connection ended with."""

    def __init__(self, reason: object) -> None:
        super().__init__(str(reason))
        self.reason = reason


def registry_answer(image: str, timeout: float = REQUEST_TIMEOUT) -> HttpAnswer:
    """HEAD of the image's manifest, anonymous (with the registry's anonymous bearer token when
    it asks for one): 200 exists, 404 does not, 401/403 needs credentials, None status when
    the registry could not be reached or its TLS certificate is not trusted here (the text
    says which). Asked over HTTPS; when the port answers the TLS handshake in plain text (a
    registry without TLS, as in-cluster and localhost:5000 registries often are), asked again
    over plain HTTP, and that answer is the one returned, its scheme 'http'. A 400 there is
    not a registry's answer but a TLS port's complaint about plain HTTP ("Client sent an HTTP
    request to an HTTPS server"): the TLS failure stands."""
    registry, repository, reference = preflight.split_image(image)
    path = f"{registry}/v2/{repository}/manifests/{reference}"
    try:
        return _head_manifest(f"https://{path}", timeout)
    except _NoAnswer as failure:
        tls = failure.reason
    if isinstance(tls, ssl.SSLCertVerificationError):
        # It answered: a private CA this machine does not trust (SSL_CERT_FILE=CA.pem trusts it).
        return HttpAnswer(None, f"registry {registry} answered with a TLS certificate not trusted here "
                                f"({tls.verify_message}); trust its CA to check it (SSL_CERT_FILE)")
    if not (isinstance(tls, ssl.SSLError) and tls.reason in _NO_TLS_REASONS):
        return HttpAnswer(None, f"registry {registry} not reachable ({tls})")
    try:
        plain = _head_manifest(f"http://{path}", timeout)
    except _NoAnswer as failure:
        return HttpAnswer(None, f"registry {registry} not reachable: its port speaks no TLS ({tls}) and "
                                f"did not answer plain HTTP either ({failure.reason})")
    if plain.status == 400:
        return HttpAnswer(None, f"registry {registry} not reachable over TLS ({tls}); over plain HTTP "
                                f"it answered HTTP 400{f': {plain.text}' if plain.text else ''}")
    return plain


def _head_manifest(url: str, timeout: float) -> HttpAnswer:
    """One anonymous HEAD of a manifest URL (a second with the anonymous bearer token when the
    registry asks for one): what the registry answered, with the URL's scheme; _NoAnswer when
    nothing HTTP answered."""
    scheme = url.split(":", 1)[0]
    headers = {"Accept": _MANIFESTS}
    for _ in range(2):
        request = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return HttpAnswer(response.status, "", scheme)
        except urllib.error.HTTPError as error:
            challenge = error.headers.get("WWW-Authenticate", "")
            token = _anonymous_token(challenge, timeout) if error.code == 401 and "Authorization" not in headers \
                else None
            if token is None:
                return HttpAnswer(error.code, error.reason if isinstance(error.reason, str) else "", scheme)
            headers["Authorization"] = f"Bearer {token}"
        except http.client.HTTPException as error:  # not HTTP (BadStatusLine: another protocol's banner)
            raise _NoAnswer(f"{type(error).__name__}: {' '.join(str(error).split())}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise _NoAnswer(getattr(error, "reason", error)) from None
    return HttpAnswer(401, "the registry refused its own anonymous token", scheme)


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

