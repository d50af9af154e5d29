"""The Nova adapter: members' compute services and Nova's hypervisor list. Talks, decides nothing.

Built on the same openstacksdk connection as the Ironic adapter (one clouds.yaml, one
cloud): openstacksdk supplies authentication and the compute endpoint (catalog or
`compute_endpoint_override`); the requests are plain compute API calls at microversion
2.53 (services addressed by UUID, `forced_down` readable and writable, hypervisors with
their service's host), so every request is one we chose.

What it keeps:
- Reads are one request for all of a cloud's nova-compute services, and one per 1,000
  hypervisors (Ironic nodes); the caller compares them with what it wants.
- Writes are exactly what the caller asks: `set_forced_down`, `delete_service`.
  Deleting is idempotent (a service already gone is not an error); Nova refusing to delete
  a host that still has instances (HTTP 409) is `ServiceInUse`, with Nova's reason.
- No answer, timeouts and 502/503/504 are retried with exponential backoff; after the last
  attempt the call raises `NovaUnavailable` and nothing was half-done on our side (each
  write is one idempotent request).
- Every failure is one exception of the `NovaError` family whose message names the problem
  and the cloud. `NovaNotConfigured` means the cloud has no usable compute endpoint:
  the operator then runs without its Nova features.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from ironic_shard_operator.adapters.openstack_http import endpoint_for, short_reason

COMPUTE_MICROVERSION = (2, 53)
MICROVERSION_HEADERS = {"OpenStack-API-Version": "compute 2.53",
                        "X-OpenStack-Nova-API-Version": "2.53"}
PAGE_LIMIT = 1000
RETRYABLE_STATUS = frozenset({502, 503, 504})


class NovaError(Exception):
    """Anything that stops the adapter; the message says what is wrong and where."""


class NovaNotConfigured(NovaError):
    """The cloud has no compute endpoint (or it is not Nova): Nova features are off."""


class NovaUnavailable(NovaError):
    """Nova does not answer (down, refused, timed out, or 5xx beyond the retries)."""


class NovaAuthError(NovaError):
    """Nova (or Keystone) refused the credentials, or policy forbids what we need (admin)."""


class NovaTooOld(NovaError):
    """The compute API is older than 2.53."""


class ServiceNotFound(NovaError):
    """The service to change does not exist (any more)."""


class ServiceInUse(NovaError):
    """Nova refused to delete a compute service: its host still has instances (or
    in-progress migrations). The service stays; `host` and Nova's `reason` say why."""

    def __init__(self, message: str, *, host: str, reason: str) -> None:
        super().__init__(message)
        self.host = host
        self.reason = reason


class NovaRequestError(NovaError):
    """Nova refused a request for another reason (a bug here or an API change)."""


@dataclass(frozen=True, slots=True)
class ComputeService:
    """One nova-compute service record. `up` is Nova's liveness verdict (heartbeat newer than
    `service_down_time`, and not forced down); `forced_down` is only ever cleared by whoever
    set it."""

    id: str
    host: str
    up: bool
    enabled: bool
    forced_down: bool
    disabled_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Hypervisor:
    """One compute node in Nova: for Ironic, `node_uuid` is the Ironic node and `host` the
    nova-compute service (the member) that reports it."""

    node_uuid: str
    host: str
    up: bool
    enabled: bool


class NovaAdapter:
    """A cloud's Nova as the operator needs it: `check()`, `compute_services()`,
    `service(host)`, `set_forced_down()`, `delete_service()`, `hypervisors()`.

    Construction does no I/O; the first call finds the compute endpoint and checks it once.
    `requests_made` counts every request sent (answered or not), `writes_made` the PUTs and
    DELETEs, so tests can assert that an unchanged cycle writes nothing.
    """

    def __init__(self, connection: Any, *, cloud_name: str | None = None,
                 request_timeout: float = 30.0, retry_attempts: int = 4,
                 backoff_seconds: float = 0.5) -> None:
        self.connection = connection
        self.cloud = cloud_name or getattr(getattr(connection, "config", None), "name", None) \
            or "(unnamed)"
        self.request_timeout = request_timeout
        self.retry_attempts = retry_attempts
        self.backoff_seconds = backoff_seconds
        self._session = getattr(connection, "session", None)
        if self._session is None:
            raise NovaNotConfigured("the connection has no keystoneauth session; pass an "
                                    "openstack.connection.Connection")
        self._endpoint: str | None = None
        self._max_version: tuple[int, int] | None = None
        self.requests_made = 0
        self.writes_made = 0

    # ---- endpoint and version -----------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The compute API base URL, ending in /v2.1 (or /v2.1/<project> from a catalog)."""
        if self._endpoint is None:
            self._endpoint = self._find_endpoint()
        return self._endpoint

    def _find_endpoint(self) -> str:
        url = endpoint_for(self.connection, self._session, "compute", self.cloud,
                           missing=NovaNotConfigured, refused=NovaAuthError, unreachable=NovaUnavailable)
        return url if "/v2.1" in url else url + "/v2.1"

    def check(self) -> tuple[int, int]:
        """Verify once that the endpoint is Nova, new enough, and that we may list services
        (admin); return Nova's maximum microversion.

        Raises NovaNotConfigured (the endpoint is not Nova, e.g. a single-endpoint cloud
        whose only endpoint is Ironic), NovaUnavailable, NovaTooOld, NovaAuthError.
        """
        if self._max_version is not None:
            return self._max_version
        root = self._send("GET", self.endpoint + "/", microversion=False)
        version = _version_document(root)
        if version is None:
            raise NovaNotConfigured(
                f"{self.endpoint} (compute endpoint of cloud '{self.cloud}') answered HTTP "
                f"{root.status_code} but is not the Nova compute API: Nova features are off "
                "(set compute_endpoint_override to Nova's URL to turn them on)")
        maximum = _parse_version(version.get("version") or "2.1")
        if maximum < COMPUTE_MICROVERSION:
            raise NovaTooOld(f"Nova at {self.endpoint} offers compute API {_format(maximum)} at "
                             f"most; the operator needs {_format(COMPUTE_MICROVERSION)}")
        probe = self._send("GET", self._url("/os-services", {"binary": "nova-compute",
                                                             "host": "-"}))
        self._raise_for_status(probe, "list compute services")
        self._max_version = maximum
        return maximum

    # ---- reading ------------------------------------------------------------------

    def compute_services(self, hosts: Iterable[str] | None = None) -> dict[str, ComputeService]:
        """nova-compute services by host (one request); only `hosts` when given."""
        self.check()
        response = self._send("GET", self._url("/os-services", {"binary": "nova-compute"}))
        self._raise_for_status(response, "list compute services")
        wanted = None if hosts is None else set(hosts)
        return {item["host"]: _service(item) for item in response.json()["services"]
                if wanted is None or item["host"] in wanted}

    def service(self, host: str) -> ComputeService | None:
        """The nova-compute service of `host`, or None when Nova has none."""
        self.check()
        response = self._send("GET", self._url("/os-services", {"binary": "nova-compute",
                                                                "host": host}))
        self._raise_for_status(response, f"read the compute service of {host}")
        found = [_service(item) for item in response.json()["services"] if item["host"] == host]
        return found[0] if found else None

    def hypervisors(self) -> tuple[Hypervisor, ...]:
        """Every compute node Nova lists with the host reporting it (pages of 1,000)."""
        self.check()
        found: list[Hypervisor] = []
        url: str | None = self._url("/os-hypervisors/detail", {"limit": PAGE_LIMIT})
        while url:
            response = self._send("GET", url)
            self._raise_for_status(response, "list hypervisors")
            body = response.json()
            found += [_hypervisor(item) for item in body["hypervisors"]]
            url = next((link["href"] for link in body.get("hypervisors_links", [])
                        if link.get("rel") == "next"), None)
        return tuple(found)

    # ---- writing ------------------------------------------------------------------

    def set_forced_down(self, service: ComputeService, forced_down: bool) -> ComputeService:
        """Set or clear `forced_down` of `service`; return the service as Nova now reports it.

        Raises ServiceNotFound when the service is gone.
        """
        self.check()
        response = self._send("PUT", self._url(f"/os-services/{service.id}"),
                              json={"forced_down": forced_down})
        if response.status_code == 404:
            raise ServiceNotFound(f"Nova has no compute service {service.id} (host "
                                  f"{service.host}) any more: cannot set forced_down")
        self._raise_for_status(response, f"set forced_down of {service.host}")
        return _service(response.json()["service"])

    def delete_service(self, service: ComputeService) -> bool:
        """Delete `service` (with its compute nodes and resource providers, done by Nova).

        True: deleted now; False: it was already gone. Raises ServiceInUse when Nova refuses
        because the host still has instances (or in-progress migrations).
        """
        self.check()
        response = self._send("DELETE", self._url(f"/os-services/{service.id}"))
        if response.status_code == 404:
            return False
        if response.status_code == 409:
            reason = _message(response)
            raise ServiceInUse(f"Nova refuses to delete the compute service of {service.host}: "
                               f"{reason}", host=service.host, reason=reason)
        self._raise_for_status(response, f"delete the compute service of {service.host}")
        return True

    # ---- transport ----------------------------------------------------------------

    def _url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        return f"{self.endpoint}{path}" + (f"?{urlencode(params)}" if params else "")

    def _send(self, method: str, url: str, *, json: Any = None, microversion: bool = True) -> Any:
        """One exchange, retried with backoff while Nova does not answer or answers
        502/503/504: the response, whatever its status. Raises NovaUnavailable at the end."""
        from keystoneauth1 import exceptions as ks

        headers = MICROVERSION_HEADERS if microversion else {}
        reason = ""
        for attempt in range(self.retry_attempts):
            if attempt:
                time.sleep(min(self.backoff_seconds * 2 ** (attempt - 1), 10.0))
            self.requests_made += 1
            self.writes_made += method in ("PUT", "DELETE")
            try:
                response = self._session.request(url, method, json=json, headers=headers,
                                                 raise_exc=False, timeout=self.request_timeout,
                                                 connect_retries=0)
            except ks.Unauthorized as error:
                raise NovaAuthError(f"the credentials of cloud '{self.cloud}' were refused: "
                                    f"{error}") from None
            except (ks.ConnectionError, ks.DiscoveryFailure) as error:
                reason = short_reason(error)
                continue
            if response.status_code in RETRYABLE_STATUS:
                reason = f"HTTP {response.status_code}: {_message(response)}"
                continue
            return response
        raise NovaUnavailable(f"Nova at {self.endpoint} (cloud '{self.cloud}') is not answering: "
                              f"{reason} ({self.retry_attempts} attempts)")

    def _raise_for_status(self, response: Any, action: str) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in (401, 403):
            verb = "refused the credentials of" if status == 401 else \
                "does not allow (policy; admin is needed) the credentials of"
            raise NovaAuthError(f"Nova at {self.endpoint} {verb} cloud '{self.cloud}' to "
                                f"{action}: HTTP {status}: {_message(response)}")
        if status == 406:
            raise NovaTooOld(f"Nova at {self.endpoint} refused microversion "
                             f"{_format(COMPUTE_MICROVERSION)}: {_message(response)}")
        raise NovaRequestError(f"Nova at {self.endpoint} refused to {action}: "
                               f"HTTP {status}: {_message(response)}")


def _service(item: Mapping[str, Any]) -> ComputeService:
    return ComputeService(id=str(item["id"]), host=item["host"], up=item.get("state") == "up",
                          enabled=item.get("status") == "enabled",
                          forced_down=bool(item.get("forced_down")),
                          disabled_reason=item.get("disabled_reason"))


def _hypervisor(item: Mapping[str, Any]) -> Hypervisor:
    return Hypervisor(node_uuid=item["hypervisor_hostname"], host=item["service"]["host"],
                      up=item.get("state") == "up", enabled=item.get("status") == "enabled")


def _version_document(response: Any) -> Mapping[str, Any] | None:
    """The v2.1 version document of a compute root answer, or None if it is not Nova's."""
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, Mapping):
        return None
    if isinstance(body.get("version"), Mapping) and body["version"].get("id") == "v2.1":
        return body["version"]
    for version in body.get("versions") or []:
        if isinstance(version, Mapping) and version.get("id") == "v2.1":
            return version
    return None


def _message(response: Any) -> str:
    """Nova's own error text ({"conflictingRequest": {"message": ...}} and the like)."""
    try:
        body = response.json()
        if isinstance(body, Mapping) and len(body) == 1:
            fault = next(iter(body.values()))
            if isinstance(fault, Mapping) and "message" in fault:
                return " ".join(str(fault["message"]).split())[:300]
    except ValueError:
        pass
    return " ".join((response.text or "").split())[:300] or "(no message)"


def _parse_version(text: str) -> tuple[int, int]:
    major, _, minor = text.strip().partition(".")
    return int(major), int(minor or 0)


def _format(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
