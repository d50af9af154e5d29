"""/healthz follows the pool loops: a loop stuck in one cycle, or that stopped cycling, for
several poll intervals makes the leader unhealthy (503 with the reason), so that the kubelet's
liveness probe restarts it; a loop that cycles and sleeps keeps it healthy. And the log can be
JSON, one object per line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from ironic_shard_operator.controller import pool_loop, runner
from ironic_shard_operator.controller.runtime import Operator
from ironic_shard_operator.controller.handlers import LoopStopped
from ironic_shard_operator.core import liveness
from testbed.ports import free_port

BODY = {"metadata": {"name": "rack-a", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {"replicas": 1, "ironic": {"pollIntervalSeconds": 100}}}


def test_a_loop_is_stuck_after_five_poll_intervals_and_never_before_the_floor():
    busy = {"ns/a": liveness.Beat(busy_since=0.0, due=0.0, interval=100)}
    assert liveness.stuck(busy, 499) == []
    assert liveness.stuck(busy, 501) == ["pool ns/a: one cycle has run for 501s (more than 500s: 5 poll intervals)"]
    short = {"ns/b": liveness.Beat(busy_since=None, due=10.0, interval=5)}  # floor: 300 s
    assert liveness.stuck(short, 309) == []
    assert liveness.stuck(short, 311) == ["pool ns/b: its next cycle was due 301s ago (more than 300s: 5 poll intervals)"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_pool_loop_stuck_in_a_cycle_makes_the_operator_unhealthy(monkeypatch):
    clock, release, entered = Clock(), asyncio.Event(), asyncio.Event()

    async def hung(op, body, claims):  # a request no timeout ends
        entered.set()
        await release.wait()
        return 100.0

    monkeypatch.setattr(pool_loop, "reconcile", hung)
    operator = Operator(kube=None, monotonic=clock)
    stopped = LoopStopped()
    loop = asyncio.ensure_future(pool_loop.run_pool(operator, BODY, stopped, claims=lambda: []))
    await asyncio.wait_for(entered.wait(), timeout=5)
    clock.now += 400
    assert operator.stuck_loops() == []  # 4 intervals: still alive
    clock.now += 200
    [problem] = operator.stuck_loops()
    assert problem.startswith("pool ns/rack-a: one cycle has run for 600s")
    release.set()  # the cycle ends: the loop sleeps until its next one is due
    await asyncio.sleep(0.05)
    assert operator.stuck_loops() == []
    stopped.set()
    await asyncio.wait_for(loop, timeout=5)
    assert operator.beats == {}  # a stopped loop is not judged


async def test_healthz_answers_503_with_the_reason_while_a_loop_is_stuck():
    port, problems = free_port(), []
    health = runner.Health(role="leader", problems=lambda: list(problems))
    app = await runner._serve_health(port, health)

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    try:
        assert await asyncio.to_thread(get) == (200, "ok leader\n")
        problems.append("pool ns/rack-a: one cycle has run for 600s (more than 500s: 5 poll intervals)")
        assert await asyncio.to_thread(get) == (
            503, "unhealthy leader: pool ns/rack-a: one cycle has run for 600s (more than 500s: 5 poll intervals)\n")
    finally:
        await app.cleanup()


def test_log_format_json_writes_one_json_object_per_line():
    code = ("import logging, os; from ironic_shard_operator.controller import runner;"
            "s = runner.Settings.from_env(os.environ);"
            "import kopf; kopf.configure(log_prefix=True, log_format=runner.LOG_FORMATS[s.log_format]);"
            "logging.getLogger('ironic_shard_operator.x').info('pool ns/a: Ready is False IronicUnavailable')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"LOG_FORMAT": "json", "PATH": ""}, check=True)
    [line] = [json.loads(x) for x in (done.stdout + done.stderr).splitlines() if x.strip()]
    assert line["message"] == "pool ns/a: Ready is False IronicUnavailable" and line["severity"] == "info"


def test_an_unknown_log_format_is_refused_with_the_choices():
    with pytest.raises(SystemExit, match="text, json"):
        runner.Settings.from_env({"LOG_FORMAT": "xml"})
