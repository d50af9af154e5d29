"""What the operator keeps in memory: its shared state (`Operator`) and each pool's (`PoolRuntime`).

The pool loop (pool_loop.py) and one cycle (reconcile.py) both read and change it; it imports
neither, so the loop and the cycle do not import each other.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ironic_shard_operator.adapters.ironic import IronicError
from ironic_shard_operator.adapters.kube import Kube
from ironic_shard_operator.controller.cloud_side import CloudSide
from ironic_shard_operator.controller.ironic_cycle import AdapterCache
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.controller.preflight_side import PreflightSide
from ironic_shard_operator.core import liveness
from ironic_shard_operator.core.model import Plan


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
