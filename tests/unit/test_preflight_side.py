"""The operator's own preflight runs (controller/preflight_side.py): when they start, which
verdict is reported meanwhile, and that a failed verdict does not stand for ever."""

from __future__ import annotations

import asyncio

from ironic_shard_operator.core.preflight import Inputs
from ironic_shard_operator.controller.preflight_side import RECHECK_FAILED_SECONDS, PreflightSide
from ironic_shard_operator.core.preflight import Check, Verdict

INPUTS = Inputs(clouds_yaml="clouds: {}", cloud_name="metal", nova_conf="[DEFAULT]\n")
DOWN = [Check("ironic-reachable", Verdict.FAIL, "Ironic at http://ironic is not answering: timed out", "start it")]
UP = [Check("ironic-reachable", Verdict.PASS, "Ironic answers")]


class Answers:
    """Checks that answer from a script, one list per run, counting the runs."""

    def __init__(self, *answers: list[Check]) -> None:
        self.answers, self.runs = list(answers), 0

    def __call__(self, inputs: Inputs) -> list[Check]:
        self.runs += 1
        return self.answers.pop(0)


async def verdict_at(side: PreflightSide, now: float, inputs: Inputs = INPUTS):
    """`follow` at `now`, then again once any run it started has ended (what the next cycle,
    woken by the run, reports)."""
    wake = asyncio.Event()
    side.follow(inputs, wake, now)
    if side.task is not None:
        await asyncio.wait_for(wake.wait(), timeout=10)
    return side.follow(inputs, wake, now)


async def test_a_failed_verdict_is_checked_again_after_a_while_and_recovers():
    checks = Answers(DOWN, UP)
    side = PreflightSide(_checks=checks)
    first = await verdict_at(side, 1000.0)
    assert first[:2] == (False, "ChecksFailed") and checks.runs == 1
    # Until the re-check is due, cycles report the failure and start nothing.
    assert await verdict_at(side, 1000.0 + RECHECK_FAILED_SECONDS - 1) == first and checks.runs == 1
    # Due: a new run; the failure stays reported while it runs, then the new verdict.
    wake = asyncio.Event()
    assert side.follow(INPUTS, wake, 1000.0 + RECHECK_FAILED_SECONDS) == first
    await asyncio.wait_for(wake.wait(), timeout=10)
    assert side.follow(INPUTS, wake, 1000.0 + RECHECK_FAILED_SECONDS)[:2] == (True, "Passed")
    assert checks.runs == 2


async def test_a_passing_verdict_is_not_checked_again_for_the_same_inputs():
    checks = Answers(UP, UP)
    side = PreflightSide(_checks=checks)
    assert (await verdict_at(side, 0.0))[0] is True
    assert (await verdict_at(side, 10 * RECHECK_FAILED_SECONDS))[0] is True
    assert checks.runs == 1
    changed = Inputs(clouds_yaml="clouds: {metal: {}}", cloud_name="metal", nova_conf="[DEFAULT]\n")
    assert (await verdict_at(side, 10 * RECHECK_FAILED_SECONDS, changed))[0] is True and checks.runs == 2


async def test_a_failure_that_persists_is_checked_once_per_interval():
    checks = Answers(DOWN, DOWN, DOWN)
    side = PreflightSide(_checks=checks)
    for now in (0.0, 1.0, 2.0, RECHECK_FAILED_SECONDS, RECHECK_FAILED_SECONDS + 5, 2 * RECHECK_FAILED_SECONDS + 1):
        assert (await verdict_at(side, now))[0] is False
    assert checks.runs == 3
