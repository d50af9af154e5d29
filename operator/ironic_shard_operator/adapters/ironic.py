"""The Ironic adapter: read a pool's managed nodes, write node shards. Talks, decides nothing.

Built on an openstacksdk connection (clouds.yaml, like every OpenStack tool): openstacksdk
supplies authentication (Keystone, http_basic or none) and the endpoint; the requests
themselves are plain Bare Metal API calls at microversion 1.82, the first with shards, so
that every request is one we chose (the number of requests is what scales). Each call says
why it is raw: openstacksdk has no call for the API root or `GET /v1/shards`, and its Node
costs 1.5-3 ms of CPU to build, minutes for a pool's 100,000 nodes (bench/sdk_cost_bench.py).

What it keeps:
- Reading costs one request per 1,000 managed nodes (`fields=` and pages of 1,000, the
  pool's conductor group and resource class filtered by Ironic, not here). Ironic cuts pages
  to its `[api]max_limit`, which a deployment may set lower: a listing goes on for as long
  as Ironic links a next page, whatever the length of the pages.
- A node is written only when a fresh read, made in bulk right before its batch of writes,
  passes the write rule of core/shard_write.py (still where the plan saw it, still free,
  not yet at its target). A node Nova claimed since the observation is never moved.
  A guarded move (a free node leaving a LIVE owner, `Guard`) is also read again on its own
  right before its write, and Placement is asked whether a build holds the node.
- Writes are bounded: at most `max_concurrent_writes` in flight, at most `writes_per_second`
  started per second; 409 (node locked), 502/503/504, timeouts and refused connections are
  retried with exponential backoff, each retry re-read first.
- Every failure is one exception of the `IronicError` family whose message names the
  problem (unreachable, not Ironic, credentials, too old) and the cloud it concerns, and
  holds no credential (core/redact.py: URL userinfo, the cloud's passwords and tokens).
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
import logging
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, ClassVar
from urllib.parse import urlencode

from ironic_shard_operator.adapters.openstack_http import (
    Transient, backoff_delay, cloud_label, describe, endpoint_for, format_version, not_answering, parse_version,
    redacting, secrets_of, send_once, session_of, with_retries,
)
from ironic_shard_operator.core.clouds_yaml import CloudsYamlError, cloud_entry
from ironic_shard_operator.core.model import Move, Node, Selector
from ironic_shard_operator.core.observation import SummaryRefused
from ironic_shard_operator.core.redact import redact, secrets_in_clouds_yaml
from ironic_shard_operator.core.shard_write import (
    GuardHold, Verdict, claimed_after_write, guarded_verdict, handover_verdict, move_verdict,
)

SHARD_MICROVERSION = (1, 82)
MICROVERSION_HEADER = "X-OpenStack-Ironic-API-Version"
MAX_VERSION_HEADER = "X-OpenStack-Ironic-API-Maximum-Version"
# Only what ownership decisions need (model.Node).
log = logging.getLogger(__name__)

NODE_FIELDS = ("uuid", "shard", "instance_uuid", "provision_state",
               "target_provision_state", "reservation")
# The page size asked for: Ironic's default [api]max_limit (Ironic cuts pages to its own
# max_limit, so a page may hold fewer; its `next` link says whether more follow).
PAGE_LIMIT = 1000
DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds per request to Ironic
# Seconds per request of the session that sets no timeout of its own (Keystone's discovery and
# token requests), unless the cloud's clouds.yaml entry sets `api_timeout` (from_clouds_yaml).
SESSION_TIMEOUT_SECONDS = 30.0
RETRYABLE_STATUS = frozenset({409, 502, 503, 504})


class IronicError(Exception):
    """Anything that stops the adapter; the message says what is wrong and where, and holds
    no credential in a form core/redact.py recognises (URL userinfo, `password=...`)."""
    kind: ClassVar[str] = "other"  # metrics: ironic_shard_ironic_api_errors_total{kind}

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class IronicConfigError(IronicError):
    """The clouds.yaml or cloud name cannot describe a connection."""
    kind: ClassVar[str] = "config"


class IronicUnavailable(IronicError):
    """Ironic does not answer (down, refused, timed out, or 5xx beyond the retries)."""
    kind: ClassVar[str] = "unavailable"


class IronicKeystoneUnavailable(IronicUnavailable):
    """Ironic could not be asked: the token request to Keystone failed (no answer, TLS, an
    HTTP error); Ironic itself was not reached."""
    kind: ClassVar[str] = "keystone_unavailable"


class IronicEndpointError(IronicError):
    """Something answers at the configured endpoint, but it is not the Ironic API."""
    kind: ClassVar[str] = "endpoint"


class IronicAuthError(IronicError):
    """Ironic (or Keystone) refused the credentials, or they may not do what we need."""
    kind: ClassVar[str] = "auth"


class IronicTooOld(IronicError):
    """The Ironic API is older than 1.82 and has no node shards."""
    kind: ClassVar[str] = "too_old"


class IronicRequestError(IronicError):
    """Ironic refused a request for another reason (a bug here or an API change)."""
    kind: ClassVar[str] = "request"


# Every `kind` an Ironic error can have, from the classes above (a metric's label values).
ERROR_KINDS = tuple(dict.fromkeys(cls.kind for cls in (
    IronicUnavailable, IronicKeystoneUnavailable, IronicAuthError, IronicEndpointError, IronicTooOld,
    IronicConfigError, IronicRequestError, IronicError)))


def selector_filters(selector: Selector) -> dict[str, str]:
    """Ironic's node-list query parameters for a pool's selector."""
    params = {}
    if selector.conductor_group:
        params["conductor_group"] = selector.conductor_group
    if selector.resource_class:
        params["resource_class"] = selector.resource_class
    return params


@dataclass(slots=True)
class ApplyResult:
    """What became of a list of moves. Every planned move is counted exactly once."""

    planned: int = 0
    applied: int = 0
    already_right: int = 0     # the fresh read showed the target already: no write needed
    skipped_claimed: int = 0   # pinned since the observation (instance, provisioning, lock)
    # No longer where the plan saw it: deleted before the re-read (a listing cannot tell that
    # from the next two), out of the selector, or given another shard (the re-reads of
    # apply_moves list the moves' sources only, so a node someone else already put at its
    # target is counted here; already_right is told apart for hand_over).
    skipped_changed: int = 0
    skipped_gone: int = 0      # deleted from Ironic between its re-read and its write (404)
    skipped_busy: int = 0      # still locked (409) after every retry
    not_attempted: int = 0     # the caller asked to stop first
    # Guarded moves written, then put back: a build claimed the node between its read and its
    # write (shard_write.claimed_after_write).
    reverted: int = 0
    # Guarded moves written and claimed meanwhile whose put-back failed: the node stays at the
    # target while a build may land on it for the source (counted in `applied` too: the shard
    # did change). Each is reported (metric, Warning Event), never only logged.
    revert_failed: list[Move] = field(default_factory=list)
    # The guarded moves held back by allocations in Placement (counted in skipped_claimed too).
    held: list[GuardHold] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return (self.already_right + self.skipped_claimed + self.skipped_changed
                + self.skipped_gone + self.skipped_busy + self.not_attempted + self.reverted)

    def count_skipped(self, verdict: Verdict) -> None:
        """Count a move the write rule did not let through (any verdict but WRITE)."""
        if verdict is Verdict.AT_TARGET:
            self.already_right += 1
        elif verdict is Verdict.CLAIMED:
            self.skipped_claimed += 1
        elif verdict is Verdict.CHANGED:
            self.skipped_changed += 1
        else:
            raise ValueError(f"{verdict} is not a skip")


@dataclass(frozen=True, slots=True)
class Guard:
    """Which moves are guarded, and how a build in flight is seen.

    A move whose source is one of `live_owners` (shard_write.guarded_owners) is read on its
    own right before its write and written only on shard_write.guarded_verdict's WRITE, then
    read again right after it and put back on shard_write.claimed_after_write.
    `placement_consumers(node_uuid)` names the consumers holding allocations on the node's
    provider (None: no Placement to ask, so the Ironic reads alone decide); an exception from
    it leaves the move unwritten this cycle (counted busy), or puts a written one back.
    """

    live_owners: frozenset[str]
    placement_consumers: Callable[[str], tuple[str, ...]] | None = None


class RateLimiter:
    """Spaces out `acquire()` returns to at most `per_second` per second across threads."""

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        if per_second <= 0:
            raise ValueError(f"writes per second must be positive, got {per_second}")
        self.interval = 1.0 / per_second
        self.clock = clock
        self.next_slot = 0.0
        self.lock = threading.Lock()

    def acquire(self) -> None:
        with self.lock:
            now = self.clock()
            slot = max(now, self.next_slot)
            self.next_slot = slot + self.interval
        if slot > now:
            time.sleep(slot - now)


class IronicAdapter:
    """One pool's view of Ironic: `check()`, `list_nodes()`, `apply_moves()`.

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
        max_concurrent_writes: int = 4,
        writes_per_second: float = 20.0,
        recheck_seconds: float = 2.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_attempts: int = 5,
        backoff_seconds: float = 0.5,
    ) -> None:
        if max_concurrent_writes < 1:
            raise ValueError(f"maxConcurrentWrites must be >= 1, got {max_concurrent_writes}")
        self.connection = connection
        self.selector = selector
        self.cloud = cloud_label(connection, cloud_name)
        self.secrets = secrets_of(connection)  # masked in every error raised (`redacting`)
        self.max_concurrent_writes = max_concurrent_writes
        self.writes_per_second = writes_per_second
        self.rate = RateLimiter(writes_per_second)
        # Writes between two bulk re-reads: about `recheck_seconds` worth of writing, which
        # bounds how stale the "still free?" answer can be when a node is written.
        self.batch_size = max(max_concurrent_writes, round(writes_per_second * recheck_seconds))
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
                         **options: Any) -> IronicAdapter:
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

    # ---- writing ------------------------------------------------------------------

    @redacting
    def apply_moves(self, moves: Sequence[Move], observed: Sequence[Node],
                    stop: threading.Event | None = None, guard: Guard | None = None) -> ApplyResult:
        """Write each move's target into its node's shard, if the node still qualifies
        (`shard_write.move_verdict`: still at the move's source and still free; a node
        pinned since the observation is never moved).

        `observed` are the nodes the moves were planned from; they only size the bulk
        re-reads. Moves are written in uuid order, in batches of `batch_size`: before each
        batch one uuid-range listing re-reads the batch's nodes. `stop` (optional) ends the
        work between writes; the moves not started are counted as not attempted. `guard`
        (optional) names the moves that are checked again right before their own write.
        Raises IronicUnavailable when Ironic stops answering beyond the retries; what was
        written stays written, and the next cycle re-reads and continues from there.
        """
        return self._apply(moves, observed, stop, move_verdict, guard)

    @redacting
    def hand_over(self, moves: Sequence[Move], observed: Sequence[Node],
                  stop: threading.Event | None = None) -> ApplyResult:
        """Write the shard of PINNED nodes (the Nova audit's repair of a misplaced node):
        each move is written only if the fresh re-read shows the node still at the move's
        source AND still carrying the instance it had in `observed`
        (`shard_write.handover_verdict`). A node whose instance left or changed, or whose
        shard someone else changed, is not touched.

        The one deliberate exception to "a pinned node never moves" (invariant 2, docs/invariants.md),
        used only for `spec.nova.repairMisplaced`; same batching, re-reads, rate limit and
        errors as apply_moves().
        """
        carried = {node.uuid: node.instance_uuid for node in observed if node.instance_uuid}
        return self._apply(moves, observed, stop,
                           lambda move, node: handover_verdict(move, node, carried.get(move.node_uuid)),
                           targets_too=True)

    def _apply(self, moves: Sequence[Move], observed: Sequence[Node], stop: threading.Event | None,
               verdict: Callable[[Move, Node | None], Verdict], guard: Guard | None = None,
               targets_too: bool = False) -> ApplyResult:
        """apply_moves() or hand_over(): each move is written only if `verdict` (the write
        rule, core/shard_write.py) says WRITE of its node's fresh read. `targets_too`: the
        re-reads also list the moves' targets (see _recheck)."""
        self.check()
        result = ApplyResult(planned=len(moves))
        known = uuids_by_owner(observed)
        ordered = sorted(moves)
        pool = ThreadPoolExecutor(self.max_concurrent_writes,
                                  thread_name_prefix="ironic-shard-write")
        try:
            previous: _Launched | None = None
            for start in range(0, len(ordered), self.batch_size):
                if stop is not None and stop.is_set():
                    result.not_attempted += len(ordered) - start
                    break
                if previous is not None:  # re-read the next batch while its last writes run
                    _wait_until_running(previous, self.max_concurrent_writes)
                launched = self._launch(ordered[start:start + self.batch_size], known, pool, stop, result,
                                        verdict, guard, targets_too)
                if previous is not None:
                    self._settle(previous, known, pool, stop, result, verdict, guard, targets_too)
                previous = launched
            if previous is not None:
                self._settle(previous, known, pool, stop, result, verdict, guard, targets_too)
        finally:
            # On an error no queued write may start after we return.
            pool.shutdown(wait=True, cancel_futures=True)
        return result

    def _launch(self, batch: list[Move], known: Mapping[str | None, list[str]], pool: ThreadPoolExecutor,
                stop: threading.Event | None, result: ApplyResult,
                verdict: Callable[[Move, Node | None], Verdict], guard: Guard | None,
                targets_too: bool) -> _Launched:
        """Re-read one batch and queue the writes its verdicts allow (the batch's first
        attempt); a re-read that gets no answer leaves the whole batch to `_settle`'s retries.
        Batches overlap: the next one is re-read while this one's last writes run, so the
        writes never wait for a re-read and a slow PATCH does not idle the other writers."""
        try:
            current = self._recheck(batch, known, targets_too)
        except Transient as error:
            return _Launched(batch, [], error)
        writes = []
        for move in batch:
            said = verdict(move, current.get(move.node_uuid))
            if said is Verdict.WRITE:
                writes.append(move)
            else:
                result.count_skipped(said)
        return _Launched([], [(move, pool.submit(self._write, move, stop, guard)) for move in writes], None)

    def _settle(self, launched: _Launched, known: Mapping[str | None, list[str]], pool: ThreadPoolExecutor,
                stop: threading.Event | None, result: ApplyResult,
                verdict: Callable[[Move, Node | None], Verdict], guard: Guard | None,
                targets_too: bool) -> None:
        """Count a launched batch's writes; retry what failed transiently, re-reading first."""
        retry, failure = _tally(result, ((move, future.result()) for move, future in launched.writes),
                                launched.failure or Transient("", unavailable=False))
        pending = [*launched.unread, *retry]
        if pending:
            self._apply_batch(sorted(pending), known, pool, stop, result, verdict, guard, targets_too,
                              first_attempt=1, failure=failure)

    def _apply_batch(self, batch: list[Move], known: Mapping[str | None, list[str]], pool: ThreadPoolExecutor,
                     stop: threading.Event | None, result: ApplyResult,
                     verdict: Callable[[Move, Node | None], Verdict], guard: Guard | None,
                     targets_too: bool = False, first_attempt: int = 0,
                     failure: Transient | None = None) -> None:
        """Re-read, then write, one batch; retry what failed transiently, re-reading first
        (from attempt `first_attempt`: `_settle` made the first one)."""
        pending = batch
        failure = failure or Transient("", unavailable=False)
        for attempt in range(first_attempt, self.retry_attempts):
            if attempt:
                time.sleep(backoff_delay(self.backoff_seconds, attempt - 1))
                if stop is not None and stop.is_set():
                    result.not_attempted += len(pending)
                    return
            try:
                current = self._recheck(pending, known, targets_too)
            except Transient as error:
                failure = error
                continue
            writes = []
            for move in pending:
                said = verdict(move, current.get(move.node_uuid))
                if said is Verdict.WRITE:
                    writes.append(move)
                else:
                    result.count_skipped(said)
            retry, failure = _tally(result, zip(writes, pool.map(lambda m: self._write(m, stop, guard), writes)),
                                    Transient("", unavailable=False))
            if not retry:
                return
            pending = retry
        if failure.unavailable:
            if failure.keystone:
                stopped = f"writing shards stopped: {not_answering('Ironic', self.endpoint, self.cloud, failure, '')}"
            else:
                stopped = (f"Ironic at {self.endpoint} (cloud '{self.cloud}') stopped answering while shards were "
                           f"written ({failure.reason}; {self.retry_attempts} attempts)")
            raise (IronicKeystoneUnavailable if failure.keystone else IronicUnavailable)(
                f"{stopped}; {result.applied} of {result.planned} moves were applied and stay applied, the next "
                "cycle re-reads Ironic and continues")
        result.skipped_busy += len(pending)

    def _recheck(self, moves: list[Move], known: Mapping[str | None, list[str]],
                 targets_too: bool = False) -> dict[str, Node]:
        """The current state of `moves`' nodes, read with filtered, uuid-ordered listings over
        the range [first move, last move] (more pages only if the range outgrew the
        observation): one of the nodes whose shard is one of the moves' sources (and, with
        `targets_too`, targets: to tell a handover already made from a changed node), one of
        the unsharded nodes when moves adopt. Only the nodes that can still be written are
        read: a failed member's ~500, not every node of its 199 heirs, which filtering by the
        targets too would list (issue 14: a whole pool per batch at 100,000 nodes). Nodes
        missing from the answer left the pool or the moves' sources."""
        sources = {move.source for move in moves}
        shards = {source for source in sources if source is not None}
        if targets_too:
            shards |= {move.target for move in moves}
        first, last = moves[0].node_uuid, moves[-1].node_uuid
        found: dict[str, Node] = {}
        for owners, extra in ((shards, {"shard": ",".join(sorted(shards))} if shards else None),
                              ({None}, {"sharded": "false"} if None in sources else None)):
            if extra is None:
                continue
            # Pages sized to the nodes of these owners the observation saw in the range (a
            # batch of a failed member's moves: about the batch), walked from the last of them
            # before the range: Ironic stops at `limit` matches, so a page the size of the whole
            # range would return every later node of the same owners.
            marker, in_range = None, 0
            for owner in owners:
                uuids = known.get(owner, ())
                low = bisect.bisect_left(uuids, first)
                in_range += bisect.bisect_right(uuids, last) - low
                if low and (marker is None or uuids[low - 1] > marker):
                    marker = uuids[low - 1]
            limit = min(PAGE_LIMIT, in_range + max(10, in_range // 10))
            found |= self._list({**selector_filters(self.selector), **extra}, marker=marker, until=last,
                                limit=limit, retry=False)
        wanted = {move.node_uuid for move in moves}
        return {uuid: node for uuid, node in found.items() if uuid in wanted}

    def _write(self, move: Move, stop: threading.Event | None,
               guard: Guard | None = None) -> str | Transient | Verdict:
        """PATCH one node's shard: "applied", "gone", "stopped", a Transient to try later, or
        the verdict that kept a guarded move from being written."""
        if stop is not None and stop.is_set():
            return "stopped"
        self.rate.acquire()
        if stop is not None and stop.is_set():  # asked again: the wait for a slot can be long
            return "stopped"
        guarded = guard is not None and move.source in guard.live_owners
        if guarded:
            said = self._guard(move, guard)
            if said is not Verdict.WRITE:
                return said
        patch = [{"op": "add", "path": "/shard", "value": move.target}]
        try:
            # Raw: an openstacksdk Node per answer costs ~5 min of CPU to adopt 100,000 nodes (bench/sdk_cost_bench.py)
            response = self._send_once("PATCH", self._url(f"/nodes/{move.node_uuid}"), json=patch)
        except Transient as failure:
            return failure
        if response.status_code == 200:
            return self._after_write(move, guard) if guarded else "applied"
        if response.status_code == 404:
            return "gone"
        if response.status_code in RETRYABLE_STATUS:
            return Transient(describe(response), unavailable=response.status_code != 409)
        self._raise_for_status(response, f"set the shard of node {move.node_uuid}")
        raise IronicRequestError(f"unexpected answer: {describe(response)}")

    def _guard(self, move: Move, guard: Guard) -> Verdict | Transient | GuardHold:
        """The guarded move's node read on its own, then Placement asked, right before its
        write: WRITE, the verdict that keeps it (a GuardHold when Placement's allocations do),
        or a Transient (it is tried again later)."""
        try:
            # Raw, as every node read here: an openstacksdk Node costs 1.5-3 ms of CPU (bench/sdk_cost_bench.py)
            response = self._send_once(
                "GET", self._url(f"/nodes/{move.node_uuid}", {"fields": ",".join(NODE_FIELDS)}))
        except Transient as failure:
            return failure
        if response.status_code == 404:
            return Verdict.CHANGED
        if response.status_code != 200:
            return Transient(describe(response), unavailable=response.status_code != 409)
        node, consumers = node_from_api(response.json()), ()
        if guard.placement_consumers is not None and move_verdict(move, node) is Verdict.WRITE:
            try:
                consumers = guard.placement_consumers(move.node_uuid)
            except Exception as error:  # Placement not answering: never write blind
                return Transient(f"Placement: {error}", unavailable=False)
        said = guarded_verdict(move, node, bool(consumers))
        return GuardHold(move.node_uuid, tuple(consumers)) if said is Verdict.CLAIMED and consumers else said

    def _after_write(self, move: Move, guard: Guard) -> str:
        """A guarded move just written, its node read again (and Placement asked): "applied",
        "reverted" once its shard is put back to the move's source because a build claimed it
        meanwhile (shard_write.claimed_after_write; a read that gets no answer counts as a
        claim: never leave a node blind with a live owner's build), or "revert_failed" when
        putting it back failed (the caller reports it). Logged either way."""
        try:
            # Raw, as every node read here: an openstacksdk Node costs 1.5-3 ms of CPU (bench/sdk_cost_bench.py)
            response = self._send_once(
                "GET", self._url(f"/nodes/{move.node_uuid}", {"fields": ",".join(NODE_FIELDS)}))
            after = node_from_api(response.json()) if response.status_code == 200 else None
            unknown = response.status_code not in (200, 404)
            consumers: tuple[str, ...] = ()
            if after is not None and not after.pinned and guard.placement_consumers is not None:
                consumers = tuple(guard.placement_consumers(move.node_uuid))
        except Exception as error:  # no answer: treated as claimed
            log.warning("node %s: moved %s -> %s, then not readable (%s): put back", move.node_uuid, move.source,
                        move.target, error)
            after, consumers, unknown = None, (), True
        if not unknown and not claimed_after_write(move, after, consumers):
            return "applied"
        back = [{"op": "add", "path": "/shard", "value": move.source}] if move.source is not None else \
            [{"op": "remove", "path": "/shard"}]
        try:
            # Raw, as the shard write above: one way to PATCH a node here
            reverted = self._send("PATCH", self._url(f"/nodes/{move.node_uuid}"), json=back)
        except IronicError as error:
            log.error("node %s: claimed by a build while it moved %s -> %s, and its shard could not be put "
                      "back (%s): the Nova audit reports it misplaced", move.node_uuid, move.source, move.target,
                      error)
            return "revert_failed"
        if reverted.status_code != 200:
            log.error("node %s: claimed by a build while it moved %s -> %s; putting its shard back was refused: "
                      "%s", move.node_uuid, move.source, move.target, describe(reverted))
            return "revert_failed"
        log.warning("node %s: a build claimed it while it moved %s -> %s (%s): its shard is put back to %s",
                    move.node_uuid, move.source, move.target,
                    "Placement allocations of " + ", ".join(consumers) if consumers else "pinned in Ironic",
                    move.source)
        return "reverted"

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


@dataclass(slots=True)
class _Launched:
    """A batch whose first attempt is under way: its queued writes (each with its future),
    or, when its re-read got no answer, its moves (`unread`) and that `failure`."""

    unread: list[Move]
    writes: list[tuple[Move, Future]]
    failure: Transient | None


def uuids_by_owner(nodes: Iterable[Node]) -> dict[str | None, list[str]]:
    """Each owner's (None: unsharded) node uuids, sorted: what sizes the bulk re-reads."""
    owned: dict[str | None, list[str]] = {}
    for node in nodes:
        owned.setdefault(node.shard, []).append(node.uuid)
    for uuids in owned.values():
        uuids.sort()
    return owned


def _tally(result: ApplyResult, outcomes: Iterable[tuple[Move, Any]],
           failure: Transient) -> tuple[list[Move], Transient]:
    """Count each write's outcome (`_write`'s) in `result`; return the moves to try again and
    the failure to report if they never succeed (an unavailable Ironic over a locked node)."""
    retry: list[Move] = []
    for move, outcome in outcomes:
        if isinstance(outcome, Verdict):
            result.count_skipped(outcome)
        elif isinstance(outcome, GuardHold):
            result.count_skipped(Verdict.CLAIMED)
            result.held.append(outcome)
        elif outcome == "applied":
            result.applied += 1
        elif outcome == "reverted":
            result.reverted += 1
        elif outcome == "revert_failed":
            result.applied += 1
            result.revert_failed.append(move)
        elif outcome == "gone":
            result.skipped_gone += 1
        elif outcome == "stopped":
            result.not_attempted += 1
        else:
            retry.append(move)
            if outcome.unavailable or not failure.unavailable:
                failure = outcome
    return retry, failure


def _wait_until_running(launched: _Launched, running: int) -> None:
    """Wait until at most `running` of a launched batch's writes are unfinished: the rest of
    its queue has started, so a batch re-read now is written from right after it."""
    unfinished = {future for _, future in launched.writes if not future.done()}
    while len(unfinished) > running:
        _, unfinished = wait(unfinished, return_when=FIRST_COMPLETED)


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
    )


def interned(value: str | None) -> str | None:
    return sys.intern(value) if value else None
