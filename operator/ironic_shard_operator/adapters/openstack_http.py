"""How the adapters talk to an OpenStack API: where it answers, one request and its
retries, microversions, and the service's own error text. A request is raw HTTP on the
cloud's keystoneauth session (`send_once`) or one openstacksdk makes through a proxy whose
every exchange the adapter's own transport carries (`routed_proxy`): either way one attempt
is `answer_of`'s.

The clouds.yaml's `<service>_endpoint_override` wins; otherwise Keystone's catalog is asked
with the cloud's interface and region, as openstacksdk itself would. Each adapter passes
its own error types and its own retry settings, so an operator reading a condition sees
"Ironic ..." or "Nova ..." errors in that adapter's own terms.

No credential leaves an adapter in an error: the texts made here (a service's error text, a
connection failure's reason, Keystone's refusal) are redacted (core/redact.py), the
adapters' exception types redact their messages, and `redacting` masks the credentials of
the adapter's own cloud (`secrets_of`) in whatever its public methods raise.
"""

from __future__ import annotations

import functools
import json as jsonlib
import re
import time
from collections.abc import Callable, Mapping, Set as AbstractSet
from typing import Any, TypeVar

from ironic_shard_operator.core.redact import redact, secrets_in_clouds_yaml

# The longest wait between two attempts of one request, however many attempts are allowed.
MAX_BACKOFF_SECONDS = 10.0
# The longest wait for the auth_url's answer to the is-it-Keystone probe (a silent Keystone then
# costs the token request's own timeouts, not one more).
PROBE_TIMEOUT_SECONDS = 5.0


def cloud_label(connection: Any, cloud_name: str | None) -> str:
    """The cloud's name for messages: the one given, else the connection's, else '(unnamed)'."""
    return cloud_name or getattr(getattr(connection, "config", None), "name", None) or "(unnamed)"


def secrets_of(connection: Any) -> frozenset[str]:
    """The credentials in a connection's cloud settings (its clouds.yaml entry): passwords,
    secrets, tokens, and the passwords of URLs with userinfo."""
    settings = getattr(getattr(connection, "config", None), "config", None)
    return secrets_in_clouds_yaml(settings if isinstance(settings, Mapping) else None)


Method = TypeVar("Method", bound=Callable[..., Any])
ProxyT = TypeVar("ProxyT")


def redacting(method: Method) -> Method:
    """For an adapter's public method: whatever it raises carries none of the credentials of
    the adapter's cloud (`self.secrets`) in its message (nor in a `reason` it carries)."""
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            error.args = tuple(redact(arg, self.secrets) if isinstance(arg, str) else arg for arg in error.args)
            if isinstance(getattr(error, "reason", None), str):
                error.reason = redact(error.reason, self.secrets)  # type: ignore[attr-defined]
            raise
    return guarded  # type: ignore[return-value]


def session_of(connection: Any, *, missing: type[Exception]) -> Any:
    """The keystoneauth session of an openstacksdk connection; raises `missing` without one."""
    session = getattr(connection, "session", None)
    if session is None:
        raise missing("the connection has no keystoneauth session; pass an "
                      "openstack.connection.Connection")
    return session


def endpoint_for(connection: Any, session: Any, service_type: str, cloud: str, *,
                 missing: type[Exception], refused: type[Exception],
                 unreachable: type[Exception]) -> str:
    """The URL of `service_type` in cloud `cloud`, without a trailing slash.

    Raises `missing` when neither the clouds.yaml nor the catalog names one, `refused`
    when Keystone refuses the credentials or the auth_url is not Keystone
    (`refuse_auth_url_that_is_not_keystone`), `unreachable` when Keystone does not answer
    (the message names Keystone and its auth_url: the service itself was never asked).
    """
    from keystoneauth1 import exceptions as ks

    refuse_auth_url_that_is_not_keystone(session, cloud, refused=refused)
    config = connection.config
    url = config.get_endpoint(service_type)
    if _guessed(config, session, service_type, url):
        raise missing(f"cloud '{cloud}' has no {service_type} endpoint: its clouds.yaml sets no "
                      f"{service_type}_endpoint_override, and its auth_type {_auth_type(config)} has no "
                      f"catalog to find one in")
    if not url:
        try:
            url = session.get_endpoint(service_type=service_type, interface=config.get_interface(),
                                       region_name=config.get_region_name(service_type))
        except ks.Unauthorized as error:
            raise refused(f"Keystone refused the credentials of cloud '{cloud}': "
                          f"{redact(str(error))}") from None
        except ks.EndpointNotFound:
            url = None
        except (ks.ConnectionError, ks.DiscoveryFailure) as error:
            auth_url = getattr(getattr(session, "auth", None), "auth_url", None) or "its auth_url"
            raise unreachable(f"cannot reach Keystone at {redact(auth_url)} (cloud '{cloud}'), asked for the "
                              f"{service_type} endpoint in its catalog: {short_reason(error)}") from None
    if not url:
        raise missing(f"cloud '{cloud}' has no {service_type} endpoint: neither "
                      f"{service_type}_endpoint_override in its clouds.yaml nor one in its catalog")
    return url.rstrip("/")


# The keystoneauth plugins without a catalog (auth_type none, http_basic): the one URL they hold,
# auth.endpoint, is what they answer for every service type. A standalone Ironic's clouds.yaml
# names Ironic there, so for any other service that URL is a guess, and a wrong one.
CATALOG_LESS_PLUGINS = (("keystoneauth1.noauth", "NoAuth"), ("keystoneauth1.http_basic", "HTTPBasicAuth"))


def _guessed(config: Any, session: Any, service_type: str, url: str | None) -> bool:
    """Whether the endpoint of `service_type` would be a catalog-less plugin's auth.endpoint
    (CATALOG_LESS_PLUGINS) rather than one the clouds.yaml names for it: never for Ironic
    (baremetal), whose endpoint that is."""
    plugin = getattr(session, "auth", None)
    if service_type == "baremetal" or (type(plugin).__module__, type(plugin).__name__) not in CATALOG_LESS_PLUGINS:
        return False
    settings = getattr(config, "config", None) or {}
    key = service_type.replace("-", "_")
    if settings.get(f"{key}_endpoint_override") or settings.get(f"{key}_endpoint"):
        return False
    return not url or url.rstrip("/") == str(getattr(plugin, "endpoint", "") or "").rstrip("/")


def _auth_type(config: Any) -> str:
    settings = getattr(config, "config", None) or {}
    return str(settings.get("auth_type") or "none")


def refuse_auth_url_that_is_not_keystone(session: Any, cloud: str, *, refused: type[Exception]) -> None:
    """Raise `refused` when the cloud's auth_url answers 401 to a request without a token.

    keystoneauth's generic identity plugins (auth_type `password`, `token`, ...) first ask
    the auth_url which Identity versions it serves, holding the plugin's lock; on a 401 they
    ask again with a token, which needs that same lock: the thread waits for ever (keystoneauth1
    5.x, discover.get_version_data inside identity.base.get_access), and so would every cycle
    of the pool. Keystone answers its version documents without a token, so an auth_url that
    answers 401 is not Keystone (a service's endpoint given by mistake) and is refused before
    keystoneauth is asked. A plugin of one Identity version (`v3password`, ...) does no such
    discovery and is not asked; neither is an auth_url that does not answer here (the token
    request then fails on its own, bounded by the session's timeout)."""
    from keystoneauth1 import exceptions as ks
    from keystoneauth1.identity.generic.base import BaseGenericPlugin

    plugin = getattr(session, "auth", None)
    if not isinstance(plugin, BaseGenericPlugin):
        return
    try:
        answer = session.get(plugin.auth_url, authenticated=False, raise_exc=False, connect_retries=0,
                             headers={"Accept": "application/json"},
                             timeout=min(session.timeout or PROBE_TIMEOUT_SECONDS, PROBE_TIMEOUT_SECONDS))
    except (ks.ConnectionError, ks.DiscoveryFailure):
        return
    if answer.status_code == 401:
        raise refused(f"the auth_url {redact(plugin.auth_url)} of cloud '{cloud}' answered HTTP 401 to a "
                      "request without a token; Keystone answers that without one, so it is not Keystone's "
                      "Identity endpoint: point auth.auth_url at Keystone (e.g. https://keystone.example/v3)")


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def short_reason(error: BaseException) -> str:
    """The useful part of a connection error: 'Connection refused', 'timed out', ... (the
    error's own text, redacted, when it is none of those)."""
    text = redact(str(error))
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    if "timed out" in text.lower() or "timeout" in type(error).__name__.lower():
        return "timed out"
    return " ".join(text.split())[:200] or type(error).__name__


class Transient(Exception):
    """A failure worth another try: nothing answered (`unavailable`), or the service
    answered that the thing is busy (Ironic's 409, node locked). `keystone`: the token request
    to Keystone failed (no answer, TLS, an HTTP error), so the service itself was never asked."""

    def __init__(self, reason: str, *, unavailable: bool = True, keystone: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unavailable = unavailable
        self.keystone = keystone


def not_answering(service: str, endpoint: str, cloud: str, failure: Transient, hint: str) -> str:
    """What to tell a person when `service` gave no usable answer: about the service with
    `hint`, or, when the token request failed, about Keystone (the service was never asked)."""
    if failure.keystone:
        return (f"{service} at {endpoint} (cloud '{cloud}') cannot be asked: {failure.reason}; is Keystone "
                "running, and is the cloud's auth_url right?")
    return f"{service} at {endpoint} (cloud '{cloud}') is not answering: {failure.reason}; {hint}"


def send_once(session: Any, method: str, url: str, *, json: Any, headers: Mapping[str, str],
              timeout: float, cloud: str, refused: type[Exception]) -> Any:
    """One HTTP attempt through the cloud's keystoneauth session: the response, whatever its
    status (`answer_of`)."""
    return answer_of(session, lambda **options: session.request(url, method, json=json, headers=headers, **options),
                     timeout=timeout, cloud=cloud, refused=refused)


def answer_of(session: Any, send: Callable[..., Any], *, timeout: float, cloud: str,
              refused: type[Exception]) -> Any:
    """The response of `send(**options)`, one HTTP attempt through `session` (`options`: no error
    raised for a status, no retry of keystoneauth's own, `timeout`), whatever its status. Raises
    `refused` when no token could be had for the credentials, Transient when nothing answered
    (refused, timed out, unreachable) or Keystone failed the token request (no answer, TLS, an
    HTTP error such as 503): then the reason names Keystone and the service itself was never asked."""
    from keystoneauth1 import exceptions as ks

    try:
        session.get_auth_headers()  # the token (kept by the session until it expires)
    except (ks.Unauthorized, ks.AuthorizationFailure) as error:
        raise refused(f"the credentials of cloud '{cloud}' were refused: {redact(str(error))}") from None
    except (ks.ConnectionError, ks.DiscoveryFailure, ks.HttpError) as error:
        auth_url = getattr(getattr(session, "auth", None), "auth_url", None) or "its auth_url"
        reason = redact(str(error)) if isinstance(error, ks.HttpError) else short_reason(error)
        raise Transient(f"the token request to Keystone at {redact(auth_url)} failed: {reason}",
                        keystone=True) from None
    except ks.MissingAuthPlugin:
        pass  # no authentication (a token_endpoint or none): nothing to ask first
    try:
        return send(raise_exc=False, timeout=timeout, connect_retries=0)
    except ks.Unauthorized as error:  # an auth plugin that could not get a token
        raise refused(f"the credentials of cloud '{cloud}' were refused: {redact(str(error))}") from None
    except (ks.ConnectionError, ks.DiscoveryFailure) as error:
        raise Transient(short_reason(error)) from None


def routed_proxy(proxy_class: type[ProxyT], connection: Any, *, service_type: str, endpoint: str,
                 default_microversion: str, exchange: Callable[[str, Callable[..., Any]], Any]) -> ProxyT:
    """openstacksdk's `proxy_class` (its compute or placement proxy) for `endpoint`, on the
    connection's session, at `default_microversion` unless a call names another, whose every HTTP
    exchange is `exchange(method, send)`: `send(**options)` makes it once with the keystoneauth
    options given (answer_of's). openstacksdk builds the requests and reads the answers; the
    adapter's own transport (counting, timeouts, retries, Keystone's failures told apart) carries
    them, as it carries the adapter's raw calls made through the same proxy (`proxy.get(url)`)."""
    routed = _routed(proxy_class)
    proxy = routed(session=connection.session, service_type=service_type, endpoint_override=endpoint,
                   default_microversion=default_microversion)
    proxy._connection = connection  # openstacksdk's resources are built for their connection
    proxy.exchange = exchange
    return proxy


@functools.cache
def _routed(proxy_class: type[ProxyT]) -> type[ProxyT]:
    """`proxy_class` whose `request`, which every HTTP exchange of openstacksdk's goes through,
    hands the exchange to the instance's `exchange`."""
    class Routed(proxy_class):  # type: ignore[valid-type,misc]
        exchange: Callable[[str, Callable[..., Any]], Any]

        def request(self, url: str, method: str, *args: Any, **kwargs: Any) -> Any:
            return self.exchange(method, lambda **options: super(Routed, self).request(
                url, method, *args, **{**kwargs, **options}))

    Routed.__name__ = Routed.__qualname__ = f"Routed{proxy_class.__name__}"
    return Routed


def with_retries(attempt: Callable[[], Any], *, attempts: int, backoff_seconds: float,
                 retry_status: AbstractSet[int], gave_up: Callable[[Transient], Exception]) -> Any:
    """The first answer of up to `attempts` calls of `attempt` whose status is not in
    `retry_status`; the calls are spaced by `backoff_delay`. An attempt that raises Transient
    counts as no answer. Raises `gave_up(the last failure)` after the last one (an answer
    with a status of `retry_status` counts as a Transient with that answer as its reason)."""
    failure = Transient("no attempt made")
    for number in range(attempts):
        if number:
            time.sleep(backoff_delay(backoff_seconds, number - 1))
        try:
            response = attempt()
        except Transient as no_answer:
            failure = no_answer
            continue
        if response.status_code in retry_status:
            failure = Transient(describe(response))
            continue
        return response
    raise gave_up(failure)


def backoff_delay(backoff_seconds: float, retry: int) -> float:
    """The wait before retry number `retry` (0 for the first): doubling, at most 10 s."""
    return min(backoff_seconds * 2 ** retry, MAX_BACKOFF_SECONDS)


def parse_version(text: str) -> tuple[int, int]:
    """A microversion ("1.82", "2.53"; "2" is 2.0) as a comparable (major, minor)."""
    major, _, minor = text.strip().partition(".")
    return int(major), int(minor or 0)


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def version_document(response: Any, version_id: str) -> Mapping[str, Any] | None:
    """The document of API version `version_id` ("v2.1") in an API root's answer (a single
    {"version": ...} or a {"versions": [...]} list), or None if the answer has none: then
    what answered is not that API."""
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, Mapping):
        return None
    if isinstance(body.get("version"), Mapping) and body["version"].get("id") == version_id:
        return body["version"]
    for version in body.get("versions") or []:
        if isinstance(version, Mapping) and version.get("id") == version_id:
            return version
    return None


def error_text(response: Any) -> str:
    """The service's own error text, redacted, on one line and at most 300 characters ('' if
    none): Ironic's {"error_message": "<JSON with a faultstring>"}, Nova's
    {"conflictingRequest": {"message": ...}} and the like, else the body as it came."""
    text = response.text or ""
    try:
        body = response.json()
        if "error_message" in body:  # Ironic wraps its fault as a JSON string
            inner = body["error_message"]
            text = jsonlib.loads(inner).get("faultstring", inner) if isinstance(inner, str) else inner
        else:
            fault = body.get("error") if isinstance(body.get("error"), Mapping) else \
                next(iter(body.values())) if len(body) == 1 else None
            if isinstance(fault, Mapping):
                text = fault.get("message", text)
    except (ValueError, AttributeError, TypeError):
        pass
    return redact(" ".join(str(text).split()))[:300]


def describe(response: Any) -> str:
    """'HTTP 409: <the service's error text>' for a response, short enough for a message."""
    text = error_text(response)
    return f"HTTP {response.status_code}: {text}" if text else f"HTTP {response.status_code}"
