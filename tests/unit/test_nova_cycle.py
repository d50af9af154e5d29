"""Nova's side of a cycle (controller/nova_cycle.py) as the Ironic writes of the same cycle
see it (invariant 13): a member past its grace whose nova-compute still heartbeats is forced
down first, and its free nodes leave it unguarded only once Nova, read again, lists it down and
forced down; an accepted request alone is not taken for Nova's word."""

from __future__ import annotations

import time
from dataclasses import replace

from ironic_shard_operator.adapters.ironic import ApplyResult
from ironic_shard_operator.adapters.nova import Hypervisor
from ironic_shard_operator.controller.nova_cycle import NovaOutcome, NovaRuntime, run_nova_cycle
from ironic_shard_operator.core.model import Member, Move, Node
from ironic_shard_operator.core.nova_policy import RecordedNova
from ironic_shard_operator.core.shard_write import guarded_owners
from ironic_shard_operator.core.spec import read_pool
from tests.unit.nova_records import services

NOW = 1_800_000_000.0
POOL = read_pool({"metadata": {"name": "rack", "namespace": "ns", "uid": "u", "generation": 1},
                  "spec": {"replicas": 2, "image": "i", "novaConfig": {"secretRef": {"name": "n"}},
                           "cloud": {"secretRef": {"name": "c"}}, "failover": {"rebalanceAfterSeconds": 60}}})
# rack-1's pod lost readiness 100 s ago (a failing readiness probe): past its grace, while its
# nova-compute heartbeats on (its service is up).
MEMBERS = (Member("rack-0", ready=True, since=0.0), Member("rack-1", ready=False, since=NOW - 100))


class NovaAnswers:
    """Nova's compute services as the operator's adapter returns them. A forced_down request is
    accepted; with `applies` False, Nova's next listing does not show it (whatever the reason:
    the request was never Nova's word, the listing is)."""

    def __init__(self, *, applies: bool = True, hypervisors_seconds: float = 0.0) -> None:
        self.services = services("rack-0", "rack-1")
        self.applies, self.listings, self.connection, self.requests_made = applies, 0, object(), 0
        self.hypervisor_listings, self.hypervisors_seconds = 0, hypervisors_seconds

    def compute_services(self, hosts=None):
        self.listings += 1
        return dict(self.services)

    def set_forced_down(self, service, forced_down):
        if self.applies:
            self.services[service.host] = replace(service, forced_down=forced_down, up=service.up and not forced_down)
        return replace(service, forced_down=forced_down)

    def hypervisors(self, stop=None):
        """Two pages, each taking half of `hypervisors_seconds`; `stop` asked between them."""
        self.hypervisor_listings += 1
        time.sleep(self.hypervisors_seconds / 2)  # the read's own duration, which paces the next audit
        if stop is not None and stop():
            return None
        time.sleep(self.hypervisors_seconds / 2)
        return ()


class IronicConnection:
    def __init__(self, nova: NovaAnswers) -> None:
        self.connection = nova.connection


def cycle(nova: NovaAnswers):
    return run_nova_cycle(NovaRuntime(adapter=nova), IronicConnection(nova), POOL, members=MEMBERS,
                          identities={"rack-0", "rack-1"}, deleting=set(), nova_conf=None, nodes=(),
                          previous=RecordedNova(), now=NOW)


def test_a_member_forced_down_leaves_the_guard_only_once_nova_read_again_lists_it_so():
    nova = NovaAnswers()
    outcome = cycle(nova)
    assert [e.reason for e in outcome.events if e.reason == "ForcedDown"] == ["ForcedDown"]
    assert nova.listings == 2, "Nova was not read again after the forced_down write"
    assert outcome.services["rack-1"].forced_down and not outcome.services["rack-1"].up
    assert guarded_owners(MEMBERS, NOW, 60, outcome.services, {"rack-0", "rack-1"}) == {"rack-0"}


def test_an_accepted_forced_down_that_nova_does_not_list_keeps_the_member_guarded():
    nova = NovaAnswers(applies=False)
    outcome = cycle(nova)
    assert not outcome.services["rack-1"].forced_down and outcome.services["rack-1"].up
    assert guarded_owners(MEMBERS, NOW, 60, outcome.services, {"rack-0", "rack-1"}) == {"rack-0", "rack-1"}


def test_without_a_new_flag_nova_is_read_once():
    nova = NovaAnswers()
    nova.services["rack-1"] = replace(nova.services["rack-1"], forced_down=True, up=False)
    outcome = cycle(nova)
    assert nova.listings == 1 and outcome.services["rack-1"].forced_down


def test_a_counted_out_member_within_its_grace_is_forced_down_before_its_free_nodes_leave_the_guard():
    """Counted out 5 s into its grace (its Kubernetes node carries the out-of-service taint) while
    its nova-compute still heartbeats: forced down in this cycle, at once, and it leaves the guard of
    its free nodes only once Nova, read again, lists it forced down; if Nova does not list the flag,
    its free nodes stay guarded: counting a member out weakens no rule of invariant 13."""
    out = (MEMBERS[0], Member("rack-1", ready=False, since=NOW - 5,
                              counted_out="its Kubernetes node k1 carries the node.kubernetes.io/out-of-service taint"))
    for applies, guarded in ((True, {"rack-0"}), (False, {"rack-0", "rack-1"})):
        nova = NovaAnswers(applies=applies)
        outcome = run_nova_cycle(NovaRuntime(adapter=nova), IronicConnection(nova), POOL, members=out,
                                 identities={"rack-0", "rack-1"}, deleting=set(), nova_conf=None, nodes=(),
                                 previous=RecordedNova(), now=NOW)
        (forced,) = [e for e in outcome.events if e.reason == "ForcedDown"]
        assert "at once" in forced.message and nova.listings == 2
        assert guarded_owners(out, NOW, 60, outcome.services, {"rack-0", "rack-1"}) == guarded


def test_the_cycle_that_forces_a_member_down_leaves_the_audit_to_the_next_one():
    """The audit reads Nova's whole hypervisor list (20-60 s at 1,000 nodes, half an hour at
    100,000): the cycle that forces a failed member down does not wait for it, so its free nodes
    move in that cycle; the audit, still due, runs in the next cycle."""
    nova = NovaAnswers()
    runtime = NovaRuntime(adapter=nova)
    first = run_nova_cycle(runtime, IronicConnection(nova), POOL, members=MEMBERS, identities={"rack-0", "rack-1"},
                           deleting=set(), nova_conf=None, nodes=(), previous=RecordedNova(), now=NOW)
    assert [e.reason for e in first.events if e.reason == "ForcedDown"] == ["ForcedDown"]
    assert nova.hypervisor_listings == 0 and runtime.schedule.audited_at is None
    run_nova_cycle(runtime, IronicConnection(nova), POOL, members=MEMBERS, identities={"rack-0", "rack-1"},
                   deleting=set(), nova_conf=None, nodes=(), previous=RecordedNova(), now=NOW + 1)
    assert nova.hypervisor_listings == 1 and runtime.schedule.audited_at == NOW + 1


def test_an_audit_whose_read_of_nova_is_slow_waits_five_times_that_read_before_the_next():
    """Reading Nova's whole hypervisor list takes from 2 s to a minute at 1,000 nodes, by
    nova-api's load, while a member's interval is 15 s: audits paced by the interval alone could
    keep nova-api busy all the time, beside the computes' passes. The next audit waits until 5x
    the read's duration has passed."""
    nova, runtime = NovaAnswers(hypervisors_seconds=0.4), NovaRuntime()
    runtime.adapter = nova
    every_second = "[DEFAULT]\nupdate_resources_interval = 1\n"
    ready = (Member("rack-0", ready=True, since=0.0), Member("rack-1", ready=True, since=0.0))

    def audit_at(now: float) -> int:
        run_nova_cycle(runtime, IronicConnection(nova), POOL, members=ready, identities={"rack-0", "rack-1"},
                       deleting=set(), nova_conf=every_second, nodes=(), previous=RecordedNova(), now=now)
        return nova.hypervisor_listings

    assert audit_at(NOW) == 1
    assert audit_at(NOW + 1.5) == 1, "audited again within 5x its read's duration"
    assert audit_at(NOW + 2.5) == 2


def test_forced_down_requests_that_repeat_every_cycle_postpone_the_audit_only_once():
    """Nova accepts the forced_down but never lists it: the request repeats every cycle, and the
    audit (which would report what is wrong) still runs every other cycle at least."""
    nova = NovaAnswers(applies=False)
    runtime = NovaRuntime(adapter=nova)
    for step in range(4):
        run_nova_cycle(runtime, IronicConnection(nova), POOL, members=MEMBERS, identities={"rack-0", "rack-1"},
                       deleting=set(), nova_conf=None, nodes=(), previous=RecordedNova(), now=NOW + 100 * step)
    assert nova.hypervisor_listings == 2


def test_without_a_failure_the_audit_runs_when_due():
    nova = NovaAnswers()
    ready = (MEMBERS[0], Member("rack-1", ready=True, since=0.0))
    run_nova_cycle(NovaRuntime(adapter=nova), IronicConnection(nova), POOL, members=ready,
                   identities={"rack-0", "rack-1"}, deleting=set(), nova_conf=None, nodes=(),
                   previous=RecordedNova(), now=NOW)
    assert nova.hypervisor_listings == 1


def test_a_due_audit_waits_while_a_members_grace_is_about_to_end():
    """The last read of Nova's hypervisor list took 0.4 s; a member's grace ends in 0.5 s, within
    twice that. An audit started now would hold up the cycle that forces that member down and
    moves its free nodes (a side runs its stages in turn): it waits, that cycle forces the member
    down without reading the hypervisor list, and the audit runs in the cycle after."""
    nova, runtime = NovaAnswers(hypervisors_seconds=0.4), NovaRuntime()
    runtime.adapter = nova
    every_second = "[DEFAULT]\nupdate_resources_interval = 1\n"

    def at(now: float, members) -> NovaOutcome:
        return run_nova_cycle(runtime, IronicConnection(nova), POOL, members=members, identities={"rack-0", "rack-1"},
                              deleting=set(), nova_conf=every_second, nodes=(), previous=RecordedNova(), now=now)

    ready = (MEMBERS[0], Member("rack-1", ready=True, since=0.0))
    at(NOW, ready)
    assert nova.hypervisor_listings == 1
    start = NOW + 30  # the audit is due again (5x its read of 0.4 s or more); rack-1 lost readiness 59.5 s ago
    failing = (MEMBERS[0], Member("rack-1", ready=False, since=start - 59.5))
    at(start, failing)
    assert nova.hypervisor_listings == 1, "the audit read Nova while rack-1's grace ran out"
    forced = at(start + 0.5, failing)  # the grace over: forced down, no read first
    assert [e.reason for e in forced.events if e.reason == "ForcedDown"] == ["ForcedDown"]
    assert nova.hypervisor_listings == 1
    at(start + 60, failing)
    assert nova.hypervisor_listings == 2


def test_a_read_of_nova_under_way_stops_when_something_new_happens_and_runs_again_next_cycle():
    """A certain failure (an out-of-service taint, a pod gone) comes with no grace to see coming:
    the side that is reading Nova's hypervisor list when it happens stops between two pages, so
    the next side forces the member down and moves its nodes without waiting for the read. The
    audit runs in a later cycle; past one audit spacing of waiting it is no longer stopped."""
    nova, runtime = NovaAnswers(), NovaRuntime()
    runtime.adapter = nova
    ready = (MEMBERS[0], Member("rack-1", ready=True, since=0.0))

    def at(now: float, news: bool) -> None:
        run_nova_cycle(runtime, IronicConnection(nova), POOL, members=ready, identities={"rack-0", "rack-1"},
                       deleting=set(), nova_conf=None, nodes=(), previous=RecordedNova(), now=now,
                       stop=lambda: news)

    at(NOW, news=True)
    assert nova.hypervisor_listings == 1 and runtime.schedule.audited_at is None  # stopped: not an audit
    at(NOW + 1, news=False)
    assert runtime.schedule.audited_at == NOW + 1
    due = NOW + 1 + runtime.schedule.audit_spacing(60.0)
    at(due, news=True)
    assert runtime.schedule.audited_at == NOW + 1
    at(due + runtime.schedule.audit_spacing(60.0), news=True)  # waited a whole spacing: read to the end
    assert runtime.schedule.audited_at == due + runtime.schedule.audit_spacing(60.0)


# ---- what the audit writes, and what it never writes ----------------------------------------


class AuditedNova(NovaAnswers):
    """A Nova whose hypervisor list and servers are given: `listed` {node: host}, `servers`
    {(host, node)}; every write to it is recorded in `writes`."""

    def __init__(self, listed: dict[str, str], servers: set[tuple[str, str]], hosts=("rack-0", "rack-1")) -> None:
        super().__init__()
        self.services = services(*hosts)
        self.listed, self.servers, self.writes = listed, servers, []

    def hypervisors(self, stop=None):
        self.hypervisor_listings += 1
        return tuple(Hypervisor(node_uuid=node, host=host, up=True, enabled=True) for node, host in self.listed.items())

    def instances_on_node(self, host, node):
        return ["inst"] if (host, node) in self.servers else []

    def set_forced_down(self, service, forced_down):
        self.writes.append(("forced_down", service.host, forced_down))
        return super().set_forced_down(service, forced_down)

    def delete_service(self, service):
        self.writes.append(("delete", service.host))


class ShardWrites(IronicConnection):
    """The Ironic side's compare-and-set writes of misplaced nodes (IronicAdapter.hand_over):
    each call's moves recorded, each written unless its node is in `changed` meanwhile."""

    def __init__(self, nova: NovaAnswers, changed=()) -> None:
        super().__init__(nova)
        self.calls, self.changed = [], set(changed)

    def hand_over(self, moves, observed, stop=None):
        self.calls.append(list(moves))
        return ApplyResult(planned=len(moves), applied=sum(m.node_uuid not in self.changed for m in moves),
                           skipped_changed=sum(m.node_uuid in self.changed for m in moves))


READY = (Member("rack-0", ready=True, since=0.0), Member("rack-1", ready=True, since=0.0))


def audited(nova, ironic, nodes, *, pool=POOL, runtime=None, now=NOW, retiring=frozenset(), metrics=None):
    return run_nova_cycle(runtime or NovaRuntime(adapter=nova), ironic, pool, members=READY,
                          identities={"rack-0", "rack-1"}, deleting=set(), nova_conf=None, nodes=nodes,
                          previous=RecordedNova(), now=now, retiring=retiring, metrics=metrics)


def test_a_node_nova_and_its_instance_place_on_a_live_member_is_given_back_with_an_event():
    """repairMisplaced off: the node whose shard a rebalance moved to rack-1 while a build on
    rack-0 deployed it goes back to rack-0 by the compare-and-set write, with an Event naming it,
    both shards and why, and the misplaced_returned action counted."""
    from prometheus_client import generate_latest

    from ironic_shard_operator.controller.metrics import OperatorMetrics

    nodes = (Node("n0", "rack-1", instance_uuid="i0"), Node("n1", "rack-1"))
    nova = AuditedNova({"n0": "rack-0", "n1": "rack-1"}, {("rack-0", "n0")})
    ironic, metrics = ShardWrites(nova), OperatorMetrics()
    outcome = audited(nova, ironic, nodes, metrics=metrics)
    assert ironic.calls == [[Move("n0", "rack-1", "rack-0")]]
    (event,) = [e for e in outcome.events if e.reason == "MisplacedNodeReturned"]
    assert "node n0 from rack-1 back to rack-0" in event.message and "instance i0 is on rack-0" in event.message
    assert 'ironic_shard_nova_actions_total{action="misplaced_returned",pool="ns/rack"} 1.0' \
        in generate_latest(metrics.registry).decode()
    assert outcome.section["findings"]["misplaced"] == 1  # until the next audit sees the write


def test_a_return_that_the_compare_and_set_skips_or_that_may_not_be_written_tells_nothing():
    nodes = (Node("n0", "rack-1", instance_uuid="i0"),)
    nova = AuditedNova({"n0": "rack-0"}, {("rack-0", "n0")})
    skipped = ShardWrites(nova, changed={"n0"})
    assert not [e for e in audited(nova, skipped, nodes).events if e.reason == "MisplacedNodeReturned"]
    paused = ShardWrites(nova)
    audited(nova, paused, nodes, pool=replace(POOL, paused=True))
    assert paused.calls == []


def test_no_node_is_given_back_to_a_retiring_member_nor_on_a_half_move():
    nodes = (Node("n0", "rack-1", instance_uuid="i0"),)
    retiring = ShardWrites(nova := AuditedNova({"n0": "rack-0"}, {("rack-0", "n0")}))
    audited(nova, retiring, nodes, retiring=frozenset({"rack-0"}))
    half = ShardWrites(nova := AuditedNova({"n0": "rack-0"}, {("rack-1", "n0")}))  # the instance names the shard
    outcome = audited(nova, half, nodes)
    assert retiring.calls == [] and half.calls == [] and outcome.section["findings"]["incomplete"] == 1


def test_a_stray_compute_is_named_in_status_event_and_metric_and_its_service_never_written():
    """legacy-0 (no member, its service up) lists two of the pool's nodes in two audits more than
    two update intervals apart: status.nova counts it (Degraded follows the findings), a StrayCompute
    Warning names it once, the metric counts it; Nova sees no write at all (its service is not ours)."""
    from prometheus_client import generate_latest

    from ironic_shard_operator.controller.metrics import OperatorMetrics

    nodes = (Node("n0", "rack-0"), Node("n1", "rack-1"), Node("n2", "rack-1"))
    nova = AuditedNova({"n0": "rack-0", "n1": "legacy-0", "n2": "legacy-0"}, set(),
                       hosts=("rack-0", "rack-1", "legacy-0"))
    runtime, metrics = NovaRuntime(adapter=nova), OperatorMetrics()
    first = audited(nova, ShardWrites(nova), nodes, runtime=runtime, metrics=metrics)
    assert first.section["findings"]["stray"] == 0
    named = audited(nova, ShardWrites(nova), nodes, runtime=runtime, now=NOW + 121, metrics=metrics)
    assert nova.hypervisor_listings == 2
    assert named.section["findings"]["stray"] == 1 and "Nova compute legacy-0" in named.section["message"]
    (warning,) = [e for e in named.events if e.reason == "StrayCompute"]
    assert warning.type == "Warning" and "lists up to 2 of the pool's nodes" in warning.message
    assert 'ironic_shard_nova_findings{kind="stray",pool="ns/rack"} 1.0' in generate_latest(metrics.registry).decode()
    again = audited(nova, ShardWrites(nova), nodes, runtime=runtime, now=NOW + 242, metrics=metrics)
    assert again.section["findings"]["stray"] == 1 and not [e for e in again.events if e.reason == "StrayCompute"]
    assert nova.writes == []
