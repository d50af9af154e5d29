"""The Nova audit: findings (duplicate, unlisted, misplaced, unmapped, incomplete, stray) and the
writes it decides (service deletion, misplaced nodes given back or handed over explicitly).
forced_down: test_fencing.py."""

import json
from dataclasses import replace

from ironic_shard_operator.core.nova_policy import (
    DUPLICATE, ENABLED, INCOMPLETE, MISPLACED, NOVA_DEFAULT_UPDATE_INTERVAL, REFUSAL_RETRY_SECONDS, RETIRED_LIMIT, STRAY,
    STRAY_MEMORY_INTERVALS, UNLISTED, UNMAPPED, PoolHosts, ServiceDeletionRefusal, StraySighting, audit, misplaced,
    retired_after, returns_to, status_section, stray_events, summary, update_interval,
)
from ironic_shard_operator.core.model import Move, Node
from ironic_shard_operator.adapters.nova import Hypervisor
from tests.unit.nova_records import service, services

NOW = 1_800_000_000.0
INTERVAL = 10.0
POOL = "rack"
MEMBERS = ("rack-0", "rack-1", "rack-2")


def listing(owners):
    """Hypervisors from {node: host or [hosts]}."""
    out = []
    for node, hosts in owners.items():
        for host in [hosts] if isinstance(hosts, str) else hosts:
            out.append(Hypervisor(node_uuid=node, host=host, up=True, enabled=True))
    return out


def nodes_of(shards, instances=()):
    return [Node(uuid=u, shard=s, instance_uuid=f"inst-{u}" if u in instances else None)
            for u, s in shards.items()]


def run(nodes, hypervisors, *, since=None, now=NOW, identities=MEMBERS, nova_services=None,
        repair=False, refused=None, retired=(), instance_hosts=None, retiring=(), held=(), strays=None):
    """One audit; unless told otherwise, Nova places each misplaced node's instance on the host
    of its compute node (no half move), as it does after any complete move."""
    if instance_hosts is None:
        instance_hosts = {node.uuid: host for node, host in misplaced(nodes, hypervisors)}
    return audit(pool_name=POOL, identities=identities, nodes=nodes, hypervisors=hypervisors,
                 services=nova_services if nova_services is not None else services(*identities),
                 since=since or {}, now=now, interval=INTERVAL, repair=repair, refused=refused,
                 retired=retired, instance_hosts=instance_hosts, retiring=retiring, held=held, strays=strays)


def kinds(report):
    return sorted((f.kind, f.subject) for f in report.findings)


# ---- a consistent pool ------------------------------------------------------------------


def test_every_node_under_its_owner_is_clean_and_decides_nothing():
    shards = {f"n{i}": MEMBERS[i % 3] for i in range(9)}
    report = run(nodes_of(shards, instances={"n0", "n1"}), listing(shards))
    assert report.findings == () and report.deletions == () and report.repairs == ()
    assert report.since == {} and report.waiting == {}
    assert report.counts() == {DUPLICATE: 0, UNLISTED: 0, MISPLACED: 0, UNMAPPED: 0, INCOMPLETE: 0, STRAY: 0}
    assert summary(report.findings) == "Nova lists every node under the compute of its owner"


def test_hypervisors_of_other_pools_are_not_our_business():
    shards = {"n0": "rack-0"}
    report = run(nodes_of(shards), listing({"n0": "rack-0", "x1": ["other-0", "other-1"]}))
    assert report.findings == ()


# ---- duplicate ---------------------------------------------------------------------------


def test_a_node_under_two_computes_is_reported_at_once():
    report = run(nodes_of({"n0": "rack-0"}), listing({"n0": ["rack-0", "rack-1"]}))
    assert kinds(report) == [(DUPLICATE, "n0")]
    assert "rack-0, rack-1" in report.findings[0].message


# ---- unlisted ----------------------------------------------------------------------------


def test_a_node_not_under_its_owner_is_reported_only_after_two_update_intervals():
    nodes = nodes_of({"n0": "rack-0", "n1": "rack-1", "n2": "rack-0", "n3": "rack-1"})
    hypervisors = listing({"n1": "rack-2", "n2": "rack-0", "n3": "rack-1"})  # n0 under none,
    # n1 still under its old owner
    first = run(nodes, hypervisors)
    assert first.findings == ()
    assert first.since == {f"{UNLISTED}:n0:rack-0": NOW, f"{UNLISTED}:n1:rack-1": NOW}

    still = run(nodes, hypervisors, since=first.since, now=NOW + 2 * INTERVAL)
    assert still.findings == () and still.since == first.since  # exactly two: not yet

    late = run(nodes, hypervisors, since=still.since, now=NOW + 2 * INTERVAL + 1)
    assert kinds(late) == [(UNLISTED, "n0"), (UNLISTED, "n1")]
    messages = {f.subject: f.message for f in late.findings}
    assert "under no compute for more than 20s" in messages["n0"]
    assert "under rack-2" in messages["n1"]


def test_a_node_that_moves_on_starts_a_new_clock_with_its_new_owner():
    pending = run(nodes_of({"n0": "rack-0"}), [], now=NOW)
    moved = run(nodes_of({"n0": "rack-1"}), [], since=pending.since, now=NOW + 3 * INTERVAL)
    assert moved.findings == (), "reported at once under a new owner that had no time to list it"


def test_the_memory_of_a_resolved_node_is_dropped():
    nodes = nodes_of({"n0": "rack-0", "n1": "rack-0"})
    pending = run(nodes, listing({"n1": "rack-0"}), now=NOW)
    resolved = run(nodes, listing({"n0": "rack-0", "n1": "rack-0"}), since=pending.since, now=NOW + 5)
    assert resolved.since == {}
    again = run(nodes, listing({"n1": "rack-0"}), since=resolved.since, now=NOW + 100)  # a fresh clock, no finding yet
    assert again.findings == () and again.since == {f"{UNLISTED}:n0:rack-0": NOW + 100}


def test_nodes_not_owned_by_a_member_are_not_expected_anywhere():
    nodes = nodes_of({"n0": None, "n1": "gone-7", "n2": "rack-9"})
    report = run(nodes, [], since={f"{UNLISTED}:{n}": NOW - 999 for n in ("n0", "n1", "n2")})
    assert report.findings == () and report.since == {}


# ---- misplaced and the explicit handover ---------------------------------------------------


def test_a_node_whose_instance_is_on_another_host_is_misplaced_and_left_alone_by_default():
    """No shard, or a shard outside the pool: nothing says which member should have had it."""
    nodes = nodes_of({"n0": "rack-9", "n1": None}, instances={"n0", "n1"})
    report = run(nodes, listing({"n0": "rack-0", "n1": "rack-2"}))
    assert kinds(report) == [(MISPLACED, "n0"), (MISPLACED, "n1")]
    assert "instance on rack-0 but its shard is rack-9" in report.findings[0].message
    assert report.repairs == () and report.returns == ()


def test_repair_hands_a_misplaced_node_over_to_its_instance_host_only_if_that_is_a_member():
    nodes = nodes_of({"n0": "rack-9", "n1": None, "n2": "rack-0"}, instances={"n0", "n1", "n2"})
    report = run(nodes, listing({"n0": "rack-0", "n1": "rack-2", "n2": "legacy-compute"}),
                 repair=True)
    assert report.repairs == (Move("n0", "rack-9", "rack-0"), Move("n1", None, "rack-2"))
    assert kinds(report) == [(MISPLACED, "n0"), (MISPLACED, "n1"), (MISPLACED, "n2")]


# ---- misplaced between two live members: given back at once -----------------------------------


def test_a_node_that_nova_and_its_instance_place_on_a_live_member_goes_back_to_it_without_repair():
    """A rebalance wrote rack-1 as the shard of a free node of rack-0, and a build placed on
    rack-0 (which still listed the node) deployed it: Nova's compute node and the instance both
    name rack-0, only Ironic says rack-1, whose compute skips the node. No compute serves it until
    its shard names rack-0 again: the audit gives it back at once, with a message naming the node,
    both shards and why, and reports it misplaced until the write is seen."""
    nodes = nodes_of({"n0": "rack-1", "n1": "rack-2"}, instances={"n0", "n1"})
    report = run(nodes, listing({"n0": "rack-0", "n1": "rack-2"}))
    assert report.repairs == ()
    (given,) = report.returns
    assert given.move == Move("n0", "rack-1", "rack-0")
    assert "node n0 from rack-1 back to rack-0" in given.message
    assert "its instance inst-n0 is on rack-0, a live member" in given.message
    assert kinds(report) == [(MISPLACED, "n0")]
    assert "its shard is set back to rack-0" in report.findings[0].message
    # with repair on, the same: given back, never handed over twice
    assert run(nodes, listing({"n0": "rack-0", "n1": "rack-2"}), repair=True).repairs == ()


def test_a_misplaced_node_goes_back_at_once_only_when_nova_and_its_instance_name_a_live_member():
    """Every other misplaced node keeps the rule of spec.nova.repairMisplaced (off here: left alone)."""
    node = Node(uuid="n0", shard="rack-1", instance_uuid="inst-n0")
    pool = PoolHosts(set(MEMBERS), set(), set(), services(*MEMBERS))
    assert returns_to(node, "rack-0", "rack-0", pool)
    cases = {
        "the instance's host unknown (not asked, or found nowhere)": (node, "rack-0", None, pool),
        "a half move: the instance on another host than its compute node": (node, "rack-0", "rack-1", pool),
        "the host no member": (node, "legacy-0", "legacy-0", pool),
        "the host being removed or retiring": (node, "rack-0", "rack-0", replace(pool, leaving={"rack-0"})),
        "the host held by a handover (its source)": (node, "rack-0", "rack-0", replace(pool, held={"rack-0"})),
        "the host's service forced down": (node, "rack-0", "rack-0", replace(pool, services=services(
            *MEMBERS, changed=[service("rack-0", forced_down=True)]))),
        "the host's service down": (node, "rack-0", "rack-0", replace(pool, services=services(
            *MEMBERS, changed=[service("rack-0", up=False)]))),
        "the host's service disabled (a retire started)": (node, "rack-0", "rack-0", replace(pool, services={
            **services(*MEMBERS), "rack-0": replace(service("rack-0"), enabled=False)})),
        "the host without a service": (node, "rack-0", "rack-0", replace(pool, services=services("rack-1", "rack-2"))),
        "no shard": (replace(node, shard=None), "rack-0", "rack-0", pool),
        "a shard outside the pool": (replace(node, shard="rack-9"), "rack-0", "rack-0", pool),
        "the shard a handover source (held)": (node, "rack-0", "rack-0", replace(pool, held={"rack-1"})),
        "the shard retiring": (node, "rack-0", "rack-0", replace(pool, leaving={"rack-1"})),
        "the shard's service forced down": (node, "rack-0", "rack-0", replace(pool, services=services(
            *MEMBERS, changed=[service("rack-1", forced_down=True)]))),
    }
    assert [why for why, args in cases.items() if returns_to(*args)] == []


def test_the_audit_gives_no_node_back_to_a_retiring_or_held_member():
    nodes = nodes_of({"n0": "rack-1"}, instances={"n0"})
    for kwargs in ({"retiring": ("rack-0",)}, {"held": ("rack-0",)}, {"held": ("rack-1",)}):
        report = run(nodes, listing({"n0": "rack-0"}), **kwargs)
        assert kinds(report) == [(MISPLACED, "n0")] and report.returns == () and report.repairs == (), kwargs
    assert run(nodes, listing({"n0": "rack-0"}), retiring=("rack-0",), repair=True).repairs == ()


def test_a_half_move_is_never_repaired_and_says_how_to_finish_it_until_it_is_finished():
    """nova-manage killed between its two saves: the compute node names rack-0, the instance
    still rack-1 (the shard). Writing the shard to rack-0 would hide the instance from rack-1,
    the host Nova sends its actions to, for good; the finding stays, with the SQL that fixes it."""
    nodes = nodes_of({"n0": "rack-1"}, instances={"n0"})
    hypervisors = listing({"n0": "rack-0"})
    assert misplaced(nodes, hypervisors) == [(nodes[0], "rack-0")]
    for now in (NOW, NOW + 100 * INTERVAL):
        report = run(nodes, hypervisors, repair=True, now=now, instance_hosts={"n0": "rack-1"})
        assert kinds(report) == [(INCOMPLETE, "n0")] and report.repairs == ()
        assert "UPDATE instances SET host='rack-0' WHERE uuid='inst-n0'" in report.findings[0].message
        assert report.returns == ()
    # not asked (or Nova found the instance nowhere): reported, never repaired blind
    for unknown in ({}, {"n0": None}):
        blind = run(nodes, hypervisors, repair=True, instance_hosts=unknown)
        assert blind.repairs == () and blind.returns == ()
    # finished by hand: an ordinary misplaced node between live members, given back
    assert [r.move for r in run(nodes, hypervisors).returns] == [Move("n0", "rack-1", "rack-0")]


def test_a_node_between_a_handovers_nova_move_and_its_shard_write_is_not_misplaced_until_it_stays():
    """A handover moves a node in Nova first (nova-manage), from a source whose service is
    forced down, then writes its shard: in between, Nova lists it under the destination while
    its shard still names the source. That is progress, not a finding, unless it persists."""
    nodes = nodes_of({"n0": "rack-2", "n1": "rack-2"}, instances={"n0", "n1"})
    forced = services(*MEMBERS, changed=[service("rack-2", forced_down=True)])
    first = run(nodes, listing({"n0": "rack-0", "n1": "rack-1"}), nova_services=forced, repair=True)
    assert kinds(first) == [] and first.repairs == ()
    later = run(nodes, listing({"n0": "rack-0", "n1": "rack-1"}), nova_services=forced, repair=True,
                since=first.since, now=NOW + 2 * INTERVAL + 1)
    assert kinds(later) == [(MISPLACED, "n0"), (MISPLACED, "n1")]
    assert later.returns == (), "the handover's source: its own shard write, or repairMisplaced"
    # A source that is up is no handover: misplaced at once, as before.
    assert kinds(run(nodes, listing({"n0": "rack-0", "n1": "rack-1"}))) == [(MISPLACED, "n0"), (MISPLACED, "n1")]


def test_a_misplaced_node_is_not_handed_to_a_member_being_retired():
    nodes = nodes_of({"n0": "rack-1"}, instances={"n0"})
    report = audit(pool_name=POOL, identities=MEMBERS, deleting=("rack-0",), nodes=nodes,
                   hypervisors=listing({"n0": "rack-0"}), services=services(*MEMBERS), since={},
                   now=NOW, interval=INTERVAL, repair=True)
    assert kinds(report) == [(MISPLACED, "n0")] and report.repairs == ()


def test_a_free_node_still_under_its_old_owner_is_not_misplaced():
    report = run(nodes_of({"n0": "rack-1"}), listing({"n0": "rack-0"}), repair=True)
    assert report.repairs == () and report.findings == ()  # a move in flight: unlisted, pending


# ---- stray computes -------------------------------------------------------------------------


def test_a_compute_outside_the_pool_sighted_twice_two_intervals_apart_is_named_with_the_fix():
    """A nova-compute with the Ironic driver and no [ironic]shard (Nova's old hash ring over every
    Ironic compute) takes a share of the pool's free nodes: Nova lists them under its host. Once
    two audits more than two update intervals apart have sighted it, the audit names it first,
    with the most of the pool's nodes it listed at once and the fix; no write of any kind is
    decided for it."""
    shards = {f"n{i}": MEMBERS[i % 3] for i in range(9)}
    nodes, nova = nodes_of(shards), services(*MEMBERS, "legacy-0")
    taking = listing({**shards, "n1": "legacy-0", "n5": "legacy-0", "n6": "legacy-0"})
    first = run(nodes, taking, nova_services=nova)
    assert first.findings == () and first.strays["legacy-0"] == StraySighting(NOW, NOW, 3)
    soon = run(nodes, taking, nova_services=nova, strays=first.strays, now=NOW + 2 * INTERVAL)
    assert soon.findings == ()
    later = run(nodes, listing({**shards, "n1": "legacy-0"}), nova_services=nova, strays=soon.strays,
                now=NOW + 2 * INTERVAL + 1, repair=True)
    assert kinds(later) == [(STRAY, "legacy-0")] and later.findings[0].kind == STRAY
    message = later.findings[0].message
    assert "Nova compute legacy-0 is not a member of this pool, yet Nova lists up to 3 of the pool's nodes" in message
    assert "stop that nova-compute, or give it an [ironic]shard no member of this pool uses" in message
    assert later.counts()[STRAY] == 1
    assert later.deletions == () and later.repairs == () and later.returns == ()


def test_a_stray_and_the_member_it_shares_nodes_with_take_them_back_and_forth_and_it_stays_named():
    """Each resource pass of either takes the records back: most audits may see every node under
    its owner. Named on its second sighting, it stays named through audits that see nothing under
    it, until none has for STRAY_MEMORY_INTERVALS update intervals."""
    nodes, nova = nodes_of({"n0": "rack-0", "n1": "rack-0"}), services(*MEMBERS, "copy-of-rack-0")
    stolen, clean = listing({"n0": "copy-of-rack-0", "n1": "copy-of-rack-0"}), listing({"n0": "rack-0", "n1": "rack-0"})
    report = run(nodes, stolen, nova_services=nova)
    for step in range(1, 5):  # two intervals of audits that see every node under its owner
        report = run(nodes, clean, nova_services=nova, strays=report.strays, now=NOW + step * INTERVAL / 2)
        assert report.findings == ()
    report = run(nodes, stolen, nova_services=nova, strays=report.strays, now=NOW + 3 * INTERVAL)
    assert kinds(report) == [(STRAY, "copy-of-rack-0")]
    last = NOW + 3 * INTERVAL
    for now in (last + INTERVAL, last + STRAY_MEMORY_INTERVALS * INTERVAL):
        report = run(nodes, clean, nova_services=nova, strays=report.strays, now=now)
        assert kinds(report) == [(STRAY, "copy-of-rack-0")], now
        assert "lists up to 2 of the pool's nodes" in report.findings[0].message
    report = run(nodes, clean, nova_services=nova, strays=report.strays,
                 now=last + STRAY_MEMORY_INTERVALS * INTERVAL + 1)
    assert report.findings == () and report.strays == {}


def test_a_stray_whose_service_goes_down_is_forgotten_at_once():
    nodes = nodes_of({"n0": "rack-0"})
    up, down = services(*MEMBERS, "legacy-0"), {**services(*MEMBERS), "legacy-0": service("legacy-0", up=False)}
    first = run(nodes, listing({"n0": "legacy-0"}), nova_services=up)
    named = run(nodes, listing({"n0": "legacy-0"}), nova_services=up, strays=first.strays, now=NOW + 3 * INTERVAL)
    assert kinds(named) == [(STRAY, "legacy-0")]
    stopped = run(nodes, listing({"n0": "legacy-0"}), nova_services=down, strays=named.strays, now=NOW + 4 * INTERVAL)
    assert stopped.findings == () and stopped.strays == {}


def test_what_is_not_a_stray_compute():
    """The pool's own hosts (members, those it retired, one being created), a host whose service
    is down (not running: nothing of it takes nodes), one listing none of the pool's nodes (other
    pools' business), and a host sighted once only (a node between two pools for one pass)."""
    nodes = nodes_of({"n0": "rack-0", "n1": "rack-1", "n2": "rack-2"})
    hypervisors = listing({"n0": "rack-5", "n1": "gone-0", "n2": "rack-3", "x9": "other-0"})
    nova = {**services(*MEMBERS, "rack-5", "rack-3", "other-0"), "gone-0": service("gone-0", up=False)}
    sighted = {h: StraySighting(NOW - 100 * INTERVAL, NOW - 99 * INTERVAL, 1) for h in ("rack-5", "gone-0", "rack-3")}
    report = run(nodes, hypervisors, nova_services=nova, strays=sighted, retired=("rack-5",),
                 identities=(*MEMBERS, "rack-3"))
    assert report.findings == () and report.strays == {}
    once = run(nodes_of({"n0": "rack-0"}), listing({"n0": "other-0"}), nova_services=nova)
    after = run(nodes_of({"n0": "rack-0"}), listing({"n0": "rack-0"}), nova_services=nova, strays=once.strays,
                now=NOW + 10 * INTERVAL)
    assert once.findings == () and not [f for f in after.findings if f.kind == STRAY]


def test_a_stray_compute_is_announced_once_by_a_warning():
    nodes, nova = nodes_of({"n0": "rack-0"}), services(*MEMBERS, "legacy-0")
    first = run(nodes, listing({"n0": "legacy-0"}), nova_services=nova)
    named = run(nodes, listing({"n0": "legacy-0"}), nova_services=nova, strays=first.strays, now=NOW + 3 * INTERVAL)
    (event,) = stray_events(first, named)
    assert (event.reason, event.type) == ("StrayCompute", "Warning") and "legacy-0" in event.message
    assert stray_events(None, named) == [event]  # an operator restart tells it again, once
    still = run(nodes, listing({"n0": "rack-0"}), nova_services=nova, strays=named.strays, now=NOW + 4 * INTERVAL)
    assert kinds(still) == [(STRAY, "legacy-0")] and stray_events(named, still) == []


# ---- unmapped members ------------------------------------------------------------------------


def test_an_up_member_with_nodes_but_nothing_listed_is_unmapped_after_two_intervals():
    nodes = nodes_of({"n0": "rack-0", "n1": "rack-1"})
    hypervisors = listing({"n0": "rack-0"})
    first = run(nodes, hypervisors)
    assert first.since.keys() == {f"{UNLISTED}:n1:rack-1", f"{UNMAPPED}:rack-1"}
    later = run(nodes, hypervisors, since=first.since, now=NOW + 3 * INTERVAL)
    assert kinds(later) == [(UNLISTED, "n1"), (UNMAPPED, "rack-1")]
    assert "discover_hosts" in next(f.message for f in later.findings if f.kind == UNMAPPED)


def test_a_down_member_or_one_without_nodes_is_not_unmapped():
    nodes = nodes_of({"n0": "rack-0"})
    down = services(*MEMBERS, changed=[service("rack-0", up=False)])
    report = run(nodes, [], nova_services=down, since={f"{UNMAPPED}:rack-0": NOW - 999,
                                                       f"{UNMAPPED}:rack-1": NOW - 999})
    assert report.counts()[UNMAPPED] == 0
    assert f"{UNMAPPED}:rack-1" not in report.since  # owns nothing: expected to list nothing


# ---- services of removed members ----------------------------------------------------------


def test_the_service_of_a_removed_member_is_deleted_once_nova_lists_none_of_our_nodes_under_it():
    nodes = nodes_of({"n0": "rack-0", "n1": "rack-1"})
    everyone = services("rack-0", "rack-1", "rack-2", "other-3", "rack")
    taking_over = run(nodes, listing({"n0": "rack-0", "n1": "rack-2"}),
                      identities=("rack-0", "rack-1"), nova_services=everyone, retired=["rack-2"])
    assert taking_over.deletions == ()
    assert "lists 1 of the pool's nodes under rack-2" in taking_over.waiting["rack-2"]

    taken = run(nodes, listing({"n0": "rack-0", "n1": "rack-1", "x9": "rack-2"}),
                identities=("rack-0", "rack-1"), nova_services=everyone, retired=["rack-2"])
    assert [d.service.host for d in taken.deletions] == ["rack-2"]  # not other-3, not "rack"
    assert taken.waiting == {}


def test_a_removed_member_that_still_owns_nodes_in_ironic_keeps_its_service():
    nodes = nodes_of({"n0": "rack-2"}, instances={"n0"})
    report = run(nodes, listing({"n0": "rack-2"}), identities=("rack-0",),
                 nova_services=services("rack-0", "rack-2"), retired=["rack-2"])
    assert report.deletions == ()
    assert "1 Ironic nodes still have shard rack-2" in report.waiting["rack-2"]


def test_a_refused_deletion_waits_before_it_is_asked_again():
    refused = {"rack-2": ServiceDeletionRefusal(NOW - 10, "Unable to delete compute service that is hosting instances")}
    kwargs = dict(identities=("rack-0",), nova_services=services("rack-0", "rack-2"), refused=refused,
                  retired=["rack-2"])
    report = run([], [], **kwargs)
    assert report.deletions == ()
    assert "hosting instances" in report.waiting["rack-2"]
    later = run([], [], now=NOW - 10 + REFUSAL_RETRY_SECONDS, **kwargs)
    assert [d.service.host for d in later.deletions] == ["rack-2"]
    assert "hosting instances" in later.waiting["rack-2"], "still refused until Nova agrees"


def test_a_host_named_like_a_member_that_this_pool_never_retired_is_left_alone():
    """`rack-7` may be a same-named pool's member in another namespace, or a host someone
    runs by hand: no nodes, not a member, yet not ours to delete, nor to report as waiting."""
    foreign = services(*MEMBERS, "rack-7")
    report = run([], [], nova_services=foreign)
    assert report.deletions == () and report.waiting == {}
    assert run([], [], nova_services=foreign, retired=["rack-4"]).deletions == (), "retired: another one"


def test_a_member_this_pool_retired_is_deleted_also_after_a_restart():
    """The record of retired identities lives in status.nova.retired: an operator restarted
    after the scale-down (its memory gone, the CR's status read back) still deletes it."""
    everyone = services("rack-0", "rack-1", "rack-2", "rack-7")
    # the cycle that retires rack-2 (its pod and ConfigMap still exist)
    retired = retired_after((), deleting={"rack-2"}, identities=MEMBERS, services=everyone)
    written = json.loads(json.dumps(status_section(ENABLED, "ok", retired=retired)))  # the CR's status
    # restart: a new process reads status.nova back; rack-2's pod and ConfigMap are gone
    survivors = ("rack-0", "rack-1")
    retired = retired_after(written["retired"], deleting=(), identities=survivors, services=everyone)
    assert retired == ("rack-2",)
    report = run([], [], identities=survivors, nova_services=everyone, retired=retired)
    assert [d.service.host for d in report.deletions] == ["rack-2"], "rack-7 was never ours"
    # once Nova lists no service for it, it leaves the record
    gone = services("rack-0", "rack-1", "rack-7")
    assert retired_after(retired, deleting=(), identities=survivors, services=gone) == ()


def test_the_record_of_retired_identities_is_kept_while_unsure_and_bounded():
    everyone = services("rack-0", "rack-3")
    # Nova not read this cycle: nothing is dropped; a member (still retiring, or taken up
    # again) is never dropped, and never deleted while a member
    assert retired_after(("rack-3", "rack-5"), deleting=(), identities=("rack-0",), services=None) == \
        ("rack-3", "rack-5")
    assert retired_after(("rack-3",), deleting=(), identities=("rack-0", "rack-3"), services={}) == ("rack-3",)
    assert run([], [], identities=("rack-0", "rack-3"), nova_services=everyone, retired=["rack-3"]).deletions == ()
    many = [f"rack-{i}" for i in range(RETIRED_LIMIT + 5)]
    kept = retired_after(many, deleting={"rack-999"}, identities=(), services=None)
    assert len(kept) == RETIRED_LIMIT and kept[-1] == "rack-999" and "rack-0" not in kept, "the newest kept"


# ---- the update interval --------------------------------------------------------------------


def test_the_update_interval_comes_from_the_members_nova_conf():
    assert update_interval("[DEFAULT]\nupdate_resources_interval = 10\n") == 10.0
    assert update_interval("[DEFAULT]\nhost = x\n") == NOVA_DEFAULT_UPDATE_INTERVAL
    assert update_interval("[DEFAULT]\nupdate_resources_interval = 0\n") == NOVA_DEFAULT_UPDATE_INTERVAL
    assert update_interval("[DEFAULT]\nupdate_resources_interval = -1\n") == NOVA_DEFAULT_UPDATE_INTERVAL
    assert update_interval("not an ini file [") == NOVA_DEFAULT_UPDATE_INTERVAL
    assert update_interval(None) == NOVA_DEFAULT_UPDATE_INTERVAL
    # oslo.config files repeat keys (multi-valued options): that must not break the reading
    assert update_interval("[DEFAULT]\ndebug = true\ndebug = false\nupdate_resources_interval = 5\n") == 5.0


def test_summary_counts_every_kind_and_spells_out_a_few():
    nodes = nodes_of({f"n{i}": "rack-0" for i in range(8)})
    report = run(nodes, listing({f"n{i}": ["rack-0", "rack-1"] for i in range(8)}))
    text = summary(report.findings)
    assert text.startswith("Nova audit: 8 duplicate: node n0 is listed under 2 computes")
    assert text.endswith("; and 3 more")


def test_findings_and_nova_writes_are_exported_as_bounded_metrics():
    from prometheus_client import generate_latest

    from ironic_shard_operator.controller.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    report = run(nodes_of({"n0": "rack-0"}), listing({"n0": ["rack-0", "rack-1"]}))
    metrics.record_nova_audit("ns/rack", report.counts())
    metrics.record_nova_action("ns/rack", "forced_down_set")
    text = generate_latest(metrics.registry).decode()
    assert 'ironic_shard_nova_findings{kind="duplicate",pool="ns/rack"} 1.0' in text
    assert 'ironic_shard_nova_findings{kind="unlisted",pool="ns/rack"} 0.0' in text
    assert 'ironic_shard_nova_actions_total{action="forced_down_set",pool="ns/rack"} 1.0' in text
    metrics.forget_pool("ns/rack")
    assert "ns/rack" not in generate_latest(metrics.registry).decode()


# ---- status.nova and its Events ---------------------------------------------------------------


def test_the_status_section_has_one_shape_whatever_the_state():
    from ironic_shard_operator.core.nova_policy import DISABLED, ENABLED, status_section

    report = run(nodes_of({"n0": "rack-0"}), listing({"n0": ["rack-0", "rack-1"]}),
                 identities=("rack-0",), nova_services=services("rack-0", "rack-5"))
    enabled = status_section(ENABLED, summary(report.findings), report, forced_down=["rack-1"])
    disabled = status_section(DISABLED, "cloud 'x' has no compute endpoint")
    assert enabled.keys() == disabled.keys() == {"state", "message", "findings", "forcedDown", "waiting",
                                                 "retired", "clearWhenReady"}
    assert enabled["findings"][DUPLICATE] == 1 and enabled["forcedDown"] == ["rack-1"]
    assert enabled["waiting"] == []  # rack-5 was deleted, not waiting
    assert disabled["findings"] == {DUPLICATE: 0, UNLISTED: 0, MISPLACED: 0, UNMAPPED: 0, INCOMPLETE: 0, STRAY: 0}
    # the same facts give the same section: no status rewrite when nothing changed
    later = run(nodes_of({"n0": "rack-0"}), listing({"n0": ["rack-0", "rack-1"]}), now=NOW + 500,
                identities=("rack-0",), nova_services=services("rack-0", "rack-5"))
    assert status_section(ENABLED, summary(later.findings), later, ["rack-1"]) == enabled


def test_events_only_for_changes_of_the_nova_section():
    from ironic_shard_operator.core.nova_policy import DISABLED, ENABLED, UNAVAILABLE, section_events, status_section

    clean = status_section(ENABLED, summary(()))
    report = run(nodes_of({"n0": "rack-0"}), listing({"n0": ["rack-0", "rack-1"]}))
    dirty = status_section(ENABLED, summary(report.findings), report)

    assert section_events(None, clean) == []  # a first, healthy report is no news
    assert section_events(clean, clean) == [] and section_events(dirty, dirty) == []
    found, = section_events(clean, dirty)
    assert (found.reason, found.type) == ("NovaAudit", "Warning") and "1 duplicate" in found.message
    cleared, = section_events(dirty, clean)
    assert cleared.reason == "NovaAuditClear"

    off, = section_events(None, status_section(DISABLED, "cloud 'c' has no compute endpoint"))
    assert off.reason == "NovaDisabled" and "has no compute endpoint" in off.message
    down, = section_events(clean, status_section(UNAVAILABLE, "timed out"))
    assert (down.reason, down.type) == ("NovaUnavailable", "Warning")
    back = section_events(status_section(UNAVAILABLE, "timed out"), clean)
    assert [e.reason for e in back] == ["NovaAvailable"]


def test_a_flag_left_alone_is_told_once_and_an_old_status_keeps_clearing_what_it_cleared():
    from ironic_shard_operator.core.nova_policy import (
        ENABLED, recorded_nova, section_events, status_section,
    )

    failure = status_section(ENABLED, summary(()), forced_down=["rack-1"], clear_when_ready=["rack-1"])
    admins = status_section(ENABLED, summary(()), forced_down=["rack-1", "rack-2"], clear_when_ready=["rack-1"])
    assert section_events(failure, failure) == []  # a failure's flag: no news
    told, = section_events(failure, admins)
    assert told.reason == "ForcedDownLeftAlone" and told.type == "Warning"
    assert "rack-2" in told.message and "openstack compute service set --up rack-2 nova-compute" in told.message
    assert section_events(admins, admins) == []  # told once
    # A status written before clearWhenReady existed: its forcedDown was cleared once ready.
    assert recorded_nova({"forcedDown": ["rack-1"]}).clear_when_ready == ("rack-1",)
    assert recorded_nova({"forcedDown": ["rack-1"], "clearWhenReady": []}).clear_when_ready == ()
    assert recorded_nova(None).clear_when_ready == ()
