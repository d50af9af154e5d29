"""The pure handover planning (core/handover.py): examples of each step, and hypothesis
properties over a simulated Nova + Ironic whose nova-manage refuses what the real one refuses
(nova 34, nova/cmd/manage.py: source not forced down, destination forced down, more than one
instance), with Jobs interrupted at random and the planner re-run from scratch every cycle."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ironic_shard_operator.core import handover
from ironic_shard_operator.core.handover import (
    ACTIVE, FAILED, SUCCEEDED, JobView, failed_kept_away, sources,
)
from ironic_shard_operator.core.model import Member, Node, Observation, PinnedCounts, PoolSpec, pinned_by_owner
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.pool_memory import memory_of
from ironic_shard_operator.core.schedule import AFTER_WAKE_SECONDS, handover_retry_in, next_delay
from ironic_shard_operator.core.shard_write import Verdict, handover_verdict
from ironic_shard_operator.core.spec import Handover, SecretKeyRef
from ironic_shard_operator.core.status import handover_section
from tests.unit.nova_records import nova_view, service

POOL = "rack"
SETTINGS = Handover(SecretKeyRef("nova-manage", "nova.conf"), max_concurrent=4)
NOW = 10_000.0


def m(i: int) -> str:
    return f"{POOL}-{i}"


def ready(*ordinals: int) -> tuple[Member, ...]:
    return tuple(Member(m(i), ready=True, since=0.0) for i in ordinals)


def with_instance(uuid: str, shard: str) -> Node:
    return Node(uuid, shard=shard, instance_uuid=f"i-{uuid}", provision_state="active")


def read_back(section) -> handover.RecordedHandover:
    """A status.handover section as the next cycle reads it back (PoolMemory.handover)."""
    return memory_of({"handover": section}).handover


def decide(*, retiring, **kw) -> handover.HandoverStep:
    """One handover step as the controller runs it: the sources found from the listing's pinned
    counts (`pinned_by_owner`, what the plan carries), then the step, with the last status
    section `recorded` read back."""
    kw["recorded"] = read_back(kw.get("recorded"))
    owned = pinned_by_owner(kw["nodes"])
    found = handover.sources(settings=kw["settings"], members=kw["members"], retiring=retiring, owned=owned,
                             pods=kw["pods"], now=kw["now"])
    return handover.decide(found=found, owned=owned, **kw)


# --- examples, one per step ---------------------------------------------------------------


def _decide(nodes, *, services, hosts, pods=(), jobs=(), members=ready(0, 1, 2), retiring=(m(2),),
            instances=None, settings_=SETTINGS, job_pods=(), ring=None, recorded=None):
    """One step; the last status recorded every retiring member held (as the steps before this
    one would have), unless `recorded` says otherwise."""
    ring = ring if ring is not None else [x.name for x in members if x.name not in retiring
                                          and (x.ready or NOW - (x.since or NOW) < 120)]
    if recorded is None:
        recorded = {"sources": [{"member": r, "trigger": "ScaleDown", "phase": handover.MOVING, "held": True}
                                for r in retiring]}
    return decide(settings=settings_, members=members, retiring=retiring, ring_members=ring,
                  pods=pods, nodes=nodes, nova=nova_view(services, hosts, instances, nodes=nodes), jobs=jobs, now=NOW,
                  job_pods=job_pods, recorded=recorded)


def test_a_retiring_source_goes_step_by_step_free_nodes_pod_forced_down_then_jobs():
    pinned = [with_instance(f"n{i}", m(2)) for i in range(6)]
    hosts = {n.uuid: m(2) for n in pinned}
    up = {h: service(h) for h in (m(0), m(1), m(2))}
    step = _decide([*pinned, Node("free-1", shard=m(2))], services=up, hosts=hosts, pods=[m(2)])
    assert step.progress[0].phase == handover.MOVING_FREE and not step.writes

    step = _decide(pinned, services=up, hosts=hosts, pods=[m(2)])
    assert step.progress[0].phase == handover.STOPPING_POD and not step.writes

    step = _decide(pinned, services=up, hosts=hosts)
    assert step.force_down == (m(2),) and not step.create_jobs

    down = {**up, m(2): service(m(2), forced_down=True)}
    step = _decide(pinned, services=down, hosts=hosts)
    (job,) = step.create_jobs
    assert len(job.moves) == SETTINGS.max_concurrent  # bounded, the rest waits
    assert {mv.target for mv in job.moves} <= {m(0), m(1)} and all(mv.source == m(2) for mv in job.moves)
    assert step.progress[0].in_flight == 4 and step.progress[0].job == job.name
    assert job.name == handover.job_name(m(2), job.moves)  # deterministic: the same after a restart


def test_nodes_nova_already_moved_are_resharded_and_never_put_in_a_job_again():
    pinned = [with_instance(f"n{i}", m(2)) for i in range(3)]
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    hosts = {"n0": m(0), "n1": m(2), "n2": m(2)}
    running = JobView("rack-2-handover-x", m(2), (("n2", m(1)),), ACTIVE)
    step = _decide(pinned, services=services, hosts=hosts, jobs=[running])
    assert step.shard_writes == (handover.Move("n0", m(2), m(0)),)
    assert not step.create_jobs  # one Job per source at a time: n1 waits for it
    assert step.progress[0].done == 1 and step.progress[0].in_flight == 1


def test_a_failed_job_with_no_progress_is_reported_with_its_log_and_retried_only_after_the_backoff():
    pinned = [with_instance("n0", m(2))]
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    failed = JobView("rack-2-handover-x", m(2), (("n0", m(0)),), FAILED, finished=NOW - 5,
                     log_tail="Destination compute is forced down!")
    step = _decide(pinned, services=services, hosts={"n0": m(2)}, jobs=[failed])
    assert [p.reason for p in step.problems] == ["HandoverFailed"]
    assert "Destination compute is forced down!" in step.problems[0].message
    assert not step.delete_jobs and not step.create_jobs
    assert step.progress[0].next_retry_at == NOW - 5 + handover.JOB_RETRY_SECONDS
    later = replace(failed, finished=NOW - handover.JOB_RETRY_SECONDS)
    assert _decide(pinned, services=services, hosts={"n0": m(2)}, jobs=[later]).delete_jobs == (failed.name,)


def test_a_failed_jobs_message_leads_with_the_error_its_traceback_ends_in():
    traceback = " | ".join([
        "An error has occurred:", "Traceback (most recent call last):",
        '  File "sqlalchemy/pool/base.py", line 943, in __connect', "    raise exc_value",
        "oslo_db.exception.DBConnectionError: (pymysql.err.OperationalError) (2003, \"Can't connect to MySQL "
        "server on '127.0.0.1' ([Errno 111] Connection refused)\")",
        "(Background on this error at: https://sqlalche.me/e/20/e3q8)"])
    text = handover.failure_text(traceback)
    assert text.startswith("oslo_db.exception.DBConnectionError: (pymysql.err.OperationalError) (2003, ")
    assert text.endswith(f"(log tail: {traceback})")
    assert handover.failure_text("Destination compute is forced down!") == "Destination compute is forced down!"
    assert handover.failure_text("  ") == "(no log)"
    assert handover.failure_text("starting | exited 1") == "exited 1 (log tail: starting | exited 1)"


def test_a_batch_that_keeps_failing_is_tried_again_later_each_time_and_the_attempt_survives_its_job():
    """Backoff: 60 s after the first failure, doubling, at most JOB_MAX_RETRY_SECONDS; the new Job
    (its attempt in its name and annotation) is created in the step that deletes the failed one,
    so a restart in between cannot reset the count."""
    pinned = [with_instance("n0", m(2))]
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    hosts = {"n0": m(2)}
    job = _decide(pinned, services=services, hosts=hosts).create_jobs[0]
    assert job.attempt == 1
    delays = []
    for _ in range(6):
        failed = JobView(job.name, m(2), tuple((mv.node_uuid, mv.target) for mv in job.moves), FAILED,
                         finished=NOW, log_tail="Destination compute is forced down!", attempt=job.attempt)
        waiting = _decide(pinned, services=services, hosts=hosts, jobs=[failed])
        assert not waiting.create_jobs and not waiting.delete_jobs
        retry_at = waiting.progress[0].next_retry_at
        assert waiting.progress[0].attempts == job.attempt and retry_at is not None
        delays.append(retry_at - NOW)
        early = replace(failed, finished=NOW - (retry_at - NOW) + 1)
        assert not _decide(pinned, services=services, hosts=hosts, jobs=[early]).create_jobs
        due = _decide(pinned, services=services, hosts=hosts, jobs=[replace(failed, finished=NOW - (retry_at - NOW))])
        (again,) = due.create_jobs
        assert due.delete_jobs == (job.name,) and due.retried == ((job.name, "refused"),)
        assert again.attempt == job.attempt + 1 and again.name != job.name and again.moves == job.moves
        assert due.progress[0].next_retry_at is None
        job = again
    assert delays == [60, 120, 240, 480, 960, 960]


def test_a_failed_job_is_counted_by_a_bounded_reason_read_from_its_log():
    reason = handover.job_failure_reason
    assert reason("nova.exception.NovaException: Source service is not yet forced down!") == "refused"
    assert reason("Found an ironic host with more than one instance! Please delete") == "refused"
    assert reason("oslo_db.exception.DBConnectionError: (pymysql.err.OperationalError) (2003, \"Can't connect")\
        == "database"
    assert reason("Killed") == reason("") == "other"
    assert set(handover.JOB_FAILURE_REASONS) == {"refused", "database", "other"}


def test_a_job_interrupted_after_some_moves_is_no_failure_and_the_rest_is_batched_again():
    pinned = [with_instance(f"n{i}", m(2)) for i in range(2)]
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    killed = JobView("j", m(2), (("n0", m(0)), ("n1", m(1))), FAILED, finished=NOW,
                     log_tail="Source service is not yet forced down!")
    step = _decide(pinned, services=services, hosts={"n0": m(0), "n1": m(2)}, jobs=[killed])
    assert not step.problems and not step.create_jobs
    assert step.shard_writes == (handover.Move("n0", m(2), m(0)),)
    # the Job is the record of n0's move until Ironic shows it: it goes once the shard is written
    assert not step.delete_jobs
    resharded = [replace(pinned[0], shard=m(0)), pinned[1]]
    step = _decide(resharded, services=services, hosts={"n0": m(0), "n1": m(2)}, jobs=[killed])
    assert step.delete_jobs == ("j",) and not step.shard_writes and not step.problems
    (again,) = _decide(resharded, services=services, hosts={"n0": m(0), "n1": m(2)}).create_jobs
    assert [mv.node_uuid for mv in again.moves] == ["n1"]


def test_refusals_change_nothing_and_say_why():
    pinned = [with_instance("two", m(2)), with_instance("busy", m(2))]
    busy = replace(pinned[1], reservation="conductor-1")
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    step = _decide([pinned[0], busy], services=services, hosts={"two": m(2), "busy": m(2)},
                   instances={"two": 2})
    assert not step.create_jobs and not step.shard_writes
    assert [p.reason for p in step.problems] == ["HandoverRefused"]
    assert "more than one instance" in step.problems[0].message
    assert "locked by conductor-1" in step.progress[0].message

    no_destination = {**services, m(0): service(m(0), forced_down=True), m(1): service(m(1), up=False)}
    step = _decide([pinned[0]], services=no_destination, hosts={"two": m(2)})
    assert not step.create_jobs
    assert step.problems[0].reason == "HandoverNoDestination"
    assert "rack-0's Nova service is forced down" in step.problems[0].message


def test_without_handover_settings_or_with_on_scale_down_off_nothing_hands_over():
    members = ready(0, 1)
    kw = dict(members=members, retiring={m(1)}, pods=(), owned=PinnedCounts(Counter({m(1): 3}), Counter({m(1): 3})),
              now=NOW)
    assert sources(settings=None, **kw) == {}
    off = replace(SETTINGS, on_scale_down=False, after_failure_seconds=600)
    assert sources(settings=off, **kw) == {}


def test_a_failed_member_hands_over_only_after_the_delay_and_once_its_pod_is_gone():
    after = replace(SETTINGS, after_failure_seconds=600)
    failed = (*ready(0), Member(m(1), ready=False, since=NOW - 601))
    kw = dict(settings=after, members=failed, retiring=(), owned=PinnedCounts(Counter({m(1): 2}), Counter({m(1): 1})),
              now=NOW)
    assert sources(pods=[m(1)], **kw) == {}
    assert sources(pods=[], **kw) == {m(1): handover.FAILURE}
    recent = (*ready(0), Member(m(1), ready=False, since=NOW - 599))
    assert sources(**{**kw, "members": recent}, pods=[]) == {}
    # a failed member hands over only Nova's nodes: pinned nodes without an instance stay with it
    assert sources(pods=[], **{**kw, "owned": PinnedCounts(Counter({m(1): 2}))}) == {}


def test_the_pod_side_never_stops_a_retiring_source_on_a_plan_alone_and_holds_a_failed_one():
    after = replace(SETTINGS, after_failure_seconds=600)
    members = (*ready(0, 1), Member(m(2), ready=False, since=NOW - 700), Member(m(3), ready=True, since=0))
    nodes = (with_instance("a", m(3)), Node("b", shard=m(3)), with_instance("c", m(2)), Node("d", shard=m(0)))
    obs = Observation(PoolSpec(POOL, replicas=3), members, nodes, NOW)
    assert failed_kept_away(plan(obs), after, members, pods=[m(0), m(1), m(3)], now=NOW) == {m(2)}
    moved = plan(replace(obs, nodes=(*nodes[:1], Node("b", shard=m(0)), *nodes[2:])))
    last = read_back({})
    away = handover.kept_away(moved, after, members, [m(0), m(1), m(3)], NOW, held={}, recorded=last)
    assert set(away) == {m(2)}  # m(3)'s free node moved, but only the step knows what Nova lists under it
    # the step found nothing left (Nova lists none of its free nodes, no server has a task): on its record,
    # with or without a plan, the pod goes
    step = _decide([nodes[0]], services={h: service(h) for h in (m(0), m(1), m(3))}, hosts={"a": m(3)},
                   pods=[m(0), m(1), m(3)], members=members, retiring=(m(3),), recorded={})
    assert step.progress[0].phase == handover.STOPPING_POD
    held = handover.holds(recorded=read_back(handover_section(step)), jobs=(), job_pods=())
    assert set(handover.kept_away(None, after, members, [m(3)], NOW, held=held, recorded=last)) == {m(3)}
    # while the last status says no handover can run (e.g. no usable nova.conf), a failed one comes back
    blocked = memory_of({"handover": {"problems": [{"trigger": "Failure", "reason": "HandoverConfigInvalid",
                                                    "message": "x"}]}}).handover
    assert blocked.blocked
    assert failed_kept_away(moved, after, members, pods=[m(0), m(1), m(3)], now=NOW, stalled=True) == frozenset()


# --- properties over a simulated Nova and Ironic ---------------------------------------------


@dataclass
class World:
    """Ironic nodes, Nova's compute nodes, services and instances, pods and Jobs: what a real
    cloud would show. `moves` counts each node's successful nova-manage moves."""

    members: tuple[Member, ...]
    retiring: frozenset[str]
    nodes: dict[str, Node]
    host: dict[str, str]
    forced_down: set[str]
    down: set[str]
    pods: set[str]
    jobs: dict[str, JobView] = field(default_factory=dict)
    moves: Counter = field(default_factory=Counter)
    instances: dict[str, int] = field(default_factory=dict)
    recorded: dict | None = None  # the last status.handover, as the next cycle reads it

    def services(self):
        return {x.name: service(x.name, up=x.name not in self.down, forced_down=x.name in self.forced_down)
                for x in self.members}

    def nova_manage(self, uuid: str, destination: str) -> str | None:
        """The real command's checks, in its order; None on success."""
        if destination in self.forced_down:
            return "Destination compute is forced down!"
        if self.host[uuid] not in self.forced_down:
            return "Source service is not yet forced down!"
        if self.instances.get(uuid, 1) > 1:
            return "Found an ironic host with more than one instance!"
        self.host[uuid] = destination
        self.moves[uuid] += 1
        return None


@st.composite
def worlds(draw):
    count = draw(st.integers(2, 5))
    leaving = draw(st.integers(1, count - 1))
    members = ready(*range(count))
    retiring = frozenset(m(i) for i in range(count - leaving, count))
    nodes, host = {}, {}
    for i in range(draw(st.integers(1, 30))):
        owner = m(draw(st.integers(0, count - 1)))
        uuid = f"node-{i:03d}"
        nodes[uuid] = with_instance(uuid, owner)
        host[uuid] = owner
    down = {m(i) for i in range(count - leaving) if draw(st.booleans()) and draw(st.booleans())}
    return World(members, retiring, nodes, host, forced_down=set(), down=down, pods=set(retiring))


def _cycle(world: World, rng: random.Random, settings_: Handover) -> handover.HandoverStep:
    ring = [x.name for x in world.members if x.name not in world.retiring]
    step = decide(settings=settings_, members=world.members, retiring=world.retiring, ring_members=ring,
                  pods=world.pods, nodes=tuple(world.nodes.values()),
                  nova=nova_view(world.services(), dict(world.host), world.instances),
                  jobs=tuple(world.jobs.values()), now=NOW, recorded=world.recorded)
    world.recorded = handover_section(step)
    in_flight = sum(len(j.moves) for j in world.jobs.values() if j.state == ACTIVE)
    assert in_flight + sum(len(b.moves) for b in step.create_jobs) <= settings_.max_concurrent
    for source in step.force_down:
        world.forced_down.add(source)
    for name in step.delete_jobs:
        del world.jobs[name]
    usable = {x for x in ring if x not in world.down and x not in world.forced_down}
    for batch in step.create_jobs:
        # invariant 9: a Job only from a source whose pod is gone and whose service is forced down
        assert batch.source not in world.pods and batch.source in world.forced_down
        assert all(mv.target in usable for mv in batch.moves)
        assert batch.name not in world.jobs
        assert not any(mv.node_uuid == uuid for j in world.jobs.values() if j.state == ACTIVE
                       for uuid, _ in j.moves for mv in batch.moves)
        world.jobs[batch.name] = JobView(batch.name, batch.source,
                                         tuple((mv.node_uuid, mv.target) for mv in batch.moves), ACTIVE)
    for move in step.shard_writes:  # Ironic second, and only after Nova
        assert world.host[move.node_uuid] == move.target
        current = world.nodes[move.node_uuid]
        if handover_verdict(move, current, current.instance_uuid) is Verdict.WRITE:
            world.nodes[move.node_uuid] = replace(current, shard=move.target)
    for name, job in list(world.jobs.items()):  # Jobs run; some pods are killed and run again
        if job.state != ACTIVE:
            continue
        runs = 1 + (rng.random() > 0.7)  # (a shrunk random() is 0: no interruption)
        error = None
        for _ in range(runs):
            stop_after = rng.randrange(len(job.moves) + 1) if rng.random() > 0.7 else len(job.moves)
            for uuid, dest in job.moves[:stop_after]:
                if (error := world.nova_manage(uuid, dest)) is not None:
                    break
            else:
                error = None if stop_after == len(job.moves) else "killed"
        world.jobs[name] = replace(job, state=SUCCEEDED if error is None else FAILED, finished=NOW - 3600,
                                   log_tail=error or "")
    if rng.random() < 0.5:  # the pod of a retiring member goes at some point (pod side)
        world.pods.clear()
    return step


@settings(max_examples=200, deadline=None)
@given(worlds(), st.randoms(use_true_random=False), st.integers(1, 12))
def test_a_retire_converges_with_each_node_moved_once_nova_first_and_loads_bounded(world, rng, limit):
    settings_ = replace(SETTINGS, max_concurrent=limit)
    kept = [x.name for x in world.members if x.name not in world.retiring]
    destinations = [x for x in kept if x not in world.down]
    original = {uuid: node.shard for uuid, node in world.nodes.items()}
    before = Counter(original.values())
    for _ in range(200):
        owners = {n.shard for n in world.nodes.values()} & world.retiring
        stuck = not destinations and not world.pods and owners
        step = _cycle(world, rng, settings_)
        if all(p.phase == handover.DONE for p in step.progress) and not world.jobs and not step.writes:
            break
        if stuck and step.progress:  # nowhere to go: nothing starts, no one forced down, nothing held
            # (but for NO_DESTINATION_RELEASE_SECONDS: a destination down for a heartbeat restarts nothing)
            assert not step.create_jobs and not step.force_down
            assert all(not p.held or p.no_destination_since is not None for p in step.progress)
            assert any(p.reason == "HandoverNoDestination" for p in step.problems)
            return
    else:
        raise AssertionError("the handover did not converge")
    # a pinned node moves only through a handover (Nova first, Ironic second), and exactly once
    for uuid, node in world.nodes.items():
        assert world.moves[uuid] == (1 if original[uuid] in world.retiring else 0)
        assert node.shard == world.host[uuid] and node.shard not in world.retiring
    # bounded loads: pinned nodes spread over the destinations as evenly as their start allowed
    after = Counter(n.shard for n in world.nodes.values())
    if not destinations:
        return
    spread_before = max(before[d] for d in destinations) - min(before[d] for d in destinations)
    assert max(after[d] for d in destinations) - min(after[d] for d in destinations) <= max(1, spread_before)


def test_a_half_move_is_reported_with_its_manual_fix_and_never_resharded_or_batched_again():
    """nova-manage killed between its two saves: the compute node names the destination, the
    instance still the source. nova-manage refuses to finish it; the operator says so, names the
    node and the fix, writes no shard and runs no Job for it, and finishes once it is fixed."""
    pinned = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    services = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}
    hosts = {"n0": m(0), "n1": m(2)}
    running = JobView("j", m(2), (("n0", m(0)),), ACTIVE)
    step = decide(settings=SETTINGS, members=ready(0, 1, 2), retiring=(m(2),), ring_members=[m(0), m(1)],
                  pods=(), nodes=pinned, jobs=[running], now=NOW,
                  nova=nova_view(services, hosts, {}, frozenset({"n0"})))
    assert not step.problems and not step.shard_writes  # its Job runs: the second save may follow
    for jobs in ([], [replace(running, state=FAILED, finished=NOW)]):
        step = decide(settings=SETTINGS, members=ready(0, 1, 2), retiring=(m(2),),
                      ring_members=[m(0), m(1)], pods=(), nodes=pinned, jobs=jobs, now=NOW,
                      nova=nova_view(services, hosts, {}, frozenset({"n0"})))
        (problem,) = step.problems
        assert problem.reason == "HandoverIncomplete" and "n0" in problem.message
        assert "UPDATE instances SET host='rack-0' WHERE uuid='i-n0'" in problem.message
        assert not step.shard_writes and all("n0" not in {mv.node_uuid for mv in b.moves} for b in step.create_jobs)
        assert step.progress[0].failed == 1
    fixed = _decide(pinned, services=services, hosts=hosts)
    assert fixed.shard_writes == (handover.Move("n0", m(2), m(0)),) and not fixed.problems


def test_a_failed_jobs_retry_wakes_the_pool_when_it_falls_due_not_a_poll_later():
    section = read_back({"sources": [{"member": m(2), "nextRetryAt": "2025-01-01T00:01:00Z"},
                                     {"member": m(1), "nextRetryAt": "2025-01-01T00:02:00Z"}, {"member": m(0)}]})
    now = 1735689600.0  # 2025-01-01T00:00:00Z
    assert handover_retry_in(section, now) == 60.0
    assert handover_retry_in(section, now + 90) == 0.0
    assert handover_retry_in(read_back({"sources": [{"member": m(0)}]}), now) is None
    assert handover_retry_in(read_back(None), now) is None
    delay = next_delay(poll_seconds=300, members=[], rebalance_after_seconds=120, now=now, failed=False,
                       wake_after=handover_retry_in(section, now), moves_applied=0)
    assert delay == 60.0 + AFTER_WAKE_SECONDS


# --- the hold, destinations, cancellation and failed sources -----------------------------------

FORCED = {m(0): service(m(0)), m(1): service(m(1)), m(2): service(m(2), forced_down=True)}


def _recorded(member, phase, trigger="ScaleDown", **extra):
    return {"sources": [{"member": member, "trigger": trigger, "phase": phase, **extra}], "problems": []}


def test_a_source_is_held_by_what_its_status_recorded_and_by_its_jobs_and_their_pods_never_by_a_plan():
    assert handover.holds(recorded=read_back(None), jobs=(), job_pods=()) == {}
    for phase in (handover.STOPPING_POD, handover.FORCING_DOWN, handover.MOVING, handover.BLOCKED,
                  handover.CANCELLING):
        assert set(handover.holds(recorded=read_back(_recorded(m(2), phase)), jobs=(), job_pods=())) == {m(2)}
    for phase in (handover.MOVING_FREE, handover.DONE):
        assert handover.holds(recorded=read_back(_recorded(m(2), phase)), jobs=(), job_pods=()) == {}
    running = JobView("j", m(2), (("n0", m(0)),), ACTIVE)
    assert "j runs" in handover.holds(recorded=read_back(None), jobs=[running], job_pods=())[m(2)]
    ended = replace(running, state=FAILED)
    assert handover.holds(recorded=read_back(None), jobs=[ended], job_pods=()) == {}
    alive = handover.JobPod("j-x", "j", m(2), (("n0", m(0)),), alive=True)  # its Job deleted, it still runs
    assert set(handover.holds(recorded=read_back(None), jobs=(), job_pods=[alive])) == {m(2)}
    assert handover.holds(recorded=read_back(None), jobs=(), job_pods=[replace(alive, alive=False)]) == {}


def test_a_node_enters_a_new_job_only_when_no_pod_of_an_earlier_job_may_still_move_it():
    pinned = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    hosts = {"n0": m(2), "n1": m(2)}
    # the failed Job's retry is due, but a pod of it is still terminating: n0 waits for it
    failed = JobView("j1", m(2), (("n0", m(0)),), FAILED, finished=NOW - 3600, log_tail="killed")
    terminating = handover.JobPod("j1-abcde", "j1", m(2), (("n0", m(0)),), alive=True)
    step = _decide(pinned, services=FORCED, hosts=hosts, jobs=[failed], job_pods=[terminating])
    assert failed.name not in step.delete_jobs
    assert all("n0" not in {mv.node_uuid for mv in b.moves} for b in step.create_jobs)
    assert step.progress[0].in_flight == 1
    # a pod whose batch is unknown (an earlier version's) holds every node of its source
    opaque = handover.JobPod("old-pod", "", m(2), None, alive=True)
    step = _decide(pinned, services=FORCED, hosts=hosts, job_pods=[opaque])
    assert not step.create_jobs and "may still run" in step.progress[0].message
    # once it has ended: retried, the new Job created in the same step
    step = _decide(pinned, services=FORCED, hosts=hosts, jobs=[failed], job_pods=[replace(terminating, alive=False)])
    assert failed.name in step.delete_jobs and any("n0" in {mv.node_uuid for mv in b.moves} for b in step.create_jobs)


def test_destinations_are_members_ready_now_with_their_service_up():
    pinned = [with_instance("n0", m(2))]
    within_grace = (Member(m(0), ready=False, since=NOW - 5), *ready(1), Member(m(2), ready=True, since=0.0))
    step = _decide(pinned, services=FORCED, hosts={"n0": m(2)}, members=within_grace)
    (job,) = step.create_jobs
    assert {mv.target for mv in job.moves} == {m(1)}  # rack-0 lost readiness 5 s ago: counted, not used
    nobody = (Member(m(0), ready=False, since=NOW - 5), Member(m(1), ready=False, since=NOW - 5), within_grace[2])
    step = _decide(pinned, services=FORCED, hosts={"n0": m(2)}, members=nobody)
    assert not step.create_jobs and "rack-0 is not Ready" in step.problems[0].message
    # Ready members whose Nova service is down (no heartbeat within Nova's service_down_time:
    # state down) or forced down are no destination either
    for unusable, why in ((service(m(0), up=False), "rack-0's Nova service is down"),
                          (service(m(0), forced_down=True), "rack-0's Nova service is forced down")):
        step = _decide(pinned, services={**FORCED, m(0): unusable}, hosts={"n0": m(2)})
        (job,) = step.create_jobs
        assert {mv.target for mv in job.moves} == {m(1)}, why
        step = _decide(pinned, services={**FORCED, m(0): unusable, m(1): service(m(1), up=False)},
                       hosts={"n0": m(2)})
        assert not step.create_jobs and why in step.problems[0].message


def test_a_retiring_pod_waits_for_its_nodes_mid_operation_and_says_since_when():
    deploying = Node("d", shard=m(2), instance_uuid="i-d", provision_state="wait call-back",
                     target_provision_state="active")
    nodes = [with_instance("n0", m(2)), deploying]
    step = _decide(nodes, services=FORCED, hosts={}, pods=[m(2)])
    (progress,) = step.progress
    assert progress.phase == handover.MOVING_FREE and "mid-operation" in progress.message
    assert progress.busy == (handover.BusyNode("d", "wait call-back -> active", NOW),)
    # since when survives in the status (a restart included); past the bound, a Warning
    seen = _recorded(m(2), handover.MOVING_FREE, busyNodes=[
        {"node": "d", "state": "wait call-back -> active", "since": "2025-01-01T00:00:00Z"}])
    later = 1735689600.0 + handover.BUSY_WARNING_SECONDS + 1
    step = decide(settings=SETTINGS, members=ready(0, 1, 2), retiring=(m(2),), ring_members=[m(0), m(1)],
                  pods=[m(2)], nodes=nodes, nova=nova_view(FORCED, {}), jobs=(), now=later, recorded=seen)
    assert step.progress[0].busy[0].since == 1735689600.0
    assert [p.reason for p in step.problems] == ["HandoverWaitingForBusyNodes"]
    # settled: the pod may go
    settled = [nodes[0], replace(deploying, provision_state="active", target_provision_state=None)]
    assert _decide(settled, services=FORCED, hosts={}, pods=[m(2)]).progress[0].phase == handover.STOPPING_POD


def test_scaling_back_up_mid_retire_finishes_what_is_in_flight_then_releases_the_member():
    nodes = [with_instance(f"n{i}", m(2)) for i in range(3)]
    running = JobView("j", m(2), (("n0", m(0)), ("n1", m(1))), ACTIVE)
    hosts = {"n0": m(0), "n1": m(2), "n2": m(2)}
    recorded = _recorded(m(2), handover.MOVING)
    members = ready(0, 1, 2)

    def step(nodes, hosts, jobs=(), job_pods=()):
        return decide(settings=SETTINGS, members=members, retiring=(), ring_members=[m(0), m(1)],
                      pods=(), nodes=nodes, nova=nova_view(FORCED, hosts), jobs=jobs, job_pods=job_pods,
                      recorded=recorded, now=NOW)

    first = step(nodes, hosts, [running])  # rack-2 is no longer retiring: its Job still runs
    (progress,) = first.progress
    assert progress.phase == handover.CANCELLING and progress.member == m(2)
    assert first.shard_writes == (handover.Move("n0", m(2), m(0)),)  # what Nova moved gets its shard
    assert not first.create_jobs and not first.delete_jobs and not first.events
    # the Job ended (n1 moved too), shards not yet written: still held
    done = replace(running, state=SUCCEEDED)
    hosts = {**hosts, "n1": m(1)}
    second = step(nodes, hosts, [done])
    assert second.progress[0].phase == handover.CANCELLING and len(second.shard_writes) == 2
    # Ironic shows both moves: the Job goes, the member is released and keeps n2
    resharded = [replace(nodes[0], shard=m(0)), replace(nodes[1], shard=m(1)), nodes[2]]
    third = step(resharded, hosts, [done])
    assert not third.progress and third.delete_jobs == ("j",)
    (event,) = third.events
    assert event.reason == "HandoverCancelled" and "keeps its 1 nodes with instances" in event.message


def test_a_half_move_alone_releases_a_cancelled_member_whose_compute_takes_it_back():
    """Real Nova (tests/nova/test_half_move_return.py): the member's nova-compute, running again,
    takes the compute node of a half move back. So it is released with the half move named; while
    anything else is in flight it stays Cancelling and the half move is reported."""
    nodes = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    half = dict(settings=SETTINGS, members=ready(0, 1, 2), retiring=(), ring_members=[m(0), m(1)], pods=(),
                nodes=nodes, recorded=_recorded(m(2), handover.MOVING), now=NOW)
    step = decide(nova=nova_view(FORCED, {"n0": m(0), "n1": m(2)}, {}, frozenset({"n0"})), jobs=(), **half)
    assert not step.progress and not step.shard_writes
    (event,) = step.events
    assert event.reason == "HandoverCancelled" and "n0" in event.message and "takes their compute nodes back" in event.message
    assert handover.holds(recorded=read_back(handover_section(step)), jobs=(), job_pods=()) == {}
    # a node fully moved in Nova (not a half move) still waits for its shard: held, the half move reported
    step = decide(nova=nova_view(FORCED, {"n0": m(0), "n1": m(1)}, {}, frozenset({"n0"})), jobs=(), **half)
    assert step.progress[0].phase == handover.CANCELLING and step.progress[0].held
    assert step.shard_writes == (handover.Move("n1", m(2), m(1)),)
    assert [p.reason for p in step.problems] == ["HandoverIncomplete"] and not step.events


def test_with_handover_turned_off_mid_way_what_is_in_flight_still_finishes():
    nodes = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    running = JobView("j", m(2), (("n0", m(0)),), ACTIVE)
    step = decide(settings=None, members=ready(0, 1, 2), retiring=(m(2),), ring_members=[m(0), m(1)],
                  pods=(), nodes=nodes, nova=nova_view(FORCED, {"n0": m(0), "n1": m(2)}), jobs=[running],
                  recorded=_recorded(m(2), handover.MOVING), now=NOW)
    assert step.progress[0].phase == handover.CANCELLING and step.shard_writes == (handover.Move("n0", m(2), m(0)),)
    assert not step.create_jobs


def test_a_failed_source_hands_over_only_novas_nodes_and_is_released_when_none_is_left():
    after = replace(SETTINGS, after_failure_seconds=600)
    members = (*ready(0, 1), Member(m(2), ready=False, since=NOW - 700))
    cleaning = Node("c", shard=m(2), provision_state="clean wait", target_provision_state="available")
    nodes = [with_instance("n0", m(2)), cleaning]
    kw = dict(settings=after, members=members, retiring=(), ring_members=[m(0), m(1)], pods=(), now=NOW)
    step = decide(nodes=nodes, nova=nova_view(FORCED, {"n0": m(2)}), jobs=(), **kw)
    (progress,) = step.progress
    assert progress.nodes == 1 and progress.held and "not Nova's" in progress.message
    # its first Job waits until the hold is on record: no pod side can then give it a pod meanwhile
    assert not step.create_jobs
    step = decide(nodes=nodes, nova=nova_view(FORCED, {"n0": m(2)}), jobs=(), recorded=handover_section(step), **kw)
    assert [mv.node_uuid for b in step.create_jobs for mv in b.moves] == ["n0"]  # the cleaning node stays
    # n0 handed over: the member is released with its cleaning node, an Event says so
    nodes = [replace(nodes[0], shard=m(0)), cleaning]
    step = decide(nodes=nodes, nova=nova_view(FORCED, {"n0": m(0)}), jobs=(),
                  recorded=_recorded(m(2), handover.MOVING, trigger=handover.FAILURE), **kw)
    assert not step.progress and [e.reason for e in step.events] == ["HandoverDone"]


def test_a_blocker_stops_new_jobs_but_keeps_every_source_held_and_its_moves_finishing():
    nodes = [with_instance("n0", m(2)), with_instance("n1", m(2))]
    step = decide(settings=SETTINGS, members=ready(0, 1, 2), retiring=(m(2),), ring_members=[m(0), m(1)],
                  pods=(), nodes=nodes, nova=nova_view(FORCED, {"n0": m(0), "n1": m(2)}), jobs=(), now=NOW,
                  recorded=_recorded(m(2), handover.MOVING), blocker=("HandoverConfigInvalid", "no [database]"))
    assert not step.create_jobs and step.shard_writes == (handover.Move("n0", m(2), m(0)),)
    assert step.progress[0].phase in handover.HELD_PHASES
    assert [p.reason for p in step.problems] == ["HandoverConfigInvalid"]


def test_a_member_a_handover_job_still_moves_nodes_to_is_not_retired():
    """Scaled down while a Job moved a node to it: Nova lists the node under it, Ironic still
    gives it to the source. Retired now, it could never get that node's shard."""
    job = JobView("j", m(3), (("n0", m(1)),), SUCCEEDED)
    assert handover.retirable([m(1), m(2)], [job], []) == {m(2)}
    pod = handover.JobPod("j-x", "gone", m(3), (("n0", m(2)),), alive=True)
    assert handover.retirable([m(1), m(2)], [], [pod]) == {m(1)}
    assert handover.retirable([m(1), m(2)], [], [replace(pod, alive=False)]) == {m(1), m(2)}


def test_a_failed_source_whose_nodes_are_all_refused_is_not_kept_from_its_pod_by_the_plan():
    """Its only node carries two instances (nova-manage refuses it): the step finds it Blocked
    with nothing in flight and holds nothing; the pod side, plan or not, lets it come back
    (its instances stay manageable) instead of keeping it down for ever."""
    after = replace(SETTINGS, after_failure_seconds=600)
    members = (*ready(0, 1), Member(m(2), ready=False, since=NOW - 700))
    nodes = (with_instance("two", m(2)), Node("f", shard=m(0)))
    current = plan(Observation(PoolSpec(POOL, replicas=3), members, nodes, NOW))
    assert handover.kept_away(current, after, members, [m(0), m(1)], NOW, held={}, recorded=read_back(None)) \
        .keys() == {m(2)}  # a failed source: no pod while its handover starts
    step = decide(settings=after, members=members, retiring=(), ring_members=[m(0), m(1)], pods=(),
                  nodes=nodes, nova=nova_view(FORCED, {"two": m(2)}, {"two": 2}), jobs=(), now=NOW,
                  recorded=_recorded(m(2), handover.MOVING, trigger=handover.FAILURE, held=True))
    (progress,) = step.progress
    assert progress.phase == handover.BLOCKED and not progress.held
    assert handover.kept_away(current, after, members, [m(0), m(1)], NOW, held={},
                              recorded=read_back(handover_section(step))) == {}


def test_a_node_nova_has_no_compute_node_for_is_reported_and_the_failed_member_released_once_nothing_is_novas():
    """A node of a failed member carries an instance in Ironic, but Nova lists no compute node
    for it (a stale instance_uuid, a deploy made without Nova, a record Nova lost): nova-manage
    has nothing to move. It is a problem the user sees, naming the node and what to do; the
    member's other nodes are handed over, and once nothing left of it is Nova's it is released
    (not held, the pod side lets it come back) instead of staying in MovingNodes for ever."""
    after = replace(SETTINGS, after_failure_seconds=600)
    members = (*ready(0, 1), Member(m(2), ready=False, since=NOW - 700))
    lost, movable = with_instance("lost", m(2)), with_instance("n0", m(2))
    kw = dict(settings=after, members=members, retiring=(), ring_members=[m(0), m(1)], pods=(), now=NOW)
    held = _recorded(m(2), handover.MOVING, trigger=handover.FAILURE, held=True)
    # absent from the hypervisor list is unknown, not "no compute node": nothing is said or decided of it
    unread = decide(nodes=[lost, movable], nova=nova_view(FORCED, {"n0": m(2)}), jobs=(), recorded=held, **kw)
    assert unread.progress[0].held and not unread.problems and "unknown until read directly" in unread.progress[0].message
    # read directly: Nova has no compute node for it
    step = decide(nodes=[lost, movable], nova=nova_view(FORCED, {"n0": m(2)}, nodes=[lost]), jobs=(), recorded=held,
                  **kw)
    (progress,) = step.progress
    assert progress.phase == handover.MOVING and progress.held and progress.failed == 1
    assert [mv.node_uuid for b in step.create_jobs for mv in b.moves] == ["n0"]  # the other node goes on
    (problem,) = step.problems
    assert (problem.trigger, problem.reason) == (handover.FAILURE, "HandoverNoComputeNode")
    assert "lost (instance i-lost)" in problem.message and "openstack server show" in problem.message
    assert "baremetal node undeploy" in problem.message and "lost" in progress.message
    # n0 handed over: only the node Nova does not know is left; the member is released, reported
    nodes = [lost, replace(movable, shard=m(0))]
    step = decide(nodes=nodes, nova=nova_view(FORCED, {"n0": m(0)}, nodes=nodes), jobs=(), recorded=held, **kw)
    (progress,) = step.progress
    assert progress.phase == handover.BLOCKED and not progress.held
    assert [p.reason for p in step.problems] == ["HandoverNoComputeNode"]
    current = plan(Observation(PoolSpec(POOL, replicas=3), members, tuple(nodes), NOW))
    assert handover.kept_away(current, after, members, [m(0), m(1)], NOW, held={},
                              recorded=read_back(handover_section(step))) == {}
    # the same node of a retiring member blocks its retire, reported the same way (it stays held)
    step = _decide([lost], services=FORCED, hosts={})
    assert step.progress[0].phase == handover.BLOCKED and step.progress[0].held
    assert [p.reason for p in step.problems] == ["HandoverNoComputeNode"]


def test_nova_is_asked_about_the_next_nodes_to_move_and_each_node_it_lists_elsewhere():
    """The instances of the next `per_source` nodes Nova still lists under a subject (uuid
    order, as Jobs take them), and every node of it Nova lists under another host; a node
    without an instance, another member's, or one Nova does not list asks nothing."""
    nodes = [with_instance(f"n{i}", m(0)) for i in (3, 1, 2)] + [
        with_instance("away", m(0)), with_instance("unlisted", m(0)), Node("free", shard=m(0)),
        with_instance("other", m(1))]
    hosts = {"n1": m(0), "n2": m(0), "n3": m(0), "away": m(2), "free": m(2), "other": m(2)}
    asked = handover.nova_questions({m(0)}, nodes, hosts, per_source=2)
    assert asked.count == ((m(0), "n1"), (m(0), "n2"))
    assert asked.half_moved == ((m(0), "away"),)


def test_a_node_is_stranded_when_an_instance_on_it_still_names_its_source():
    assert handover.stranded({"away": 1, "done": 0}) == frozenset({"away"})


def _plan_of(create: tuple[str, ...] = (), delete: tuple[str, ...] = ()):
    from ironic_shard_operator.core.model import NodeCounts, Plan
    return Plan(desired_replicas=2, ring_members=(m(0), m(1)), moves=(), members_to_create=create,
                members_to_delete=delete, scale_down_blocked={}, loads=(), counts=NodeCounts())


def test_a_source_whose_job_runs_is_not_retired_and_gets_no_pod_when_scaled_back_up():
    """A failed member whose nodes Nova has all moved owns nothing in Ironic, so the plan retires
    it; while its Job, or a pod of one, may still run a nova-manage naming it, it stays (no pod);
    scaled back up meanwhile, it still gets no pod: it is held (found by the fault model)."""
    job = JobView("j", m(3), (("n0", m(0)),), handover.ACTIVE)
    pod = handover.JobPod("j-x", "j", m(3), (("n0", m(0)),), alive=True)
    assert handover.retirable([m(3)], [job], []) == frozenset()
    assert handover.retirable([m(3)], [], [pod]) == frozenset()
    assert handover.retirable([m(3)], [replace(job, state=SUCCEEDED)], [replace(pod, alive=False)]) == {m(3)}
    held = handover.holds(recorded=read_back(None), jobs=[job], job_pods=[pod])
    kept = handover.pod_side(identities=[m(0), m(1), m(3)], plan=_plan_of(delete=(m(3),)), away=held,
                             fenced_members=(), jobs=[job], job_pods=[pod], recorded=read_back(None))
    assert m(3) in kept.stop and m(3) not in kept.retire and m(3) not in kept.keep
    # Its identity gone already (an earlier operator retired it): the plan creates it again, held.
    again = handover.pod_side(identities=[m(0), m(1)], plan=_plan_of(create=(m(3),)), away=held,
                              fenced_members=(), jobs=[job], job_pods=[pod], recorded=read_back(None))
    assert m(3) not in again.keep


def test_a_member_nova_lists_a_node_under_is_not_retired_before_ironic_follows():
    """Nova moved n0 to member 2 (its Job cancelled and gone, its pod ended), Ironic still gives
    it to member 1: the step records member 2 as receiving, and the pod side, reading that
    record, does not retire member 2 though the plan does (it owns nothing in Ironic yet)."""
    nodes = [with_instance("n0", m(1))]
    nova = nova_view({m(0): service(m(0)), m(1): service(m(1), forced_down=True), m(2): service(m(2))},
                    {"n0": m(2)})
    step = decide(settings=SETTINGS, members=ready(0, 2), retiring=(m(1),), ring_members=[m(0)],
                  pods=(m(0), m(2)), nodes=nodes, nova=nova, jobs=(), now=NOW)
    assert step.receiving == (m(2),)
    recorded = handover_section(step)
    assert recorded["receiving"] == [m(2)]
    side = handover.pod_side(identities=[m(0), m(1), m(2)], plan=_plan_of(delete=(m(2),)), away={},
                             fenced_members=(), jobs=(), job_pods=(), recorded=read_back(recorded))
    assert m(2) not in side.retire and m(2) in side.keep
    assert handover.retirable([m(2)], (), ()) == {m(2)}  # without the record it would go
