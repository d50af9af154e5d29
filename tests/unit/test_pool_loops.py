"""The pool loops that stand in for kopf daemons (controller/handlers.py, PoolLoops): one
loop per pool, reading the latest CR, restarted for a new pool of the same name, and waited
for when the operator stops, also when the pool was deleted while the loop was mid-cycle."""

from __future__ import annotations

import asyncio

from ironic_shard_operator.controller.handlers import LoopStopped, PoolLoops


def pool(uid: str, generation: int) -> dict:
    return {"metadata": {"name": "rack-a", "namespace": "ns", "uid": uid, "generation": generation}}


class Recorder:
    """A pool loop that records what it saw and, once stopped, takes `linger` s to end."""

    def __init__(self, linger: float = 0.0) -> None:
        self.linger = linger
        self.started: list[str] = []
        self.ended: list[str] = []
        self.bodies: dict[str, dict] = {}

    async def __call__(self, body: dict, stopped: LoopStopped) -> None:
        uid = body["metadata"]["uid"]
        self.started.append(uid)
        self.bodies[uid] = body
        await stopped.wait()
        await asyncio.sleep(self.linger)  # a cycle that finishes its current write
        self.ended.append(uid)


async def test_one_loop_per_pool_reads_the_latest_cr_and_a_new_uid_restarts_it():
    loops, loop = PoolLoops(), Recorder()
    loops.follow("ns/rack-a", pool("u1", 1), loop)
    await asyncio.sleep(0)
    loops.follow("ns/rack-a", pool("u1", 2), loop)  # an update: same loop, the new body
    await asyncio.sleep(0)
    assert loop.started == ["u1"]
    assert loop.bodies["u1"]["metadata"]["generation"] == 2
    loops.follow("ns/rack-a", pool("u2", 1), loop)  # deleted and re-created meanwhile
    await asyncio.sleep(0.01)
    assert loop.started == ["u1", "u2"] and loop.ended == ["u1"]
    await loops.stop_all(timeout=1)
    assert loop.ended == ["u1", "u2"]


async def test_the_operator_stop_waits_for_a_deleted_pools_loop_to_end():
    loops, loop = PoolLoops(), Recorder(linger=0.2)
    loops.follow("ns/rack-a", pool("u1", 1), loop)
    await asyncio.sleep(0)
    loops.stop("ns/rack-a")  # the pool was deleted; its loop is still finishing a cycle
    assert loop.ended == []
    await loops.stop_all(timeout=5)
    assert loop.ended == ["u1"]


async def test_a_loop_that_does_not_end_is_cancelled_after_the_timeout():
    loops, loop = PoolLoops(), Recorder(linger=60)
    loops.follow("ns/rack-a", pool("u1", 1), loop)
    await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    await loops.stop_all(timeout=0.1)
    assert asyncio.get_running_loop().time() - started < 5
    assert loop.ended == []
