"""A pool's Ironic and Nova side whose requests all hang for good (a library deadlock) is found
out and abandoned (controller/cloud_side.py): it has sent no request for
HUNG_AFTER_SECONDS; abandoned, it can write nothing more (its interrupt set, `may_write`
False for it alone), and the pool's next cycle starts a new side on a new connection."""

from __future__ import annotations

import asyncio
import threading
import time

from ironic_shard_operator.controller.cloud_side import CloudSide, CloudWork
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.core.pool_memory import PoolMemory
from ironic_shard_operator.core.spec import read_pool
from ironic_shard_operator.core.status import CycleFacts

POOL = read_pool({"metadata": {"name": "rack", "namespace": "ns", "uid": "u", "generation": 1},
                  "spec": {"replicas": 1, "image": "i", "novaConfig": {"secretRef": {"name": "n"}},
                           "cloud": {"secretRef": {"name": "c"}}}})


class HungAdapter:
    """An Ironic adapter whose first call never returns until `gate` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.requests_made = 0
        self.connection = object()

    def check(self) -> None:
        self.requests_made += 1
        self.gate.wait(60)
        raise RuntimeError("released")


async def test_a_side_that_sends_no_request_for_long_is_abandoned_and_may_write_nothing_more() -> None:
    adapter, interrupt = HungAdapter(), threading.Event()
    work = CloudWork(key="ns/rack", pool=POOL, adapter=adapter, members=(), identities=frozenset(), nova_conf=None,
                     pool_memory=PoolMemory(), now=time.time(), nova=NovaRuntime(),
                     metrics=None, may_write=lambda: True)
    side = CloudSide(work, interrupt, requests_made=lambda: adapter.requests_made, hung_after=300.0)
    try:
        # The side starts in its thread: its first request goes out, then hangs. Wait for it,
        # so that request is not counted as progress in the middle of the checks below.
        for _ in range(3000):
            if adapter.requests_made:
                break
            await asyncio.sleep(0.01)
        assert adapter.requests_made == 1
        start = side.started
        assert not side.hung(start)  # samples the first request: the clock starts at `start`
        assert not side.hung(start + 299.0)
        adapter.requests_made += 1  # a request went out: progress, the clock starts again
        assert not side.hung(start + 300.0)
        assert not side.hung(start + 599.0)
        assert side.hung(start + 600.0)
        assert side.may_write()
        side.abandon()
        assert interrupt.is_set() and side.abandoned.is_set() and side.reported
        assert not side.may_write()  # its Nova and handover writes ask this; its Ironic writes the interrupt
    finally:
        adapter.gate.set()
        await asyncio.wait([side.task], timeout=30)
    assert side.task.done()


async def test_a_hung_side_is_abandoned_and_the_next_cycle_starts_a_new_side_on_a_new_connection() -> None:
    """The wiring (controller/reconcile.py): the cycle that finds its pool's side hung abandons
    it, drops the pool's Ironic adapter and Nova adapter (the hung connection keeps its locks),
    and starts a new side on a new adapter; the abandoned side may write nothing more."""
    import socket

    from ironic_shard_operator.controller.runtime import Operator
    from ironic_shard_operator.controller.reconcile import _Cycle, _start_cloud_side, _Members, _Secrets

    with socket.socket() as closed:  # a port nothing listens on: the new side's requests are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    clouds_yaml = (f"clouds:\n  ironic:\n    auth_type: none\n    baremetal_endpoint_override: "
                   f"http://127.0.0.1:{port}\n")
    pool = read_pool({"metadata": {"name": "rack", "namespace": "ns", "uid": "u", "generation": 1},
                      "spec": {"replicas": 1, "image": "i", "novaConfig": {"secretRef": {"name": "n"}},
                               "cloud": {"secretRef": {"name": "c"}, "cloudName": "ironic"}}})
    op = Operator(kube=None)
    runtime = op.runtime("ns/rack")
    hung_adapter, old_interrupt = HungAdapter(), threading.Event()
    work = CloudWork(key="ns/rack", pool=pool, adapter=hung_adapter, members=(), identities=frozenset(),
                     nova_conf=None, pool_memory=PoolMemory(), now=time.time(),
                     nova=runtime.nova, metrics=None, may_write=op.may_write)
    hung = runtime.cloud_side = CloudSide(work, old_interrupt, requests_made=lambda: hung_adapter.requests_made,
                                          hung_after=0.05)
    old_cache, runtime.nova.adapter = runtime.ironic, object()  # the Nova adapter of the hung connection
    cycle = _Cycle(op, {"metadata": {"name": "rack", "namespace": "ns"}}, "ns", "rack", runtime, time.time(), {},
                   PoolMemory())
    members = _Members(pods={}, member_confs={}, identities=[], readiness=(), facts=CycleFacts(generation=0))
    new = None
    try:
        await asyncio.sleep(0)  # the side sends its first request, which hangs
        cloud = await _start_cloud_side(cycle, pool, members, _Secrets(None, "", clouds_yaml))
        assert cloud.cloud_side is hung and not hung.abandoned.is_set()  # a request went out just now: not hung
        await asyncio.sleep(0.1)  # no request since, for longer than hung_after
        cloud = await _start_cloud_side(cycle, pool, members, _Secrets(None, "", clouds_yaml))
        new = runtime.cloud_side
        assert hung.abandoned.is_set() and old_interrupt.is_set() and not hung.may_write()
        assert new is not hung and cloud.cloud_side is new and new.may_write()
        assert runtime.ironic is not old_cache and runtime.ironic.adapter is not None  # a new connection
        assert runtime.interrupt is not old_interrupt and not runtime.interrupt.is_set()
    finally:
        hung_adapter.gate.set()
        await asyncio.wait([hung.task] + ([new.task] if new is not None else []), timeout=60)
    assert new is not None and new.task.done()
    result = new.task.result()  # it ran on the new adapter (Ironic refused: said so), not the hung one
    assert result.error is not None and f"127.0.0.1:{port}" in str(result.error)
    assert runtime.nova.adapter is None or runtime.nova.adapter.connection is runtime.ironic.adapter.connection
