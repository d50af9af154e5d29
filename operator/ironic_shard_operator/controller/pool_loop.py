"""The operator's per-pool runtime and loop: when each pool's cycle (reconcile.py) runs.

`Operator.run_pool()` is the loop kopf starts once per IronicComputeShard (handlers.py
wires it): it runs `reconcile()` whenever something about the pool changed (`wake()`),
and otherwise every `spec.ironic.pollIntervalSeconds`, or sooner when a time-based
decision falls due (core/schedule.py: a grace ending, a pending timeout, ForceAfter). One
loop per pool means one cycle per pool at a time; every trigger runs the same
level-triggered cycle.

A pool's Ironic and Nova side runs in the background (cloud_side.py), so cycles go on
looking after the pods while Ironic or Nova is slow, hung or refusing; the side wakes the
pool when it ends after its cycle moved on. Its shard writes stop between two writes when
something new happens (`wake()` sets the pool's interrupt; the next side, being
level-triggered, re-plans with the new readiness and continues) or when the loop is stopped
(CR deleted, operator stopping): the loop then waits for the side to end.
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
from ironic_shard_operator.controller.cloud_side import CloudSide
from ironic_shard_operator.controller.ironic_cycle import AdapterCache
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.controller.preflight_side import PreflightSide
from ironic_shard_operator.controller.reconcile import reconcile
from ironic_shard_operator.core import liveness
from ironic_shard_operator.core.claims import PoolClaim
from ironic_shard_operator.core.model import Plan
from ironic_shard_operator.core.schedule import RETRY_SECONDS
from ironic_shard_operator.core.spec import IronicSettings

log = logging.getLogger(__name__)

# Seconds to let a burst of triggers (a pod's create, schedule, start, ready) gather
# into one cycle.
DEBOUNCE_SECONDS = 0.5


@dataclass
class PoolRuntime:
    """What the operator keeps in memory about one pool between its cycles.

    Nothing here is needed for correctness after a restart: the adapter is rebuilt (`ironic`
    keeps it between cycles), the cloud identity re-read, `last_status` falls back to the
    CR's own status, and the first Ironic and Nova side plans again (until it does, only the
    existing members are looked after).
    """

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ironic: AdapterCache = field(default_factory=AdapterCache)
    cloud: str | None = None
    last_status: dict[str, Any] | None = None
    generation: int | None = None
    # Set when the running Ironic and Nova side should end its shard writes early (news, or
    # stopping); each side gets a new one.
    interrupt: threading.Event = field(default_factory=threading.Event)
    nova: NovaRuntime = field(default_factory=NovaRuntime)
    # The pool's Ironic and Nova side (cloud_side.py): the one under way, or the last one.
    cloud_side: CloudSide | None = None
    # The last plan and Ironic error a side found: what cycles act on and report while the
    # side under way has not planned (a hung or refusing Ironic).
    ironic_plan: Plan | None = None
    ironic_error: IronicError | None = None
    # The pool's preflight: the run for its current Secrets and its verdict (Preflight condition).
    preflight: PreflightSide = field(default_factory=PreflightSide)


class Operator:
    """The shared state of one operator process: its Kubernetes client and the pools.

    `may_write()` is the leader's write check (LeaderElector.may_write): the write steps of
    a cycle ask it before each batch of writes, and make none once it is False."""

    def __init__(self, kube: Kube, *, metrics: Any = None,
                 clock: Callable[[], float] = time.time,
                 may_write: Callable[[], bool] = lambda: True,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.may_write = may_write
        self.monotonic = monotonic  # the clock of the loops' beats (core/liveness.py)
        self.pools: dict[str, PoolRuntime] = {}
        self.beats: dict[str, liveness.Beat] = {}

    def stuck_loops(self) -> list[str]:
        """Why the pool loops are not alive (core/liveness.py): empty while they are."""
        return liveness.stuck(self.beats, self.monotonic())

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
        watcher = asyncio.ensure_future(_interrupt_when_stopped(stopped, runtime))
        try:
            await self._loop(key, runtime, body, stopped, claims)
        finally:
            self.beats.pop(key, None)
            watcher.cancel()
            runtime.interrupt.set()
            if runtime.cloud_side is not None:  # its writes stop at the interrupt; Ironic may hang
                await asyncio.wait([runtime.cloud_side.task])
        log.info("pool %s: stopped; its pods go with the CR (owner references), "
                 "Ironic node shards are left as they are", key)

    async def _loop(self, key: str, runtime: PoolRuntime, body: Mapping[str, Any], stopped: Any,
                    claims: Callable[[], Iterable[PoolClaim]]) -> None:
        while not stopped:
            runtime.wake.clear()
            interval = _poll_interval(body)
            self.beats[key] = liveness.Beat(self.monotonic(), self.monotonic(), interval)
            try:
                delay = await reconcile(self, body, claims())
            except (KubeError, IronicError) as error:  # noqa: PERF203 - the loop must go on
                log.warning("pool %s: cycle failed: %s", key, error)
                delay = RETRY_SECONDS
            except Exception:  # a bug: say so loudly, keep the other pools going
                log.exception("pool %s: cycle failed unexpectedly", key)
                delay = RETRY_SECONDS
            self.beats[key] = liveness.Beat(None, self.monotonic() + delay + DEBOUNCE_SECONDS, interval)
            await _sleep_until(runtime.wake, stopped, delay)
            if runtime.wake.is_set() and not stopped:
                await asyncio.sleep(DEBOUNCE_SECONDS)


def _poll_interval(body: Mapping[str, Any]) -> float:
    """The pool's spec.ironic.pollIntervalSeconds, also in a spec invalid elsewhere (its default
    where it cannot be read)."""
    value = ((body.get("spec") or {}).get("ironic") or {}).get("pollIntervalSeconds")
    return float(value) if isinstance(value, (int, float)) and value > 0 else IronicSettings().poll_interval_seconds


async def _interrupt_when_stopped(stopped: Any, runtime: PoolRuntime) -> None:
    await stopped.wait()
    runtime.interrupt.set()


async def _sleep_until(wake: asyncio.Event, stopped: Any, seconds: float) -> None:
    """Return on `wake`, on `stopped`, or after `seconds`, whichever comes first."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
