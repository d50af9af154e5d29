"""A deployment whose Ironic cuts listings shorter than our page size ([api]max_limit below
1,000): every node is still seen, by the full listing and by the bulk re-read before writes.
Against a real Ironic started with max_limit 10 and a 25-node pool (three pages)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ironic_shard_operator.adapters.ironic import IronicAdapter
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.core.model import PoolSpec, Selector
from testbed.ironic_service import (
    IronicService,
    assign_shards_directly_in_db,
    running_ironic,
    seed_nodes_directly_in_db,
    shards_of,
    unique_resource_class,
)
from tests.integration.conftest import POOL, members_with_down, ready_members

pytestmark = pytest.mark.integration

MAX_LIMIT = 10
NODES = 25


@pytest.fixture(scope="module")
def small_pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IronicService]:
    """A real Ironic whose listings hold at most MAX_LIMIT nodes per page."""
    with running_ironic(tmp_path_factory.mktemp("ironic-small-pages"), auth="noauth",
                        max_limit=MAX_LIMIT) as service:
        yield service


def adapter_of(service: IronicService, resource_class: str) -> IronicAdapter:
    return IronicAdapter.from_clouds_yaml(service.clouds_yaml, service.cloud_name,
                                          selector=Selector(resource_class=resource_class))


def test_the_service_really_cuts_pages_at_max_limit(small_pages: IronicService):
    resource_class = unique_resource_class("cut")
    seed_nodes_directly_in_db(small_pages, NODES, resource_class=resource_class)
    page = small_pages.request("GET", f"/nodes?resource_class={resource_class}&limit=1000").json()
    assert len(page["nodes"]) == MAX_LIMIT and page.get("next"), "the premise of this file"


def test_the_listing_sees_every_node_of_a_pool_longer_than_a_page(small_pages: IronicService):
    resource_class = unique_resource_class("listing")
    uuids = seed_nodes_directly_in_db(small_pages, NODES, resource_class=resource_class)
    adapter = adapter_of(small_pages, resource_class)

    nodes = adapter.list_nodes()

    assert sorted(node.uuid for node in nodes) == sorted(uuids)


def test_adoption_writes_every_unassigned_node(small_pages: IronicService):
    """The re-read before the writes lists unassigned nodes (sharded=false) in pages too."""
    resource_class = unique_resource_class("adopt")
    seed_nodes_directly_in_db(small_pages, NODES, resource_class=resource_class)
    adapter = adapter_of(small_pages, resource_class)

    report = run_cycle(adapter, PoolSpec(POOL, replicas=3), ready_members(3))

    owners = shards_of(small_pages, resource_class)
    assert len(owners) == NODES
    assert set(Counter(owners.values())) == {f"{POOL}-{i}" for i in range(3)}, f"left: {owners}"
    assert report.moves_planned == report.moves_applied == NODES
    assert adapter.writes_made == NODES


def test_failover_moves_every_free_node_of_a_dead_member(small_pages: IronicService):
    """The re-read before the writes lists by shard (source and target) in pages too."""
    resource_class = unique_resource_class("failover")
    uuids = seed_nodes_directly_in_db(small_pages, NODES, resource_class=resource_class)
    dead, alive = f"{POOL}-0", f"{POOL}-1"
    assign_shards_directly_in_db(small_pages, {node: dead for node in uuids})
    adapter = adapter_of(small_pages, resource_class)
    now = time.time()

    report = run_cycle(adapter, PoolSpec(POOL, replicas=2), members_with_down(2, down={0}, now=now),
                       now=now)

    assert shards_of(small_pages, resource_class) == {node: alive for node in uuids}
    assert report.moves_planned == report.moves_applied == NODES
    assert adapter.writes_made == NODES
