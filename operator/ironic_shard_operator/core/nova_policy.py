"""Nova's side of a pool, audited against Ironic: findings, the services to delete, the
misplaced nodes to hand over. Pure: the shell (controller/nova_cycle.py) reads Nova and
carries the decisions out; forced_down, which follows the grace rule, is core/fencing.py's.

Invariants: Nova's hypervisor list is the judge (each Ironic node has at most one compute
node, whose host is the one that last reported it, and a node with an instance is reported
only by its instance's host); only the service of an identity THIS pool created and retired
is ever deleted (invariant 11); a pinned node is handed over only to the host of its own
instance (the one audited exception to invariant 2): at once when Nova and the instance both
name a live member and its shard another member (`returns_to`), else only on `repair`; a half
move never; a compute that is not the pool's is named (`stray`), never written to.
"""

from __future__ import annotations

import configparser
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from ironic_shard_operator.core.events import Event
from ironic_shard_operator.core.model import Move, Node, member_ordinal

# Nova's default spacing of its periodic tasks when update_resources_interval is 0.
NOVA_DEFAULT_UPDATE_INTERVAL = 60.0
# A node may legitimately be listed elsewhere (or nowhere) for one resource cycle of its new
# owner; two cycles without it is a finding.
UPDATE_INTERVALS_BEFORE_FINDING = 2
# After Nova refused to delete a service (instances left), ask again only after this long.
REFUSAL_RETRY_SECONDS = 300.0
# How status.nova.waiting says that Nova refused to delete a service (condition ScaleDownBlocked).
REFUSED = "Nova refused to delete its service"
# How many findings the status and Events spell out (the counts cover all of them).
EXAMPLES = 5
# The most retired identities status.nova.retired remembers (the most recent kept): beyond
# it the oldest is forgotten, and its service, if any is left, is left alone (never a
# deletion without the record).
RETIRED_LIMIT = 64

DUPLICATE, UNLISTED, MISPLACED, UNMAPPED, INCOMPLETE, STRAY = (
    "duplicate", "unlisted", "misplaced", "unmapped", "incomplete", "stray")
FINDING_KINDS = (DUPLICATE, UNLISTED, MISPLACED, UNMAPPED, INCOMPLETE, STRAY)
# Misplaced nodes whose instance's host is asked of Nova per audit (two requests each).
INSTANCE_HOSTS_ASKED = 50
# A stray compute and the member whose shard it shares take the same nodes' records from each
# other at each of their resource passes (Nova's resource tracker drops a cached compute node
# another host took, then takes it back): the audit sees the nodes under the stray in some of
# its reads only, as many as the two passes' phases allow. A stray is named once sighted in two
# reads more than two update intervals apart, and stays named until no read has sighted it for
# this many update intervals, or its service is down.
STRAY_MEMORY_INTERVALS = 30


class ServiceRecord(Protocol):
    """A nova-compute service as the audit needs it (nova.ComputeService has these)."""

    @property
    def id(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def forced_down(self) -> bool: ...
    @property
    def enabled(self) -> bool: ...


class HypervisorRecord(Protocol):
    """One compute-node record (nova.Hypervisor has these): Ironic node and reporting host."""

    @property
    def node_uuid(self) -> str: ...
    @property
    def host(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Finding:
    """Something wrong in Nova's view of the pool; `subject` is a node uuid or member name.
    `message` depends only on the facts (not on the clock), so a status built from it is
    rewritten only when they change.

    What Nova shows, and why it can be trusted as the judge (Nova 2024.1+, `[ironic]shard`):
    each Ironic node has at most one compute-node record, named by the node's UUID, whose
    `host` is the nova-compute service that last reported it. A member whose shard gains a
    free node takes the record over at its next resource-tracker cycle; a member that stops
    reporting a node keeps the record (Nova deletes it only when the Ironic node is gone).
    A node with an instance is reported only by the host of that instance, so its record's
    host IS the instance's host: the audit reads the instance's host from the hypervisor list
    (no server listing needed).

    Findings (`Finding.kind`):
    - `duplicate`: a managed node listed under two or more computes (reported at once);
    - `unlisted`: a node owned by a member but not listed under that member's compute (under
      none, or still under another) for longer than two update intervals (the members' resource
      cycle, `update_interval()`); the first time it was seen so is carried from audit to audit
      in `since` (kept in memory: after an operator restart the clock starts again);
    - `misplaced`: a node with an instance, listed under exactly one host that is not its shard
      (a handover between its Nova move and its shard write only once that persists).
      No compute serves it (the instance's host lists only the nodes of its own shard, and no other
      host takes over a node with an instance). When Nova places the node's instance on that same
      host (`instance_hosts`), that host is a live member and the shard another member that no
      handover holds (`returns_to`: a build placed on the node's old owner just after a rebalance
      wrote its new shard, or a shard changed by hand), the audit gives it back at once
      (`AuditReport.returns`, an Event each); otherwise, with `repair`, it hands it over
      explicitly when that host is a member of the pool. Either is a Move setting its shard to
      the compute node's host: the one audited exception to "the ring never moves a pinned
      node" (invariant 2);
    - `incomplete`: a misplaced node whose instance Nova places on another host than its compute
      node (a nova-manage move killed between its two saves: compute node saved, instance not).
      Never repaired: writing its shard would hide the instance from the host Nova sends its
      actions to, and nova-manage cannot finish it; the finding names the SQL that does, and stays
      until it is done (invariant 12);
    - `unmapped`: a member whose service is up and owns nodes, but Nova lists no node under it
      for longer than two update intervals (its host is not mapped to a cell: the deployment's
      host discovery has not run for it);
    - `stray`: a host that is no member of the pool (nor one it retired), whose service is up,
      and under which Nova listed some of the pool's nodes in two audits more than two update
      intervals apart (`StraySighting`): a nova-compute with the Ironic driver and no
      `[ironic]shard` (it joins Nova's hash ring of every Ironic compute and takes a share of
      every shard's free nodes), or one with a member's shard under another host (it takes that
      shard's). It and the member take the nodes' records from each other at each resource pass,
      so a read sees them under the stray only in part of the time: it stays named until no
      audit has sighted it for STRAY_MEMORY_INTERVALS update intervals, or its service is down.
      Builds placed on those nodes while it holds them go to it. Named, never touched: its
      service is not the operator's.
    """

    kind: str
    subject: str
    message: str


@dataclass(frozen=True, slots=True)
class ServiceDeletion:
    """Delete `service`: its host was a member of the pool and is gone for good."""

    service: ServiceRecord
    message: str


@dataclass(frozen=True, slots=True)
class ServiceDeletionRefusal:
    """Nova refused to delete the service of a host at `at` (epoch seconds), saying `reason`."""

    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class StraySighting:
    """What the audits saw of a host that is not the pool's listing the pool's nodes: when Nova
    first and last listed some under it (while its service stayed up), and the most at once."""

    first: float
    last: float
    most: int


@dataclass(frozen=True, slots=True)
class MisplacedReturn:
    """Give misplaced `move.node_uuid` back to `move.target`, the live member that Nova's compute
    node and the node's instance both name (`returns_to`); `message` says so for its Event."""

    move: Move
    message: str


@dataclass(frozen=True, slots=True)
class AuditReport:
    """One audit: findings, what to delete or hand over, and the memory for the next audit.

    `since` maps a pending finding's key to when it was first seen, `strays` the sightings of
    hosts that are not the pool's (`StraySighting`); pass both to the next audit. `waiting`
    explains, per retired host, why its service is not deleted yet.
    `returns` are misplaced nodes given back at once to the live member Nova and their instance
    name (`returns_to`); `repairs` the other explicit handovers of misplaced nodes (only with
    repair enabled). No node is in both.
    """

    findings: tuple[Finding, ...] = ()
    since: Mapping[str, float] = field(default_factory=dict)
    deletions: tuple[ServiceDeletion, ...] = ()
    waiting: Mapping[str, str] = field(default_factory=dict)
    repairs: tuple[Move, ...] = ()
    returns: tuple[MisplacedReturn, ...] = ()
    strays: Mapping[str, StraySighting] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Findings per kind, every kind present (zeros included)."""
        found = Counter(f.kind for f in self.findings)
        return {kind: found[kind] for kind in FINDING_KINDS}


def update_interval(nova_conf: str | None, member_confs: Iterable[str | None] = ()) -> float:
    """Seconds between two resource-tracker cycles of the slowest member, read from the files
    they run: `[DEFAULT]update_resources_interval` of a member's own file (`member_confs`,
    podspec.member_conf: it wins as the later config file), else of the base nova.conf, when positive, else Nova's default
    periodic spacing (60 s). An unreadable file counts as one without the option."""
    base = _positive_interval(nova_conf)
    members = [_positive_interval(conf) or base for conf in member_confs] or [base]
    return max(value or NOVA_DEFAULT_UPDATE_INTERVAL for value in members)


def _positive_interval(conf: str | None) -> float | None:
    """`[DEFAULT]update_resources_interval` of an ini text when positive, else None."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(conf or "")
        value = float(parser.get("DEFAULT", "update_resources_interval", fallback="0"))
    except (configparser.Error, ValueError):
        return None
    return value if value > 0 else None


def retired_after(recorded: Iterable[str], *, deleting: Iterable[str], identities: Iterable[str],
                  services: Mapping[str, ServiceRecord] | None) -> tuple[str, ...]:
    """status.nova.retired after this cycle: the identities this pool retired whose Nova
    service may still exist, oldest first, at most RETIRED_LIMIT (the newest kept).

    `recorded`: the list so far (the last status, so it survives a restart); `deleting`: the
    identities this cycle deletes (plan.members_to_delete; added); `identities`: the current members; `services`:
    Nova's services when this cycle read them, None otherwise. An identity whose pod and
    ConfigMap are gone leaves the list once Nova lists no service for it: deleted, or never
    registered (with no pod left, none can register any more). A member stays listed (its
    retirement may span cycles, and one taken up again is never deleted while a member).
    """
    members = set(identities)
    kept = [host for host in dict.fromkeys(recorded)
            if host in members or services is None or host in services]
    kept += [host for host in sorted(set(deleting)) if host not in kept]
    return tuple(kept[-RETIRED_LIMIT:])


def half_move_message(node: str, instance: str | None, source: str, host: str) -> str:
    """What a half move is and how to finish it by hand: the compute node of `node` is under
    `host` while its instance still names `source` (nova-manage killed between its two saves;
    it refuses to finish it: the compute node's service, now `host`, is not forced down)."""
    return (f"node {node}: Nova lists its compute node under {host} but its instance "
            f"{instance} still names host {source} (a nova-manage move interrupted between its "
            f"two saves; nova-manage refuses to finish it). Finish it in the cell database of "
            f"novaManageConfig: UPDATE instances SET host='{host}' WHERE uuid='{instance}' "
            f"AND deleted=0; the operator then sets the node's Ironic shard to {host}")


def handover_in_flight(shard: str | None, host: str, members: AbstractSet[str], leaving: AbstractSet[str],
                       services: Mapping[str, ServiceRecord]) -> bool:
    """Whether a node Nova lists under `host` while its shard is `shard` is a handover between
    its two Nova steps and its Ironic step (core/handover.py): moved in Nova from a member whose
    service is forced down (the handover's source) to a member that stays. Its shard is written
    next; only if that does not follow within the audit's patience is it misplaced."""
    source = services.get(shard) if shard is not None else None
    return (shard in members and source is not None and source.forced_down
            and host in members and host not in leaving)


def misplaced(nodes: Iterable[Node], hypervisors: Iterable[HypervisorRecord]) -> list[tuple[Node, str]]:
    """(node, host) of the nodes with an instance that Nova lists under exactly one host, not
    their shard: the audit's `misplaced` candidates, whose instance's host the shell asks Nova
    for (`instance_hosts` of `audit`), at most INSTANCE_HOSTS_ASKED of them, by uuid."""
    listed: defaultdict[str, set[str]] = defaultdict(set)
    for hypervisor in hypervisors:
        listed[hypervisor.node_uuid].add(hypervisor.host)
    found = [(node, next(iter(listed[node.uuid]))) for node in sorted(nodes, key=lambda n: n.uuid)
             if node.instance_uuid and len(listed.get(node.uuid, ())) == 1 and node.shard not in listed[node.uuid]]
    return found[:INSTANCE_HOSTS_ASKED]


def audit(*, pool_name: str, identities: Iterable[str], nodes: Sequence[Node],
          deleting: Iterable[str] = (), retiring: Iterable[str] = (), held: Iterable[str] = (),
          retired: Iterable[str] = (),
          hypervisors: Iterable[HypervisorRecord], services: Mapping[str, ServiceRecord],
          since: Mapping[str, float], now: float, interval: float, repair: bool = False,
          refused: Mapping[str, ServiceDeletionRefusal] | None = None,
          instance_hosts: Mapping[str, str | None] | None = None,
          strays: Mapping[str, StraySighting] | None = None) -> AuditReport:
    """Compare Nova's hypervisor list with the pool's Ironic nodes.

    What each finding means: `Finding`; which services are deleted: `_retired_services`.

    `identities` are the pool's current members (a pod or a ConfigMap exists), `deleting`
    those of them being removed (plan.members_to_delete) and `retiring` those chosen to retire
    (plan.retiring) (never a repair's target), `held` the members a handover holds (neither a
    return's target nor its source); `retired` the identities this
    pool retired (`retired_after`: only their services are ever deleted); `nodes`
    the pool's managed Ironic nodes; `services` every nova-compute service by host;
    `since` the memory returned by the previous audit; `interval` the members' update
    interval in seconds; `refused` the hosts whose service deletion Nova refused;
    `instance_hosts` the host Nova places the instance of each `misplaced()` node on (None:
    none found). A node not asked about is never repaired. `strays`: the sightings returned by
    the previous audit.
    """
    pool = PoolHosts(set(identities), set(deleting) | set(retiring), set(held), services)
    clocks = _Clocks(since, now, UPDATE_INTERVALS_BEFORE_FINDING * interval)
    listed, under_host = _listing(nodes, hypervisors)
    sightings = _sightings(pool, set(retired), under_host, strays or {}, now, interval)
    stray_findings = [Finding(STRAY, host, stray_message(host, seen.most)) for host, seen in sightings.items()
                      if seen.last - seen.first > clocks.patience]
    findings, decided, owned = _node_findings(nodes, listed, pool, clocks, repair, instance_hosts or {})
    # strays first: they are the cause of their nodes' other findings
    findings = stray_findings + findings + _unmapped(pool_name, pool.members, services, owned, under_host, clocks)
    deletions, waiting = _retired_services(pool_name, retired, pool.members, services, owned, under_host,
                                           refused or {}, now)
    return AuditReport(findings=tuple(findings), since=clocks.seen, deletions=tuple(deletions), waiting=waiting,
                       repairs=tuple(d for d in decided if isinstance(d, Move)),
                       returns=tuple(d for d in decided if isinstance(d, MisplacedReturn)), strays=sightings)


@dataclass(frozen=True, slots=True)
class PoolHosts:
    """The audit's view of who is who among Nova's hosts: the pool's current members, those of
    them leaving (being removed or retiring) or held by a handover, and Nova's services by host."""

    members: AbstractSet[str]
    leaving: AbstractSet[str]
    held: AbstractSet[str]
    services: Mapping[str, ServiceRecord]

    def live(self, host: str | None) -> bool:
        """Whether `host` is a member that stays and serves: a current identity, neither leaving
        nor held by a handover, whose Nova service is up, enabled and not forced down."""
        service = self.services.get(host) if host is not None else None
        return (host in self.members and host not in self.leaving and host not in self.held
                and service is not None and service.up and service.enabled and not service.forced_down)

    def handing_over(self, host: str | None) -> bool:
        """Whether `host` may be a handover's source: leaving, held, or its service forced down."""
        service = self.services.get(host) if host is not None else None
        return host in self.leaving or host in self.held or (service is not None and service.forced_down)


def returns_to(node: Node, host: str, instance_host: str | None, pool: PoolHosts) -> bool:
    """Whether misplaced `node` (an instance, Nova's compute node under `host`, not its shard)
    goes back to `host` at once, without spec.nova.repairMisplaced: Nova places its instance on
    `host` too (known, not assumed: no half move), `host` is a live member (`PoolHosts.live`),
    and the node's shard names another member that no handover may be moving it from. That is
    the window after a rebalance between live members (a build placed on the old owner, which
    still listed the node, after the new shard was written) or a shard changed by hand: Nova and
    the instance agree, only Ironic's shard does not; every other misplaced node keeps `repair`'s rule."""
    return (instance_host == host and pool.live(host) and node.shard in pool.members
            and node.shard != host and not pool.handing_over(node.shard))


@dataclass
class _Clocks:
    """The audit's memory of pending findings: when each was first seen (`since`, the last
    audit's memory) and, filled as the audit goes, those still pending now (`seen`, the next)."""

    since: Mapping[str, float]
    now: float
    patience: float
    seen: dict[str, float] = field(default_factory=dict)

    def persisting(self, key: str) -> bool:
        """Whether `key` has been pending for longer than the patience (remembered either way)."""
        first = self.seen[key] = self.since.get(key, self.now)
        return self.now - first > self.patience


def _listing(nodes: Iterable[Node], hypervisors: Iterable[HypervisorRecord]
             ) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Nova's hypervisor list over the pool's nodes: the hosts each node is listed under, and
    the nodes listed under each host (others' nodes left out)."""
    listed: defaultdict[str, list[str]] = defaultdict(list)
    under_host: defaultdict[str, set[str]] = defaultdict(set)
    managed = {node.uuid for node in nodes}
    for hypervisor in hypervisors:
        if hypervisor.node_uuid in managed:
            listed[hypervisor.node_uuid].append(hypervisor.host)
            under_host[hypervisor.host].add(hypervisor.node_uuid)
    return listed, under_host


def _node_findings(nodes: Sequence[Node], listed: Mapping[str, list[str]], pool: PoolHosts, clocks: _Clocks,
                   repair: bool, instance_hosts: Mapping[str, str | None]
                   ) -> tuple[list[Finding], list[Move | MisplacedReturn], Counter[str]]:
    """Each node against the computes Nova lists it under: duplicate, misplaced (and its
    return or repair), incomplete, unlisted; and the nodes each shard owns."""
    members = pool.members
    findings: list[Finding] = []
    decided: list[Move | MisplacedReturn] = []
    owned: Counter[str] = Counter()
    for node in sorted(nodes, key=lambda n: n.uuid):
        hosts = sorted(set(listed.get(node.uuid, ())))
        if node.shard is not None:
            owned[node.shard] += 1
        if len(hosts) > 1:
            findings.append(Finding(DUPLICATE, node.uuid,
                                    f"node {node.uuid} is listed under {len(hosts)} computes "
                                    f"({', '.join(hosts)})"))
        elif node.instance_uuid and hosts and hosts[0] != node.shard:
            host = hosts[0]
            if handover_in_flight(node.shard, host, members, pool.leaving, pool.services) \
                    and not clocks.persisting(f"{MISPLACED}:{node.uuid}:{host}"):
                continue  # moved in Nova first by a handover: its shard is written next
            finding, move = _misplaced(node, host, instance_hosts.get(node.uuid), pool, repair)
            findings.append(finding)
            decided += [move] if move is not None else []
        elif node.shard in members and hosts != [node.shard]:
            if clocks.persisting(f"{UNLISTED}:{node.uuid}:{node.shard}"):  # a new owner: a new clock
                where = f"under {hosts[0]}" if hosts else "under no compute"
                findings.append(Finding(UNLISTED, node.uuid,
                                        f"node {node.uuid} (shard {node.shard}) is listed {where} "
                                        f"for more than {clocks.patience:g}s"))
    return findings, decided, owned


def _misplaced(node: Node, host: str, instance_host: str | None, pool: PoolHosts,
               repair: bool) -> tuple[Finding, Move | MisplacedReturn | None]:
    """A node with an instance that Nova lists under `host`, not its shard: a half move when its
    instance is on another host (never repaired: nova-manage's second save is missing), else
    misplaced: given back at once when `returns_to` says so, else repaired when asked for and
    the host is a staying member where the instance is too."""
    assert node.instance_uuid is not None
    if instance_host is not None and instance_host != host:
        return Finding(INCOMPLETE, node.uuid, half_move_message(node.uuid, node.instance_uuid, instance_host,
                                                                 host)), None
    message = (f"node {node.uuid} has an instance on {host} but its shard is {node.shard or '(none)'}: "
               "no compute serves it")
    if returns_to(node, host, instance_host, pool):
        return (Finding(MISPLACED, node.uuid, f"{message}; Nova and its instance both name {host}, a live member: "
                                              f"its shard is set back to {host}"),
                MisplacedReturn(Move(node.uuid, node.shard, host), returned_message(node, host)))
    if repair and host in pool.members and host not in pool.leaving and instance_host == host:
        return Finding(MISPLACED, node.uuid, message), Move(node.uuid, node.shard, host)
    return Finding(MISPLACED, node.uuid, message), None


def returned_message(node: Node, host: str) -> str:
    """The Event of a misplaced node given back to `host` (`returns_to`): the node, its shard
    before and after, and why."""
    return (f"Set the Ironic shard of node {node.uuid} from {node.shard} back to {host}: Nova lists its compute "
            f"node under {host} and its instance {node.instance_uuid} is on {host}, a live member, so no "
            f"compute served it while its shard named {node.shard} (a build placed on {host} just after a "
            "rebalance wrote the new shard, or a shard changed by hand); given back at once, without "
            "spec.nova.repairMisplaced")


def _sightings(pool: PoolHosts, retired: AbstractSet[str], under_host: Mapping[str, set[str]],
               before: Mapping[str, StraySighting], now: float, interval: float) -> dict[str, StraySighting]:
    """The sightings of hosts that are neither members of the pool nor retired by it, their Nova
    service up, that Nova lists some of the pool's nodes under now or did within
    STRAY_MEMORY_INTERVALS update intervals (`before`: the last audit's). A host that is ours,
    or whose service is down or gone, is forgotten at once. By host, sorted."""
    sightings = {}
    for host in sorted(set(under_host) | set(before)):
        service = pool.services.get(host)
        if host in pool.members or host in retired or service is None or not service.up:
            continue
        listed, seen = len(under_host.get(host, ())), before.get(host)
        if listed:
            sightings[host] = StraySighting(seen.first if seen else now, now, max(listed, seen.most if seen else 0))
        elif seen is not None and now - seen.last <= STRAY_MEMORY_INTERVALS * interval:
            sightings[host] = seen
    return sightings


def stray_message(host: str, listed: int) -> str:
    """What a stray compute is, what it does to the pool and the fix (someone else's); `listed`:
    the most of the pool's nodes Nova listed under it at once."""
    return (f"Nova compute {host} is not a member of this pool, yet Nova lists up to {listed} of the pool's nodes "
            "under it: a nova-compute with the Ironic driver and no [ironic]shard (or with a member's "
            "shard under another host) takes nodes away from their members, and builds placed on them "
            "go to it. It is not the operator's, which never touches its service: stop that nova-compute, "
            "or give it an [ironic]shard no member of this pool uses")


def stray_events(previous: AuditReport | None, report: AuditReport) -> list[Event]:
    """A Warning for each stray compute this audit names that the previous one did not."""
    before = {f.subject for f in previous.findings if f.kind == STRAY} if previous is not None else set()
    return [Event("StrayCompute", f.message, "Warning") for f in report.findings
            if f.kind == STRAY and f.subject not in before]


def _unmapped(pool_name: str, members: AbstractSet[str], services: Mapping[str, ServiceRecord], owned: Counter[str],
              under_host: Mapping[str, set[str]], clocks: _Clocks) -> list[Finding]:
    """Members up and owning nodes under which Nova has listed none for longer than the
    patience: their host is probably not mapped to a cell."""
    findings = []
    for member in sorted(members, key=lambda m: (member_ordinal(pool_name, m) or 0, m)):
        service = services.get(member)
        if service is None or not service.up or not owned[member] or under_host.get(member):
            continue
        if clocks.persisting(f"{UNMAPPED}:{member}"):
            findings.append(Finding(UNMAPPED, member,
                                    f"member {member} is up and owns nodes, but Nova has listed "
                                    f"none under it for more than {clocks.patience:g}s: is its host mapped "
                                    "to a cell (nova-manage cell_v2 discover_hosts)?"))
    return findings


def _retired_services(pool_name: str, retired: Iterable[str], members: AbstractSet[str],
                      services: Mapping[str, ServiceRecord], owned: Counter[str],
                      under_host: Mapping[str, set[str]], refused: Mapping[str, ServiceDeletionRefusal],
                      now: float) -> tuple[list[ServiceDeletion], dict[str, str]]:
    """The services of members this pool retired that are deleted now, and why each other one
    waits: nodes still carry its shard, Nova still lists nodes under it, or Nova refused
    (asked again REFUSAL_RETRY_SECONDS later). Only this pool's member names, never a member.

    `AuditReport.deletions`: the service of an identity THIS pool created and retired
    (scale-down: no pod, no ConfigMap any more), once no managed node has it as shard and
    Nova lists no managed node under it. A host that merely looks like one of the pool's
    (`<pool>-<n>`: a same-named pool in another namespace, a host someone runs by hand) is
    never touched. The retired identities are recorded in status.nova.retired
    (`retired_after()`), so an operator restart keeps the knowledge; an identity leaves the
    record once it is no member and Nova lists no service for it (deleted, or never
    registered). Nova refusing (instances left, HTTP 409)
    is remembered by the shell (`refused`) and retried only after `REFUSAL_RETRY_SECONDS`;
    until a retry succeeds the host stays in `waiting` (so ScaleDownBlocked does not blink
    each time Nova is asked again).
    """
    deletions: list[ServiceDeletion] = []
    waiting: dict[str, str] = {}
    for host in sorted(set(retired)):
        service = services.get(host)
        if service is None or member_ordinal(pool_name, host) is None or host in members:
            continue
        if owned[host]:
            waiting[host] = (f"{owned[host]} Ironic nodes still have shard {host}; its Nova "
                             "service is deleted once they are freed or handed over")
        elif under_host.get(host):
            waiting[host] = (f"Nova still lists {len(under_host[host])} of the pool's nodes under "
                             f"{host}; its service is deleted once their new owners took them over")
        else:
            if host in refused:  # still refused until Nova agrees, also while asked again
                waiting[host] = f"{REFUSED}: {refused[host].reason}"
                if now - refused[host].at < REFUSAL_RETRY_SECONDS:
                    continue
            deletions.append(ServiceDeletion(
                service, f"Deleted Nova compute service {host}: the member was removed by "
                         "scale-down and owns no node any more"))
    return deletions, waiting


def summary(findings: Sequence[Finding]) -> str:
    """One sentence for a condition or an Event: counts per kind, then a few examples."""
    if not findings:
        return "Nova lists every node under the compute of its owner"
    found = Counter(f.kind for f in findings)
    counts = ", ".join(f"{found[kind]} {kind}" for kind in FINDING_KINDS if found[kind])
    examples = "; ".join(f.message for f in findings[:EXAMPLES])
    more = f"; and {len(findings) - EXAMPLES} more" if len(findings) > EXAMPLES else ""
    return f"Nova audit: {counts}: {examples}{more}"


# ---- status.nova and its Events ----------------------------------------------------------------

ENABLED, DISABLED, UNAVAILABLE = "Enabled", "Disabled", "Unavailable"


def status_section(state: str, message: str, report: AuditReport | None = None,
                   forced_down: Iterable[str] = (), retired: Iterable[str] = (),
                   clear_when_ready: Iterable[str] = ()) -> dict:
    """`status.nova`: always the same keys (the status is merge-patched: a key left out would
    linger), values that change only with the facts (no clock), so an unchanged pool's status
    is not rewritten.

    `state`: ENABLED (Nova answers; `message` summarises the last audit), DISABLED (the cloud
    has no usable Nova: `message` says why) or UNAVAILABLE (Nova did not answer; the last
    audit's findings are kept). `forced_down`: members whose service is forced down now.
    `retired`: the identities this pool retired whose service may remain (`retired_after`),
    in their order. `clear_when_ready`: members whose forced_down belongs to a failure and is
    cleared once they are ready (`fencing.clear_when_ready_after`).
    """
    return {
        "state": state,
        "message": message,
        "findings": report.counts() if report is not None else {kind: 0 for kind in FINDING_KINDS},
        "forcedDown": sorted(forced_down),
        "waiting": [f"{host}: {why}" for host, why in sorted((report.waiting if report else {}).items())],
        "retired": list(retired),
        "clearWhenReady": sorted(clear_when_ready),
    }


@dataclass(frozen=True, slots=True)
class RecordedNova:
    """status.nova as the last Nova cycle wrote it, read back once (`recorded_nova`,
    PoolMemory.nova): the members it forced down, those whose flag it clears once they are
    ready, the identities it retired whose service may remain, and the section itself (what
    the next section's Events compare with, kept while Nova is not asked)."""

    forced_down: tuple[str, ...] = ()
    clear_when_ready: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()
    section: Mapping | None = None


def recorded_nova(section: Mapping | None) -> RecordedNova:
    """The last status.nova read back. A section written before `clearWhenReady` existed
    cleared every forced-down member once ready: its `forcedDown` stands in."""
    if not isinstance(section, Mapping):
        return RecordedNova()
    forced_down = tuple(h for h in section.get("forcedDown") or () if isinstance(h, str))
    clear = section["clearWhenReady"] if "clearWhenReady" in section else forced_down
    return RecordedNova(forced_down, tuple(h for h in clear or () if isinstance(h, str)),
                        tuple(h for h in section.get("retired") or () if isinstance(h, str)), section)


def left_forced_down(section: Mapping) -> set[str]:
    """Members whose service is forced down but not by a failure the operator saw: an
    administrator's flag on a ready member, which the operator leaves alone."""
    return set(section.get("forcedDown") or ()) - set(section.get("clearWhenReady") or ())


def section_events(previous: Mapping | None, section: Mapping) -> list[Event]:
    """Events for what changed between two `status.nova` sections (none for a steady state)."""
    before = previous or {}
    state, message = section["state"], section["message"]
    events = []
    if state != before.get("state") and (before or state != ENABLED):
        if state == DISABLED:
            events.append(Event("NovaDisabled", f"Nova features are off: {message}"))
        elif state == UNAVAILABLE:
            events.append(Event("NovaUnavailable", f"Nova is not answering (retrying with "
                                                   f"backoff): {message}", "Warning"))
        else:
            events.append(Event("NovaAvailable", "Nova answers: forced_down during failover, "
                                                 "service cleanup on scale-down and the audit are on"))
    if state == ENABLED:
        for host in sorted(left_forced_down(section) - left_forced_down(before)):
            events.append(Event("ForcedDownLeftAlone", (
                f"Nova compute service {host} is forced down while its member is ready; the operator "
                f"did not set that and leaves it: Nova schedules nothing to {host} and no handover lands "
                f"there until it is cleared (openstack compute service set --up {host} nova-compute)"),
                "Warning"))
        found = any(section["findings"].values())
        had = any((before.get("findings") or {}).values())
        if found and message != before.get("message"):
            events.append(Event("NovaAudit", message, "Warning"))
        elif had and not found:
            events.append(Event("NovaAuditClear", message))
    return events
