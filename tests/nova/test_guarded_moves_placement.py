"""The race guard with the real Placement: a build in flight claims its node
in Placement before Ironic shows an instance_uuid. While Placement holds an allocation on a
node's resource provider, that free node does not move away from its live owner when a member
joins (the consumer holding it reported, for status.guard); once the allocation is gone, it
moves; while Placement does not answer, it waits. A move away from a dead owner asks nothing.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
import requests
import yaml

from ironic_shard_operator.adapters.ironic import IronicAdapter
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.core.model import Member, PoolSpec, Selector
from ironic_shard_operator.core.shard_write import GuardHold
from testbed.ironic_service import IronicService, seed_nodes_directly_in_db, shards_of, unique_resource_class
from testbed.nova_stack import NovaStack

pytestmark = pytest.mark.nova

RESOURCE = "CUSTOM_GUARDED"


class Placement:
    """The test's own client of the real Placement: what Nova's resource tracker and
    scheduler would have written for a node and a build in flight."""

    def __init__(self, stack: NovaStack) -> None:
        self.url = stack.placement_url
        self.headers = {"X-Auth-Token": stack.token, "OpenStack-API-Version": "placement 1.39"}

    def _call(self, method: str, path: str, body: object = None) -> requests.Response:
        response = requests.request(method, self.url + path, json=body, headers=self.headers, timeout=30)
        assert response.status_code < 400, (method, path, response.status_code, response.json()["errors"][0]["detail"])
        return response

    def claim(self, node: str) -> str:
        """The node's provider with its one unit (as nova-compute reports it), and a build's
        allocation of it (as the scheduler claims it); returns the consumer."""
        self._call("PUT", f"/resource_classes/{RESOURCE}")  # as Nova registers a node's class
        self._call("POST", "/resource_providers", {"uuid": node, "name": node})
        self._call("PUT", f"/resource_providers/{node}/inventories",
                   {"resource_provider_generation": 0, "inventories": {RESOURCE: {"total": 1}}})
        consumer = str(uuid.uuid4())
        self._call("PUT", f"/allocations/{consumer}", {
            "allocations": {node: {"resources": {RESOURCE: 1}}}, "consumer_generation": None,
            "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()), "consumer_type": "INSTANCE"})
        return consumer

    def release(self, consumer: str) -> None:
        self._call("DELETE", f"/allocations/{consumer}")


def _adapter(stack: NovaStack, ironic: IronicService, resource_class: str) -> IronicAdapter:
    entry = stack.cloud_config()
    entry.pop("compute_api_version")
    entry |= {"baremetal_endpoint_override": ironic.url, "placement_endpoint_override": stack.placement_url}
    return IronicAdapter.from_clouds_yaml(yaml.safe_dump({"clouds": {"c": entry}}), "c",
                                          selector=Selector(resource_class=resource_class))


def test_a_node_held_in_placement_stays_with_its_live_owner_until_released(
        nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    resource_class = unique_resource_class("placement")
    seed_nodes_directly_in_db(noauth_ironic, 12, resource_class=resource_class, shard="pool-0")
    adapter = _adapter(nova_stack, noauth_ironic, resource_class)
    spec, now = PoolSpec(name="pool", replicas=2), time.time()
    joined = [Member("pool-0", ready=True, since=now - 600), Member("pool-1", ready=True, since=now - 5)]

    paused = run_cycle(adapter, spec, joined, now=now, paused=True)  # what the join would move
    held = paused.plan.moves[0].node_uuid
    placement = Placement(nova_stack)
    consumer = placement.claim(held)

    first = run_cycle(adapter, spec, joined, now=now)
    assert shards_of(noauth_ironic, resource_class)[held] == "pool-0"
    assert first.applied.skipped_claimed == 1
    assert first.applied.applied == len(paused.plan.moves) - 1
    # what status.guard lists, and a LeakedAllocation names once it is old (core/guard_holds.py)
    assert first.applied.held == [GuardHold(held, (consumer,))]

    placement.release(consumer)
    second = run_cycle(adapter, spec, joined, now=time.time())
    assert second.plan.moves == (paused.plan.moves[0],)
    assert shards_of(noauth_ironic, resource_class)[held] == "pool-1"


def test_a_move_away_from_a_dead_owner_does_not_wait_for_placement(
        nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    """Nothing can spawn on a member past its grace: its nodes are re-owned at once, and an
    allocation left on one (a build that failed with the member) does not hold it there."""
    resource_class = unique_resource_class("dead-owner")
    nodes = seed_nodes_directly_in_db(noauth_ironic, 4, resource_class=resource_class, shard="pool-0")
    Placement(nova_stack).claim(nodes[0])
    now = time.time()
    members = [Member("pool-0", ready=False, since=now - 600), Member("pool-1", ready=True, since=now - 600)]
    report = run_cycle(_adapter(nova_stack, noauth_ironic, resource_class), PoolSpec(name="pool", replicas=2),
                       members, now=now)
    assert report.applied.applied == 4
    assert set(shards_of(noauth_ironic, resource_class).values()) == {"pool-1"}


def test_a_placement_that_does_not_answer_keeps_guarded_moves_where_they_are(
        nova_stack: NovaStack, noauth_ironic: IronicService) -> None:
    """Never write blind: a build Placement placed before it stopped answering shows in Ironic
    only later, so a free node does not leave its live owner while Placement does not answer
    (counted busy, tried again next cycle); nothing is read or written for those moves. A move
    away from a dead owner needs no guard and goes ahead."""
    resource_class = unique_resource_class("placement-down")
    nodes = seed_nodes_directly_in_db(noauth_ironic, 6, resource_class=resource_class, shard="pool-0")
    entry = nova_stack.cloud_config()
    entry.pop("compute_api_version")
    entry |= {"baremetal_endpoint_override": noauth_ironic.url, "placement_endpoint_override": _closed_url()}
    adapter = IronicAdapter.from_clouds_yaml(yaml.safe_dump({"clouds": {"c": entry}}), "c",
                                             selector=Selector(resource_class=resource_class))
    now = time.time()
    joined = [Member("pool-0", ready=True, since=now - 600), Member("pool-1", ready=True, since=now - 5)]
    report = run_cycle(adapter, PoolSpec(name="pool", replicas=2), joined, now=now)
    assert report.moves_planned and report.applied.applied == 0
    assert report.applied.skipped_busy == report.moves_planned
    assert set(shards_of(noauth_ironic, resource_class).values()) == {"pool-0"}
    assert report.ironic_requests == 1  # the listing; no re-read, no write

    dead = [Member("pool-0", ready=False, since=now - 600), Member("pool-1", ready=True, since=now - 600)]
    report = run_cycle(adapter, PoolSpec(name="pool", replicas=2), dead, now=now)
    assert report.applied.applied == len(nodes)
    assert set(shards_of(noauth_ironic, resource_class).values()) == {"pool-1"}


def _closed_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"
