"""The Nova adapter: members' compute services and Nova's hypervisor list. Talks, decides nothing.

openstacksdk's compute proxy at microversion 2.53 makes the services, forced_down, delete and
servers calls over the adapter's own transport (openstack_http.routed_proxy); the API root, the
hypervisor list (an SDK Hypervisor costs ~1 ms of CPU each: bench/sdk_cost_bench.py) and the
host-mapping read at 2.42 stay raw, each saying why at its call. Invariants: writes are exactly what
the caller asks and idempotent; every failure is one `NovaError` naming the problem and the cloud,
without a credential. Details: docs/design.md, "Nova adapter".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlencode

from ironic_shard_operator.adapters.openstack_http import (
    Transient, answer_of, cloud_label, describe, endpoint_for, error_text, format_version, not_answering,
    parse_version, redacting, routed_proxy, secrets_of, session_of, version_document, with_retries,
)
from ironic_shard_operator.core.redact import redact

COMPUTE_MICROVERSION = (2, 53)
# Compute nodes per `GET /os-hypervisors/detail` page. nova-api looks each one's service up on
# its own (~20 ms a node on two cores: 20.7 s for a page of 1,000 in the side-by-side bench),
# so pages of 1,000 came close to the request timeout alone and passed it behind one other
# caller; a page of 100 stays a few seconds, and the listing costs Nova the same in all.
PAGE_LIMIT = 100
# `GET /os-hosts/{host}` is served up to microversion 2.42 only (deprecated since, never removed
# below it): the one read of Nova's API that looks a host's cell mapping up by host name.
HOSTS_MICROVERSION = "2.42"
# nova 34's answers to it (nova/exception.py HostMappingNotFound, ComputeHostNotFound).
NOT_MAPPED_TEXT = "is not mapped to any cell"
MAPPED_NO_NODE_TEXT = ("Compute host", "could not be found")
RETRYABLE_STATUS = frozenset({502, 503, 504})


class NovaError(Exception):
    """Anything that stops the adapter; the message says what is wrong and where, and holds
    no credential in a form core/redact.py recognises (URL userinfo, `password=...`)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


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
class Instance:
    """One server as Nova shows it when read directly (`GET /servers/{id}`): the host and the
    compute node (for Ironic, the node uuid) it runs on, its `task_state` (an action in
    progress: only the instance's own compute clears it) and `vm_state`."""

    id: str
    host: str | None
    node: str | None
    task_state: str | None
    vm_state: str | None


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
    `service(host)`, `set_forced_down()`, `set_disabled()`, `delete_service()`, `hypervisors()`,
    `hypervisor_host()`, `instances_on_node()`, `instance()`, `instances_on_host()`, `host_mapped()`.

    Construction does no I/O; the first call finds the compute endpoint and checks it once.
    `requests_made` counts every request sent (answered or not), `writes_made` the PUTs and
    DELETEs, so tests can assert that an unchanged cycle writes nothing.
    """

    def __init__(self, connection: Any, *, cloud_name: str | None = None,
                 request_timeout: float = 30.0, retry_attempts: int = 4,
                 backoff_seconds: float = 0.5, page_limit: int = PAGE_LIMIT) -> None:
        self.connection = connection
        self.cloud = cloud_label(connection, cloud_name)
        self.secrets = secrets_of(connection)  # masked in every error raised (`redacting`)
        self.request_timeout = request_timeout
        self.retry_attempts = retry_attempts
        self.backoff_seconds = backoff_seconds
        self.page_limit = page_limit
        self._session = session_of(connection, missing=NovaNotConfigured)
        self._max_version: tuple[int, int] | None = None
        self.requests_made = 0
        self.writes_made = 0

    # ---- endpoint and version -----------------------------------------------------

    @cached_property
    def endpoint(self) -> str:
        """The compute API base URL, ending in /v2.1 (or /v2.1/<project> from a catalog)."""
        url = endpoint_for(self.connection, self._session, "compute", self.cloud,
                           missing=NovaNotConfigured, refused=NovaAuthError, unreachable=NovaUnavailable)
        return url if "/v2.1" in url else url + "/v2.1"

    @cached_property
    def _compute(self) -> Any:
        """openstacksdk's compute proxy for `endpoint`, at 2.53, through `_exchange`."""
        from openstack.compute.v2._proxy import Proxy

        return routed_proxy(Proxy, self.connection, service_type="compute", endpoint=self.endpoint,
                            default_microversion=format_version(COMPUTE_MICROVERSION), exchange=self._exchange)

    @redacting
    def check(self) -> tuple[int, int]:
        """Verify once that the endpoint is Nova, new enough, and that we may list services
        (admin); return Nova's maximum microversion.

        Raises NovaNotConfigured (the endpoint is not Nova, e.g. a single-endpoint cloud
        whose only endpoint is Ironic), NovaUnavailable, NovaTooOld, NovaAuthError.
        """
        if self._max_version is not None:
            return self._max_version
        # Raw: openstacksdk's compute Version lacks the maximum microversion, and what answers may not be Nova
        root = self._compute.get(self.endpoint + "/", microversion=None)
        version = version_document(root, "v2.1")
        if version is None:
            raise NovaNotConfigured(
                f"{self.endpoint} (compute endpoint of cloud '{self.cloud}') answered HTTP "
                f"{root.status_code} but is not the Nova compute API: Nova features are off "
                "(set compute_endpoint_override to Nova's URL to turn them on)")
        maximum = parse_version(version.get("version") or "2.1")
        if maximum < COMPUTE_MICROVERSION:
            raise NovaTooOld(f"Nova at {self.endpoint} offers compute API {format_version(maximum)} "
                             f"at most; the operator needs {format_version(COMPUTE_MICROVERSION)}")
        self._answer("list compute services",
                     lambda: list(self._compute.services(binary="nova-compute", host="-")))
        self._max_version = maximum
        return maximum

    # ---- reading ------------------------------------------------------------------

    @redacting
    def compute_services(self, hosts: Iterable[str] | None = None) -> dict[str, ComputeService]:
        """nova-compute services by host (one request); only `hosts` when given."""
        self.check()
        listed = self._answer("list compute services", lambda: list(self._compute.services(binary="nova-compute")))
        wanted = None if hosts is None else set(hosts)
        return {item.host: _service(item) for item in listed if wanted is None or item.host in wanted}

    @redacting
    def service(self, host: str) -> ComputeService | None:
        """The nova-compute service of `host`, or None when Nova has none."""
        self.check()
        listed = self._answer(f"read the compute service of {host}",
                              lambda: list(self._compute.services(binary="nova-compute", host=host)))
        found = [_service(item) for item in listed if item.host == host]
        return found[0] if found else None

    @redacting
    def hypervisors(self, stop: Callable[[], bool] | None = None) -> tuple[Hypervisor, ...] | None:
        """Every compute node Nova lists with the host reporting it, read in pages of
        `page_limit` (each request bounded in time, whatever the size of the cloud) to the
        end (`hypervisor_pages`: a short page is not the end). None when `stop()` said so
        between two pages: the list was not read to its end."""
        self.check()

        def page(marker: str | None) -> list[Mapping[str, Any]]:
            query: dict[str, Any] = {"limit": self.page_limit, **({"marker": marker} if marker else {})}
            # Raw: openstacksdk Hypervisors cost ~2 min of CPU per 100,000 listed, ~2 s here (bench/sdk_cost_bench.py)
            response = self._compute.get(self._url("/os-hypervisors/detail", query))
            self._raise_for_status(response, "list hypervisors")
            return response.json()["hypervisors"]

        items = hypervisor_pages(page, stop)
        return None if items is None else tuple(_hypervisor(item) for item in items)

    @redacting
    def hypervisor_host(self, node: str) -> str | None:
        """The host Nova names for the compute node `node` (an Ironic node uuid), read directly
        (`hypervisor_hostname_pattern`, which matches a part of the name: only the exact name
        counts); None when Nova lists no such compute node. A proof where a list's silence is
        not one (a page that ended early, a host not mapped to a cell)."""
        self.check()
        # Raw: one filtered read of the same records `hypervisors` reads raw
        response = self._compute.get(self._url("/os-hypervisors/detail", {"hypervisor_hostname_pattern": node}))
        if response.status_code == 404:
            return None
        self._raise_for_status(response, f"read the compute node {node}")
        hosts = {_hypervisor(item).host for item in response.json()["hypervisors"]
                 if item.get("hypervisor_hostname") == node}
        return hosts.pop() if len(hosts) == 1 else None

    @redacting
    def instance(self, instance_id: str) -> Instance | None:
        """The server `instance_id` read directly (admin: any project); None when Nova answers
        that it has no such server (deleted, or never Nova's). Any other failure raises: a
        server Nova cannot show (a cell down) is unknown, never absent."""
        self.check()
        # Raw: the four admin fields by name; openstacksdk's Server renders ~100 attributes
        response = self._compute.get(self._url(f"/servers/{quote(instance_id, safe='')}"))
        if response.status_code == 404:
            return None
        self._raise_for_status(response, f"read the server {instance_id}")
        return _instance(response.json()["server"])

    @redacting
    def instances_on_host(self, host: str) -> tuple[Instance, ...]:
        """The non-deleted servers Nova places on `host` (admin filter `host`, every project),
        as `instance` reads each. Servers of a cell that does not answer are left out by Nova:
        this list only ever proves that something is there."""
        self.check()
        found: list[Instance] = []
        marker: str | None = None
        while True:
            query = {"all_tenants": 1, "host": host, "limit": 1000, **({"marker": marker} if marker else {})}
            # Raw: as `instance`; the detail list is the one that carries the task state
            response = self._compute.get(self._url("/servers/detail", query))
            self._raise_for_status(response, f"list the servers on {host}")
            page = response.json()["servers"]
            found += [_instance(item) for item in page]
            if len(page) < 1000:
                return tuple(found)
            marker = page[-1]["id"]

    @redacting
    def instances_on_node(self, host: str, node: str) -> int:
        """Non-deleted instances Nova places on `host`'s compute node `node` (for Ironic, the
        node uuid): nova-manage refuses to move a node with more than one. One request of the
        summary list (admin filters `host` and `node`), which renders no network or flavor."""
        self.check()
        return self._answer(f"list the instances on {host}'s node {node}", lambda: sum(
            1 for _ in self._compute.servers(details=False, all_projects=True, compute_host=host, node=node)))

    @redacting
    def host_mapped(self, host: str) -> bool | None:
        """Whether Nova has mapped `host` to a cell (its API database's host mapping), which
        Nova needs before it lists the host's compute nodes or schedules to them: one
        `GET /os-hosts/{host}` at microversion 2.42. It looks the mapping up first and answers
        404 "Host '<host>' is not mapped to any cell" without one (False); with one, 200, or
        404 "Compute host <host> could not be found." while the host has no compute node yet
        (True). Any other answer (the route gone, a policy that forbids it) is None: Nova does
        not say. Transport failures raise NovaUnavailable, as every call does."""
        self.check()
        # Raw: openstacksdk has no os-hosts call (deprecated since 2.43)
        response = self._compute.get(self._url(f"/os-hosts/{quote(host, safe='')}"), microversion=HOSTS_MICROVERSION)
        if response.status_code == 200:
            return True
        text = error_text(response) if response.status_code == 404 else ""
        if NOT_MAPPED_TEXT in text:
            return False
        if all(part in text for part in MAPPED_NO_NODE_TEXT):
            return True
        return None

    # ---- writing ------------------------------------------------------------------

    @redacting
    def set_forced_down(self, service: ComputeService, forced_down: bool) -> ComputeService:
        """Set or clear `forced_down` of `service`; return the service as Nova now reports it.

        Raises ServiceNotFound when the service is gone.
        """
        return self._update_service(service, "set forced_down", is_forced_down=forced_down)

    @redacting
    def set_disabled(self, service: ComputeService, reason: str | None) -> ComputeService:
        """Disable `service` with `reason` (the scheduler then sends it no new builds; it still
        serves its instances), or enable it (`reason` None); return the service as Nova now
        reports it. Raises ServiceNotFound when the service is gone."""
        if reason is None:  # Nova refuses a disabled_reason beside "enabled"
            return self._update_service(service, "enable", status="enabled")
        return self._update_service(service, "disable", status="disabled", disabled_reason=reason)

    def _update_service(self, service: ComputeService, action: str, **changes: Any) -> ComputeService:
        """One `PUT /os-services/{id}` sending exactly `changes` (openstacksdk Service fields)."""
        from openstack import exceptions as sdk

        self.check()
        record = self._service_record(service)
        for name, value in changes.items():
            setattr(record, name, value)
        try:
            # The record's own commit: the proxy's update_service(_forced_down) first asks Nova's
            # version document through keystoneauth, outside this adapter's transport
            updated = record.commit(self._compute)
        except sdk.NotFoundException:
            raise ServiceNotFound(f"Nova has no compute service {service.id} (host "
                                  f"{service.host}) any more: cannot {action} it") from None
        except sdk.HttpException as error:
            self._raise_for_status(error.response, f"{action} the compute service of {service.host}")
            raise
        return _service(updated)

    @redacting
    def delete_service(self, service: ComputeService) -> bool:
        """Delete `service` (with its compute nodes and resource providers, done by Nova).

        True: deleted now; False: it was already gone. Raises ServiceInUse when Nova refuses
        because the host still has instances (or in-progress migrations).
        """
        from openstack import exceptions as sdk

        self.check()
        try:
            self._compute.delete_service(self._service_record(service), ignore_missing=False)
        except sdk.NotFoundException:
            return False
        except sdk.ConflictException as error:
            reason = error_text(error.response) or "(no message)"
            raise ServiceInUse(f"Nova refuses to delete the compute service of {service.host}: "
                               f"{reason}", host=service.host, reason=reason) from None
        except sdk.HttpException as error:
            self._raise_for_status(error.response, f"delete the compute service of {service.host}")
            raise
        return True

    def _service_record(self, service: ComputeService) -> Any:
        """openstacksdk's record of `service`, by its id: a write sends only what it changes."""
        from openstack.compute.v2.service import Service

        return Service.existing(id=service.id, connection=self.connection)

    # ---- transport ----------------------------------------------------------------

    def _url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        return f"{self.endpoint}{path}" + (f"?{urlencode(params)}" if params else "")

    def _answer(self, action: str, call: Callable[[], Any]) -> Any:
        """What `call()` (openstacksdk requests) returns; Nova's refusal (HTTP >= 400, as
        openstacksdk raises it) raised as this adapter's error for `action`."""
        from openstack import exceptions as sdk

        try:
            return call()
        except sdk.HttpException as error:
            self._raise_for_status(error.response, action)
            raise

    def _exchange(self, method: str, send: Callable[..., Any]) -> Any:
        """One exchange (`send(**options)` makes it once), retried with backoff while Nova does
        not answer or answers 502/503/504: the response, whatever its status. Raises
        NovaUnavailable at the end."""
        def attempt() -> Any:
            self.requests_made += 1
            self.writes_made += method in ("PUT", "DELETE")
            return answer_of(self._session, send, timeout=self.request_timeout, cloud=self.cloud,
                             refused=NovaAuthError)

        def gave_up(failure: Transient) -> NovaUnavailable:
            return NovaUnavailable(not_answering("Nova", self.endpoint, self.cloud, failure,
                                                 f"tried {self.retry_attempts} times"))

        return with_retries(attempt, attempts=self.retry_attempts, backoff_seconds=self.backoff_seconds,
                            retry_status=RETRYABLE_STATUS, gave_up=gave_up)

    def _raise_for_status(self, response: Any, action: str) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in (401, 403):
            verb = "refused the credentials of" if status == 401 else \
                "does not allow (policy; admin is needed) the credentials of"
            raise NovaAuthError(f"Nova at {self.endpoint} {verb} cloud '{self.cloud}' to "
                                f"{action}: {describe(response)}")
        if status == 406:
            raise NovaTooOld(f"Nova at {self.endpoint} refused microversion "
                             f"{format_version(COMPUTE_MICROVERSION)}: "
                             f"{error_text(response) or '(no message)'}")
        raise NovaRequestError(f"Nova at {self.endpoint} refused to {action}: {describe(response)}")


def hypervisor_pages(page: Callable[[str | None], list[Mapping[str, Any]]],
                     stop: Callable[[], bool] | None = None) -> list[Mapping[str, Any]] | None:
    """Every item of Nova's paged hypervisor list (compute API 2.53 or later), `page(marker)`
    being one page after the hypervisor id `marker` (None: the first page); None when `stop()`
    (asked before each page after the first) said to stop.

    Nova drops the compute nodes of a host not mapped to a cell from a page after reading it
    (nova/api/openstack/compute/hypervisors.py), and gives a next link only to a full page: a
    page left short by such a host has none, although more follow. So the listing goes on from
    the last item listed and ends only at an empty page. A page whose every node is on unmapped
    hosts also comes back empty: nothing in Nova's answer tells it from the end. The operator
    gives a member nodes only once its host is mapped (core/host_mapping.py), so only a run of
    a whole page of another host's nodes, unmapped, can end the listing early."""
    found: list[Mapping[str, Any]] = []
    marker = None
    while items := page(marker):
        found += items
        marker = str(items[-1]["id"])
        if stop is not None and stop():
            return None
    return found


def _service(record: Any) -> ComputeService:
    """An openstacksdk Service as the adapter reports it."""
    return ComputeService(id=str(record.id), host=record.host, up=record.state == "up",
                          enabled=record.status == "enabled", forced_down=bool(record.is_forced_down),
                          disabled_reason=record.disabled_reason)


def _instance(item: Mapping[str, Any]) -> Instance:
    return Instance(id=item["id"], host=item.get("OS-EXT-SRV-ATTR:host"),
                    node=item.get("OS-EXT-SRV-ATTR:hypervisor_hostname"),
                    task_state=item.get("OS-EXT-STS:task_state"), vm_state=item.get("OS-EXT-STS:vm_state"))


def _hypervisor(item: Mapping[str, Any]) -> Hypervisor:
    return Hypervisor(node_uuid=item["hypervisor_hostname"], host=item["service"]["host"],
                      up=item.get("state") == "up", enabled=item.get("status") == "enabled")
