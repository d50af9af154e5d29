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
from ironic_shard_operator.core.model import AutoscaleHistory
from ironic_shard_operator.core.spec import read_pool

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
                     previous_nova=None, autoscale_history=AutoscaleHistory(), now=time.time(), nova=NovaRuntime(),
                     metrics=None, may_write=lambda: True)
    side = CloudSide(work, interrupt, requests_made=lambda: adapter.requests_made, hung_after=300.0)
    try:
        await asyncio.sleep(0)  # the side starts: its first request hangs
        start = side.started
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
