"""kopf wiring: which Kubernetes events run which pool's cycle. Nothing here decides.

Invariants: one loop task per pool (`pool_loop.run_pool`), so one cycle per pool at a time; an
event only wakes that loop; pools carry no finalizer (deleting a pool needs no operator; its pods
go by owner reference, Ironic shards stay as they are); kopf posts no Events of its own. Why the
loop is not a kopf daemon, and the legacy finalizer's removal: docs/design.md, "kopf wiring".
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import kopf

from ironic_shard_operator.core.podspec import POOL_LABEL
from ironic_shard_operator.controller import pool_loop
from ironic_shard_operator.controller.runtime import Operator
from ironic_shard_operator.core.claims import PoolClaim
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

# The finalizer pools carried while the loop was a kopf daemon; no pool gets it any more.
LEGACY_FINALIZER = f"{GROUP}/operator"
# How long the operator's stop waits for the pool loops to end (as kopf waited for daemons).
STOP_SECONDS = 30.0


class LoopStopped:
    """A pool loop's stop flag, read the way `pool_loop.run_pool` reads it: truthy once set,
    and awaitable."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass
class _Loop:
    uid: str
    body: dict[str, Any]  # the live view of the CR that the loop reads; refreshed by each event
    stopped: LoopStopped
    task: asyncio.Task[None]


class PoolLoops:
    """At most one running loop per pool (namespace/name), for the pool's current uid; a
    stopped loop is awaited by `stop_all` until it has ended (it may be mid-cycle)."""

    def __init__(self) -> None:
        self._loops: dict[str, _Loop] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def follow(self, key: str, raw: Mapping[str, Any],
               start: Callable[[Mapping[str, Any], LoopStopped], Awaitable[None]]) -> None:
        """Show pool `key`'s loop the CR as `raw` says it is now; start the loop if it is not
        running, or if `raw` is a new pool of that name (then the old loop is stopped)."""
        uid = raw["metadata"]["uid"]
        loop = self._loops.get(key)
        if loop is not None and loop.uid == uid and not loop.task.done():
            loop.body.clear()
            loop.body.update(raw)
            return
        if loop is not None:
            self._stop(loop)
        body, stopped = dict(raw), LoopStopped()
        task = asyncio.create_task(start(body, stopped), name=f"pool {key}")
        task.add_done_callback(lambda done: _report_crash(key, done))
        self._loops[key] = _Loop(uid, body, stopped, task)

    def stop(self, key: str) -> None:
        loop = self._loops.pop(key, None)
        if loop is not None:
            self._stop(loop)

    def _stop(self, loop: _Loop) -> None:
        loop.stopped.set()
        if not loop.task.done():
            self._stopping.add(loop.task)
            loop.task.add_done_callback(self._stopping.discard)

    async def stop_all(self, timeout: float) -> None:
        """Stop every loop; cancel those still running after `timeout` seconds."""
        loops, self._loops = list(self._loops.values()), {}
        for loop in loops:
            self._stop(loop)
        tasks = list(self._stopping)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _report_crash(key: str, task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("pool %s: its loop ended with an error; the pool's next event restarts it", key,
                  exc_info=task.exception())


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.enabled = False
    settings.persistence.finalizer = LEGACY_FINALIZER  # kopf removes it: see the module's doc
    if getattr(memo, "operator", None) is None:
        raise kopf.PermanentError("handlers need memo.operator (start through runner.main)")
    memo.pool_loops = PoolLoops()


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    await memo.pool_loops.stop_all(STOP_SECONDS)
    await memo.operator.kube.close()


@kopf.index(GROUP, VERSION, PLURAL)
def pool_claims(namespace: str, name: str, meta: Any, spec: Any, **_: Any) -> dict[str, PoolClaim]:
    selector = spec.get("selector") or {}
    return {"pools": PoolClaim(
        key=f"{namespace}/{name}",
        created=meta.get("creationTimestamp") or "",
        selector=Selector(selector.get("conductorGroup"), selector.get("resourceClass")),
    )}


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_changed(event: Any, type: str | None, namespace: str, name: str, meta: Any,
                       memo: kopf.Memo, pool_claims: kopf.Index[str, PoolClaim], **_: Any) -> None:
    operator: Operator = memo.operator
    key = f"{namespace}/{name}"
    if type == "DELETED" or meta.get("deletionTimestamp"):
        memo.pool_loops.stop(key)
        if type == "DELETED":
            operator.forget(key)
        return

    def claims() -> list[PoolClaim]:
        return [PoolClaim(c.key, c.created, c.selector, operator.runtime(c.key).cloud)
                for c in pool_claims.get("pools", [])]

    memo.pool_loops.follow(key, event["object"],
                           lambda body, stopped: pool_loop.run_pool(operator, body, stopped, claims=claims))
    runtime = operator.runtime(key)
    if runtime.generation != meta.get("generation"):
        operator.wake(key)


@kopf.on.event("", "v1", "pods", labels={POOL_LABEL: kopf.PRESENT})
async def pod_changed(namespace: str, labels: Any, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.wake(f"{namespace}/{labels[POOL_LABEL]}")
