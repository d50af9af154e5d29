"""A slow Ironic and Nova side says where its time went (controller/cloud_side.py StageTimes):
a failed member's free nodes move only in the writes stage, so the stages before it are the
wait a user sees. Each stage that ran is counted in
ironic_shard_cloud_side_stage_duration_seconds, and a side of SLOW_SIDE_SECONDS or more logs one
line naming every stage with its seconds."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import generate_latest

from ironic_shard_operator.adapters.ironic import IronicUnavailable
from ironic_shard_operator.controller import cloud_side
from ironic_shard_operator.controller.cloud_side import CloudSide, CloudWork, StageTimes
from ironic_shard_operator.controller.metrics import OperatorMetrics
from ironic_shard_operator.controller.nova_cycle import NovaRuntime
from ironic_shard_operator.core.pool_memory import PoolMemory
from ironic_shard_operator.core.spec import read_pool

POOL = read_pool({"metadata": {"name": "rack", "namespace": "ns", "uid": "u", "generation": 1},
                  "spec": {"replicas": 1, "image": "i", "novaConfig": {"secretRef": {"name": "n"}},
                           "cloud": {"secretRef": {"name": "c"}}}})
SLOW_IRONIC_SECONDS = 0.3


class SlowIronic:
    """An Ironic adapter that answers its first request after SLOW_IRONIC_SECONDS, with a 503."""

    requests_made = 0
    connection = object()

    def check(self) -> None:
        self.requests_made += 1
        time.sleep(SLOW_IRONIC_SECONDS)
        raise IronicUnavailable("503 Service Unavailable")


def stage_seconds(metrics: OperatorMetrics) -> dict[tuple[str, str], float]:
    """(stage, count|sum) -> value of the stage histogram for pool ns/rack."""
    found = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name.startswith("ironic_shard_cloud_side_stage_duration_seconds_") \
                    and sample.labels.get("pool") == "ns/rack" and not sample.name.endswith("_bucket"):
                found[sample.labels["stage"], sample.name.rsplit("_", 1)[1]] = sample.value
    return found


async def test_a_slow_side_logs_each_stage_and_counts_it(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cloud_side, "SLOW_SIDE_SECONDS", SLOW_IRONIC_SECONDS)
    metrics = OperatorMetrics()
    work = CloudWork(key="ns/rack", pool=POOL, adapter=SlowIronic(), members=(), identities=frozenset(),
                     nova_conf=None, pool_memory=PoolMemory(), now=time.time(), nova=NovaRuntime(),
                     metrics=metrics, may_write=lambda: True)
    with caplog.at_level(logging.INFO, logger=cloud_side.__name__):
        side = CloudSide(work, threading.Event())
        result = await side.result_by(side.started + 120.0)

    assert result is not None and isinstance(result.error, IronicUnavailable)
    lines = [r.getMessage() for r in caplog.records if "the Ironic and Nova side took" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "ironic " in lines[0] and "nova " in lines[0] and "writes" not in lines[0]  # no plan: no writes
    found = stage_seconds(metrics)
    assert found["ironic", "count"] == 1 and found["ironic", "sum"] >= SLOW_IRONIC_SECONDS
    assert found["nova", "count"] == 1
    assert found.get(("writes", "count"), 0) == 0


def test_a_quick_side_logs_nothing_and_stages_are_laps(caplog: pytest.LogCaptureFixture) -> None:
    clock = iter([0.0, 1.0, 1.5, 4.0]).__next__
    times = StageTimes(clock)
    for stage in ("ironic", "nova", "writes"):
        times.lap(stage)
    assert times.seconds == [("ironic", 1.0), ("nova", 0.5), ("writes", 2.5)]
    with caplog.at_level(logging.INFO, logger=cloud_side.__name__):
        times.report("ns/rack", None)
    assert "took" not in caplog.text  # 4 s < SLOW_SIDE_SECONDS
