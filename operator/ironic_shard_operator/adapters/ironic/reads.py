"""Reading Ironic: the connection, the one-time check, a pool's nodes, the shard summary, and
the transport every request (reads and writes) goes through. Decides nothing.

Built on an openstacksdk connection (clouds.yaml, like every OpenStack tool): openstacksdk
supplies authentication (Keystone, http_basic or none) and the endpoint; the requests
themselves are plain Bare Metal API calls at microversion 1.82, the first with shards, so
that every request is one we chose (the number of requests is what scales). Each call says
why it is raw: openstacksdk has no call for the API root or `GET /v1/shards`, and its Node
costs 1.5-3 ms of CPU to build, minutes for a pool's 100,000 nodes (bench/sdk_cost_bench.py).

Invariants:
- reading costs one request per 1,000 managed nodes (`fields=` and pages of 1,000, the
  pool's conductor group and resource class filtered by Ironic, not here). Ironic cuts pages
  to its `[api]max_limit`, which a deployment may set lower: a listing goes on for as long
  as Ironic links a next page, whatever the length of the pages;
- every request is counted (`requests_made`, `writes_made`), answered or not;
- every failure is an `IronicError` (errors.py) whose message holds no credential.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from functools import cache, cached_property
from typing import Any, Self
from urllib.parse import urlencode

from ironic_shard_operator.adapters.ironic.errors import (
    IronicAuthError, IronicConfigError, IronicEndpointError, IronicKeystoneUnavailable, IronicRequestError,
    IronicTooOld, IronicUnavailable,
)
from ironic_shard_operator.adapters.openstack_http import (
    Transient, cloud_label, describe, endpoint_for, format_version, not_answering, parse_version, redacting,
    secrets_of, send_once, session_of, with_retries,
)
from ironic_shard_operator.core.clouds_yaml import CloudsYamlError, cloud_entry
from ironic_shard_operator.core.model import Node, Selector
from ironic_shard_operator.core.observation import SummaryRefused
from ironic_shard_operator.core.redact import redact, secrets_in_clouds_yaml

SHARD_MICROVERSION = (1, 82)
MICROVERSION_HEADER = "X-OpenStack-Ironic-API-Version"
MAX_VERSION_HEADER = "X-OpenStack-Ironic-API-Maximum-Version"

# Only what ownership decisions need (model.Node).
NODE_FIELDS = ("uuid", "shard", "instance_uuid", "provision_state",
               "target_provision_state", "reservation", "target_power_state")
# The page size asked for: Ironic's default [api]max_limit (Ironic cuts pages to its own
# max_limit, so a page may hold fewer; its `next` link says whether more follow).
PAGE_LIMIT = 1000
DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds per request to Ironic
# Seconds per request of the session that sets no timeout of its own (Keystone's discovery and
# token requests), unless the cloud's clouds.yaml entry sets `api_timeout` (from_clouds_yaml).
SESSION_TIMEOUT_SECONDS = 30.0
RETRYABLE_STATUS = frozenset({409, 502, 503, 504})


def selector_filters(selector: Selector) -> dict[str, str]:
    """Ironic's node-list query parameters for a pool's selector."""
    params = {}
    if selector.conductor_group:
        params["conductor_group"] = selector.conductor_group
    if selector.resource_class:
        params["resource_class"] = selector.resource_class
    return params


class IronicReader:
    """One pool's view of Ironic, read only: `check()`, `list_nodes()`, `shard_summary()`,
    `unsharded_nodes()`, `nodes_of()` (writes.py's IronicAdapter adds the shard writes).

    Construction does no I/O; the first call checks the endpoint, the API version and the
    credentials once (`check()`). Every request goes through `_send_once`, which counts it:
    `requests_made` (all) and `writes_made` (PATCHes), answered or not, so tests and
    benchmarks count reads and writes exactly.
    """

    def __init__(
        self,
        connection: Any,
        *,
        selector: Selector = Selector(),
        cloud_name: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_attempts: int = 5,
        backoff_seconds: float = 0.5,
    ) -> None:
        self.connection = connection
        self.selector = selector
        self.cloud = cloud_label(connection, cloud_name)
        self.secrets = secrets_of(connection)  # masked in every error raised (`redacting`)
        self.request_timeout = request_timeout
        self.retry_attempts = retry_attempts
        self.backoff_seconds = backoff_seconds
        self._max_version: tuple[int, int] | None = None
        self._requests = 0
        self._writes = 0
        self._count_lock = threading.Lock()
        self._session = session_of(connection, missing=IronicConfigError)

    # ---- construction -------------------------------------------------------------

    @classmethod
    def from_clouds_yaml(cls, clouds_yaml: str | Mapping[str, Any], cloud_name: str,
                         **options: Any) -> Self:
        """An adapter for cloud `cloud_name` of a clouds.yaml (text or parsed mapping).

        Environment variables (OS_*) and files on disk are ignored: the clouds.yaml given
        is the whole configuration. Raises IronicConfigError when the entry cannot describe
        a connection; an auth_type no installed keystoneauth plugin answers to is refused
        before openstacksdk's loader is asked, which would log a WARNING on each attempt.
        Every request of the connection's session is bounded in time, Keystone's too: an
        entry without `api_timeout` gets SESSION_TIMEOUT_SECONDS (keystoneauth waits
        for ever by default, and a Keystone that accepts and never answers held each cycle).
        """
        from openstack import connection as os_connection
        from openstack.config import loader

        try:
            entry = cloud_entry(clouds_yaml, cloud_name)
        except CloudsYamlError as error:
            raise IronicConfigError(str(error)) from None
        auth_type = entry.get("auth_type", entry.get("auth_plugin"))
        if auth_type not in (None, "", "None", "token_endpoint") and auth_type not in auth_plugins():
            raise IronicConfigError(
                f"cloud '{cloud_name}' of the clouds.yaml has auth_type {auth_type!r}, which is no "
                f"authentication plugin known here (known: {', '.join(sorted(auth_plugins()))})")
        try:
            settings = {"api_timeout": SESSION_TIMEOUT_SECONDS, **entry}
            region = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False).get_one(**settings)
            conn = os_connection.Connection(config=region)
        except Exception as error:  # openstacksdk raises several types for bad configs
            raise IronicConfigError(f"cloud '{cloud_name}' of the clouds.yaml cannot be "
                                    f"used: {redact(str(error), secrets_in_clouds_yaml(entry))}") from None
        return cls(conn, cloud_name=cloud_name, **options)

    # ---- counting -----------------------------------------------------------------

    @property
    def requests_made(self) -> int:
        """HTTP requests sent to Ironic so far (answered or not, writes included)."""
        return self._requests

    @property
    def writes_made(self) -> int:
        """PATCH requests sent to Ironic so far (answered or not)."""
        return self._writes

    # ---- checking -----------------------------------------------------------------

    @cached_property
    def endpoint(self) -> str:
        """The Ironic API base URL (without /v1), from the clouds.yaml or the catalog."""
        url = endpoint_for(self.connection, self._session, "baremetal", self.cloud,
                           missing=IronicEndpointError, refused=IronicAuthError,
                           unreachable=IronicKeystoneUnavailable)  # only Keystone is asked here
        return url[:-3] if url.endswith("/v1") else url

    @redacting
    def check(self) -> tuple[int, int]:
        """Verify endpoint, API version and credentials once; return the max microversion.

        Raises IronicUnavailable (nothing answers), IronicEndpointError (it is not Ironic),
        IronicTooOld (API < 1.82), IronicAuthError (credentials refused).
        """
        if self._max_version is not None:
            return self._max_version
        # Raw: openstacksdk has no call for Ironic's API root, whose max-version header (or who answered) we need
        root = self._send("GET", self.endpoint + "/", retry=False, microversion=False)
        if MAX_VERSION_HEADER not in root.headers or root.status_code != 200:
            if root.status_code in (401, 403) and "WWW-Authenticate" in root.headers:
                self._raise_auth(root, "read the API root")
            raise IronicEndpointError(
                f"{self.endpoint} (baremetal endpoint of cloud '{self.cloud}') answered HTTP "
                f"{root.status_code}{_answered_as(root)} but is not the Ironic API root: check the endpoint")
        version = parse_version(root.headers[MAX_VERSION_HEADER])
        if version < SHARD_MICROVERSION:
            raise IronicTooOld(
                f"Ironic at {self.endpoint} offers API {format_version(version)} at most; node "
                f"shards need {format_version(SHARD_MICROVERSION)} (Ironic 21.4 / 2023.1 or "
                f"newer): upgrade Ironic or point cloud '{self.cloud}' at a newer one")
        # Raw, as every node read here: an openstacksdk Node costs 1.5-3 ms of CPU (bench/sdk_cost_bench.py)
        probe = self._send("GET", self._url("/nodes", {"fields": "uuid", "limit": 1}), retry=False)
        if probe.status_code in (401, 403):
            self._raise_auth(probe, "list nodes")
        if probe.status_code != 200:
            raise IronicRequestError(f"Ironic at {self.endpoint} refused to list nodes: "
                                     f"{describe(probe)}")
        self._max_version = version
        return version

    def _raise_auth(self, response: Any, action: str) -> None:
        verb = "refused the credentials of" if response.status_code == 401 else \
            "does not allow (policy) the credentials of"
        raise IronicAuthError(f"Ironic at {self.endpoint} {verb} cloud '{self.cloud}' "
                              f"to {action}: {describe(response)}")

    # ---- reading ------------------------------------------------------------------

    @redacting
    def list_nodes(self) -> tuple[Node, ...]:
        """The pool's managed nodes, in pages of 1,000 (or Ironic's smaller max_limit, m):
        ceil(n / m) requests, +1 when n is a multiple of m (Ironic links a next page after
        every full one)."""
        self.check()
        return tuple(self._list(selector_filters(self.selector), marker=None, until=None).values())

    @redacting
    def shard_summary(self) -> dict[str, int] | SummaryRefused:
        """Ironic's node count per shard value over ALL its nodes (`GET /v1/shards`, one
        request; the count of nodes without a shard is named "None", as Ironic names it).
        SummaryRefused when Ironic's policy refuses it (403: `baremetal:shards:get`)."""
        self.check()
        response = self._send("GET", self._url("/shards"))  # raw: openstacksdk has no call for GET /v1/shards
        if response.status_code == 403:
            return SummaryRefused(redact(f"Ironic at {self.endpoint} does not allow (policy) the credentials "
                                         f"of cloud '{self.cloud}' to read the shard summary: "
                                         f"{describe(response)}", self.secrets))
        self._raise_for_status(response, "read the shard summary")
        return {str(item["name"]): int(item["count"]) for item in response.json()["shards"]}

    @redacting
    def unsharded_nodes(self) -> tuple[Node, ...]:
        """The nodes of the selector without a shard (`sharded=false`): one request, whose
        answer is empty when there are none, plus one per further 1,000."""
        self.check()
        filters = {**selector_filters(self.selector), "sharded": "false"}
        return tuple(self._list(filters, marker=None, until=None).values())

    @redacting
    def nodes_of(self, owner: str) -> tuple[Node, ...]:
        """The nodes of the selector whose shard is `owner`: one request per 1,000."""
        self.check()
        filters = {**selector_filters(self.selector), "shard": owner}
        return tuple(self._list(filters, marker=None, until=None).values())

    def _list(self, filters: Mapping[str, str], *, marker: str | None, until: str | None,
              limit: int = PAGE_LIMIT, retry: bool = True) -> dict[str, Node]:
        """Nodes matching `filters` after `marker`, stopping past `until`: every page
        Ironic links, each of at most `limit` nodes (fewer if Ironic's max_limit is lower).

        Ironic's `next` link is the one sign that more follow: a page shorter than `limit`
        may only be cut to max_limit. The next page is asked for here, with the last node
        as marker (what the link carries), since the link's host is Ironic's idea of its
        own address, which need not be the endpoint that reaches it from here.
        With `until`, pages are sorted by uuid so the walk can stop once it is passed.
        Without `retry`, a page that gets no answer raises Transient (the caller retries).
        """
        params: dict[str, Any] = {**filters, "fields": ",".join(NODE_FIELDS), "limit": limit}
        if until is not None:
            params |= {"sort_key": "uuid", "sort_dir": "asc"}
        start, nodes = marker, {}
        while True:
            page_params = dict(params, marker=marker) if marker else params
            url = self._url("/nodes", page_params)
            # Raw: openstacksdk Nodes cost ~2.5 min of CPU per 100,000-node cycle, ~0.3 s here (bench/sdk_cost_bench.py)
            response = self._send("GET", url) if retry else self._send_once("GET", url)
            if not retry and response.status_code in RETRYABLE_STATUS:
                raise Transient(describe(response), unavailable=response.status_code != 409)
            if response.status_code == 404 and marker is not None:
                # The marker node was deleted since we saw it: walk again from the top.
                if marker == start:
                    start = None
                marker = start
                nodes.clear()
                continue
            self._raise_for_status(response, "list nodes")
            body = response.json()
            page = body["nodes"]
            nodes.update((item["uuid"], node_from_api(item)) for item in page)
            if not page or not body.get("next") or (until is not None and page[-1]["uuid"] >= until):
                return nodes
            marker = page[-1]["uuid"]

    # ---- transport ----------------------------------------------------------------

    def _url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = f"?{urlencode(params, safe=',')}" if params else ""
        return f"{self.endpoint}/v1{path}{query}"

    def _send(self, method: str, url: str, *, json: Any = None, retry: bool = True,
              microversion: bool = True) -> Any:
        """One HTTP exchange, retried with backoff while Ironic does not answer or answers
        502/503/504: the response, whatever its status. Raises IronicUnavailable when no
        usable answer came after `retry_attempts` (or the one attempt without `retry`)."""
        def gave_up(failure: Transient) -> IronicUnavailable:
            unavailable = IronicKeystoneUnavailable if failure.keystone else IronicUnavailable
            return unavailable(not_answering("Ironic", self.endpoint, self.cloud, failure,
                                             "is it running, and is the baremetal endpoint right?"))

        return with_retries(lambda: self._send_once(method, url, json=json, microversion=microversion),
                            attempts=self.retry_attempts if retry else 1,
                            backoff_seconds=self.backoff_seconds,
                            retry_status=RETRYABLE_STATUS - {409} if retry else frozenset(),
                            gave_up=gave_up)

    def _send_once(self, method: str, url: str, *, json: Any = None,
                   microversion: bool = True) -> Any:
        """One HTTP attempt, counted: the response, or Transient when nothing answered."""
        headers = {MICROVERSION_HEADER: format_version(SHARD_MICROVERSION)} if microversion else {}
        with self._count_lock:  # every request we send passes here: the one counter
            self._requests += 1
            self._writes += method == "PATCH"
        return send_once(self._session, method, url, json=json, headers=headers,
                         timeout=self.request_timeout, cloud=self.cloud, refused=IronicAuthError)

    def _raise_for_status(self, response: Any, action: str) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in (401, 403):
            self._raise_auth(response, action)
        if status in RETRYABLE_STATUS:
            raise IronicUnavailable(f"Ironic at {self.endpoint} could not {action}: "
                                    f"{describe(response)}")
        if status == 406:
            raise IronicTooOld(f"Ironic at {self.endpoint} refused microversion "
                               f"{format_version(SHARD_MICROVERSION)}: {describe(response)}")
        raise IronicRequestError(f"Ironic at {self.endpoint} refused to {action}: "
                                 f"{describe(response)}")


def _answered_as(response: Any) -> str:
    """Who answered instead of Ironic, when the answer says so: ' (a Kubernetes API server:
    Unauthorized)' for a Kubernetes Status object, else ''.

    Ironic's root is public: it answers without credentials. A 401 or 403 there is an auth
    refusal only when it asks for credentials as OpenStack does (a WWW-Authenticate challenge:
    keystonemiddleware's `Keystone uri=...`, Ironic's http_basic `Basic realm=...`, or a
    proxy's in front of it); any other 401/403 comes from another service (a Kubernetes API
    server refuses the unknown credentials), so the endpoint is wrong, not the password."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, Mapping) and body.get("kind") == "Status" and "apiVersion" in body:
        return f" (a Kubernetes API server: {redact(str(body.get('message') or body.get('reason') or ''))[:120]})"
    return ""


@cache
def auth_plugins() -> frozenset[str]:
    """The auth_type names of the installed keystoneauth plugins (fixed per process): their
    entry points, read without loading them (loading logs an ERROR for each plugin whose
    optional dependencies are missing)."""
    from importlib.metadata import entry_points

    return frozenset(point.name for point in entry_points(group="keystoneauth1.plugin"))


def node_from_api(item: Mapping[str, Any]) -> Node:
    """A model Node from a `fields=`-limited Ironic node document ('' counts as unset).

    Owners and states repeat across thousands of nodes: one shared string each keeps a
    100,000-node observation small (bench/memory_bench.py).
    """
    return Node(
        uuid=item["uuid"],
        shard=interned(item.get("shard")),
        instance_uuid=item.get("instance_uuid") or None,
        provision_state=interned(item.get("provision_state")),
        target_provision_state=interned(item.get("target_provision_state")),
        reservation=interned(item.get("reservation")),
        target_power_state=interned(item.get("target_power_state")),
    )


def interned(value: str | None) -> str | None:
    return sys.intern(value) if value else None
