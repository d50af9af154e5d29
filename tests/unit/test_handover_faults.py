"""Handovers under faults: a hypothesis state machine runs the operator's own
decisions against a simulated cloud, with a fault between any two steps.

The operator's part is the product's code, step for step as a cycle runs it (controller/
reconcile.py, cloud_side.py, handover.py; the handover step sees the pods as listed when its
side started, before the pod side of the same cycle acted): the planner, `handover.holds` and
`handover.kept_away` (the pod side, with or without a plan), `fencing`'s forced_down rule with
the hold, the free moves' write rule, `handover.decide` and `status.handover_section` (the status
the next cycle reads back). The world is simulated as the real parts behave:

- Ironic: nodes with a shard, an instance, a provision state;
- Nova: a compute node per node (the host it is listed under) and the host of its instance;
  nova-manage refuses what nova 34 refuses (the compute node's service not forced down, the
  destination forced down) and saves the compute node, then the instance: a kill in between
  leaves a half move; a member's nova-compute, while its pod runs, takes over the compute node of
  every node of its shard (the resource tracker's rebalance);
- Kubernetes: member pods, handover Jobs (backoffLimit 2, podReplacementPolicy Failed) and
  their pods, which outlive a deleted Job until they end and, asked to stop, end after the
  nova-manage run under way.

A nova-manage run spans three steps, as the real one spans its checks and its two saves: it
starts (checks that the compute node's service is forced down and the destination is not),
saves the compute node, then saves the instance. So a second run of the same node, started by
another pod before the first one saved, passes the same checks: the overlap the operator must
never let happen (a node enters a new Job only once no pod of an earlier Job may still move it).

Faults: an operator restart (cycles without a plan, no memory), the operator killed between
its writes and its status write, a scale change, a blocker
(unusable novaManageConfig) or Nova not answering appearing and clearing, a Job pod killed (also
between nova-manage's two saves), a Job deleted, a member failing for a while, a node going
mid-operation, Nova's hypervisor list leaving nodes out (a short page, an unmapped host: only
the step's direct reads tell the truth), a server deleted locally while its host is forced down.

Invariants, after every step:
- no member has a pod while anything of its handover is in flight (a Job of it runs, a pod of
  one may still run, a node of it moved in Nova but not in Ironic);
- never two nova-manage runs for one node at once;
- a node Nova moved never goes back (no resource tracker re-homes a node nova-manage moved, but
  for a half move's, which its returning source takes back: that heals it, as real Nova does);
- a node whose server Nova deleted (Ironic still deployed) is never put in a Job nor moved.
And once the faults stop and the pool settles: every node with an instance has compute-node
host == instance host == Ironic shard == a member whose pod runs, or is a half move the status
reports (HandoverIncomplete) until it is finished by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ironic_shard_operator.core import fencing, handover
from ironic_shard_operator.core.handover import ACTIVE, FAILED, SUCCEEDED, JobPod, JobView, NodeRead, NovaView
from ironic_shard_operator.core.model import Member, Node, Observation, PoolSpec, pinned_by_owner
from ironic_shard_operator.core.planner import plan
from ironic_shard_operator.core.pool_memory import memory_of
from ironic_shard_operator.core.shard_write import Verdict, handover_verdict, move_verdict
from ironic_shard_operator.core.spec import Handover, SecretKeyRef
from ironic_shard_operator.core.status import handover_section, handover_section_unseen
from tests.unit.nova_records import service

POOL = "rack"
# The steps of one nova-manage run: its checks passed, then the compute node saved (the
# instance's save ends the run).
STARTED, SAVED = "started", "compute node saved"
GRACE = 30.0
AFTER_FAILURE = 60.0
STEP = 10.0
SETTINGS = Handover(SecretKeyRef("nova-manage", "nova.conf"), after_failure_seconds=AFTER_FAILURE, max_concurrent=3)
BACKOFF_LIMIT = 2
BLOCKER = ("HandoverConfigInvalid", "Secret nova-manage has no [database] connection")


def m(i: int) -> str:
    return f"{POOL}-{i}"


@dataclass
class RunningPod:
    """A handover Job's pod: where it is in its batch, whether it runs, whether it was asked to
    stop (its deletion, or its Job's)."""

    name: str
    job: str
    source: str
    moves: tuple[tuple[str, str], ...]
    index: int = 0
    alive: bool = True
    stopping: bool = False
    exit_code: int | None = None
    run: str | None = None  # the nova-manage run under way on moves[index]: STARTED, then SAVED

    def moving(self) -> str | None:
        """The node a nova-manage run of this pod is moving right now (None between runs)."""
        return self.moves[self.index][0] if self.alive and self.run is not None else None


@dataclass
class World:
    now: float = 100_000.0
    replicas: int = 4
    identities: set[str] = field(default_factory=set)
    pods: dict[str, bool] = field(default_factory=dict)          # member -> Ready
    since: dict[str, float | None] = field(default_factory=dict)  # readiness last changed
    was_ready: dict[str, bool] = field(default_factory=dict)
    unschedulable: dict[str, int] = field(default_factory=dict)  # member -> steps its pod cannot start
    nodes: dict[str, Node] = field(default_factory=dict)
    host: dict[str, str] = field(default_factory=dict)           # Nova: the compute node's host
    instance_host: dict[str, str] = field(default_factory=dict)  # Nova: the instance's host
    forced: set[str] = field(default_factory=set)
    clear_when_ready: frozenset[str] = frozenset()
    jobs: dict[str, JobView] = field(default_factory=dict)
    job_pods: dict[str, RunningPod] = field(default_factory=dict)
    job_failures: dict[str, int] = field(default_factory=dict)
    recorded: dict | None = None                                 # status.handover
    no_plan_for: int = 0
    status_lost: bool = False
    blocker: bool = False
    nova_down: bool = False
    pods_made: int = 0
    moved_by_nova_manage: set[str] = field(default_factory=set)
    hidden: set[str] = field(default_factory=set)          # nodes Nova's hypervisor list leaves out (it lies)
    deleted: dict[str, str] = field(default_factory=dict)  # node -> its host when Nova deleted its server locally

    def members(self) -> tuple[Member, ...]:
        return tuple(Member(name, ready=self.pods.get(name, False), since=self.since.get(name))
                     for name in sorted(self.identities, key=lambda n: int(n.rsplit("-", 1)[1])))

    def services(self):
        return {h: service(h, forced_down=h in self.forced) for h in self.identities}

    def note_readiness(self) -> None:
        """`since` of every member whose readiness changed (what status.members carries)."""
        for member in self.identities:
            ready = self.pods.get(member, False)
            if self.was_ready.get(member) != ready:
                self.since[member] = self.now if ready or self.was_ready.get(member) else self.since.get(member)
                self.was_ready[member] = ready

    def job_pod_views(self) -> list[JobPod]:
        return [JobPod(p.name, p.job, p.source, p.moves, p.alive) for p in self.job_pods.values()]

    def in_flight(self, member: str) -> list[str]:
        """What of `member`'s handover is in flight: Jobs running, pods that may run, nodes Nova
        moved away from it that Ironic still gives it."""
        found = [f"job {j.name}" for j in self.jobs.values() if j.source == member and j.state == ACTIVE]
        found += [f"pod {p.name}" for p in self.job_pods.values() if p.source == member and p.alive]
        found += [f"node {u}" for u, n in self.nodes.items()
                  if n.shard == member and n.instance_uuid and self.host.get(u) not in (None, member)
                  and self.instance_host.get(u) != member]  # a half move heals once its member runs
        return found


class HandoverUnderFaults(RuleBasedStateMachine):

    @initialize(instances=st.lists(st.booleans(), min_size=8, max_size=12))
    def a_pool_of_four_ready_members(self, instances):
        w = self.world = World()
        for i in range(4):
            w.identities.add(m(i))
            w.pods[m(i)] = w.was_ready[m(i)] = True
            w.since[m(i)] = w.now - 1000
        for i, carries in enumerate(instances):
            uuid, owner = f"node-{i:02d}", m(i % 4)
            w.nodes[uuid] = Node(uuid, shard=owner, instance_uuid=f"inst-{uuid}" if carries else None,
                                 provision_state="active" if carries else "available")
            w.host[uuid] = owner
            if carries:
                w.instance_host[uuid] = owner

    # --- faults ---------------------------------------------------------------------------

    @rule(cycles=st.integers(1, 4))
    def operator_restarts_and_ironic_is_slow(self, cycles):
        """A new operator process (or leader): nothing in memory, and Ironic too slow for its
        first cycles to have a plan."""
        self.world.no_plan_for = cycles
        self.step()

    @rule()
    def operator_killed_between_its_writes_and_its_status(self):
        """The handover step acts, then the process dies before the status write; the next
        process starts without a plan."""
        self.world.status_lost = True
        self.step()

    @rule(replicas=st.integers(1, 4))
    def scale(self, replicas):
        self.world.replicas = replicas
        self.step()

    @rule()
    def blocker_toggles(self):
        self.world.blocker = not self.world.blocker
        self.step()

    @rule()
    def nova_api_toggles(self):
        self.world.nova_down = not self.world.nova_down
        self.step()

    @precondition(lambda self: any(p.alive for p in self.world.job_pods.values()))
    @rule(data=st.data(), half=st.booleans())
    def a_job_pod_is_killed(self, data, half):
        """SIGKILL, wherever its nova-manage run is; with `half`, a run that has passed its
        checks is killed just after its compute node's save (the instance not saved)."""
        w = self.world
        pod = w.job_pods[data.draw(st.sampled_from(sorted(n for n, p in w.job_pods.items() if p.alive)))]
        if half and pod.run == STARTED:
            self._save_compute_node(pod)
        pod.alive, pod.exit_code, pod.run = False, 137, None
        self.step()

    @precondition(lambda self: bool(self.world.jobs))
    @rule(data=st.data())
    def a_job_is_deleted_by_someone(self, data):
        w = self.world
        name = data.draw(st.sampled_from(sorted(w.jobs)))
        del w.jobs[name]
        for pod in w.job_pods.values():
            if pod.job == name and pod.alive:
                pod.stopping = True  # SIGTERM: the run under way ends, no other starts
        self.step()

    @rule(data=st.data(), steps=st.integers(1, 12))
    def a_member_fails_for_a_while(self, data, steps):
        w = self.world
        member = data.draw(st.sampled_from(sorted(w.identities)))
        w.unschedulable[member] = steps
        w.pods.pop(member, None)
        self.step()

    @rule(data=st.data())
    def a_node_goes_mid_operation_or_settles(self, data):
        w = self.world
        uuid = data.draw(st.sampled_from(sorted(w.nodes)))
        node = w.nodes[uuid]
        if node.target_provision_state:
            w.nodes[uuid] = replace(node, provision_state="active" if node.instance_uuid else "available",
                                    target_provision_state=None)
        elif node.instance_uuid:  # a rebuild: its nova-compute drives it
            w.nodes[uuid] = replace(node, provision_state="wait call-back", target_provision_state="active")
        self.step()

    @rule(data=st.data())
    def the_hypervisor_list_lies(self, data):
        """A page that ends early or a host not mapped to a cell: Nova's list leaves some nodes
        out (an empty set: it tells the truth again). Direct reads still tell the truth."""
        w = self.world
        w.hidden = data.draw(st.sets(st.sampled_from(sorted(w.nodes)), max_size=4))
        self.step()

    @precondition(lambda self: bool(self._deletable()))
    @rule(data=st.data())
    def a_server_is_deleted_while_its_host_is_forced_down(self, data):
        """A user deletes a server whose host is forced down: Nova deletes it locally (its
        record only); Ironic keeps the node deployed with the old instance_uuid."""
        w = self.world
        uuid = data.draw(st.sampled_from(self._deletable()))
        w.deleted[uuid] = w.host[uuid]
        del w.instance_host[uuid]
        self.step()

    def _deletable(self) -> list[str]:
        w = self.world
        moving = {uuid for p in w.job_pods.values() if p.alive for uuid, _ in p.moves}
        moving |= {uuid for j in w.jobs.values() for uuid, _ in j.moves}
        return sorted(u for u, n in w.nodes.items() if n.instance_uuid and u in w.instance_host
                      and w.host.get(u) == w.instance_host[u] in w.forced and u not in moving)

    @rule()
    def time_passes(self):
        self.step()

    # --- the invariants -------------------------------------------------------------------

    @invariant()
    def no_member_has_a_pod_while_its_handover_is_in_flight(self):
        w = self.world
        for member in w.pods:
            assert not w.in_flight(member), (member, w.in_flight(member), w.recorded)

    @invariant()
    def never_two_nova_manage_runs_on_one_node_at_once(self):
        moving = [(p.moving(), p.name) for p in self.world.job_pods.values() if p.moving() is not None]
        nodes = [node for node, _ in moving]
        assert len(nodes) == len(set(nodes)), f"two nova-manage runs on one node at once: {sorted(moving)}"

    @invariant()
    def a_node_whose_server_nova_deleted_never_moves(self):
        w = self.world
        for uuid, host in w.deleted.items():
            assert w.host[uuid] == host and w.nodes[uuid].shard == host, (uuid, host, w.host[uuid], w.recorded)

    # --- settling: the faults stop, the pool converges ----------------------------------------

    def teardown(self):
        w = getattr(self, "world", None)
        if w is None:
            return
        w.no_plan_for, w.blocker, w.nova_down = 0, False, False
        w.unschedulable.clear()
        w.hidden = set()
        for uuid in w.deleted:  # undeployed by hand, as HandoverDeletedInNova says: a free node again
            w.nodes[uuid] = replace(w.nodes[uuid], instance_uuid=None, provision_state="available")
        w.deleted.clear()
        for uuid, node in list(w.nodes.items()):
            if node.target_provision_state:
                w.nodes[uuid] = replace(node, provision_state="active", target_provision_state=None)
        for _ in range(120):
            self.step()
        half = {u for u in w.nodes if w.instance_host.get(u) not in (None, w.host.get(u))}
        stray = {u for u, n in w.nodes.items() if n.instance_uuid and w.host.get(u) not in w.identities}
        reported = " ".join(p.get("message", "") for p in (w.recorded or {}).get("problems") or ()
                            if p.get("reason") == "HandoverIncomplete")
        for uuid in half | stray:
            assert uuid in reported, (uuid, w.recorded)
        for uuid in half:  # finished by hand (the SQL the message names): the pool converges
            w.instance_host[uuid] = w.host[uuid]
        for uuid in stray:  # moved by hand to a member (the nova-manage the message names)
            w.host[uuid] = w.instance_host[uuid] = min(name for name, ready in w.pods.items() if ready)
        for _ in range(120):
            self.step()
        live = {name for name, ready in w.pods.items() if ready}
        for uuid, node in w.nodes.items():
            if node.instance_uuid:
                assert w.host[uuid] == w.instance_host[uuid] == node.shard, (uuid, node, w.host[uuid], w.recorded)
                assert node.shard in live, (uuid, node.shard, live, w.recorded, w.replicas)
        assert not [j for j in w.jobs.values() if j.state == ACTIVE] and not any(p.alive for p in w.job_pods.values())

    # --- one step: the operator's cycle, then the world moves on --------------------------------

    def step(self):
        w = self.world
        w.now += STEP
        w.note_readiness()
        members = w.members()
        current = plan(Observation(PoolSpec(POOL, replicas=w.replicas, rebalance_after_seconds=GRACE), members,
                                   tuple(w.nodes.values()), w.now)) if not w.no_plan_for else None
        w.no_plan_for = max(0, w.no_plan_for - 1)
        jobs, job_pods = list(w.jobs.values()), w.job_pod_views()
        listed_pods = set(w.pods)  # what the Ironic and Nova side listed as it started, in parallel
        # the pod side (reconcile._decide_pods), with or without a plan
        recorded = memory_of({"handover": w.recorded}).handover  # the last status, read back
        held = handover.holds(recorded=recorded, jobs=jobs, job_pods=job_pods)
        away = handover.kept_away(current, SETTINGS, members, set(w.pods), w.now, held=held, recorded=recorded)
        side = handover.pod_side(identities=[m.name for m in members if m.name in w.identities], plan=current,
                                 away=away, fenced_members=(), jobs=jobs, job_pods=job_pods,
                                 recorded=recorded)
        for member in sorted(side.stop):
            w.pods.pop(member, None)
        for member in sorted(side.retire):
            w.pods.pop(member, None)
            w.identities.discard(member)
        keep = set(side.keep)
        for member in sorted(keep):
            w.identities.add(member)
            if member not in w.pods and not w.unschedulable.get(member):
                w.pods[member] = False  # created; Ready from the next step
        # Nova: forced_down first (the hold keeps it)
        if not w.nova_down:
            services = w.services()
            cwr = fencing.clear_when_ready_after(w.clear_when_ready, members, services)
            changes = fencing.forced_down_changes(members, services, GRACE, w.now, cwr, frozenset(held))
            for change in changes:
                (w.forced.add if change.forced_down else w.forced.discard)(change.member)
            w.clear_when_ready = fencing.clear_when_ready_written(cwr, changes, w.forced & w.identities)
        # Ironic: the plan's free moves, each by the write rule (no builds in this model)
        if current is not None:
            for move in current.moves:
                if move_verdict(move, w.nodes[move.node_uuid]) is Verdict.WRITE:
                    w.nodes[move.node_uuid] = replace(w.nodes[move.node_uuid], shard=move.target)
            self.handover_step(current, members, jobs, job_pods, listed_pods)
        self.world_moves_on()

    def handover_step(self, current, members, jobs, job_pods, listed_pods):
        w = self.world
        nodes = tuple(w.nodes.values())
        owned = pinned_by_owner(nodes)
        found = handover.sources(settings=SETTINGS, members=members, retiring=current.retiring, owned=owned,
                                 pods=listed_pods, now=w.now)
        recorded = memory_of({"handover": w.recorded}).handover
        if w.nova_down:  # the step sees nothing of Nova: the recorded sources stay
            w.recorded = handover_section_unseen(recorded, handover.unseen_problems(
                recorded, found, "HandoverNovaUnavailable", "Nova: not answering"))
            return
        # as controller/handover.py reads Nova: the (maybe lying) list, then the step's questions
        # read one by one (they tell the truth)
        listed = {u: h for u, h in w.host.items() if u not in w.hidden}
        subjects = set(found) | set(handover.holds(recorded=recorded, jobs=jobs, job_pods=job_pods))
        asked = handover.nova_questions(subjects, nodes, listed, 2 * SETTINGS.max_concurrent)
        nova = NovaView(w.services(), listed, {},
                        frozenset(u for _, u in asked.half_moved if w.instance_host.get(u) == w.nodes[u].shard),
                        {u: NodeRead(w.host.get(u), u in w.instance_host, w.instance_host.get(u), u)
                         for u, _ in asked.direct})
        step = handover.decide(settings=SETTINGS, members=members, found=found,
                               ring_members=current.ring_members, pods=listed_pods, nodes=nodes,
                               owned=owned, nova=nova, jobs=jobs, job_pods=job_pods, recorded=recorded,
                               blocker=BLOCKER if w.blocker else None, now=w.now)
        for source in step.force_down:
            w.forced.add(source)
        for batch in step.create_jobs:
            moves = tuple((mv.node_uuid, mv.target) for mv in batch.moves)
            assert batch.name not in w.jobs
            assert not {uuid for uuid, _ in moves} & set(w.deleted), (moves, w.deleted)  # never a deleted server's
            w.jobs[batch.name] = JobView(batch.name, batch.source, moves, ACTIVE, attempt=batch.attempt)
            self.start_job_pod(batch.name)
        for name in step.delete_jobs:
            w.jobs.pop(name, None)
            for pod in w.job_pods.values():
                if pod.job == name and pod.alive:
                    pod.stopping = True
        for move in step.shard_writes:
            node = w.nodes[move.node_uuid]
            assert w.host[move.node_uuid] == move.target  # Ironic only after Nova
            if handover_verdict(move, node, node.instance_uuid) is Verdict.WRITE:
                w.nodes[move.node_uuid] = replace(node, shard=move.target)
        if w.status_lost:  # the operator died after acting, before its status write
            w.status_lost = False
            w.no_plan_for = max(w.no_plan_for, 1)
            return
        w.recorded = handover_section(step)

    def start_job_pod(self, job):
        w = self.world
        w.pods_made += 1
        view = w.jobs[job]
        w.job_pods[f"{job}-{w.pods_made}"] = RunningPod(f"{job}-{w.pods_made}", job, view.source, view.moves)

    def _may_move(self, uuid, dest):
        """nova-manage's checks, nova 34's order; None when it moves the node."""
        w = self.world
        if dest in w.forced:
            return "Destination compute is forced down!"
        if w.host.get(uuid) not in w.forced:
            return "Source service is not yet forced down!"
        return None

    def _save_compute_node(self, pod):
        uuid, dest = pod.moves[pod.index]
        self.world.host[uuid] = dest
        self.world.moved_by_nova_manage.add(uuid)
        pod.run = SAVED

    def nova_manage_goes_on(self, pod):
        """One step of a Job pod's script: the next step of the nova-manage run under way (its
        checks, the compute node's save, the instance's save), or, between runs, the next run,
        a skip (nova-manage refused: its source is not forced down), the pod's failure, or its
        end (batch done, or asked to stop: the run under way always finishes first)."""
        w = self.world
        if pod.run == STARTED:
            self._save_compute_node(pod)
            return
        if pod.run == SAVED:
            uuid, dest = pod.moves[pod.index]
            w.instance_host[uuid] = dest
            pod.run, pod.index = None, pod.index + 1
            return
        if pod.stopping or pod.index >= len(pod.moves):
            pod.alive, pod.exit_code = False, 143 if pod.stopping and pod.index < len(pod.moves) else 0
            return
        refused = self._may_move(*pod.moves[pod.index])
        if refused is None:
            pod.run = STARTED
        elif "Destination" in refused:
            pod.alive, pod.exit_code = False, 1
        else:
            pod.index += 1

    def world_moves_on(self):
        w = self.world
        # Runs start (their checks) before the runs under way save: a run's checks may come
        # between another run's checks and its saves, as they may in two real processes.
        under_way = [p for p in w.job_pods.values() if p.alive and p.run is not None]
        for pod in [p for p in w.job_pods.values() if p.alive and p.run is None]:
            self.nova_manage_goes_on(pod)
        for pod in under_way:
            self.nova_manage_goes_on(pod)
        self.never_two_nova_manage_runs_on_one_node_at_once()
        # the Job controller: success, or a replacement once the pod has ended, up to the limit
        for name, job in list(w.jobs.items()):
            if job.state != ACTIVE:
                continue
            mine = [p for p in w.job_pods.values() if p.job == name]
            if any(p.alive for p in mine):
                continue
            if any(p.exit_code == 0 for p in mine):
                w.jobs[name] = replace(job, state=SUCCEEDED, finished=w.now)
            elif sum(1 for p in mine if p.exit_code not in (None, 0)) > BACKOFF_LIMIT:
                w.jobs[name] = replace(job, state=FAILED, finished=w.now, log_tail="killed")
            else:
                self.start_job_pod(name)
        # member pods: a pod created last step is Ready now; nova-compute's resource tracker
        # takes over the compute node of every node of its shard
        for member in list(w.pods):
            w.pods[member] = True
            for uuid, node in w.nodes.items():
                if node.shard == member and w.host.get(uuid) != member:
                    # taking back a half move's compute node heals it (measured on real Nova:
                    # tests/nova/test_half_move_return.py); one whose instance moved too must never be
                    assert uuid not in w.moved_by_nova_manage or not node.instance_uuid \
                        or w.instance_host.get(uuid) == member, (
                            f"{member}'s resource tracker takes back node {uuid} nova-manage moved")
                    w.host[uuid] = member
        for member in list(w.unschedulable):
            w.unschedulable[member] -= 1
            if w.unschedulable[member] <= 0:
                del w.unschedulable[member]


HandoverUnderFaults.TestCase.settings = settings(
    max_examples=400, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_handovers_under_faults = HandoverUnderFaults.TestCase
