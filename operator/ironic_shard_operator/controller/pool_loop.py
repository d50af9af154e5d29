"""A pool's loop: when its cycle (reconcile.py) runs.

`run_pool()` is the loop started once per IronicComputeShard (handlers.py wires it): it runs
`reconcile()` whenever something about the pool changed (`Operator.wake()`, runtime.py), and
otherwise every `spec.ironic.pollIntervalSeconds`, or sooner when a time-based decision falls
due (core/schedule.py: a grace ending, a pending timeout, ForceAfter). One loop per pool means
one cycle per pool at a time; every trigger runs the same level-triggered cycle.

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
from typing import Any, Callable, Iterable, Mapping

from ironic_shard_operator.adapters.ironic import IronicError
from ironic_shard_operator.adapters.kube import KubeError
from ironic_shard_operator.controller.reconcile import reconcile
from ironic_shard_operator.controller.runtime import Operator, PoolRuntime
from ironic_shard_operator.core import liveness
from ironic_shard_operator.core.claims import PoolClaim
from ironic_shard_operator.core.schedule import after_failed_cycle
from ironic_shard_operator.core.spec import IronicSettings

log = logging.getLogger(__name__)

# Seconds to let a burst of triggers (a pod's create, schedule, start, ready) gather
# into one cycle.
DEBOUNCE_SECONDS = 0.5


async def run_pool(op: Operator, body: Mapping[str, Any], stopped: Any,
                   claims: Callable[[], Iterable[PoolClaim]]) -> None:
    """Cycle pool `body` (a live view of the CR) until `stopped` (kopf's daemon flag).

    `claims` lists every pool's claim (for Conflict), read fresh for each cycle.
    """
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    runtime = op.runtime(key)
    runtime.wake.set()
    watcher = asyncio.ensure_future(_interrupt_when_stopped(stopped, runtime))
    try:
        await _loop(op, key, runtime, body, stopped, claims)
    finally:
        op.beats.pop(key, None)
        watcher.cancel()
        runtime.interrupt.set()
        if runtime.cloud_side is not None:  # its writes stop at the interrupt; Ironic may hang
            await asyncio.wait([runtime.cloud_side.task])
    log.info("pool %s: stopped; its pods go with the CR (owner references), "
             "Ironic node shards are left as they are", key)


async def _loop(op: Operator, key: str, runtime: PoolRuntime, body: Mapping[str, Any], stopped: Any,
                claims: Callable[[], Iterable[PoolClaim]]) -> None:
    while not stopped:
        runtime.wake.clear()
        interval = _poll_interval(body)
        op.beats[key] = liveness.Beat(op.monotonic(), op.monotonic(), interval)
        try:
            delay = await reconcile(op, body, claims())
        except (KubeError, IronicError) as error:  # noqa: PERF203 - the loop must go on
            log.warning("pool %s: cycle failed: %s", key, error)
            delay = after_failed_cycle()
        except Exception:  # a bug: say so loudly, keep the other pools going
            log.exception("pool %s: cycle failed unexpectedly", key)
            delay = after_failed_cycle()
        op.beats[key] = liveness.Beat(None, op.monotonic() + delay + DEBOUNCE_SECONDS, interval)
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
