"""Holding the operator's Lease: acquire, renew every RETRY seconds, release.

The rule of who may hold it is core/lease.py; this module only reads and writes the Lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ironic_shard_operator.adapters.kube import Kube, KubeError
from ironic_shard_operator.core.lease import LEASE_NAME, RENEW_DEADLINE, RETRY, Observed, claim

log = logging.getLogger(__name__)


class LeaderElector:
    """Acquires, renews and releases the operator's Lease."""

    def __init__(self, kube: Kube, namespace: str, identity: str) -> None:
        self.kube, self.namespace, self.identity = kube, namespace, identity
        self.observed = Observed()
        self.lease: dict[str, Any] | None = None

    async def try_once(self) -> bool:
        """One attempt to acquire or renew; True while this replica holds the Lease."""
        loop = asyncio.get_running_loop()
        current = await self.kube.get_lease(self.namespace, LEASE_NAME)
        wanted = claim(current, self.identity, self.observed, loop.time(), time.time())
        if wanted is None:
            return False
        wanted["metadata"]["namespace"] = self.namespace
        if current is None:
            written = await self.kube.create_lease(self.namespace, wanted)
        else:
            written = await self.kube.replace_lease(self.namespace, wanted)
        if written is not None:
            self.lease = written
        return written is not None

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
                         (self.observed.record or ("?",))[0])
                announced = True
            await asyncio.sleep(RETRY)

    async def keep(self) -> None:
        """Renew every RETRY seconds; return when the Lease could not be renewed in time."""
        loop = asyncio.get_running_loop()
        last_renewed = loop.time()
        while True:
            await asyncio.sleep(RETRY)
            try:
                # A hanging request must not stretch the deadline past the Lease.
                if await asyncio.wait_for(self.try_once(), timeout=RETRY):
                    last_renewed = loop.time()
                    continue
                log.error("leader: the Lease was taken by %s", (self.observed.record or ("?",))[0])
                return
            except (KubeError, asyncio.TimeoutError) as error:
                log.warning("leader: renewal failed: %s", error or "timed out")
            if loop.time() - last_renewed > RENEW_DEADLINE:
                log.error("leader: could not renew the Lease for %.0fs", RENEW_DEADLINE)
                return

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at once (best effort)."""
        if self.lease is None:
            return
        released = dict(self.lease, spec=dict(self.lease["spec"], holderIdentity="",
                                              leaseDurationSeconds=1))
        try:
            await self.kube.replace_lease(self.namespace, released)
        except KubeError as error:
            log.warning("leader: could not release the Lease: %s", error)
