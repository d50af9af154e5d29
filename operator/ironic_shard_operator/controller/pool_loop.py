"""The operator's per-pool runtime and loop: when each pool's cycle (reconcile.py) runs.

`Operator.run_pool()` is the loop kopf starts once per IronicComputeShard (handlers.py
wires it): it runs `reconcile()` whenever something about the pool changed (`wake()`),
and otherwise every `spec.ironic.pollIntervalSeconds`, or sooner when a time-based
decision falls due (core/schedule.py: a grace ending, a pending timeout, ForceAfter). One
loop per pool means one cycle per pool at a time; every trigger runs the same
level-triggered cycle.

A cycle's shard writes stop between two writes when something new happens (`wake()` sets
the pool's interrupt; the next cycle starts at once and, being level-triggered, continues
the writes after looking after the pods) or when the loop is stopped (CR deleted, operator
stopping). So a failed member is replaced promptly even during a long rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ironic_shard_operator.adapters.ironic import IronicError
from ironic_shard_operator.adapters.kube import Kube, KubeError
from ironic_shard_operator.controller.ironic_cycle import AdapterCache
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.controller.reconcile import reconcile
from ironic_shard_operator.core.claims import PoolClaim
from ironic_shard_operator.core.schedule import RETRY_SECONDS

log = logging.getLogger(__name__)

# Seconds to let a burst of triggers (a pod's create, schedule, start, ready) gather
# into one cycle.
DEBOUNCE_SECONDS = 0.5


@dataclass
class PoolRuntime:
    """What the operator keeps in memory about one pool between its cycles.

    Nothing here is needed for correctness after a restart: the adapter is rebuilt (`ironic`
    keeps it between cycles), the cloud identity re-read, and `last_status` falls back to the
    CR's own status.
    """

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ironic: AdapterCache = field(default_factory=AdapterCache)
    cloud: str | None = None
    last_status: dict[str, Any] | None = None
    generation: int | None = None
    # Set when the running cycle should end its shard writes early (news, or stopping).
    interrupt: threading.Event = field(default_factory=threading.Event)
    nova: NovaRuntime = field(default_factory=NovaRuntime)


class Operator:
    """The shared state of one operator process: its Kubernetes client and the pools.

    `may_write()` is the leader's write check (LeaderElector.may_write): the write steps of
    a cycle ask it before each batch of writes, and make none once it is False."""

    def __init__(self, kube: Kube, *, metrics: Any = None,
                 clock: Callable[[], float] = time.time,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.may_write = may_write
        self.pools: dict[str, PoolRuntime] = {}

    def runtime(self, key: str) -> PoolRuntime:
        return self.pools.setdefault(key, PoolRuntime())

    def wake(self, key: str) -> None:
        """Ask for a cycle of pool `key` (namespace/name) soon; bursts gather into one.

        Call it on the event loop (asyncio.Event is not thread-safe)."""
        runtime = self.runtime(key)
        runtime.wake.set()
        runtime.interrupt.set()

    def forget(self, key: str) -> None:
        runtime = self.pools.pop(key, None)
        if runtime is not None:
            runtime.interrupt.set()
        if self.metrics is not None:
            self.metrics.forget_pool(key)

    async def run_pool(self, body: Mapping[str, Any], stopped: Any,
                       claims: Callable[[], Iterable[PoolClaim]]) -> None:
        """Cycle pool `body` (a live view of the CR) until `stopped` (kopf's daemon flag).

        `claims` lists every pool's claim (for Conflict), read fresh for each cycle.
        """
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        runtime = self.runtime(key)
        runtime.wake.set()
        watcher = asyncio.ensure_future(_interrupt_when_stopped(stopped, runtime.interrupt))
        try:
            await self._loop(key, runtime, body, stopped, claims)
        finally:
            watcher.cancel()
            runtime.interrupt.set()
        log.info("pool %s: stopped; its pods go with the CR (owner references), "
                 "Ironic node shards are left as they are", key)

    async def _loop(self, key: str, runtime: PoolRuntime, body: Mapping[str, Any], stopped: Any,
                    claims: Callable[[], Iterable[PoolClaim]]) -> None:
        while not stopped:
            runtime.wake.clear()
            runtime.interrupt.clear()
            try:
                delay = await reconcile(self, body, claims())
            except (KubeError, IronicError) as error:  # noqa: PERF203 - the loop must go on
                log.warning("pool %s: cycle failed: %s", key, error)
                delay = RETRY_SECONDS
            except Exception:  # a bug: say so loudly, keep the other pools going
                log.exception("pool %s: cycle failed unexpectedly", key)
                delay = RETRY_SECONDS
            await _sleep_until(runtime.wake, stopped, delay)
            if runtime.wake.is_set() and not stopped:
                await asyncio.sleep(DEBOUNCE_SECONDS)


async def _interrupt_when_stopped(stopped: Any, flag: threading.Event) -> None:
    await stopped.wait()
    flag.set()


async def _sleep_until(wake: asyncio.Event, stopped: Any, seconds: float) -> None:
    """Return on `wake`, on `stopped`, or after `seconds`, whichever comes first."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
