"""Side by side with what Nova ships: one real Ironic, the real Nova stack and Placement, real
nova-compute processes, the same fake-hardware nodes and the same Nova settings for three setups
measured one after another:

  (a) one nova-compute for every node;
  (b) Nova's own hash ring: k nova-compute processes with no [ironic]shard (every compute that is
      up re-maps the nodes at each resource-tracker pass);
  (c) this operator with k members (its pods run as real nova-compute processes on the process
      kubelet, testbed/process_kubelet.py, against the test bed's real Kubernetes control plane,
      testbed/control_plane.py).

Every setup gets a fresh Nova stack (its own databases, Placement and vhost) over the same Ironic
nodes: 10-20 % of them (--instances) carry an instance, seeded as the tests seed them (through
Nova's own objects on the host that lists the node, then the node's instance_uuid in Ironic, and
powered on). Nova's settings are the same for all (--service-down-time, --report-interval,
--update-resources-interval; Nova's defaults unless told), and every compute logs at DEBUG (the
resource tracker's pass is logged at DEBUG only).

Measured only through Nova's and Placement's APIs (tests/nova/nova_watch.py samples the
hypervisor list, the compute services, the resource providers and GET /allocation_candidates
about every second) and nova-compute's own log:

1. the resource-tracker pass per compute: seconds from "Running periodic task
   ComputeManager.update_available_resource" to the last "Final resource view" of the pass,
   against the nodes it updated; the fit in seconds per node;
2. recovery: SIGKILL one compute; seconds until every free node it served is listed under a live
   hypervisor (service up, not forced down, a heartbeat after the kill) AND offered by Placement's
   GET /allocation_candidates for its resource class. (a) is restarted at once (the time a human
   or a supervisor takes is not ours to invent); (c) is left to the operator (its pod is replaced,
   as a kubelet restarts a container), and again with the replacement held (a lost Kubernetes
   node: the operator re-owns the free nodes after spec.failover.rebalanceAfterSeconds); at the
   end of (c), twice more: the node declared out of service (a certain failure: no grace), and
   the grace set equal to Nova's service_down_time (equal settings). Each recovery also gives
   its phases: when Nova lists the compute down and forced down, when every free node's shard
   has left it in Ironic (its `updated_at`, read once after the recovery), when a destination's
   next pass starts, the first and the last node listed live (`--recoveries-only`: the passes
   and the recoveries, without the joins and the handover; (b)'s recovery taken twice);
3. join of one compute (k -> k+1): nodes that changed hypervisor against the ideal N/(k+1), how
   often they changed, windows in which a node was listed under two hypervisors or none, and
   resource providers deleted (or created again) in Placement; the new host is mapped to the cell
   (nova-manage cell_v2 discover_hosts --by-service): in (b) by the bench as soon as its service
   appears, as a deployment's host discovery does; in (c) by the operator's own host-mapping Job
   (the mapping counts in the join's time);
4. instance nodes: any instance whose node changed hypervisor; for (c), a member retired with
   spec.handover: seconds until every server on it accepted (202) and performed os-stop (its
   Ironic node powered off), a careful client asking once Nova lists the server on a live host.

Output: one table (measure x setup) printed, and the same numbers as JSON at --out (printed).
Usage: .venv/bin/python bench/nova_bench.py [--nodes 1000] [--members 4] [--out PATH]
(`make bench-nova`; about an hour at 1,000 nodes on 2 cores; not in CI)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed, tests, bench: run as a script

import yaml  # noqa: E402

from bench.nova_measures import (  # noqa: E402
    PassLog, Window, any_listed_live, between, changed_hypervisor, ended_elsewhere, first, linear_fit, listed_live,
    median, moved_instance_nodes, offered, ownership_windows, provider_churn, render_table, sample_gaps,
    schedulable, seconds_per_node, service_flag, settled_since,
)
from testbed import nova_starter  # noqa: E402
from testbed.ironic_service import (  # noqa: E402
    IronicService, assign_shards_directly_in_db, running_ironic, seed_nodes_directly_in_db, shard_updates,
)
from testbed.nova_stack import NovaStack  # noqa: E402
from testbed.waiting import wait_for  # noqa: E402
from tests.nova.nova_watch import NovaWatch  # noqa: E402

RESOURCE_CLASS = "bench-nova"
SINGLE = "one-0"
RING = "ring"
POOL = "ours"
# Nova's own defaults (nova/conf/service.py, nova/conf/compute.py): update_resources_interval 0
# runs the task at the periodic default of 60 s.
NOVA_DEFAULTS = {"service_down_time": 60, "report_interval": 10, "update_resources_interval": 60}
# The operator's defaults (the CRD): spec.failover.rebalanceAfterSeconds, spec.ironic.pollIntervalSeconds.
OPERATOR_DEFAULTS = {"grace": 120, "poll": 30}
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


@dataclass
class Settings:
    nodes: int
    instances: float
    members: int
    passes: int
    timings: dict[str, int]
    grace: int
    poll: int
    held: bool
    recoveries_only: bool = False  # skip the joins and the handover; (b)'s recovery taken twice

    @property
    def slow(self) -> float:
        """A generous bound for one resource-tracker period at this scale (pass + interval):
        0.3 s per node is six times the steady pass measured on 2 cores."""
        return self.timings["update_resources_interval"] + 0.3 * self.nodes + 30


# ---- reading the computes' logs ----------------------------------------------------------------

class Logs:
    """Each compute's log (`<run>/logs/<name>.log`), read on from where it was left."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._read: dict[str, tuple[int, bytes, PassLog]] = {}

    def passes(self, name: str) -> PassLog:
        offset, rest, log = self._read.get(name, (0, b"", PassLog()))
        path = self.run_dir / "logs" / f"{name}.log"
        if path.exists():
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            log.feed(line.decode(errors="replace") for line in lines)
        self._read[name] = (offset, rest, log)
        return log


# ---- one setup's run ---------------------------------------------------------------------------

@dataclass
class Run:
    """What every phase of one setup needs: the services, the sampler, the logs, the instances."""

    settings: Settings
    ironic: IronicService
    stack: NovaStack
    nodes: list[str]
    instance_nodes: list[str]
    watch: NovaWatch
    logs: Logs
    clock: float = field(default_factory=lambda: time.time() - time.monotonic())  # epoch = at + clock
    instance_host: dict[str, str] = field(default_factory=dict)   # node -> its instance's host
    seeded_at: float = math.inf                                    # monotonic: the first instances seeded
    servers: dict[str, str] = field(default_factory=dict)          # server -> node

    def epoch(self, at: float) -> float:
        return at + self.clock

    def latest(self):
        """The newest sample (waits for the first)."""
        wait_for(lambda: self.watch.samples, timeout=120, what="a first sample of Nova")
        return self.watch.samples[-1]

    def listed(self) -> dict[str, tuple[str, ...]]:
        return dict(self.latest().hosts)

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    # -- waiting for Nova
    def wait_settled(self, hosts: list[str], what: str, timeout: float | None = None) -> float:
        """Until every node is listed under exactly one compute and no listing changed during two
        complete passes of every compute in `hosts`; returns the monotonic time that listing began."""
        timeout = timeout or 8 * self.settings.slow + 120

        def settled() -> float | None:
            since = settled_since(self.watch.samples, self.nodes)
            if since is None:
                return None
            after = self.epoch(since)
            return since if all(len(self.logs.passes(h).steady(after)) >= 2 for h in hosts) else None
        return wait_for(settled, timeout=timeout, interval=2, what=what)

    def map_hosts_when_up(self, hosts: list[str], timeout: float) -> float:
        """discover_hosts as soon as every service of `hosts` is registered; its monotonic time."""
        wait_for(lambda: set(hosts) <= set(self.stack.compute_services()), timeout=timeout, interval=0.5,
                 what=f"the services of {hosts} registered")
        self.stack.discover_hosts()
        return time.monotonic()

    # -- instances
    def seed_instances(self, nodes: list[str]) -> None:
        """An instance on each of `nodes`, on the host Nova lists it under (Nova first, then Ironic,
        powered on, as a boot leaves it)."""
        listed = self.listed()
        self.seeded_at = min(self.seeded_at, time.monotonic())
        by_host: dict[str, list[str]] = {}
        for node in nodes:
            (host,) = listed[node]
            by_host.setdefault(host, []).append(node)
        for host, mine in sorted(by_host.items()):
            for node, server in zip(mine, self.stack.seed_instances(host, mine)):
                self.instance_host[node] = host
                self.servers[server] = node

        def record(item: tuple[str, str]) -> None:
            server, node = item
            self.ironic.request("PATCH", f"/nodes/{node}", json=[
                {"op": "add", "path": "/instance_uuid", "value": server}])
            self.ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power on"})
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(record, [(s, n) for s, n in self.servers.items() if n in nodes]))

    # -- measures
    def cycle(self, hosts: list[str], after: float) -> dict:
        """The first `passes` steady passes of each of `hosts` that started after `after` (epoch)."""
        wanted = self.settings.passes
        cpu_before, wall_before = self.compute_cpu(hosts), time.monotonic()
        wait_for(lambda: all(len(self.logs.passes(h).steady(after)) >= wanted for h in hosts),
                 timeout=(wanted + 2) * self.settings.slow + 120, interval=2,
                 what=f"{wanted} resource-tracker passes of {hosts}")
        cores = (self.compute_cpu(hosts) - cpu_before) / (time.monotonic() - wall_before)
        passes = [p for h in hosts for p in self.logs.passes(h).steady(after)[:wanted]]
        return {"passes": [{"host": h, "seconds": round(p.seconds, 2), "nodes": p.nodes}
                           for h in hosts for p in self.logs.passes(h).steady(after)[:wanted]],
                "median_seconds": median([p.seconds for p in passes]),
                "median_nodes": median([p.nodes for p in passes]),
                "seconds_per_node": seconds_per_node(passes),
                "compute_cores_busy": round(cores, 2)}

    def seed_then_cycle(self, label: str, hosts: list[str]) -> dict:
        """Instances on the chosen nodes, then `cycle` of `hosts` from there on."""
        self.seed_instances(self.instance_nodes)
        seeded = time.time()
        self.say(f"{label} {len(self.instance_nodes)} instances seeded; measuring {self.settings.passes} passes")
        return self.cycle(hosts, seeded)

    def compute_cpu(self, hosts: list[str]) -> float:
        """CPU seconds the nova-compute processes of `hosts` have used so far (the OS's count:
        how much of the machine the computes took while their passes were measured)."""
        used = nova_starter.cpu_seconds(self.stack.run_dir)
        return sum(used.get(h, 0.0) for h in hosts)

    def recovery(self, victim: str, kill: Callable[[], None], timeout: float) -> dict:
        """SIGKILL `victim` with `kill()` (which may also restart it); seconds until every free node
        it served is schedulable again (nova_measures.schedulable)."""
        free = sorted(n for n, hosts in self.listed().items() if hosts == (victim,) and n not in self.instance_host)
        killed_wall, killed_at = time.time(), time.monotonic()
        kill()

        def back() -> float | None:
            return first(self.watch.samples, lambda s: schedulable(s, free, killed_wall), after=killed_at)
        try:
            at = wait_for(back, timeout=timeout, interval=1, what=f"the free nodes of {victim} schedulable again")
        except AssertionError:
            last = self.latest()
            print(f"free nodes of {victim}: {len(free)}; listed now: "
                  f"{Counter(last.hosts.get(n) for n in free).most_common(5)}; offered by Placement: "
                  f"{sum(n in last.candidates for n in free)}; services: {last.services}", flush=True)
            raise
        samples = between(self.watch.samples, killed_at, at)
        listed_at = first(samples, lambda s: listed_live(s, free, killed_wall))
        offered_at = first(samples, lambda s: offered(s, free))
        restarted = [p for p in self.logs.passes(victim).passes if p.startup and p.started >= killed_wall]

        def after_kill(at: float | None) -> float | None:
            return None if at is None else round(at - killed_at, 1)
        # (c): when the operator wrote the free nodes' shards, read once now from Ironic's own
        # updated_at (polling Ironic meanwhile would slow the very writes it times)
        written = self.shards_written(free, victim, killed_wall)
        moved_wall = written[-1] if written else None
        # the first pass of another compute that began once the shards were written (the one
        # that can pick them up; a pass lists its nodes from Ironic when it starts)
        next_passes = [p.started for host in self.latest().services if host != victim
                       for p in self.logs.passes(host).passes if moved_wall is not None and p.started >= moved_wall]
        # when each free node's compute node record moved to a survivor, from the survivors' own
        # logs: the listing's true moment, free of the sampler's gaps (5-20 s under load)
        logged = [m.at for host in self.latest().services if host != victim for m in self.logs.passes(host).moved
                  if m.source == victim and m.node in free and m.at >= killed_wall]
        return {"victim": victim, "free_nodes": len(free), "seconds": round(at - killed_at, 1),
                "listed_live_seconds": round(listed_at - killed_at, 1),
                "offered_seconds": round(offered_at - killed_at, 1),
                # where the time went: Nova's own verdict (service_down_time after the last report),
                # the operator's forced_down, its shard writes done ((c)), the first free node and
                # the last picked up by a live compute (the spread is the destinations' passes)
                "phases": {"nova_down": after_kill(first(samples, lambda s: service_flag(s, victim, "down"))),
                           "forced_down": after_kill(first(samples, lambda s: service_flag(s, victim, "forced_down"))),
                           "first_shard_written": round(written[0] - killed_wall, 1) if written else None,
                           "shards_moved": round(written[-1] - killed_wall, 1) if written else None,
                           "next_pass_started": round(min(next_passes) - killed_wall, 1) if next_passes else None,
                           "first_listed": after_kill(first(samples, lambda s: any_listed_live(s, free, killed_wall))),
                           "all_listed": after_kill(listed_at),
                           "last_moved_logged": round(max(logged) - killed_wall, 1) if logged else None},
                # a restarted process (same host): when it started and how long its first pass took
                "restart_started_seconds": restarted and round(restarted[0].started - killed_wall, 1) or None,
                "restart_first_pass_seconds": restarted and round(restarted[0].seconds, 1) or None}

    def shards_written(self, free: list[str], victim: str, since: float) -> list[float]:
        """When Ironic last changed each of `free` (epoch, sorted) that no longer carries shard
        `victim` and changed after `since`: the operator's shard writes of a recovery. Empty when
        none moved (setups without shards, or a member that came back before any moved)."""
        now = shard_updates(self.ironic, RESOURCE_CLASS)
        return sorted(at for n in free for shard, at in [now[n]] if shard != victim and at is not None and at >= since)

    def join(self, start: Callable[[], None], new_host: str, hosts_after: list[str],
             mapped: Callable[[], float]) -> dict:
        """Start one more compute with `start()`; what changed in Nova and Placement until the
        listing settles again. `mapped()` waits until the new host is mapped to the cell (by
        whoever maps it in that setup) and returns when (monotonic)."""
        before = self.listed()
        started_at = time.monotonic()
        start()
        mapped_at = mapped()
        settled_at = self.wait_settled(hosts_after, f"the listing settled with {new_host}")
        ended_at = time.monotonic()
        samples = between(self.watch.samples, started_at, ended_at)
        free = [n for n in self.nodes if n not in self.instance_host]
        windows = ownership_windows(samples, self.nodes)
        changes = changed_hypervisor(samples, self.nodes)
        moved = ended_elsewhere(samples, self.nodes)
        churn = provider_churn(samples, self.nodes)
        after = self.listed()
        ideal = round(len(self.nodes) / len(hosts_after))
        loads = Counter(hosts[0] for hosts in after.values() if len(hosts) == 1)
        return {"new_host": new_host, "ideal": ideal,
                "moved": len(moved), "moved_to_new": sum(1 for n in moved if after.get(n) == (new_host,)),
                "changes": sum(changes.values()), "free_nodes": len(free),
                "new_host_nodes": loads[new_host],
                "balance_after": round(max(loads.values()) / (len(self.nodes) / len(hosts_after)), 3),
                "nodes_before": dict(Counter(h for hosts in before.values() for h in hosts)),
                "nodes_after": dict(Counter(h for hosts in after.values() for h in hosts)),
                "double": summarise(windows, "double"), "missing": summarise(windows, "missing"),
                "churn": sum(churn.values()), "churn_nodes": len(churn),
                "mapped_seconds": mapped_at and round(mapped_at - started_at, 1),
                "settled_seconds": round(settled_at - started_at, 1),
                "observed_seconds": round(ended_at - started_at, 1)}

    def instance_moves(self, until: float = math.inf) -> list[str]:
        """Instance nodes listed under another host than their instance's, from the seeding on."""
        return sorted(moved_instance_nodes(between(self.watch.samples, self.seeded_at, until), self.instance_host))


def summarise(windows: list[Window], kind: str) -> dict:
    mine = [w for w in windows if w.kind == kind]
    return {"count": len(mine), "nodes": len({w.node for w in mine}),
            "longest_seconds": round(max((w.seconds for w in mine), default=0.0), 1)}


# ---- the setups --------------------------------------------------------------------------------

def host_conf(run: Run, workdir: Path, host: str) -> list[Path]:
    """The base nova.conf (as a pool's Secret holds it) and an overlay naming the host."""
    base = workdir / "nova.conf"
    if not base.exists():
        base.write_text(run.stack.compute_conf(run.ironic.cloud))
    overlay = workdir / f"{host}.conf"
    overlay.write_text(f"[DEFAULT]\nhost = {host}\n")
    return [base, overlay]


def single(run: Run, workdir: Path) -> dict:
    """(a) one nova-compute for every node."""
    stack, out = run.stack, {}
    stack.start_compute(SINGLE, host_conf(run, workdir, SINGLE))
    run.map_hosts_when_up([SINGLE], timeout=300)
    run.wait_settled([SINGLE], "every node listed under the one compute")
    out["cycle"] = run.seed_then_cycle("(a)", [SINGLE])

    def crash_and_restart() -> None:
        nova_starter.terminate(stack.run_dir, SINGLE, sig=signal.SIGKILL)
        stack.start_compute(SINGLE, host_conf(run, workdir, SINGLE))
    run.say("(a) SIGKILL of the compute, restarted at once")
    out["recovery"] = run.recovery(SINGLE, crash_and_restart, timeout=4 * run.settings.slow + 300)
    out["instance_moves"] = run.instance_moves()
    return out


def ring(run: Run, workdir: Path) -> dict:
    """(b) Nova's own hash ring: k computes with no [ironic]shard."""
    stack, k, out = run.stack, run.settings.members, {}
    hosts = [f"{RING}-{i}" for i in range(k)]
    for host in hosts:
        stack.start_compute(host, host_conf(run, workdir, host))
    run.map_hosts_when_up(hosts, timeout=300)
    run.wait_settled(hosts, f"the ring of {k} settled", timeout=20 * run.settings.slow + 600)
    out["cycle"] = run.seed_then_cycle("(b)", hosts)

    victim = hosts[1]
    # with --recoveries-only, the recovery twice (one sample of the ring varies as much as ours)
    for key in ("recovery", "recovery_again") if run.settings.recoveries_only else ("recovery",):
        run.say(f"(b) SIGKILL of {victim}, not restarted: the ring re-maps its nodes")
        out[key] = run.recovery(victim, lambda: nova_starter.terminate(stack.run_dir, victim, sig=signal.SIGKILL),
                                timeout=run.settings.timings["service_down_time"] + 6 * run.settings.slow + 300)
        run.say(f"(b) {victim} restarted; the ring settles at {k} again")
        stack.start_compute(victim, host_conf(run, workdir, victim))
        run.wait_settled(hosts, f"the ring of {k} settled again", timeout=10 * run.settings.slow + 600)
    if run.settings.recoveries_only:
        out["instance_moves"] = run.instance_moves()
        return out

    new = f"{RING}-{k}"
    run.say(f"(b) join of {new}")
    out["join"] = run.join(lambda: stack.start_compute(new, host_conf(run, workdir, new)), new, [*hosts, new],
                           mapped=lambda: run.map_hosts_when_up([new], timeout=run.settings.slow + 120))
    out["instance_moves"] = run.instance_moves()
    return out


def operator(run: Run, workdir: Path) -> dict:
    """(c) this operator with k members, on the test bed's real Kubernetes control plane (its
    state, logs and audit log in WORKDIR/kube)."""
    from testbed import control_plane
    from testbed.kube_client import KubeClient
    from testbed.operator_objects import create_secrets, install_crd
    from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
    from tests.nova import handover_pool
    from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
    from tests.support.kube_api import KubeAPI
    from tests.support.operator_harness import (
        POOLS, OperatorProcess, get_pool, member_pods, patch_spec, pool_manifest, ready_members,
    )

    stack, settings, k, out = run.stack, run.settings, run.settings.members, {}
    members = [f"{POOL}-{i}" for i in range(k)]
    with ExitStack() as cleanup:
        state = workdir / "kube"
        cleanup.callback(control_plane.stop, state)  # the first registered, the last run; also after a failed start
        plane = control_plane.start(state)
        client = KubeClient(plane.kubeconfig)
        api = KubeAPI(plane.kubeconfig, client, workdir, plane=plane)
        ns = api.create_namespace("bench")
        install_crd(client)
        cloud = yaml.safe_load(clouds_yaml(stack, run.ironic, stack.compute_url))
        cloud["clouds"][CLOUD]["placement_endpoint_override"] = stack.placement_url  # the guard asks it
        create_secrets(client, ns, yaml.safe_dump(cloud), nova_conf=stack.compute_conf(run.ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", stack.nova_conf.read_text())
        # A Kubernetes node per member (and the joining one): fencing one node fences one member.
        kubelet = cleanup.enter_context(ProcessKubelet(client, ns, stack, workdir / "kubelet", nodes=k + 2))
        operator_process = cleanup.enter_context(OperatorProcess(api, ns, "op-bench", workdir))

        def delete_pool() -> None:
            client.delete(f"{POOLS.format(ns=ns)}/{POOL}")
            wait_for(lambda: not client.get(POOLS.format(ns=ns))["items"], timeout=120, what="the pool deleted")
        cleanup.callback(delete_pool)  # runs before the operator and the kubelet stop
        client.create(POOLS.format(ns=ns), pool_manifest(
            POOL, cloud_name=CLOUD, resource_class=RESOURCE_CLASS, image=PROCESS_IMAGE, replicas=k,
            failover={"rebalanceAfterSeconds": settings.grace}, ironic={"pollIntervalSeconds": settings.poll},
            handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}}))
        def members_mapped(hosts: list[str], timeout: float) -> float:
            """The operator maps its members' hosts (its host-mapping Job, spec.handover's
            nova-manage config): when status.hostMapping says every one of `hosts` is Mapped."""
            wait_for(lambda: set(hosts) <= handover_pool.mapped_members(client, ns, POOL), timeout=timeout,
                     interval=0.5, what=f"status.hostMapping: {hosts} Mapped by the operator's Job")
            return time.monotonic()

        members_mapped(members, timeout=600)
        wait_for(lambda: ready_members(client, ns, POOL) == members, timeout=settings.slow + 300, interval=1,
                 what=f"{k} Ready members")
        run.wait_settled(members, f"the pool of {k} settled", timeout=10 * settings.slow + 600)
        out["cycle"] = run.seed_then_cycle("(c)", members)

        victim = members[1]
        run.say(f"(c) SIGKILL of {victim}'s nova-compute; the operator does the rest")
        out["recovery"] = run.recovery(victim, lambda: kubelet.kill(victim), timeout=4 * settings.slow + 300)
        wait_for(lambda: ready_members(client, ns, POOL) == members, timeout=300, what="the member Ready again")
        run.wait_settled(members, f"the pool of {k} settled again")
        if settings.held:
            run.say(f"(c) SIGKILL of {victim}'s nova-compute, its replacement held (a lost node)")
            kubelet.hold(victim)
            out["recovery_held"] = run.recovery(victim, lambda: kubelet.kill(victim),
                                                timeout=settings.grace + settings.poll + 6 * settings.slow + 300)
            kubelet.release(victim)
            wait_for(lambda: ready_members(client, ns, POOL) == members, timeout=settings.slow + 300,
                     interval=1, what="the held member Ready again")
            run.wait_settled(members, f"the pool of {k} settled after the held member's return")

        new = f"{POOL}-{k}"
        if not settings.recoveries_only:
            run.say(f"(c) join of {new} (replicas {k + 1})")
            out["join"] = recorded(lambda: run.join(
                lambda: patch_spec(client, ns, POOL, {"replicas": k + 1}), new, [*members, new],
                mapped=lambda: members_mapped([new], timeout=settings.slow + 300)))
        out["instance_moves"] = run.instance_moves()
        if not settings.recoveries_only:
            out["handover"] = recorded(lambda: handover(run, new, members,
                                                        lambda: patch_spec(client, ns, POOL, {"replicas": k})))

        # Issue 23's two other recoveries, after every measure above (taken as before):
        # a certain failure (its Kubernetes node declared out of service, as a fencing agent
        # does), and the ambiguous one again with the grace equal to Nova's service_down_time.
        fenced: list[str] = []  # the Kubernetes node taken away, given back by after_held

        def kill_on_fenced_node() -> None:
            node = member_pods(client, ns, POOL)[victim]["spec"]["nodeName"]
            kubelet.kill(victim)
            kubelet.set_node_reachable(node, False)
            taints = client.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
            client.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [*taints, OUT_OF_SERVICE]}})
            fenced.append(node)

        def after_held() -> None:
            while fenced:
                kubelet.set_node_reachable(fenced.pop(), True)  # its taints back to the kubelet's own
            kubelet.release(victim)
            wait_for(lambda: ready_members(client, ns, POOL) == members, timeout=settings.slow + 300,
                     interval=1, what="the held member Ready again")
            run.wait_settled(members, f"the pool of {k} settled after the held member's return")

        if settings.held:
            run.say(f"(c) SIGKILL of {victim}'s nova-compute, its node declared out of service (a certain failure)")
            kubelet.hold(victim)
            out["recovery_counted_out"] = recorded(lambda: run.recovery(
                victim, kill_on_fenced_node, timeout=settings.poll + 6 * settings.slow + 300))
            recorded(after_held)
            equal = settings.timings["service_down_time"]
            run.say(f"(c) SIGKILL of {victim}'s nova-compute, replacement held, grace {equal} s = Nova's service_down_time")
            patch_spec(client, ns, POOL, {"failover": {"rebalanceAfterSeconds": equal}})
            kubelet.hold(victim)
            out["recovery_held_equal"] = {"grace": equal, **recorded(lambda: run.recovery(
                victim, lambda: kubelet.kill(victim), timeout=equal + settings.poll + 6 * settings.slow + 300))}
            recorded(after_held)
        out["operator_status"] = {key: (get_pool(client, ns, POOL).get("status") or {}).get(key)
                                  for key in ("nodes", "handover")}
        out["operator_log"] = str(operator_process.log_path)
    return out


def recorded(measure: Callable[[], dict | None]) -> dict:
    """`measure()`'s result, or the error it ended in: a measure added at the end of a setup
    must not cost the run the measures taken before it."""
    try:
        return measure() or {}
    except Exception as exc:  # noqa: BLE001 - reported in the table and the JSON
        print(f"measure failed: {exc!r}", flush=True)
        return {"error": repr(exc)[:500]}


def handover(run: Run, retiring: str, kept: list[str], retire: Callable[[], None]) -> dict:
    """Instances on `retiring` (the same share of its nodes as elsewhere), then `retire()`;
    seconds until every server on it accepted os-stop and its node powered off. A careful client:
    it asks once Nova lists the server on a live member (asked earlier, Nova accepts the stop
    and no compute ever carries it out, tests/nova/test_handover_scenario.py)."""
    listed = run.listed()
    mine = sorted(n for n, hosts in listed.items() if hosts == (retiring,))
    with_instances = mine[:max(1, round(len(mine) * run.settings.instances))]
    before = set(run.servers)
    run.seed_instances(with_instances)
    servers = {s: n for s, n in run.servers.items() if s not in before}
    run.say(f"(c) {len(servers)} instances on {retiring}; retiring it with spec.handover")
    started = time.monotonic()
    retire()
    accepted: dict[str, float] = {}
    performed: dict[str, float] = {}
    hosts = (*kept, retiring)

    def progress() -> bool:
        services = run.stack.compute_services()
        host_of = {s["id"]: h for h in hosts for s in run.stack._get_all(f"/servers?all_tenants=1&host={h}", "servers")}
        for server, node in servers.items():
            if server not in accepted:
                host = host_of.get(server)
                service = services.get(host or "", {})
                if host in kept and service.get("state") == "up" and not service.get("forced_down"):
                    code, text = run.stack.server_action(server, {"os-stop": None})
                    if code == 202:
                        accepted[server] = time.monotonic()
            elif server not in performed:
                power = run.ironic.request("GET", f"/nodes/{node}?fields=power_state").json()["power_state"]
                if power == "power off":
                    performed[server] = time.monotonic()
        return len(performed) == len(servers)
    wait_for(progress, timeout=1800, interval=1, what=f"every server of {retiring} stopped")
    return {"servers": len(servers), "retiring": retiring,
            "accepted_seconds": round(max(accepted.values()) - started, 1),
            "performed_seconds": round(max(performed.values()) - started, 1),
            "first_performed_seconds": round(min(performed.values()) - started, 1)}


SETUPS: dict[str, tuple[str, Callable[[Run, Path], dict]]] = {
    "a": ("(a) one nova-compute", single),
    "b": ("(b) Nova's hash ring", ring),
    "c": ("(c) this operator", operator),
}


# ---- the whole run -----------------------------------------------------------------------------

def reset_ironic(ironic: IronicService, nodes: list[str], instance_nodes: list[str]) -> None:
    """The nodes as the bench found them: no shard, no instance, powered off."""
    assign_shards_directly_in_db(ironic, {n: None for n in nodes})  # SETUP SHORTCUT (testbed)

    def clear(node: str) -> None:
        if ironic.request("GET", f"/nodes/{node}?fields=instance_uuid").json()["instance_uuid"]:
            ironic.request("PATCH", f"/nodes/{node}", json=[{"op": "remove", "path": "/instance_uuid"}])
        ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power off"})
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(clear, instance_nodes))


def run_setup(key: str, settings: Settings, ironic: IronicService, nodes: list[str], instance_nodes: list[str],
              workdir: Path) -> dict:
    label, body = SETUPS[key]
    setup_dir = workdir / key
    setup_dir.mkdir(parents=True, exist_ok=True)
    state = nova_starter.start(setup_dir / "nova", owner_pid=os.getpid(), timings=settings.timings,
                               compute_debug=True)
    stack = NovaStack(state)
    hosts = {SINGLE} | {f"{RING}-{i}" for i in range(settings.members + 1)} | \
        {f"{POOL}-{i}" for i in range(settings.members + 1)}
    started = time.monotonic()
    try:
        with NovaWatch(stack, set(nodes), hosts, period=1.0, placement_class=RESOURCE_CLASS) as watch:
            run = Run(settings, ironic, stack, nodes, instance_nodes, watch, Logs(stack.run_dir))
            run.say(f"{label}: Nova stack {stack.id} started in {stack.start_seconds:.0f} s; "
                    f"load average {os.getloadavg()[0]:.1f}")
            result = body(run, setup_dir)
            gaps = sample_gaps(watch.samples)
            result["sampling"] = {"samples": len(watch.samples), "failed_reads": len(watch.errors),
                                  "errors": dict(Counter(type(e).__name__ for e in watch.errors)),
                                  "median_gap_seconds": gaps[0] and round(gaps[0], 2),
                                  "longest_gap_seconds": gaps[1] and round(gaps[1], 1)}
    finally:
        nova_starter.stop(state)
    result["seconds"] = round(time.monotonic() - started)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--instances", type=float, default=0.15, help="share of nodes with an instance (0.15)")
    parser.add_argument("--members", type=int, default=4, help="k: computes of (b), members of (c) (4)")
    parser.add_argument("--passes", type=int, default=3, help="steady passes measured per compute (3)")
    parser.add_argument("--setups", default="abc", help="which setups, in order (abc)")
    for name, value in NOVA_DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=value, help=f"Nova's {name} ({value})")
    parser.add_argument("--grace", type=int, default=OPERATOR_DEFAULTS["grace"],
                        help="(c) spec.failover.rebalanceAfterSeconds (the CRD's default, 120)")
    parser.add_argument("--poll", type=int, default=OPERATOR_DEFAULTS["poll"],
                        help="(c) spec.ironic.pollIntervalSeconds (the CRD's default, 30)")
    parser.add_argument("--no-held", action="store_true", help="(c) skip the recovery with the replacement held")
    parser.add_argument("--recoveries-only", action="store_true",
                        help="the passes and the recoveries only (no join, no handover); (b) recovers twice")
    parser.add_argument("--out", type=Path, default=REPO / ".run" / "nova-bench" / "nova_bench.json")
    parser.add_argument("--keep", type=Path, help="keep logs and state in this directory")
    args = parser.parse_args()
    # A SIGTERM (a timeout, a kill) unwinds like Ctrl-C: every Nova stack, Ironic and the
    # operator stop, and the JSON keeps the setups measured so far.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    settings = Settings(args.nodes, args.instances, args.members, args.passes,
                        {name: getattr(args, name) for name in NOVA_DEFAULTS}, args.grace, args.poll, not args.no_held,
                        args.recoveries_only)
    load = os.getloadavg()[0]
    print(f"nova bench: {settings.nodes} nodes, {settings.instances:.0%} with instances, k = {settings.members}; "
          f"Nova {settings.timings}; operator grace {settings.grace} s, poll {settings.poll} s; "
          f"load average {load:.1f} on {os.cpu_count()} cores", flush=True)
    results: dict = {"settings": {**settings.__dict__, "load_average_at_start": load, "cores": os.cpu_count()},
                     "setups": {}}
    with ExitStack() as cleanup:
        workdir = args.keep or Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="nova-bench-")))
        workdir.mkdir(parents=True, exist_ok=True)
        ironic = cleanup.enter_context(running_ironic(workdir / "ironic", auth="noauth"))
        nodes = sorted(seed_nodes_directly_in_db(ironic, settings.nodes, resource_class=RESOURCE_CLASS,
                                                     powered_off=True))
        instance_nodes = nodes[:round(settings.nodes * settings.instances)]
        for key in args.setups:
            reset_ironic(ironic, nodes, instance_nodes)
            results["setups"][key] = recorded(lambda: run_setup(key, settings, ironic, nodes, instance_nodes, workdir))
            write(args.out, results)
    results["fit"] = fit(results)
    write(args.out, results)
    print()
    print(table(results))
    print()
    print("\n".join(claims(results)))
    print(f"\nJSON: {args.out}")
    return 0


def write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))


# ---- the report --------------------------------------------------------------------------------

def _get(result: dict, *keys: str):
    for key in keys:
        if not isinstance(result, dict) or key not in result or result[key] is None:
            return None
        result = result[key]
    return result


def table(results: dict) -> str:
    setups = results["setups"]
    keys = list(setups)
    settings = results["settings"]
    k = settings["members"]

    def cell(key: str, render: Callable[[dict], str | None], missing: str = "n/a") -> str:
        try:
            text = render(setups[key])
        except (KeyError, TypeError):
            text = None
        return text if text is not None else missing

    def row(label: str, render: Callable[[dict], str | None], missing: dict[str, str] | None = None):
        return label, [cell(key, render, (missing or {}).get(key, "n/a")) for key in keys]

    def seconds(value) -> str | None:
        return None if value is None else f"{value:.1f}"

    def windows(kind: str) -> Callable[[dict], str | None]:
        return lambda r: (f"{r['join'][kind]['count']} ({r['join'][kind]['nodes']} nodes, longest "
                          f"{r['join'][kind]['longest_seconds']:.0f} s)") if r.get("join") else None

    rows = [
        row("nodes per compute (a pass's Final resource views, median)", lambda r: f"{r['cycle']['median_nodes']:.0f}"),
        row("resource-tracker pass, s (median per compute)", lambda r: seconds(r["cycle"]["median_seconds"])),
        row("seconds per node", lambda r: f"{r['cycle']['seconds_per_node'] * 1000:.0f} ms"),
        row("cores the computes kept busy meanwhile (of the machine's)",
            lambda r: f"{r['cycle']['compute_cores_busy']:.2f} of {settings['cores']}"),
        row("recovery after SIGKILL of one compute, s", lambda r: seconds(r["recovery"]["seconds"])),
        row("recovery, the replacement held (a lost node), s", lambda r: seconds(_get(r, "recovery_held", "seconds")),
            {"a": "n/a", "b": "(as above: nothing restarts it)"}),
        row("recovery, the replacement held, its node declared out of service (certain), s",
            lambda r: seconds(_get(r, "recovery_counted_out", "seconds")), {"a": "n/a", "b": "n/a"}),
        row("recovery, the replacement held, grace = Nova's service_down_time, s",
            lambda r: seconds(_get(r, "recovery_held_equal", "seconds")), {"a": "n/a", "b": "(equal: as above)"}),
        row(f"join ({k} -> {k + 1}): nodes that changed hypervisor / ideal N/(k+1)",
            lambda r: f"{r['join']['moved']} / {r['join']['ideal']} ({r['join']['moved'] / r['join']['ideal']:.2f}x)"),
        row("join: hypervisor changes (a node moved once changes once)", lambda r: f"{r['join']['changes']}"),
        row("join: busiest compute after / N/(k+1)", lambda r: f"{r['join']['balance_after']:.2f}"),
        row("join: windows listed under two hypervisors", windows("double")),
        row("join: windows listed under none", windows("missing")),
        row("join: resource providers deleted or re-created", lambda r: f"{r['join']['churn']}"),
        row("join: new host mapped to the cell ((b) by the bench, (c) by the operator's Job, its status), s",
            lambda r: seconds(r["join"]["mapped_seconds"])),
        row("join: until the listing settled, s", lambda r: seconds(r["join"]["settled_seconds"])),
        row("instances whose node changed hypervisor", lambda r: f"{len(r['instance_moves'])}"),
        row("retire with handover: every server accepted / performed os-stop, s",
            lambda r: f"{r['handover']['accepted_seconds']:.0f} / {r['handover']['performed_seconds']:.0f} "
                      f"({r['handover']['servers']} servers)"),
    ]
    return render_table([SETUPS[key][0] for key in keys], rows)


def fit(results: dict) -> dict | None:
    """Pass seconds against nodes per compute, least squares over the passes of (a) and (c) (their
    computes list only the nodes they serve; (b)'s list every node)."""
    points = [(p["nodes"], p["seconds"]) for key in "ac"
              for p in _get(results["setups"], key, "cycle", "passes") or ()]
    line = linear_fit(points)
    return line and {"seconds_per_node": round(line[0], 4), "intercept_seconds": round(line[1], 1),
                     "passes": len(points)}


def claims(results: dict) -> list[str]:
    """The goals of the issue as ratios of this run."""
    s = results["setups"]
    k = results["settings"]["members"]
    out = []
    a_cycle, b_cycle, c_cycle = (_get(s, key, "cycle", "median_seconds") for key in "abc")
    if a_cycle and c_cycle:
        out.append(f"cycle per member: (c) {c_cycle:.1f} s = {c_cycle / a_cycle:.2f}x (a)'s {a_cycle:.1f} s "
                   f"(1/k = {1 / k:.2f}); the ring's {b_cycle or float('nan'):.1f} s = "
                   f"{(b_cycle or float('nan')) / a_cycle:.2f}x")
    line = results.get("fit")
    if line:
        out.append(f"fit over the passes of (a) and (c): {line['seconds_per_node'] * 1000:.0f} ms per node + "
                   f"{line['intercept_seconds']:.1f} s ({line['passes']} passes)")
    c_rec = _get(s, "c", "recovery", "seconds")
    b_recs = [r for r in (_get(s, "b", key, "seconds") for key in ("recovery", "recovery_again")) if r]
    b_rec = median(b_recs) if b_recs else None  # the ring's recoveries, taken twice with --recoveries-only
    if len(b_recs) > 1:
        out.append(f"the ring's recoveries: {', '.join(f'{r:.1f}' for r in b_recs)} s (median {b_rec:.1f} s: "
                   f"the anchor below)")
    if b_rec and c_rec:
        held = _get(s, "c", "recovery_held", "seconds")
        out.append(f"recovery: (c) {c_rec:.0f} s = {c_rec / b_rec:.2f}x the ring's {b_rec:.0f} s (goal <= 0.5x)"
                   + (f"; with the replacement held {held:.0f} s = {held / b_rec:.2f}x" if held else ""))
        for key, what in (("recovery_counted_out", "held, its node out of service (certain)"),
                          ("recovery_held_equal", "held, grace = service_down_time (equal settings)")):
            value = _get(s, "c", key, "seconds")
            if value:
                out.append(f"recovery {what}: (c) {value:.0f} s = {value / b_rec:.2f}x the ring's {b_rec:.0f} s")
    for key in "bc":
        for recovery in ("recovery", "recovery_again", "recovery_held", "recovery_counted_out", "recovery_held_equal"):
            phases = _get(s, key, recovery, "phases")
            if phases:
                out.append(f"{recovery} {key}, seconds after the kill: " + ", ".join(
                    f"{name} {value}" for name, value in phases.items() if value is not None))
    for key in "bc":
        join = _get(s, key, "join")
        if join:
            out.append(f"join {key}: moved {join['moved']} / ideal {join['ideal']} = {join['moved'] / join['ideal']:.2f}x "
                       f"(goal <= 1.05x in (c)); double windows {join['double']['count']}, missing "
                       f"{join['missing']['count']}, provider churn {join['churn']}")
    return out


if __name__ == "__main__":
    sys.exit(main())
