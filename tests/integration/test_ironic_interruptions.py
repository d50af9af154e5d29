"""Interrupted cycles against the real Ironic service: the operator killed mid-cycle, and
Ironic itself stopped mid-cycle. Either way Ironic is left with every node at its old
owner or its planned one, and the next cycle finishes the job with the ideal writes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from ironic_shard_operator.controller.handover import HandoverWork
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.adapters.ironic import IronicUnavailable
from ironic_shard_operator.core.model import Move, Observation, PoolSpec
from ironic_shard_operator.core.planner import owners_after, plan
from testbed.ironic_service import (
    IronicService, claim_for_instance, seed_nodes_directly_in_db, shards_of, unique_resource_class,
)
from tests.integration.conftest import POOL, members_with_down, ready_members

pytestmark = pytest.mark.integration

NODES = 1000
WAIT_SECONDS = 120.0

# The operator's cycle in a process of its own, so the test can kill it like a pod.
CYCLE_PROCESS = """
import json, sys
from ironic_shard_operator.controller.handover import HandoverWork
from ironic_shard_operator.controller.ironic_cycle import run_cycle
from ironic_shard_operator.adapters.ironic import IronicAdapter
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.model import Member, PoolSpec
args = json.load(sys.stdin)
adapter = IronicAdapter.from_clouds_yaml(args["clouds_yaml"], args["cloud"],
                                         selector=Selector(resource_class=args["resource_class"]))
run_cycle(adapter, PoolSpec(args["pool"], replicas=len(args["members"])),
          [Member(name, ready=True) for name in args["members"]])
"""


def wait_until_moved(service: IronicService, resource_class: str, before: dict[str, str | None],
                     at_least: int, still_running: Callable[[], bool]) -> None:
    """Poll Ironic until at least `at_least` nodes changed owner (fail if the cycle ends first)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        now = shards_of(service, resource_class)
        if sum(now[node] != owner for node, owner in before.items()) >= at_least:
            return
        assert still_running(), "the cycle finished before it could be interrupted"
        assert time.monotonic() < deadline, f"fewer than {at_least} moves in {WAIT_SECONDS} s"
        time.sleep(0.1)


def settled_shards(service: IronicService, resource_class: str) -> dict[str, str | None]:
    """The shards once Ironic has finished the PATCHes a killed process left on the wire
    (Ironic still serves a request whose client died): two equal reads 1.5 s apart."""
    previous = shards_of(service, resource_class)
    while True:
        time.sleep(1.5)
        current = shards_of(service, resource_class)
        if current == previous:
            return current
        previous = current


def test_a_cycle_killed_half_way_converges_when_run_again(
        ironic_service: IronicService, converged_pool):
    pool_class, owners = converged_pool(NODES, members=10, name="killed")
    adapter = ironic_service.adapter(pool_class)
    spec, members = PoolSpec(POOL, replicas=11), ready_members(11)  # rack-10 joins
    expected = plan(Observation(spec, tuple(members), adapter.list_nodes(), now=time.time()))
    final = owners_after(adapter.list_nodes(), expected.moves)

    child = subprocess.Popen([sys.executable, "-c", CYCLE_PROCESS], stdin=subprocess.PIPE,
                             text=True)
    try:
        child.stdin.write(json.dumps({  # type: ignore[union-attr]
            "clouds_yaml": ironic_service.clouds_yaml, "cloud": ironic_service.cloud_name,
            "resource_class": pool_class, "pool": POOL, "members": [m.name for m in members]}))
        child.stdin.close()  # type: ignore[union-attr]
        wait_until_moved(ironic_service, pool_class, owners, len(expected.moves) // 3,
                         lambda: child.poll() is None)
    finally:
        child.kill()
        child.wait()

    halfway = settled_shards(ironic_service, pool_class)
    done = sum(halfway[node] != owner for node, owner in owners.items())
    assert 0 < done < len(expected.moves), "the kill did not interrupt the cycle"
    assert all(halfway[node] in (owners[node], final[node]) for node in owners)

    writes = adapter.writes_made
    run_cycle(adapter, spec, members)

    assert shards_of(ironic_service, pool_class) == final, "the re-run reached another state"
    assert adapter.writes_made - writes == len(expected.moves) - done
    writes = adapter.writes_made
    run_cycle(adapter, spec, members)
    assert adapter.writes_made == writes


def test_ironic_stopped_mid_cycle_gives_one_clear_error_and_the_cycle_recovers_after(
        ironic_service: IronicService, converged_pool):
    pool_class, owners = converged_pool(NODES, members=10, name="ironic-down")
    # Short retries: the test waits for the give-up, the operator would retry next poll.
    adapter = ironic_service.adapter(pool_class, retry_attempts=3, backoff_seconds=0.2)
    spec, now = PoolSpec(POOL, replicas=10), time.time()
    members = members_with_down(10, down={3}, now=now)  # rack-3's free nodes must move
    expected = plan(Observation(spec, tuple(members), adapter.list_nodes(), now=now))
    final = owners_after(adapter.list_nodes(), expected.moves)
    errors: list[BaseException] = []

    def cycle() -> None:
        try:
            run_cycle(adapter, spec, members, now=now)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    worker = threading.Thread(target=cycle)
    worker.start()
    try:
        wait_until_moved(ironic_service, pool_class, owners, len(expected.moves) // 4,
                         worker.is_alive)
    finally:
        ironic_service.stop()
        worker.join(timeout=WAIT_SECONDS)
    try:
        assert not worker.is_alive(), "the cycle hangs with Ironic down"
        assert len(errors) == 1 and isinstance(errors[0], IronicUnavailable), errors
        message = str(errors[0])
        assert ironic_service.url in message and "stopped answering" in message, message
        assert "\n" not in message
        with pytest.raises(IronicUnavailable, match="is not answering: Connection refused"):
            run_cycle(adapter, spec, members, now=now)  # a cycle while it is down
    finally:
        ironic_service.start()

    halfway = shards_of(ironic_service, pool_class)
    done = sum(halfway[node] != owner for node, owner in owners.items())
    assert 0 < done < len(expected.moves), "Ironic stopped too late to interrupt the cycle"
    assert all(halfway[node] in (owners[node], final[node]) for node in owners), \
        "a node ended at neither its old owner nor its planned one"

    writes = adapter.writes_made
    run_cycle(adapter, spec, members, now=now)  # the same adapter, once Ironic is back

    after = shards_of(ironic_service, pool_class)
    moved_now = {node for node in owners if after[node] != halfway[node]}
    assert {owners[node] for node in moved_now} == {f"{POOL}-3"}, \
        "the recovery cycle moved nodes other than the leaving member's"
    assert adapter.writes_made - writes == len(moved_now) == len(expected.moves) - done
    loads = Counter(after.values())
    assert loads[f"{POOL}-3"] == 0
    assert max(loads.values()) - min(loads.values()) <= 1, loads
    # Not asserted: after == final. Which member takes the one node of rounding
    # (1000 / 9) depends on what members hold when the cycle re-plans; see the report.


def test_a_cycle_asked_to_stop_ends_between_writes_and_the_next_one_finishes(
        ironic_service: IronicService, converged_pool):
    """The operator's shutdown path: `stop` ends the writing early, cleanly accounted."""
    pool_class, owners = converged_pool(NODES, members=10, name="stopped")
    adapter = ironic_service.adapter(pool_class)
    spec, members = PoolSpec(POOL, replicas=11), ready_members(11)
    stop = threading.Event()
    reports = []
    worker = threading.Thread(target=lambda: reports.append(
        run_cycle(adapter, spec, members, stop=stop)))
    worker.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while adapter.writes_made < 20 and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join(timeout=WAIT_SECONDS)

    assert not worker.is_alive() and len(reports) == 1
    first = reports[0].applied
    assert first.not_attempted > 0, "the cycle finished before it was asked to stop"
    assert first.applied + first.skipped == first.planned
    halfway = shards_of(ironic_service, pool_class)
    assert sum(halfway[node] != owner for node, owner in owners.items()) == first.applied

    second = run_cycle(adapter, spec, members)

    assert second.moves_applied == first.planned - first.applied
    loads = Counter(shards_of(ironic_service, pool_class).values())
    assert max(loads.values()) - min(loads.values()) <= 1, loads


def test_a_handovers_shard_writes_stop_at_the_next_patch_once_the_lease_is_lost(ironic_service: IronicService):
    """Invariant 10 for the handover's shard writes (controller/handover.py, the same path as
    spec.nova.repairMisplaced's): the Lease is asked right before each PATCH, not once per
    step or per batch. A leader whose renew deadline passes in the middle of one batch of
    writes sends no further PATCH: every node after it keeps its shard."""
    pool_class = unique_resource_class("handover-lease")
    nodes = sorted(seed_nodes_directly_in_db(ironic_service, 30, resource_class=pool_class, shard="pool-2"))
    claim_for_instance(ironic_service, nodes)  # each carries an instance: only a handover moves it
    adapter = ironic_service.adapter(pool_class, max_concurrent_writes=1)  # one writer: PATCHes in order
    observed = adapter.list_nodes()
    moves = [Move(node, "pool-2", "pool-0") for node in nodes]
    assert len(moves) <= adapter.batch_size, "the moves must make one batch: only a per-PATCH check stops them"
    lease = {"held": True, "asked": 0}

    def may_write() -> bool:  # the renew deadline passes once 5 PATCHes went out
        lease["asked"] += 1
        lease["held"] = lease["held"] and adapter.writes_made < 5
        return lease["held"]

    result = adapter.hand_over(moves, observed, HandoverWork(kube=None, may_write=may_write).write_stop())

    assert (result.applied, result.not_attempted) == (5, len(moves) - 5), result
    assert adapter.writes_made == 5
    after = shards_of(ironic_service, pool_class)
    assert [after[node] for node in nodes] == ["pool-0"] * 5 + ["pool-2"] * (len(moves) - 5)
    assert lease["asked"] > 5, "the Lease was not asked before each write"
