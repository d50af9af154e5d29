"""The handover respects all of Nova (issue 37): a server deleted while its source was down is never
moved, a list's silence is never an answer, a retiring pod waits for Nova to list its former free
nodes elsewhere and for its servers' tasks, servers handed over with a task are named with the fix,
a finished retire says so. Pure: core/handover.py's step over NovaViews that lie or tell the truth."""

from __future__ import annotations

from dataclasses import replace

from ironic_shard_operator.core import handover
from ironic_shard_operator.core.handover import NodeRead
from ironic_shard_operator.core.model import Member, Node, pinned_by_owner
from ironic_shard_operator.core.pool_memory import memory_of
from ironic_shard_operator.core.spec import Handover, SecretKeyRef
from ironic_shard_operator.core.status import handover_section
from tests.unit.nova_records import nova_view, service

POOL = "rack"
SETTINGS = Handover(SecretKeyRef("nova-manage", "nova.conf"), max_concurrent=4)
NOW = 10_000.0


def m(i: int) -> str:
    return f"{POOL}-{i}"


MEMBERS = tuple(Member(m(i), ready=True, since=0.0) for i in range(3))
UP = {m(i): service(m(i)) for i in range(3)}
FORCED = {**UP, m(2): service(m(2), forced_down=True)}
HELD = {"sources": [{"member": m(2), "trigger": "ScaleDown", "phase": handover.MOVING, "held": True}]}


def with_instance(uuid: str, shard: str) -> Node:
    return Node(uuid, shard=shard, instance_uuid=f"i-{uuid}", provision_state="active")


def step(nodes, nova, *, pods=(), jobs=(), recorded=HELD, retiring=(m(2),), now=NOW) -> handover.HandoverStep:
    owned = pinned_by_owner(nodes)
    found = handover.sources(settings=SETTINGS, members=MEMBERS, retiring=retiring, owned=owned, pods=pods, now=now)
    return handover.decide(settings=SETTINGS, members=MEMBERS, found=found, ring_members=[m(0), m(1)], pods=pods,
                           nodes=nodes, owned=owned, nova=nova, jobs=jobs, now=now,
                           recorded=memory_of({"handover": recorded}).handover)


def batched(result: handover.HandoverStep) -> set[str]:
    return {mv.node_uuid for b in result.create_jobs for mv in b.moves}


# --- a delete during the forced-down window is a local delete --------------------------------


def test_a_server_nova_deleted_while_its_source_was_down_is_never_moved_and_is_reported_with_the_fix():
    nodes = [with_instance("gone", m(2)), with_instance("kept", m(2))]
    hosts = {"gone": m(2), "kept": m(2)}
    nova = nova_view(FORCED, hosts, read={"gone": NodeRead(m(2), instance_found=False)})
    result = step(nodes, nova)
    assert batched(result) == {"kept"}  # the other node goes on: nothing else is held back
    (problem,) = result.problems
    assert problem.reason == handover.DELETED_IN_NOVA == "HandoverDeletedInNova"
    assert "gone (instance i-gone)" in problem.message and "openstack baremetal node undeploy" in problem.message
    assert result.progress[0].failed == 1
    # alone, it blocks the retire (the node is still deployed and pinned) and stays reported every step
    result = step(nodes[:1], nova)
    assert not result.create_jobs and result.progress[0].phase == handover.BLOCKED
    assert [p.reason for p in result.problems] == ["HandoverDeletedInNova"]


def test_a_node_is_put_in_a_job_only_once_nova_read_directly_shows_its_server_on_the_source():
    nodes = [with_instance("n0", m(2))]
    hosts = {"n0": m(2)}
    unread = handover.NovaView(FORCED, hosts)  # the list alone
    assert not step(nodes, unread).create_jobs
    elsewhere = nova_view(FORCED, hosts, read={"n0": NodeRead(m(2), True, m(0), "n0")})
    result = step(nodes, elsewhere)
    assert not result.create_jobs and "not on rack-2/n0" in result.progress[0].message
    assert batched(step(nodes, nova_view(FORCED, hosts))) == {"n0"}


# --- absent from a list is unknown, never "no" ------------------------------------------------


def test_a_shard_is_written_after_a_move_only_on_a_direct_read_that_finds_node_and_server_on_the_destination():
    nodes = [with_instance("n0", m(2))]
    listed = {"n0": m(0)}
    lies = [handover.NovaView(FORCED, listed),  # the list says moved; not read
            nova_view(FORCED, listed, read={"n0": NodeRead(None, True, m(0), "n0")}),  # no compute node read back
            nova_view(FORCED, listed, read={"n0": NodeRead(m(0), False)}),  # the server is gone
            nova_view(FORCED, listed, read={"n0": NodeRead(m(0), True, m(2), "n0")})]  # a half move
    for nova in lies:
        result = step(nodes, nova)
        assert not result.shard_writes and result.progress[0].held
    result = step(nodes, nova_view(FORCED, listed))
    assert result.shard_writes == (handover.Move("n0", m(2), m(0)),)


def test_a_job_is_deleted_and_a_member_released_only_on_novas_word_for_each_node():
    nodes = [with_instance("n0", m(2))]
    job = handover.JobView("rack-2-handover-a", m(2), (("n0", m(0)),), handover.SUCCEEDED)
    # a short page: the node moved by the Job is absent from the list; unknown, so the Job stays
    short = handover.NovaView(FORCED, {})
    result = step(nodes, short, jobs=[job])
    assert job.name not in result.delete_jobs and result.progress[0].held
    # scaled back up (no source any more), Cancelling: released only once each node is known
    cancelled = step(nodes, short, jobs=[job], retiring=())
    assert job.name not in cancelled.delete_jobs
    assert cancelled.progress[0].phase == handover.CANCELLING and not cancelled.events
    # read directly: still under the source (the Job did not move it): the Job goes, the member is released
    truth = nova_view(FORCED, {}, read={"n0": NodeRead(m(2), True, m(2), "n0")})
    released = step(nodes, truth, jobs=[job], retiring=())
    assert job.name in released.delete_jobs and [e.reason for e in released.events] == ["HandoverCancelled"]


# --- a retiring pod waits for Nova -------------------------------------------------------------


def test_a_retiring_pod_stays_while_nova_lists_its_former_free_nodes_under_it():
    nodes = [with_instance("n0", m(2)), Node("f1", shard=m(0)), Node("f2", shard=m(1))]
    waiting = step(nodes, nova_view(UP, {"n0": m(2), "f1": m(2), "f2": m(1)}), pods=[m(2)], recorded={})
    (progress,) = waiting.progress
    assert progress.phase == handover.MOVING_FREE and not progress.held
    assert "Nova still lists 1 of its former free nodes under it" in progress.message
    # the pod side keeps it too: nothing recorded holds it, and a plan alone never stops it
    assert handover.holds(recorded=memory_of({"handover": handover_section(waiting)}).handover, jobs=(),
                          job_pods=()) == {}
    taken = step(nodes, nova_view(UP, {"n0": m(2), "f1": m(0), "f2": m(1)}), pods=[m(2)], recorded={})
    assert taken.progress[0].phase == handover.STOPPING_POD and taken.progress[0].held


def test_a_retiring_pod_stays_while_a_server_has_a_task_then_goes_after_the_bound_with_a_warning():
    nodes = [with_instance("n0", m(2))]
    busy = nova_view(UP, {"n0": m(2)}, tasks={m(2): (("srv-1", "rebooting"),)})
    result = step(nodes, busy, pods=[m(2)], recorded={})
    (progress,) = result.progress
    assert progress.phase == handover.MOVING_FREE and "srv-1 (rebooting)" in progress.message
    assert progress.busy_servers == (handover.BusyServer("srv-1", "rebooting", NOW),)
    # since when survives in the status; past the bound the pod goes, the servers named with the fix
    later = NOW + handover.TASK_WAIT_SECONDS
    result = step(nodes, busy, pods=[m(2)], recorded=handover_section(result), now=later)
    assert result.progress[0].phase == handover.STOPPING_POD
    (problem,) = result.problems
    assert problem.reason == "HandoverServerTasksLeft" and "srv-1 (rebooting)" in problem.message
    assert "openstack server set --state active" in problem.message


def test_servers_handed_over_with_a_task_or_an_error_are_named_with_the_fix():
    nodes = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    nova = nova_view(FORCED, {"n0": m(0), "n1": m(1)},
                     read={"n0": NodeRead(m(0), True, m(0), "n0", task_state="powering-off"),
                           "n1": NodeRead(m(1), True, m(1), "n1", vm_state="error")})
    result = step(nodes, nova)
    assert len(result.shard_writes) == 2
    (problem,) = result.problems
    assert problem.reason == "HandoverServerTasksLeft"
    assert "i-n0 (powering-off)" in problem.message and "i-n1 (vm_state error)" in problem.message


# --- say what happened ---------------------------------------------------------------------------


def test_a_finished_retire_is_announced_as_done_not_cancelled():
    held = {"sources": [{"member": m(2), "trigger": "ScaleDown", "phase": handover.MOVING, "held": True}]}
    nodes = [with_instance("n0", m(0))]  # its last node handed over: it owns none any more
    result = step(nodes, nova_view(FORCED, {"n0": m(0)}), recorded=held)
    (event,) = result.events
    assert event.reason == "HandoverDone" and "retire goes on" in event.message and "keeps its 0" not in event.message
    # a cancelled one (scaled back up) that keeps its nodes says it is cancelled
    kept = [with_instance("n0", m(2))]
    result = step(kept, nova_view(FORCED, {"n0": m(2)}), recorded=held, retiring=())
    assert [e.reason for e in result.events] == ["HandoverCancelled"] and "keeps its 1" in result.events[0].message


def test_the_questions_read_directly_the_next_nodes_those_listed_elsewhere_and_those_the_list_is_silent_about():
    nodes = [with_instance(f"n{i}", m(2)) for i in range(5)]
    hosts = {"n0": m(2), "n1": m(2), "n2": m(2), "n3": m(0)}
    asked = handover.nova_questions([m(2)], nodes, hosts, per_source=2)
    assert asked.count == ((m(2), "n0"), (m(2), "n1"))
    assert {uuid for uuid, _ in asked.direct} == {"n0", "n1", "n3", "n4"}
    assert dict(asked.direct)["n4"] == "i-n4"


def test_a_replaced_view_keeps_what_was_read():
    view = nova_view(FORCED, {"n0": m(2)})
    assert replace(view, compute_host={}).host_of("n0") == m(2)  # read directly
    assert not handover.NovaView(FORCED, {}).known("n0")


def test_a_power_action_in_progress_keeps_a_retiring_pod_as_a_provision_state_does():
    powering = replace(with_instance("n1", m(2)), reservation="conductor-1", target_power_state="power off")
    nodes = [with_instance("n0", m(2)), powering]
    result = step(nodes, nova_view(UP, {"n0": m(2), "n1": m(2)}), pods=[m(2)], recorded={})
    (progress,) = result.progress
    assert progress.phase == handover.MOVING_FREE and "n1 (power -> power off)" in progress.message
    assert progress.busy == (handover.BusyNode("n1", "power -> power off", NOW),)


def test_a_destination_down_for_a_heartbeat_does_not_release_and_restop_a_held_source():
    nodes = [with_instance("n0", m(2))]
    flapping = {**FORCED, m(0): service(m(0), up=False), m(1): service(m(1), up=False)}
    blocked = step(nodes, nova_view(flapping, {"n0": m(2)}))
    (progress,) = blocked.progress
    assert progress.phase == handover.BLOCKED and progress.held and progress.no_destination_since == NOW
    assert [p.reason for p in blocked.problems] == ["HandoverNoDestination"]
    # the destinations back a cycle later: its Job starts, it never had its pod back
    back = step(nodes, nova_view(FORCED, {"n0": m(2)}), recorded=handover_section(blocked), now=NOW + 30)
    assert batched(back) == {"n0"}
    # no destination for longer than the bound: released (its pod may come back)
    later = NOW + handover.NO_DESTINATION_RELEASE_SECONDS
    released = step(nodes, nova_view(flapping, {"n0": m(2)}), recorded=handover_section(blocked), now=later)
    assert released.progress[0].phase == handover.BLOCKED and not released.progress[0].held


# --- bounded holds: held as before, but named after a bound -----------------------------------------


def test_a_job_pod_on_a_lost_kubernetes_node_keeps_its_source_held_and_is_named_after_a_bound():
    nodes = [with_instance("n0", m(2))]
    pod = handover.JobPod("rack-2-handover-a-x", "rack-2-handover-a", m(2), (("n0", m(0)),), alive=True,
                          stopping_since=NOW - 60, node="node-7")
    soon = step(nodes, nova_view(FORCED, {"n0": m(2)}), retiring=())  # a Cancelling member, its Job deleted
    assert not [p for p in soon.problems if p.reason == "HandoverJobPodStuck"]
    held = handover.holds(recorded=memory_of({"handover": HELD}).handover, jobs=(), job_pods=[pod])
    assert m(2) in held
    late = replace(pod, stopping_since=NOW - handover.JOB_POD_STUCK_SECONDS)
    result = handover.decide(settings=SETTINGS, members=MEMBERS, found={}, ring_members=[m(0), m(1)], pods=(),
                             nodes=nodes, owned=pinned_by_owner(nodes), nova=nova_view(FORCED, {"n0": m(2)}),
                             jobs=(), now=NOW, job_pods=[late], recorded=memory_of({"handover": HELD}).handover)
    (problem,) = [p for p in result.problems if p.reason == "HandoverJobPodStuck"]
    assert "rack-2-handover-a-x" in problem.message and "node-7" in problem.message
    assert "out-of-service" in problem.message and "--force" in problem.message
    assert result.progress[0].held and result.progress[0].phase == handover.CANCELLING


def test_a_failed_source_waiting_on_a_locked_node_says_so_after_the_bound():
    after = replace(SETTINGS, after_failure_seconds=600)
    members = (*MEMBERS[:2], Member(m(2), ready=False, since=NOW - 700))
    locked = replace(with_instance("n1", m(2)), reservation="conductor-3")
    nodes = [with_instance("n0", m(2)), locked]
    recorded = {"sources": [{"member": m(2), "trigger": "Failure", "phase": handover.MOVING, "held": True,
                             "busyNodes": [{"node": "n1", "state": "locked by conductor-3",
                                            "since": "2025-01-01T00:00:00Z"}]}]}

    def failed_step(now):
        owned = pinned_by_owner(nodes)
        found = handover.sources(settings=after, members=members, retiring=(), owned=owned, pods=(), now=now)
        return handover.decide(settings=after, members=members, found=found, ring_members=[m(0), m(1)], pods=(),
                               nodes=nodes, owned=owned, nova=nova_view(FORCED, {"n0": m(2), "n1": m(2)}), jobs=(),
                               now=now, recorded=memory_of({"handover": recorded}).handover)

    early = failed_step(1735689600.0 + 60)
    assert batched(early) == {"n0"} and early.progress[0].busy[0].state == "locked by conductor-3"
    assert not [p for p in early.problems if p.reason == "HandoverWaitingForBusyNodes"]
    late = failed_step(1735689600.0 + handover.BUSY_WARNING_SECONDS)
    (problem,) = [p for p in late.problems if p.reason == "HandoverWaitingForBusyNodes"]
    assert "n1 (locked by conductor-3)" in problem.message and "openstack baremetal node abort" in problem.message
