"""Nova's side of one pool's cycle: observe Nova, decide (forced_down: core/fencing.py; the
audit: core/nova_policy.py), write, report. Runs in a worker thread after the pod actions,
on the pool's openstacksdk connection (the Ironic adapter's), so a slow or absent Nova never
delays a pod replacement.

Invariants: forced_down is written first (the write failover waits for), then the service
deletions, then the Ironic handover of misplaced nodes (compare-and-set on shard and
instance): those Nova and their instance place on a live member at once, each with its Event,
the others only with spec.nova.repairMisplaced; a compute that is not the pool's (a stray) is
named, never written to; `paused` or a lost Lease writes nothing; it never raises for Nova's sake: no usable
compute endpoint, refused credentials or a Nova older than 2.53 turn Nova off (Disabled, with
the reason), any other failure is Unavailable and the rest of the cycle goes on. When Nova is
asked and audited is core/nova_schedule.py's call; every decision is re-derived from what
Nova and Ironic show.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from ironic_shard_operator.core import fencing, nova_policy
from ironic_shard_operator.controller.leader import WriteStop
from ironic_shard_operator.core.nova_schedule import NovaSchedule
from ironic_shard_operator.adapters.ironic import IronicAdapter, IronicError
from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.host_mapping import ProbeAnswer
from ironic_shard_operator.core.model import Member, Move, Node
from ironic_shard_operator.adapters.nova import (
    NovaAdapter, NovaAuthError, NovaError, NovaNotConfigured, NovaTooOld, ServiceInUse, ServiceNotFound,
)
from ironic_shard_operator.core.spec import Pool
from ironic_shard_operator.core.status import spread

log = logging.getLogger(__name__)

# Per request, and attempts per call (the adapter backs off between them): a Nova that
# hangs holds a cycle for about a minute at most.
REQUEST_TIMEOUT_SECONDS = 15.0
REQUEST_ATTEMPTS = 3


@dataclass
class NovaRuntime:
    """What the operator keeps in memory about one pool's Nova between cycles.

    Losing it (an operator restart) costs little: the audit's clocks start again (an
    `unlisted` or `unmapped` finding shows two update intervals later, a `stray` once sighted
    twice again) and a refused deletion is asked again. The retired identities live in status.nova.retired; `retired`
    only bridges cycles whose section could not be written.
    """

    adapter: NovaAdapter | None = None
    since: dict[str, float] = field(default_factory=dict)
    strays: dict[str, nova_policy.StraySighting] = field(default_factory=dict)
    refused: dict[str, nova_policy.ServiceDeletionRefusal] = field(default_factory=dict)
    report: nova_policy.AuditReport | None = None
    schedule: NovaSchedule = NovaSchedule()
    retired: tuple[str, ...] = ()
    # What Nova last said of each member's cell mapping, by (host, service id)
    # (controller/host_mapping.py; lost on restart: asked again once).
    host_probes: dict[tuple[str, str], ProbeAnswer] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NovaOutcome:
    """`section`: the new status.nova, None when Nova was not asked this cycle (keep the
    last one). `events`: for the writes done and the section's transitions. `services`: the
    compute services as Nova shows them once this cycle's forced_down writes are done, read
    again from Nova when one was forced down (None: not known this cycle). `listed`: the hosts
    Nova's hypervisor list named, when the audit read it this cycle (empty otherwise): each is
    mapped to a cell."""

    section: dict[str, Any] | None
    events: tuple[Event, ...] = ()
    services: Mapping[str, Any] | None = None
    listed: frozenset[str] = frozenset()


def run_nova_cycle(state: NovaRuntime, ironic: IronicAdapter, pool: Pool, *,
                   members: Sequence[Member], identities: AbstractSet[str], deleting: AbstractSet[str],
                   nova_conf: str | None, nodes: Sequence[Node] | None,
                   previous: nova_policy.RecordedNova, now: float, metrics: Any = None,
                   may_write: Callable[[], bool] | None = None,
                   held: AbstractSet[str] = frozenset(), member_confs: Sequence[str | None] = (),
                   stop: Callable[[], bool] | None = None, retiring: AbstractSet[str] = frozenset()) -> NovaOutcome:
    """One Nova cycle of `pool` (see the module doc). Blocking: run it in a worker thread.

    `members`: the readiness of the pool's identities; `identities`: every current member
    (pod or ConfigMap) and the ones being created; `deleting`: those of them this cycle
    deletes (plan.members_to_delete: no misplaced node is handed to them); `retiring`: those the
    plan retires (plan.retiring: no misplaced node is given back to them either); `nodes`: the
    pool's Ironic nodes as this cycle read them, None when Ironic could not be read (then only forced_down is looked
    after, and only once Nova has answered before); `previous`: the last status.nova read back (PoolMemory.nova);
    `may_write`: asked right before the writes (the leader's Lease check), none made if False;
    `held`: members a handover holds (their forced_down is never cleared, and the audit gives
    them no misplaced node, nor takes one from them); `member_confs`: the
    members' own nova.conf files (podspec.member_conf; with `nova_conf`, their update interval paces the audit);
    `stop`: asked between the pages of the audit's read (the side's interrupt: something new
    happened, a certain failure maybe, whose move must not wait for the read).
    Never raises for Nova's sake: failures become the section's state.
    """
    cycle = _NovaCycle(pool, tuple(members), identities, deleting, nova_conf, nodes, previous, now, metrics,
                       may_write, held, tuple(member_confs), stop, retiring)
    if state.adapter is not None and state.adapter.connection is not ironic.connection:
        state.adapter, state.schedule = None, state.schedule.for_new_cloud()  # a new clouds.yaml
    recorded = (*previous.retired, *state.retired)
    state.retired = nova_policy.retired_after(recorded, deleting=deleting, identities=identities, services=None)
    if not state.schedule.asks_nova(now, ironic_read=nodes is not None):
        if previous.section and list(state.retired) != list(previous.retired):
            return NovaOutcome({**previous.section, "retired": list(state.retired)})  # recorded, Nova or not
        return NovaOutcome(None)
    if state.adapter is None:
        state.adapter = NovaAdapter(ironic.connection, cloud_name=pool.cloud_name,
                                    request_timeout=REQUEST_TIMEOUT_SECONDS,
                                    retry_attempts=REQUEST_ATTEMPTS)
    nova, events = state.adapter, []
    try:
        answered = _asked(state, nova, ironic, cycle, recorded, events)
    except (NovaNotConfigured, NovaAuthError, NovaTooOld) as error:
        section = _disabled(state, cycle, error)
    except NovaError as error:
        section = _unavailable(state, cycle, error)
    else:
        section = _enabled(state, cycle, answered)
        return NovaOutcome(section, tuple(events) + tuple(nova_policy.section_events(previous.section, section)),
                           _services_after(nova, pool.key, answered.services, answered.forced), answered.listed)
    return NovaOutcome(section, tuple(events) + tuple(nova_policy.section_events(previous.section, section)))


@dataclass(frozen=True, slots=True)
class _NovaCycle:
    """run_nova_cycle's arguments, for its steps."""

    pool: Pool
    members: tuple[Member, ...]
    identities: AbstractSet[str]
    deleting: AbstractSet[str]
    nova_conf: str | None
    nodes: Sequence[Node] | None
    previous: nova_policy.RecordedNova
    now: float
    metrics: Any
    may_write: Callable[[], bool] | None
    held: AbstractSet[str]
    member_confs: tuple[str | None, ...] = ()
    stop: Callable[[], bool] | None = None
    retiring: AbstractSet[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Answered:
    """What a cycle whose Nova answered saw and wrote: the services as first read, the
    forced_down changes decided, the clearWhenReady flags they were decided with, the hosts
    forced down once the writes are done, and the hosts the hypervisor list named (audited)."""

    services: Mapping[str, nova_policy.ServiceRecord]
    changes: tuple[fencing.ForcedDownChange, ...]
    clear_when_ready: frozenset[str]
    forced: set[str]
    listed: frozenset[str]


def _asked(state: NovaRuntime, nova: NovaAdapter, ironic: IronicAdapter, cycle: _NovaCycle,
           recorded: Sequence[str], events: list[Event]) -> _Answered:
    """Nova's services read, forced_down decided (core/fencing.py: set once a member has not
    been ready for failover.rebalanceAfterSeconds, cleared as soon as it is ready again if the
    flag belongs to a failure, status.nova.clearWhenReady; an administrator's flag on a ready
    member stays), the audit made when due, then the writes (forced_down first; then the Ironic
    handover of misplaced nodes, which a Nova failure does not hold up). Nova errors propagate.

    A cycle that forces a member down leaves a due audit to the next cycle (`_audit`)."""
    services = nova.compute_services()
    state.schedule = state.schedule.answered_now()
    state.retired = nova_policy.retired_after(recorded, deleting=cycle.deleting, identities=cycle.identities,
                                              services=services)
    clear_when_ready = fencing.clear_when_ready_after(
        cycle.previous.clear_when_ready, cycle.members, services)
    changes = fencing.forced_down_changes(cycle.members, services, cycle.pool.spec.rebalance_after_seconds,
                                          cycle.now, clear_when_ready, cycle.held)
    previous_report = state.report
    deletions, repairs, returns, listed = _audit(state, nova, cycle, services,
                                                 failing_over=any(change.forced_down for change in changes))
    if state.report is not previous_report and state.report is not None:
        events += nova_policy.stray_events(previous_report, state.report)
    forced = {host for host, s in services.items() if s.forced_down}
    if not cycle.pool.paused and (cycle.may_write is None or cycle.may_write()):
        try:
            _write(nova, cycle.pool.key, changes, deletions, state, cycle.now, forced, cycle.metrics, events)
        finally:
            stop = WriteStop(threading.Event(), cycle.may_write or (lambda: True))
            if returns:
                _give_back(ironic, cycle.pool.key, returns, cycle.nodes or (), cycle.metrics, events, stop)
            if repairs:
                _hand_over(ironic, cycle.pool.key, repairs, cycle.nodes or (), cycle.metrics, events, stop)
    return _Answered(services, tuple(changes), clear_when_ready, forced, listed)


def _audit(state: NovaRuntime, nova: NovaAdapter, cycle: _NovaCycle, services: Mapping[str, Any], *,
           failing_over: bool = False) -> tuple[tuple[nova_policy.ServiceDeletion, ...], tuple[Move, ...],
                                                 tuple[nova_policy.MisplacedReturn, ...], frozenset[str]]:
    """When the audit is due (once per update interval of the members, the
    `update_resources_interval` of the nova.conf they run, and at most a share of Nova's time:
    NovaSchedule.audit_due) and Ironic was read: Nova's
    hypervisor list audited against the nodes (core/nova_policy.py::audit, its report kept in
    `state`); its service deletions (of members this pool retired, status.nova.retired), its
    repairs (spec.nova.repairMisplaced), its returns of misplaced nodes to the live member Nova
    and their instance name (`nova_policy.returns_to`) and the hosts the list named. Not due: nothing.

    `failing_over` (this cycle forces a member down), or a member's grace ending within the
    read's expected time (NovaSchedule.audit_lookahead): a due audit waits for a later cycle
    (NovaSchedule.may_postpone_audit), so that the failed member's free nodes move as soon as
    its grace ends; and a read under way stops between two pages once `cycle.stop` says
    something new happened (a failure that is certain moves at once, with no grace to see
    coming): the read of Nova's whole hypervisor list (2-12 s at 1,000 nodes here, a minute on
    a busy nova-api, half an hour at 100,000) never stands between a failure and its recovery.
    Either wait is bounded (may_postpone_audit): past it the audit runs to its end."""
    interval = nova_policy.update_interval(cycle.nova_conf, cycle.member_confs)
    nodes = cycle.nodes
    if nodes is None or not state.schedule.audit_due(cycle.now, interval):
        return (), (), (), frozenset()
    grace_ending = fencing.grace_ends_within(cycle.members, cycle.now, cycle.pool.spec.rebalance_after_seconds,
                                             state.schedule.audit_lookahead())
    may_wait = state.schedule.may_postpone_audit(cycle.now, interval)
    if (failing_over or grace_ending) and may_wait:
        state.schedule = state.schedule.audit_postponed(cycle.now)
        return (), (), (), frozenset()
    reading = time.monotonic()
    hypervisors = nova.hypervisors(stop=cycle.stop if may_wait else None)
    took = time.monotonic() - reading
    if hypervisors is None:  # stopped: the next side reads again
        log.info("pool %s: the Nova audit's read stopped after %.1f s: something new is handled first",
                 cycle.pool.key, took)
        state.schedule = state.schedule.audit_postponed(cycle.now)
        return (), (), (), frozenset()
    state.report = nova_policy.audit(
        pool_name=cycle.pool.name, identities=cycle.identities, deleting=cycle.deleting, retiring=cycle.retiring,
        held=cycle.held, retired=state.retired,
        nodes=nodes, hypervisors=hypervisors, services=services, since=state.since, now=cycle.now,
        interval=interval, repair=cycle.pool.repair_misplaced, refused=state.refused,
        instance_hosts=_instance_hosts(nova, nova_policy.misplaced(nodes, hypervisors)), strays=state.strays)
    state.since, state.strays = dict(state.report.since), dict(state.report.strays)
    state.schedule = state.schedule.audited(cycle.now, took)
    if cycle.metrics is not None:
        cycle.metrics.record_nova_audit(cycle.pool.key, state.report.counts())
    return state.report.deletions, state.report.repairs, state.report.returns, frozenset(h.host for h in hypervisors)


def _disabled(state: NovaRuntime, cycle: _NovaCycle, error: NovaError) -> dict[str, Any]:
    """The section of a Nova that cannot be used (no endpoint, credentials refused, too old)."""
    state.schedule = state.schedule.after(nova_policy.DISABLED, cycle.now)
    if cycle.metrics is not None:
        cycle.metrics.record_nova_error(cycle.pool.key, "disabled")
    return nova_policy.status_section(nova_policy.DISABLED, str(error), retired=state.retired)


def _unavailable(state: NovaRuntime, cycle: _NovaCycle, error: NovaError) -> dict[str, Any]:
    """The section of a Nova that did not answer: the last audit and forced_down flags kept."""
    state.schedule = state.schedule.after(nova_policy.UNAVAILABLE, cycle.now)
    if cycle.metrics is not None:
        cycle.metrics.record_nova_error(cycle.pool.key, "unavailable")
    log.warning("pool %s: Nova: %s (next attempt in %.0fs)", cycle.pool.key, error,
                state.schedule.retry_at - cycle.now)
    return nova_policy.status_section(nova_policy.UNAVAILABLE, str(error), state.report,
                                      cycle.previous.forced_down, state.retired, cycle.previous.clear_when_ready)


def _enabled(state: NovaRuntime, cycle: _NovaCycle, answered: _Answered) -> dict[str, Any]:
    """The section of a Nova that answered: the audit's findings, the hosts forced down."""
    state.schedule = state.schedule.after(nova_policy.ENABLED, cycle.now)
    message = nova_policy.summary(state.report.findings) if state.report is not None else \
        "Nova answers; its hypervisor list is audited once Ironic has been read"
    return nova_policy.status_section(
        nova_policy.ENABLED, message, state.report, sorted(answered.forced & cycle.identities), state.retired,
        fencing.clear_when_ready_written(answered.clear_when_ready, answered.changes, answered.forced))


def _services_after(nova: NovaAdapter, key: str, services: Mapping[str, Any],
                    forced: AbstractSet[str]) -> Mapping[str, Any] | None:
    """The compute services as Nova shows them once this cycle's writes are done. When a service
    was forced down, Nova is read again: a member past its grace leaves the guard of its free
    nodes' moves (shard_write.guarded_owners) only once Nova itself lists it down and forced
    down, never on the strength of an accepted request alone. None when that read fails (every
    identity is then guarded). Without a new flag, the first read with the flags written."""
    if all(services[host].forced_down for host in forced if host in services):
        return {host: replace(s, forced_down=host in forced) for host, s in services.items()}
    try:
        return nova.compute_services()
    except NovaError as error:
        log.warning("pool %s: Nova not read again after forcing services down (%s): every member's free "
                    "nodes move guarded this cycle", key, error)
        return None


def _write(nova: NovaAdapter, key: str, changes: Sequence[fencing.ForcedDownChange],
           deletions: Sequence[nova_policy.ServiceDeletion], state: NovaRuntime, now: float,
           forced: set[str], metrics: Any, events: list[Event]) -> None:
    """Carry out the decisions, one Event per write done (appended to `events` at once, so
    a later failure loses none); `forced` (hosts forced down) follows what was written.
    `state.report.waiting` follows the deletions: a deleted service waits no more, a refused
    one is waiting from this cycle on (also after an operator restart, which forgets the
    earlier refusals). Nova errors other than the expected answers propagate (the caller
    backs off)."""
    record: Callable[[str], None] = (lambda action: metrics.record_nova_action(key, action)) \
        if metrics is not None else (lambda action: None)
    for change in changes:
        try:
            nova.set_forced_down(change.service, change.forced_down)
        except ServiceNotFound:
            continue  # deleted meanwhile: nothing to force or clear
        (forced.add if change.forced_down else forced.discard)(change.member)
        record("forced_down_set" if change.forced_down else "forced_down_cleared")
        events.append(Event("ForcedDown" if change.forced_down else "ForcedDownCleared",
                            change.message, "Warning" if change.forced_down else "Normal"))
    for deletion in deletions:
        host = deletion.service.host
        try:
            nova.delete_service(deletion.service)
        except ServiceInUse as refusal:
            state.refused[host] = nova_policy.ServiceDeletionRefusal(now, refusal.reason)
            _set_waiting(state, host, f"{nova_policy.REFUSED}: {refusal.reason}")
            record("service_delete_refused")
            events.append(Event("NovaServiceInUse", f"{refusal}; asked again in "
                                f"{nova_policy.REFUSAL_RETRY_SECONDS:.0f}s", "Warning"))
            continue
        state.refused.pop(host, None)
        _set_waiting(state, host, None)
        forced.discard(host)
        record("service_deleted")
        events.append(Event("DeletedNovaService", deletion.message))


def _instance_hosts(nova: NovaAdapter, misplaced: Sequence[tuple[Node, str]]) -> dict[str, str | None]:
    """For each misplaced (node, compute-node host): the host Nova places the node's instance
    on, asked under the compute node's host first, then under the node's shard; None when
    under neither."""
    found: dict[str, str | None] = {}
    for node, host in misplaced:
        candidates = [h for h in (host, node.shard) if h]
        found[node.uuid] = next((h for h in candidates if nova.instances_on_node(h, node.uuid)), None)
    return found


def _set_waiting(state: NovaRuntime, host: str, why: str | None) -> None:
    """Record (or with None, drop) why `host`'s service is not deleted yet in the last report."""
    if state.report is None:
        return
    waiting = {h: w for h, w in state.report.waiting.items() if h != host}
    if why is not None:
        waiting[host] = why
    state.report = replace(state.report, waiting=waiting)


def _give_back(ironic: IronicAdapter, key: str, returns: Sequence[nova_policy.MisplacedReturn],
               nodes: Sequence[Node], metrics: Any, events: list[Event], stop: WriteStop) -> None:
    """Set each misplaced node Nova and its instance place on a live member back to that member's
    shard (`nova_policy.returns_to`), one compare-and-set write each (the adapter re-reads the
    node and skips it if its shard or instance changed since `nodes` were read), and an Event
    naming each node written. An Ironic failure is logged and left to the next audit."""
    for given in returns:
        if stop.is_set():
            return
        try:
            result = ironic.hand_over([given.move], nodes, stop)
        except IronicError as error:
            log.warning("pool %s: misplaced node %s not given back to %s, Ironic failed: %s", key,
                        given.move.node_uuid, given.move.target, error)
            return
        if result.applied:
            if metrics is not None:
                metrics.record_nova_action(key, "misplaced_returned")
            events.append(Event("MisplacedNodeReturned", given.message))


def _hand_over(ironic: IronicAdapter, key: str, repairs: Sequence[Move], nodes: Sequence[Node],
               metrics: Any, events: list[Event], stop: WriteStop) -> None:
    """Set misplaced nodes' shard to their instance's host (spec.nova.repairMisplaced).
    The adapter re-reads each node right before writing and skips any whose shard or
    instance changed since `nodes` were read. An Ironic failure is logged and left to the
    next audit (which finds the nodes still misplaced, or not any more)."""
    try:
        result = ironic.hand_over(repairs, nodes, stop)
    except IronicError as error:
        log.warning("pool %s: misplaced nodes not handed over, Ironic failed: %s", key, error)
        return
    if not result.applied:
        return
    if metrics is not None:
        metrics.record_nova_action(key, "misplaced_handed_over", result.applied)
    events.append(Event("HandedOverNodes", f"Set the Ironic shard of {result.applied} of "
                        f"{len(repairs)} misplaced nodes to their instance's host (planned: "
                        f"{spread(repairs)}): spec.nova.repairMisplaced is true"))
