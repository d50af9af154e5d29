"""Record what an operator version writes into status and what it decides from that status
again, for tests/unit/test_upgrade_memory.py: an operator upgraded in the middle of a handover
must carry on from the statuses the old one wrote, deciding what the old one would have.

Run against the version to record (its package first on the path), e.g. for the main of
2026-11-27 (83a825b), from a worktree of it:

    git worktree add /tmp/main83 83a825b
    PYTHONPATH=/tmp/main83/operator .venv/bin/python -m tests.unit.upgrade.record \\
        tests/unit/upgrade/statuses_83a825b.json

The pools are tests/unit/upgrade/worlds.py. This script calls that version's API (which the
current code has since changed: `sources_listed`, `decide` without `owned`, the raw status
read by `since_of`, `guard_section`, `news`); the test asks the current API the same questions.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from ironic_shard_operator.core import fencing, handover, nova_policy, pods
from ironic_shard_operator.core.guard_holds import guard_section, held_by_guard
from ironic_shard_operator.core.model import Observation
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.refusals import news
from ironic_shard_operator.core.schedule import handover_retry_in, next_delay
from ironic_shard_operator.core.status import CycleFacts, autoscale_history_of, build_status, handover_section, since_of
from tests.unit.nova_records import nova_view
from tests.unit.upgrade import worlds
from tests.unit.upgrade.worlds import (
    GRACE, HANDOVER, HELD, LEAKED_AFTER, NOW, POLL, REFUSALS, World, job_record, m, plain,
)

def planned(world: World, history=None):
    kw = {"autoscale_history": history} if history is not None else {}
    return plan(Observation(world.spec, world.members, world.nodes, world.now, **kw))


def step(world: World, jobs, recorded):
    """One handover step as that version's controller runs it."""
    the_plan = planned(world)
    found = handover.sources_listed(world.nodes, settings=HANDOVER, members=world.members,
                                    retiring=the_plan.retiring, pods=world.pods, now=world.now)
    return handover.decide(settings=HANDOVER, members=world.members, found=found,
                           ring_members=the_plan.ring_members, pods=world.pods, nodes=world.nodes,
                           nova=nova_view(world.services, world.compute_host, nodes=world.nodes), jobs=jobs,
                           now=world.now, recorded=recorded)


def handover_situation(make, fail_job: bool, forced_down: list[str], clear_when_ready: list[str]) -> dict:
    """Handover steps every 30 s, each acted on (its Jobs created, deleted), until a Job runs;
    with `fail_job` that Job then fails and one more step sees it. The status written after
    the last step, then the decisions the next cycle makes from that status."""
    jobs: list = []
    recorded = None
    at = NOW - 100
    while not jobs:
        taken = step(make(at), jobs, recorded)
        jobs = _acted(jobs, taken, at)
        recorded = handover_section(taken)
        at += 30
    if fail_job:
        jobs = [dataclasses.replace(j, state=handover.FAILED, finished=at - 10,
                                    log_tail="ERROR: Can't connect to MySQL server") for j in jobs]
    before = make(at)
    taken = step(before, jobs, recorded)
    jobs = _acted(jobs, taken, at)
    guard, _ = guard_section(None, HELD, {"n00"}, NOW - 700, LEAKED_AFTER)
    status, _ = build_status(CycleFacts(
        generation=3, members=before.members, plan=planned(before), now=before.now, handover=handover_section(taken),
        handover_enabled=True, guard=guard, error=REFUSALS[0].message, error_reason=REFUSALS[0].reason,
        nova=nova_policy.status_section(nova_policy.ENABLED, "Nova lists every node under the compute of its owner",
                                        forced_down=forced_down, clear_when_ready=clear_when_ready)), None)
    status = json.loads(json.dumps(status))  # as the API server stores it
    return {"status": status, "jobs": [job_record(j) for j in jobs], "decisions": decisions(make(NOW), status, jobs)}


def _acted(jobs: list, taken, at: float) -> list:
    """The pool's Jobs once a step is carried out: its deletions gone, its new Jobs running."""
    kept = [j for j in jobs if j.name not in taken.delete_jobs]
    return kept + [handover.JobView(b.name, b.source, tuple((mv.node_uuid, mv.target) for mv in b.moves),
                                    handover.ACTIVE, attempt=b.attempt, created=at) for b in taken.create_jobs]


def decisions(world: World, status: dict, jobs) -> dict:
    """What that version decides at `world.now` from the last status `status`."""
    recorded = status.get("handover")
    the_plan = planned(world, autoscale_history_of(status))
    held = handover.holds(recorded=recorded, jobs=jobs, job_pods=())
    away = handover.kept_away(the_plan, HANDOVER, world.members, world.pods, world.now, held=held, recorded=recorded)
    side = handover.pod_side(identities=[x.name for x in world.members], plan=the_plan, away=away,
                             fenced_members=(), jobs=jobs, job_pods=(), recorded=recorded)
    retry_in = handover_retry_in(recorded, world.now)
    clear = fencing.clear_when_ready_after(nova_policy.recorded_clear_when_ready(status.get("nova")),
                                           world.members, world.services)
    readiness = {x.name: pods.member_readiness(x.name, None, since_of(status).get(x.name), world.now)
                 for x in world.members}
    return plain({
        "members": since_of(status),
        "readiness_without_pod": readiness,
        "desired_replicas": the_plan.desired_replicas,
        "holds": held,
        "kept_away": away,
        "pod_side": side,
        "step": step(world, jobs, recorded),
        "retry_in": retry_in,
        "next_delay": next_delay(poll_seconds=POLL, members=world.members, rebalance_after_seconds=GRACE,
                                 now=world.now, failed=False, wake_after=retry_in, moves_applied=0),
        "clear_when_ready": clear,
        "forced_down_changes": fencing.forced_down_changes(world.members, world.services, GRACE, world.now, clear,
                                                           set(held)),
        "held_by_guard": held_by_guard(status.get("guard"), ()),
        "guard_after": guard_section(status.get("guard"), HELD, {"n00"}, world.now, LEAKED_AFTER),
        "news": news(REFUSALS, status),
    })


def forced_down_situation() -> dict:
    before = worlds.forced_down_kept(NOW - 10)
    status, _ = build_status(CycleFacts(
        generation=2, members=before.members, plan=planned(before), now=before.now,
        nova=nova_policy.status_section(nova_policy.ENABLED, "Nova lists every node under the compute of its owner",
                                        forced_down=[m(0), m(1)], clear_when_ready=[m(1)])), None)
    status = json.loads(json.dumps(status))
    return {"status": status, "jobs": [], "decisions": decisions(worlds.forced_down_kept(NOW), status, [])}


def autoscale_situation() -> dict:
    """40 nodes want 10 members; 60 s later 12 nodes want 3: the window holds 10. Decided again
    inside the window, and after it."""
    first = planned(worlds.autoscaled(40, NOW - 120))
    fewer = worlds.autoscaled(12, NOW - 60)
    second = planned(fewer, first.autoscale.history)
    status, _ = build_status(CycleFacts(generation=4, members=fewer.members, plan=second, now=fewer.now), None)
    status = json.loads(json.dumps(status))
    window = worlds.AUTOSCALE.scale_down_stabilization_seconds
    return {"status": status, "jobs": [], "decisions": {
        "inside_window": decisions(worlds.autoscaled(12, NOW), status, []),
        "after_window": decisions(worlds.autoscaled(12, NOW - 60 + window + 1), status, []),
        "history": plain(autoscale_history_of(status))}}


def main(out: str) -> int:
    version = subprocess.run(["git", "-C", str(Path(handover.__file__).parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    recorded = {"version": version, "situations": {
        "mid_retire": handover_situation(worlds.mid_retire, False, [m(2)], [m(2)]),
        "mid_failure": handover_situation(worlds.mid_failure, True, [m(1)], [m(1)]),
        "forced_down_kept": forced_down_situation(),
        "autoscale_window_open": autoscale_situation(),
    }}
    Path(out).write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(recorded['situations'])} situations of {version} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
