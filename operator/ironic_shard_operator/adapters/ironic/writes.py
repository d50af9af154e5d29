"""Writing node shards: each planned move written only on the write rule of
core/shard_write.py, against a fresh read. Decides nothing: the rule, and which moves are
guarded, are core's.

Invariants:
- a node is written only when a fresh read, made in bulk right before its batch of writes,
  passes the write rule (still where the plan saw it, still free, not yet at its target):
  a node Nova claimed since the observation is never moved;
- a guarded move (core/shard_write.py::is_guarded) is also read again on its own right
  before its write, Placement asked whether a build holds the node, and read again right
  after it: put back when a build claimed it meanwhile;
- writes are bounded: at most `max_concurrent_writes` in flight, at most `writes_per_second`
  started per second; 409 (node locked), 502/503/504, timeouts and refused connections are
  retried with exponential backoff, each retry re-read first;
- every planned move is counted exactly once (`ApplyResult`).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from ironic_shard_operator.adapters.ironic.errors import (
    IronicError, IronicKeystoneUnavailable, IronicRequestError, IronicUnavailable,
)
from ironic_shard_operator.adapters.ironic.reads import (
    NODE_FIELDS, PAGE_LIMIT, RETRYABLE_STATUS, IronicReader, node_from_api, selector_filters,
)
from ironic_shard_operator.adapters.openstack_http import Transient, backoff_delay, describe, not_answering, redacting
from ironic_shard_operator.core.model import Move, Node
from ironic_shard_operator.core.shard_write import (
    GuardHold, PlacementState, Verdict, claimed_after_write, guarded_verdict, handover_verdict, is_guarded,
    move_verdict, split_blind,
)
from ironic_shard_operator.core.write_order import write_order

log = logging.getLogger(__name__)


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

    A move leaving one of `owners` (core/shard_write.py::is_guarded) is read on its own right
    before its write and written only on shard_write.guarded_verdict's WRITE, then read again
    right after it and put back on shard_write.claimed_after_write. `placement`: Placement's
    state as the writes start; with NOT_ANSWERING the guarded moves are not tried at all
    (shard_write.waits_for_placement). `placement_consumers(node_uuid)` names the consumers
    holding allocations on the node's provider (None: no Placement to ask, so the Ironic
    reads alone decide); an exception from it leaves the move unwritten this cycle (counted
    busy), or puts a written one back.
    """

    owners: frozenset[str]
    placement: PlacementState = PlacementState.ABSENT
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


class IronicAdapter(IronicReader):
    """One pool's view of Ironic: IronicReader's reads, and `apply_moves()` and
    `hand_over()`, the shard writes. Construction does no I/O."""

    def __init__(
        self,
        connection: Any,
        *,
        max_concurrent_writes: int = 4,
        writes_per_second: float = 20.0,
        recheck_seconds: float = 2.0,
        **reading: Any,
    ) -> None:
        if max_concurrent_writes < 1:
            raise ValueError(f"maxConcurrentWrites must be >= 1, got {max_concurrent_writes}")
        super().__init__(connection, **reading)
        self.max_concurrent_writes = max_concurrent_writes
        self.writes_per_second = writes_per_second
        self.rate = RateLimiter(writes_per_second)
        # Writes between two bulk re-reads: about `recheck_seconds` worth of writing, which
        # bounds how stale the "still free?" answer can be when a node is written.
        self.batch_size = max(max_concurrent_writes, round(writes_per_second * recheck_seconds))


    @redacting
    def apply_moves(self, moves: Sequence[Move], observed: Sequence[Node],
                    stop: threading.Event | None = None, guard: Guard | None = None) -> ApplyResult:
        """Write each move's target into its node's shard, if the node still qualifies
        (`shard_write.move_verdict`: still at the move's source and still free; a node
        pinned since the observation is never moved).

        `observed` are the nodes the moves were planned from; they only size the bulk
        re-reads. Moves are written in `core/write_order.py`'s order (each heir's set in one
        go when heirs have a batch or more each, else uuid order), in batches of
        `batch_size`: before each batch one uuid-range listing re-reads the batch's nodes.
        `stop` (optional) ends the work between writes; the moves not started are counted as
        not attempted. `guard`
        (optional) names the moves that are checked again right before their own write.
        Guarded moves that wait for Placement (shard_write.split_blind) are not tried: they
        count as busy. Raises IronicUnavailable when Ironic stops answering beyond the retries;
        what was written stays written, and the next cycle re-reads and continues from there.
        """
        tried, waiting = (list(moves), []) if guard is None else split_blind(moves, guard.owners, guard.placement)
        return self._apply(tried, observed, stop, move_verdict, guard, waiting=len(waiting))

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
               targets_too: bool = False, waiting: int = 0) -> ApplyResult:
        """apply_moves() or hand_over(): each move is written only if `verdict` (the write
        rule, core/shard_write.py) says WRITE of its node's fresh read. `targets_too`: the
        re-reads also list the moves' targets (see _recheck). `waiting`: planned moves kept
        back untried, counted busy."""
        self.check()
        result = ApplyResult(planned=len(moves) + waiting, skipped_busy=waiting)
        known = uuids_by_owner(observed)
        ordered = write_order(moves, self.batch_size)
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
        writes = _writable(batch, current, verdict, result)
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
            writes = _writable(pending, current, verdict, result)
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
        the range [lowest uuid, highest uuid] of the moves (more pages only if the range outgrew the
        observation): one of the nodes whose shard is one of the moves' sources (and, with
        `targets_too`, targets: to tell a handover already made from a changed node), one of
        the unsharded nodes when moves adopt. Only the nodes that can still be written are
        read: a failed member's ~500, not every node of its 199 heirs, which filtering by the
        targets too would list (a whole pool per batch at 100,000 nodes). Nodes
        missing from the answer left the pool or the moves' sources."""
        sources = {move.source for move in moves}
        shards = {source for source in sources if source is not None}
        if targets_too:
            shards |= {move.target for move in moves}
        first, last = min(move.node_uuid for move in moves), max(move.node_uuid for move in moves)
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
        guarded = guard is not None and is_guarded(move, guard.owners)
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
            except Exception as error:  # no answer: never write blind (shard_write.waits_for_placement)
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


def _writable(moves: Iterable[Move], current: Mapping[str, Node], verdict: Callable[[Move, Node | None], Verdict],
              result: ApplyResult) -> list[Move]:
    """The moves `verdict` lets through against their nodes' fresh read (`current`); each other
    one counted in `result` as its verdict says."""
    writes = []
    for move in moves:
        said = verdict(move, current.get(move.node_uuid))
        if said is Verdict.WRITE:
            writes.append(move)
        else:
            result.count_skipped(said)
    return writes


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
