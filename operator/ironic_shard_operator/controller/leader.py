"""Holding the operator's Lease: acquire, renew every RETRY seconds, release; and the
holder's write check, `may_write()`, that every batch of writes asks first.

The rules (who may hold it, how long the holder may write) are core/lease.py; this
module only reads and writes the Lease and keeps the time of the last renewal.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable

from ironic_shard_operator.adapters.kube import Kube, KubeError
from ironic_shard_operator.core import lease as rule
from ironic_shard_operator.core.lease import LEASE_NAME, RETRY, Observed, claim

log = logging.getLogger(__name__)


def lease_clock() -> float:
    """The holder's clock for its write check: monotonic, and on Linux counting the time
    the machine was suspended too (CLOCK_BOOTTIME), which a standby elsewhere lives through."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


class WriteStop:
    """The `stop` flag of the Ironic writers (adapters/ironic/writes.py asks `is_set()` before each
    write): set once `interrupt` is set (news, stopping) or `may_write()` turned False."""

    def __init__(self, interrupt: threading.Event, may_write: Callable[[], bool]) -> None:
        self.interrupt, self.may_write = interrupt, may_write

    def is_set(self) -> bool:
        return self.interrupt.is_set() or not self.may_write()


class LeaderElector:
    """Acquires, renews and releases the operator's Lease; `may_write()` for the writers."""

    def __init__(self, kube: Kube, namespace: str, identity: str, metrics: Any = None) -> None:
        self.kube, self.namespace, self.identity = kube, namespace, identity
        self.metrics = metrics  # told the Lease's leaseTransitions at every read
        self.observed = Observed()
        self.lease: dict[str, Any] | None = None
        # lease_clock() when the last successful acquire/renewal began; None: not held.
        self.renewed_at: float | None = None

    def may_write(self) -> bool:
        """True while this replica holds the Lease within its renew deadline (core/lease.py).

        Safe to call from any thread (the Ironic and Nova writers run in worker threads)."""
        return rule.may_write(self.renewed_at, lease_clock())

    async def try_once(self) -> bool:
        """One attempt to acquire or renew; True while this replica holds the Lease."""
        loop = asyncio.get_running_loop()
        began = lease_clock()  # a standby sees this renewal only after it began
        current = await self.kube.get_lease(self.namespace, LEASE_NAME)
        if self.metrics is not None and current is not None:
            self.metrics.set_lease_transitions(int((current.get("spec") or {}).get("leaseTransitions") or 0))
        wanted = claim(current, self.identity, self.observed, loop.time(), time.time())
        if wanted is None:
            return False
        wanted["metadata"]["namespace"] = self.namespace
        if current is None:
            written = await self.kube.create_lease(self.namespace, wanted)
        else:
            written = await self.kube.replace_lease(self.namespace, wanted)
        if written is None:
            return False
        self.lease, self.renewed_at = written, began
        return True

    def holder(self) -> str:
        """The holder identity last read from the Lease ("?" before any read)."""
        return str((self.observed.record or ("?",))[0])

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        announced = False
        while True:
            try:
                if await self.try_once():
                    log.info("leader: %s holds Lease %s/%s", self.identity, self.namespace, LEASE_NAME)
                    return
            except KubeError as error:
                log.warning("leader election: %s", error)
            if not announced:
                log.info("standby: Lease %s/%s is held by %s; waiting", self.namespace, LEASE_NAME,
                         self.holder())
                announced = True
            await asyncio.sleep(RETRY)

    async def keep(self) -> None:
        """Renew every RETRY seconds; return once the Lease is another replica's, or when
        `may_write()` turned False (no renewal within the renew deadline)."""
        while True:
            await asyncio.sleep(RETRY)
            if not self.may_write():
                break
            try:
                # A hanging request must not stretch the deadline past the Lease.
                if await asyncio.wait_for(self.try_once(), timeout=RETRY):
                    continue
                if self.holder() != self.identity:
                    log.error("leader: the Lease was taken by %s", self.holder())
                    return
                log.warning("leader: renewal failed: the Lease changed since it was read")
            except (KubeError, asyncio.TimeoutError) as error:
                log.warning("leader: renewal failed: %s", error or "timed out")
            if not self.may_write():
                break
        log.error("leader: could not renew the Lease within %.0fs", rule.RENEW_DEADLINE)

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at once (best effort)."""
        if self.lease is None:
            return
        self.renewed_at = None  # no write after this
        released = dict(self.lease, spec=dict(self.lease["spec"], holderIdentity="",
                                              leaseDurationSeconds=1))
        try:
            await self.kube.replace_lease(self.namespace, released)
        except KubeError as error:
            log.warning("leader: could not release the Lease: %s", error)
