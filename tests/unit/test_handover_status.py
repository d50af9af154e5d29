"""How handovers show in the pool's status (core/status.py): ScaleDownBlocked says how to turn
handover on when it is off, says HandingOver while it goes, and names what stops it."""

from __future__ import annotations

from ironic_shard_operator.core import handover
from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.status import CycleFacts, build_status, handover_section

MEMBERS = (Member("p-0", True, 0.0), Member("p-1", True, 0.0))
NODES = (Node("a", shard="p-1", instance_uuid="i-a"), Node("b", shard="p-0"))
PLAN = plan(Observation(PoolSpec("p", replicas=1), MEMBERS, NODES, 100.0))


def _conditions(**facts):
    status, _ = build_status(CycleFacts(generation=1, members=MEMBERS, plan=PLAN, now=100.0,
                                        pods_ready=2, pods_existing=2, **facts), None)
    return status, {c["type"]: c for c in status["conditions"]}


def test_without_handover_scale_down_blocked_says_how_to_turn_it_on():
    _, conditions = _conditions()
    blocked = conditions["ScaleDownBlocked"]
    assert blocked["status"] == "True" and blocked["reason"] == "PinnedNodes"
    assert "set spec.handover" in blocked["message"] and "novaManageConfig" in blocked["message"]


def test_a_handover_under_way_is_progress_and_a_stuck_one_names_its_reason():
    going = handover.HandoverStep(progress=(handover.SourceProgress(
        "p-1", handover.SCALE_DOWN, handover.MOVING, nodes=1, in_flight=1, job="p-1-handover-x"),))
    status, conditions = _conditions(handover=handover_section(going), handover_enabled=True)
    assert status["handover"]["sources"][0]["job"] == "p-1-handover-x"
    assert (conditions["ScaleDownBlocked"]["status"], conditions["ScaleDownBlocked"]["reason"]) == \
        ("False", "HandingOver")
    assert conditions["Progressing"]["reason"] == "HandingOver" and "p-1-handover-x" in conditions["Progressing"]["message"]

    stuck = handover.HandoverStep(problems=(handover.Problem(
        handover.SCALE_DOWN, "HandoverFailed", "Job p-1-handover-x failed: Destination compute is forced down!"),))
    _, conditions = _conditions(handover=handover_section(stuck), handover_enabled=True)
    assert conditions["ScaleDownBlocked"]["reason"] == "HandoverFailed"
    assert "Destination compute is forced down!" in conditions["ScaleDownBlocked"]["message"]

    failed_member = handover.HandoverStep(problems=(handover.Problem(
        handover.FAILURE, "HandoverConfigInvalid", "Secret nm has no key nova.conf"),))
    _, conditions = _conditions(handover=handover_section(failed_member), handover_enabled=True)
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == ("True", "HandoverConfigInvalid")


def test_a_failed_job_shows_its_attempt_and_when_it_is_tried_again():
    waiting = handover.HandoverStep(progress=(handover.SourceProgress(
        "p-1", handover.SCALE_DOWN, handover.MOVING, nodes=1, failed=1, job="p-1-handover-x", attempts=2,
        next_retry_at=1_700_000_120.0),))
    status, _ = _conditions(handover=handover_section(waiting), handover_enabled=True)
    source = status["handover"]["sources"][0]
    assert (source["attempts"], source["nextRetryAt"]) == (2, "2023-11-14T22:15:20Z")
