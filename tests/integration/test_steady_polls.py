"""Observation by need against the real Ironic service: a steady poll costs at most 2
requests and writes nothing, and each change that matters is acted on within one poll.

A poll is one `run_cycle` with the pool's `ObservationMemory`, as the operator's Ironic side
runs it (controller/cloud_side.py). Requests and writes are counted by the adapter itself;
ownership is read back from Ironic. The pools have 2,500 nodes, so that a full listing (3
pages) costs more than a steady poll, and each pool is its own resource class and its own
pool name (member identities are global to an Ironic, invariant 8).
"""

from __future__ import annotations

import math
import time

import pytest

from ironic_shard_operator.controller.ironic_cycle import CycleReport, ObservationMemory, run_cycle
from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from testbed.ironic_service import (
    IronicService,
    assign_shards_directly_in_db,
    claim_for_instance,
    enrol_nodes,
    seed_nodes_directly_in_db,
    shards_of,
    unique_resource_class,
)

pytestmark = pytest.mark.integration

NODES = 2500
MEMBERS = 25  # 100 nodes each: a member's failure costs ~5 s of writes


class Pool:
    """One pool of NODES nodes converged over MEMBERS ready members (database shortcut), its
    adapter and its observation memory; `poll()` is one cycle of the operator's Ironic side."""

    def __init__(self, service: IronicService, name: str) -> None:
        self.service, self.name = service, name
        self.resource_class = unique_resource_class(name)
        uuids = seed_nodes_directly_in_db(service, NODES, resource_class=self.resource_class)
        fresh = tuple(Node(uuid=u, provision_state="available") for u in uuids)
        self.spec = PoolSpec(name, replicas=MEMBERS)
        self.members = [Member(f"{name}-{i}", ready=True) for i in range(MEMBERS)]
        decision = plan(Observation(self.spec, tuple(self.members), fresh, now=0.0))
        assign_shards_directly_in_db(service, owners_after(fresh, decision.moves))
        self.adapter = service.adapter(self.resource_class)
        self.memory = ObservationMemory()

    def poll(self) -> tuple[CycleReport, int, int]:
        """One poll: its report, the Ironic requests and the writes it made (the adapter's
        one-time check of the endpoint on first use is not a poll's cost)."""
        writes = self.adapter.writes_made
        report = run_cycle(self.adapter, self.spec, self.members, memory=self.memory)
        return report, report.ironic_requests, self.adapter.writes_made - writes

    def member_down(self, ordinal: int) -> None:
        """Member `ordinal` lost readiness an hour ago (past any grace)."""
        self.members[ordinal] = Member(f"{self.name}-{ordinal}", ready=False, since=time.time() - 3600)

    def owners(self) -> dict[str, str | None]:
        return shards_of(self.service, self.resource_class)


def full_listing_requests() -> int:
    return math.ceil(NODES / 1000) + (NODES % 1000 == 0)


def test_a_steady_poll_makes_two_requests_and_no_write(ironic_service: IronicService):
    pool = Pool(ironic_service, "steady")
    first, requests, writes = pool.poll()
    assert (first.full_listing, first.full_listing_kind) == ("no full listing yet", "no_listing_yet")
    assert requests == 1 + full_listing_requests()  # the shard summary, then the listing
    before = pool.owners()

    for _ in range(3):
        report, requests, writes = pool.poll()
        assert report.full_listing is None, report.full_listing
        assert requests <= 2 < full_listing_requests() + 1
        assert writes == 0
        assert report.moves_planned == 0
        assert report.counts.total == NODES
    assert pool.owners() == before


def test_a_new_node_is_adopted_by_the_next_poll_and_a_disjoint_pool_stays_quiet(
        ironic_service: IronicService):
    ours, theirs = Pool(ironic_service, "newnode-a"), Pool(ironic_service, "newnode-b")
    for pool in (ours, theirs):
        pool.poll()
        assert pool.poll()[0].full_listing is None

    (new,) = enrol_nodes(ironic_service, 1, resource_class=ours.resource_class)

    report, requests, writes = ours.poll()
    assert report.full_listing is None, "the new node came with the unsharded listing"
    assert requests == 2 + 1 + 1, "2 cheap requests, the bulk re-read, the write"
    assert writes == 1 and ours.owners()[new] in {m.name for m in ours.members}
    report, requests, writes = theirs.poll()  # the global summary's "None" moved: not its business
    assert (report.full_listing, requests, writes) == (None, 2, 0)

    (theirs_new,) = enrol_nodes(ironic_service, 1, resource_class=theirs.resource_class)
    report, _, writes = theirs.poll()
    assert writes == 1 and theirs.owners()[theirs_new] in {m.name for m in theirs.members}
    report, requests, writes = ours.poll()  # its own write since: one full listing, then quiet
    assert report.full_listing_kind == "own_writes" and writes == 0
    report, requests, writes = ours.poll()
    assert (report.full_listing, requests, writes) == (None, 2, 0)


def test_a_ring_change_is_acted_on_by_the_next_poll(ironic_service: IronicService):
    pool = Pool(ironic_service, "ringchange")
    pool.poll()
    assert pool.poll()[0].full_listing is None
    leaver = f"{pool.name}-2"
    its_nodes = {n for n, owner in pool.owners().items() if owner == leaver}

    pool.member_down(2)
    report, requests, writes = pool.poll()

    assert report.full_listing is None, "only the leaver's nodes need listing"
    assert report.observe_requests == 3, "2 cheap requests and the leaver's nodes"
    assert writes == len(its_nodes)
    assert leaver not in pool.owners().values()

    assert pool.poll()[0].full_listing == "shards were written since the last full listing"
    report, requests, writes = pool.poll()
    assert (report.full_listing, requests, writes) == (None, 2, 0), "the leaver owns nothing: not listed"


def test_a_node_freed_on_a_member_outside_the_ring_is_moved_by_the_next_poll(
        ironic_service: IronicService):
    pool = Pool(ironic_service, "freed")
    failed = f"{pool.name}-24"
    its_nodes = sorted(n for n, owner in pool.owners().items() if owner == failed)
    claim_for_instance(ironic_service, its_nodes[:3])
    pool.poll()
    pool.member_down(24)
    report, _, writes = pool.poll()  # the ring change: its free nodes leave, the pinned stay
    assert writes == len(its_nodes) - 3
    assert pool.poll()[0].full_listing == "shards were written since the last full listing"
    report, requests, writes = pool.poll()
    assert report.full_listing is None
    assert (requests, writes) == (3, 0), "2 cheap requests + 1 listing of the member outside the ring"

    # The instance on one of its nodes is deleted while the member is down.
    ironic_service.request("PATCH", f"/nodes/{its_nodes[0]}",
                           json=[{"op": "remove", "path": "/instance_uuid"}])
    report, requests, writes = pool.poll()

    assert (report.full_listing, writes) == (None, 1)
    owners = pool.owners()
    assert owners[its_nodes[0]] != failed
    assert [owners[n] for n in its_nodes[1:3]] == [failed, failed], "pinned nodes moved"
