"""What a pool's cycle tells besides its CR, after each status write: the pool's gauges
(metrics.record_status) and one INFO line per condition change in the operator's log
(core/pool_signals.py decides both). So a pool that cannot start is seen on /metrics and in
the log from its first cycle, not only in `kubectl describe`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ironic_shard_operator.core.pool_signals import condition_changes, signals

log = logging.getLogger(__name__)


def status_written(metrics: Any, key: str, body: Mapping[str, Any], status: Mapping[str, Any],
                   last_written: Mapping[str, Any] | None) -> None:
    """Pool `key` (its CR `body`) has status `status` now; `last_written` is the status this
    process wrote before (None at its first cycle of the pool: every condition is news)."""
    for line in condition_changes(key, None if last_written is None else last_written.get("conditions") or [],
                                  status.get("conditions") or []):
        log.info("%s", line)
    if metrics is not None:
        metrics.record_status(key, signals(body, status))
