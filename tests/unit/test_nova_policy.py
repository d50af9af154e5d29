"""The Nova audit: findings (duplicate, unlisted, misplaced, unmapped) and the Nova writes it
decides (service deletion, explicit handover of misplaced nodes). forced_down: test_fencing.py."""

import json

from ironic_shard_operator.core.nova_policy import (
    DUPLICATE, ENABLED, INCOMPLETE, MISPLACED, NOVA_DEFAULT_UPDATE_INTERVAL, REFUSAL_RETRY_SECONDS, RETIRED_LIMIT, UNLISTED,
    UNMAPPED, ServiceDeletionRefusal, audit, misplaced, retired_after, status_section, summary, update_interval,
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
        repair=False, refused=None, retired=(), instance_hosts=None):
    """One audit; unless told otherwise, Nova places each misplaced node's instance on the host
    of its compute node (no half move), as it does after any complete move."""
    if instance_hosts is None:
        instance_hosts = {node.uuid: host for node, host in misplaced(nodes, hypervisors)}
    return audit(pool_name=POOL, identities=identities, nodes=nodes, hypervisors=hypervisors,
                 services=nova_services if nova_services is not None else services(*identities),
                 since=since or {}, now=now, interval=INTERVAL, repair=repair, refused=refused,
                 retired=retired, instance_hosts=instance_hosts)


def kinds(report):
    return sorted((f.kind, f.subject) for f in report.findings)


# ---- a consistent pool ------------------------------------------------------------------


def test_every_node_under_its_owner_is_clean_and_decides_nothing():
    shards = {f"n{i}": MEMBERS[i % 3] for i in range(9)}
    report = run(nodes_of(shards, instances={"n0", "n1"}), listing(shards))
    assert report.findings == () and report.deletions == () and report.repairs == ()
    assert report.since == {} and report.waiting == {}
    assert report.counts() == {DUPLICATE: 0, UNLISTED: 0, MISPLACED: 0, UNMAPPED: 0, INCOMPLETE: 0}
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
    nodes = nodes_of({"n0": "rack-1", "n1": None}, instances={"n0", "n1"})
    report = run(nodes, listing({"n0": "rack-0", "n1": "rack-2"}))
    assert kinds(report) == [(MISPLACED, "n0"), (MISPLACED, "n1")]
    assert "instance on rack-0 but its shard is rack-1" in report.findings[0].message
    assert report.repairs == ()


def test_repair_hands_a_misplaced_node_over_to_its_instance_host_only_if_that_is_a_member():
    nodes = nodes_of({"n0": "rack-1", "n1": None, "n2": "rack-0"}, instances={"n0", "n1", "n2"})
    report = run(nodes, listing({"n0": "rack-0", "n1": "rack-2", "n2": "legacy-compute"}),
                 repair=True)
    assert report.repairs == (Move("n0", "rack-1", "rack-0"), Move("n1", None, "rack-2"))
    assert kinds(report) == [(MISPLACED, "n0"), (MISPLACED, "n1"), (MISPLACED, "n2")]


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
    # not asked (or Nova found the instance nowhere): reported, never repaired blind
    assert run(nodes, hypervisors, repair=True, instance_hosts={}).repairs == ()
    assert run(nodes, hypervisors, repair=True, instance_hosts={"n0": None}).repairs == ()
    # finished by hand: an ordinary misplaced node, repaired
    assert run(nodes, hypervisors, repair=True).repairs == (Move("n0", "rack-1", "rack-0"),)


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
    assert disabled["findings"] == {DUPLICATE: 0, UNLISTED: 0, MISPLACED: 0, UNMAPPED: 0, INCOMPLETE: 0}
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
