"""PodGarbageCollector: the part of kube-controller-manager's pod garbage collector that fencing
meets. It force-deletes terminating pods of not-Ready out-of-service nodes, and the pods of nodes
that no longer exist (after a quarantine); each is set Failed first unless it has ended. Its
periods are compressed: code under test may rely only on "some seconds later". Details:
README.md, "Pod garbage collector"."""
from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any

from testbed.kube_emulator.conditions import node_ready

CHECK_PERIOD = 1.0  # real: 20 s
QUARANTINE = 2.0  # real: 40 s
OUT_OF_SERVICE_TAINT = 'node.kubernetes.io/out-of-service'
ORPHANED_CONDITION = {'type': 'DisruptionTarget', 'status': 'True', 'reason': 'DeletionByPodGC',
                      'message': 'PodGC: node no longer exists'}

log = logging.getLogger(__name__)


def out_of_service(node: dict[str, Any]) -> bool:
    return any(t.get('key') == OUT_OF_SERVICE_TAINT for t in (node.get('spec') or {}).get('taints') or ())


class PodGarbageCollector:
    """The collector's loop over the fake's store, given as functions: `pods()` and `nodes()` list
    the stored objects, `fail_and_delete(pod, condition)` sets the pod Failed (with `condition`,
    if any) unless it has ended and force-deletes it (the fake's own write paths)."""

    def __init__(self, pods: Callable[[], list[dict[str, Any]]], nodes: Callable[[], list[dict[str, Any]]],
                 fail_and_delete: Callable[[dict[str, Any], dict[str, Any] | None], None], *,
                 check_period: float = CHECK_PERIOD, quarantine: float = QUARANTINE,
                 clock: Callable[[], float] = lambda: asyncio.get_running_loop().time()) -> None:
        self._pods, self._nodes, self._fail_and_delete = pods, nodes, fail_and_delete
        self.check_period, self.quarantine = check_period, quarantine
        self._clock = clock
        self._missing_since: dict[str, float] = {}  # node name -> when first seen missing

    async def run(self) -> None:
        """Collect every `check_period` seconds until cancelled; a failed pass is logged, not fatal."""
        while True:
            await asyncio.sleep(self.check_period)
            try:
                self.collect()
            except Exception:  # a bug of the fake: say so, and keep collecting
                log.exception('the fake pod garbage collector failed a pass')

    def collect(self) -> None:
        """One pass (PodGCController.gc): terminating pods on out-of-service nodes, then orphans."""
        pods = self._pods()
        nodes = {node['metadata']['name']: node for node in self._nodes()}
        for pod in pods:
            node = nodes.get(pod['spec'].get('nodeName') or '')
            if pod['metadata'].get('deletionTimestamp') and node is not None \
                    and not node_ready(node) and out_of_service(node):
                self._fail_and_delete(pod, None)
        self._collect_orphans(self._pods(), set(nodes))

    def _collect_orphans(self, pods: list[dict[str, Any]], existing: set[str]) -> None:
        now = self._clock()
        wanted = {pod['spec'].get('nodeName') for pod in pods} - {None, ''} - existing
        for name in list(self._missing_since):
            if name not in wanted:
                del self._missing_since[name]
        for name in wanted:
            self._missing_since.setdefault(name, now)
        current = {node['metadata']['name'] for node in self._nodes()}  # the look-up after quarantine
        deleted = {name for name, since in self._missing_since.items()
                   if now - since >= self.quarantine and name not in current}
        for pod in pods:
            if pod['spec'].get('nodeName') in deleted:
                self._fail_and_delete(pod, dict(ORPHANED_CONDITION, lastProbeTime=None,
                                                lastTransitionTime=_now()))
        for name in deleted:
            del self._missing_since[name]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')
