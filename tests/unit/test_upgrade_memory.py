"""An operator upgraded in the middle of a handover carries on: fed the statuses the main of
2026-11-27 (83a825b) wrote — mid-retire with a Job running, mid-failure with a failed Job
waiting for its retry, an operator's forced_down kept beside an administrator's, an autoscale
window open — the current code reads them back once (core/pool_memory.py) and decides what that
version decided from them: who is held and gets no pod, the next handover step, when the next
cycle runs, which forced_down flags are cleared, the guard's clocks, which refusals are news,
how many members autoscale wants (the one change on purpose: the next cycle comes sooner while a
member is within its grace). The statuses and that version's decisions were recorded by
tests/unit/upgrade/record.py over the pools of tests/unit/upgrade/worlds.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ironic_shard_operator.core import fencing, handover, pods
from ironic_shard_operator.core.guard_holds import guard_section, held_by_guard
from ironic_shard_operator.core.model import Observation
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.pool_memory import PoolMemory, memory_of
from ironic_shard_operator.core.refusals import news
from ironic_shard_operator.core.schedule import IN_GRACE_RECHECK_SECONDS, handover_retry_in, next_delay
from tests.unit.nova_records import nova_view
from tests.unit.upgrade import worlds
from tests.unit.upgrade.worlds import GRACE, HANDOVER, HELD, LEAKED_AFTER, NOW, POLL, REFUSALS, World, job_from, plain

RECORDED = json.loads((Path(__file__).parent / "upgrade" / "statuses_83a825b.json").read_text())
SITUATIONS = RECORDED["situations"]


def step(world: World, jobs, memory: PoolMemory):
    """One handover step as the current controller runs it."""
    the_plan = plan(Observation(world.spec, world.members, world.nodes, world.now, autoscale_history=memory.autoscale))
    found = handover.sources(settings=HANDOVER, members=world.members, retiring=the_plan.retiring,
                             owned=the_plan.owned, pods=world.pods, now=world.now)
    return handover.decide(settings=HANDOVER, members=world.members, found=found,
                           ring_members=the_plan.ring_members, pods=world.pods, nodes=world.nodes,
                           owned=the_plan.owned, nova=nova_view(world.services, world.compute_host, nodes=world.nodes),
                           jobs=jobs, now=world.now, recorded=memory.handover)


def decisions(world: World, status: dict, jobs) -> dict:
    """What the current code decides at `world.now` from the last status `status`."""
    memory = memory_of(status)
    the_plan = plan(Observation(world.spec, world.members, world.nodes, world.now, autoscale_history=memory.autoscale))
    held = handover.holds(recorded=memory.handover, jobs=jobs, job_pods=())
    away = handover.kept_away(the_plan, HANDOVER, world.members, world.pods, world.now, held=held,
                              recorded=memory.handover)
    side = handover.pod_side(identities=[x.name for x in world.members], plan=the_plan, away=away,
                             fenced_members=(), jobs=jobs, job_pods=(), recorded=memory.handover)
    retry_in = handover_retry_in(memory.handover, world.now)
    clear = fencing.clear_when_ready_after(memory.nova.clear_when_ready, world.members, world.services)
    readiness = {x.name: pods.member_readiness(x.name, None, memory.members.get(x.name), world.now)
                 for x in world.members}
    return plain({
        "members": memory.members,
        "readiness_without_pod": readiness,
        "desired_replicas": the_plan.desired_replicas,
        "holds": held,
        "kept_away": away,
        "pod_side": side,
        "step": step(world, jobs, memory),
        "retry_in": retry_in,
        "next_delay": next_delay(poll_seconds=POLL, members=world.members, rebalance_after_seconds=GRACE,
                                 now=world.now, failed=False, wake_after=retry_in, moves_applied=0),
        "clear_when_ready": clear,
        "forced_down_changes": fencing.forced_down_changes(world.members, world.services, GRACE, world.now, clear,
                                                           set(held)),
        "held_by_guard": held_by_guard(memory.guard, ()),
        "guard_after": guard_section(memory.guard, HELD, {"n00"}, world.now, LEAKED_AFTER),
        "news": news(REFUSALS, memory.degraded),
    })


@pytest.mark.parametrize("name, make", [("mid_retire", worlds.mid_retire), ("mid_failure", worlds.mid_failure),
                                        ("forced_down_kept", worlds.forced_down_kept)])
def test_every_decision_from_a_status_the_last_version_wrote_is_the_one_it_made(name, make):
    situation = SITUATIONS[name]
    jobs = [job_from(j) for j in situation["jobs"]]
    world = make(NOW)
    expected = dict(situation["decisions"])
    if any(fencing.grace_left(m, NOW, GRACE) is not None for m in world.members):
        # Changed on purpose since that version: a member within its grace is looked at every
        # IN_GRACE_RECHECK_SECONDS (a certain failure no pod event announces is seen at once).
        expected["next_delay"] = min(expected["next_delay"], IN_GRACE_RECHECK_SECONDS)
    assert decisions(world, situation["status"], jobs) == expected


def test_an_autoscale_window_the_last_version_opened_holds_until_it_ends():
    situation = SITUATIONS["autoscale_window_open"]
    recorded, status = situation["decisions"], situation["status"]
    assert plain(memory_of(status).autoscale) == recorded["history"]
    window = worlds.AUTOSCALE.scale_down_stabilization_seconds
    inside = decisions(worlds.autoscaled(12, NOW), status, [])
    after = decisions(worlds.autoscaled(12, NOW - 60 + window + 1), status, [])
    assert (inside, after) == (recorded["inside_window"], recorded["after_window"])
    assert (inside["desired_replicas"], after["desired_replicas"]) == (10, 3)


def test_the_recorded_situations_are_the_ones_named():
    """What the statuses hold, so that a re-recording that loses a situation fails here."""
    retire, failure = SITUATIONS["mid_retire"], SITUATIONS["mid_failure"]
    (retiring,) = retire["status"]["handover"]["sources"]
    assert (retiring["member"], retiring["phase"], retiring["held"]) == ("rack-2", handover.MOVING, True)
    assert [j["state"] for j in retire["jobs"]] == [handover.ACTIVE]
    (failed,) = failure["status"]["handover"]["sources"]
    assert (failed["trigger"], failed["attempts"], "nextRetryAt" in failed) == (handover.FAILURE, 1, True)
    assert failure["decisions"]["retry_in"] > 0
    nova = SITUATIONS["forced_down_kept"]["status"]["nova"]
    assert (nova["forcedDown"], nova["clearWhenReady"]) == (["rack-0", "rack-1"], ["rack-1"])
    assert SITUATIONS["autoscale_window_open"]["status"]["autoscale"]["peaks"]
