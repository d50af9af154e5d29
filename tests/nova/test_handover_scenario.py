"""Retire with handover under the faults it exists for, as Nova sees it: the real
operator, real Ironic, the real Nova stack, member pods run as REAL nova-compute processes and
the handover Job's pod as a REAL `nova-manage db ironic_compute_node_move` with the mounted config
(testbed/process_kubelet.py).

3 members, 30 nodes of which half carry instances (seeded through Nova's objects, then recorded
in Ironic, as a boot does); `spec.nova.repairMisplaced` on. Scale to 2; on the way:
- a node of the retiring member is mid-operation (wait call-back -> active): its free nodes move,
  but its pod stays, and status.handover says which node waits and since when; once the node
  settles, the pod goes and the service is forced down;
- a half move: one of its instance nodes' compute node is moved in Nova's cell database while its
  instance is not (what nova-manage killed between its two saves leaves). It is never batched nor
  re-sharded, not by the handover and not by the audit's repair: ScaleDownBlocked /
  HandoverIncomplete names it with the SQL that finishes it, and the retired member's service
  stays; once an administrator runs that SQL, the node is re-sharded and the service deleted;
- the operator is killed once the first Job runs and restarted while Ironic hangs (a forwarder
  holds every request unanswered until the new operator reports Ironic not answering): its
  cycles have no plan, and the source stays held all the same (no pod of its name ever appears,
  its service stays forced down);
- a Job's pod is killed between two of its nova-manage runs (the Job's next pod skips the nodes
  moved already and finishes the batch).
The end: each node moved once in Nova, never listed under two computes, Ironic agreeing; each
server's host is its node's new owner, and every handed-over server accepts os-stop and its
Ironic node powers off. A stop sent to a server of the dead source before its node moved is
accepted and never carried out (no nova-compute serves its host), until it is handed over and reset.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ironic_shard_operator.core.handover_job import MOVES_ANNOTATION
from testbed.ironic_service import IronicService, set_provision_state_directly_in_db
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.nova_watch import NovaWatch
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, member_pods, patch_spec, pool_manifest,
)
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.nova

GRACE = 30
POLL = 5
NODES = 30
HANDOVER_JOBS = "ironicshards.io/component=handover"  # not the host-mapping Jobs of the pool's start


def test_retire_hands_over_every_instance_node_through_busy_nodes_half_moves_and_restarts(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "ho", NODES)
    pool, (m0, m1, m2), resource_class, nodes, shards = \
        names.pool, names.members, names.resource_class, names.nodes, names.shards

    def power(node: str) -> str | None:
        return ironic.request("GET", f"/nodes/{node}?fields=power_state").json()["power_state"]

    def server_host(server: str, hosts: tuple[str, ...]) -> str | None:
        return handover_pool.server_host(nova_stack, server, hosts)

    def source_entry() -> dict:
        section = get_pool(client, ns, pool).get("status", {}).get("handover") or {}
        return next((s for s in section.get("sources") or () if s["member"] == m2), {})

    def member_status(member: str) -> dict:
        return next((m for m in get_pool(client, ns, pool).get("status", {}).get("members") or ()
                     if m["name"] == member), {})

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as kubelet, \
            SwitchableProxy(ironic.url) as hung_ironic:
        operator = OperatorProcess(kube_api, ns, "op-handover", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url,
                                               ironic_url=hung_ironic.url(ironic.url)),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", nova_stack.nova_conf.read_text())
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": GRACE}, ironic={"pollIntervalSeconds": POLL},
                nova={"repairMisplaced": True},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 2}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards)

            owners = shards()  # half the nodes carry an instance
            instances = handover_pool.seed_instances(nova_stack, ironic, owners, (m0, m1, m2), 5)
            on_m2 = sorted(n for n in instances if owners[n] == m2)
            servers_of = {instances[n]: n for n in instances}
            # Jobs take a source's nodes by uuid, two at a time: [0, 1], [2, 3]; [4] is half moved.
            busy_node, stuck_node, half_node = on_m2[0], on_m2[3], on_m2[4]
            stuck = instances[stuck_node]
            set_provision_state_directly_in_db(ironic, [busy_node], "wait call-back", "active")

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=1.0) as watch, \
                    JobWatch(client, ns) as jobs, handover_pool.PodSightings(client, ns, {m2}) as sightings:
                retire_at = time.monotonic()
                patch_spec(client, ns, pool, {"replicas": 2})

                # A node mid-operation: the free nodes move, the pod stays, the status says why.
                def waiting_for_busy_node() -> bool:
                    free_left = [n for n, o in shards().items() if o == m2 and n not in instances]
                    busy = source_entry().get("busyNodes") or []
                    return not free_left and [b["node"] for b in busy] == [busy_node]
                wait(waiting_for_busy_node, timeout=GRACE + 12 * POLL, interval=1,
                     what="the retiring member's free nodes moved and its busy node reported")
                entry = source_entry()
                assert entry["phase"] == "MovingFreeNodes" and not entry.get("held"), entry
                assert entry["busyNodes"][0]["state"] == "wait call-back -> active"
                pod = client.get(f"/api/v1/namespaces/{ns}/pods/{m2}")
                assert not pod["metadata"].get("deletionTimestamp"), "the pod went with a node mid-operation"
                set_provision_state_directly_in_db(ironic, [busy_node], "active", None)  # it settles

                wait(lambda: events(client, ns, "HandoverForcedDown"), timeout=GRACE + 12 * POLL, interval=0.5,
                     what="the retired member's service forced down")
                pod_gone_at = time.monotonic()
                # Its pod is gone, its service forced down, its nodes not moved yet: a stop is
                # accepted by the API and never carried out.
                assert nova_stack.hypervisor_hosts()[stuck_node] == [m2]
                before_code, before_text = nova_stack.server_action(stuck, {"os-stop": None})
                # nova-manage killed between its two saves, for one node: compute node on m0, instance on m2
                nova_stack.half_move(half_node, m0)

                wait(lambda: events(client, ns, "HandoverJobCreated"), timeout=GRACE + 6 * POLL, interval=0.5,
                     what="the first handover Job")
                first_job_at = time.monotonic()
                operator.kill()  # mid-batch: the Job runs on; the next operator starts while Ironic hangs
                hung_ironic.hang()
                operator = OperatorProcess(kube_api, ns, "op-handover-2", tmp_path).start()
                # The new operator's cycles have no plan: the source stays held all the same, until
                # it reports Ironic not answering (its side silent for cloud_side.SILENT_SECONDS).
                wait(lambda: "held" in member_status(m2).get("message", ""), timeout=120, interval=0.5,
                     what="the new operator, without a plan, holding the source")
                wait(lambda: condition(get_pool(client, ns, pool), "Ready").get("reason") == "IronicUnavailable",
                     timeout=120, interval=1, what="the new operator reporting Ironic not answering")
                assert hung_ironic.held and m2 not in member_pods(client, ns, pool)
                hung_ironic.answer_again()
                killed_pod = kill_a_job_pod_mid_batch(kube_api, ns, kubelet, nova_stack)

                wait(lambda: {shards()[n] for n in on_m2 if n != half_node} <= {m0, m1}, timeout=180, interval=1,
                     what="every instance node of the retired member but the half move re-sharded")
                resharded_at = time.monotonic()
                # The half move: reported with its fix, never batched, never re-sharded, not even
                # by the audit's repair (which has seen it: findings.incomplete).
                def half_move_reported() -> bool:
                    status = get_pool(client, ns, pool).get("status", {})
                    blocked = condition({"status": status}, "ScaleDownBlocked")
                    return (blocked.get("reason") == "HandoverIncomplete"
                            and f"UPDATE instances SET host='{m0}' WHERE uuid='{instances[half_node]}'"
                            in blocked.get("message", "")
                            and (status.get("nova") or {}).get("findings", {}).get("incomplete") == 1)
                wait(half_move_reported, timeout=6 * interval + 60, interval=1,
                     what="the half move reported by the handover and by the audit")
                assert shards()[half_node] == m2 and m2 in nova_stack.compute_services()
                assert not any(half_node in {n for n, _ in moves} for _, moves in jobs.seen.values())
                nova_stack.cell_sql(f"UPDATE instances SET host='{m0}' WHERE uuid='{instances[half_node]}' "
                                    "AND deleted=0")  # what the message says to run
                wait(lambda: shards()[half_node] == m0, timeout=6 * POLL + 60, interval=1,
                     what="the half move, once finished by hand, re-sharded")
                wait(lambda: handover_pool.nova_agrees(nova_stack, shards), timeout=3 * interval, interval=2,
                     what="Nova agreeing with Ironic")
                wait(lambda: m2 not in nova_stack.compute_services(), timeout=60 + 3 * interval, interval=1,
                     what="the retired member's service deleted")
                gone_at = time.monotonic()
            # Held from its pod's stop on: no pod of its name, its service forced down throughout.
            assert not sightings.between(m2, pod_gone_at, gone_at), "a pod of the held source appeared"
            forced = [s for s in watch.samples if pod_gone_at <= s.at <= gone_at and m2 in s.services]
            assert forced and all(s.services[m2].get("forced_down") for s in forced), \
                "the held source's forced_down was cleared"
            # Each server's host is its node's new owner.
            final = shards()
            assert {s: server_host(s, (m0, m1, m2)) for s in servers_of} == \
                {s: final[n] for s, n in servers_of.items()}
            assert {p for p in member_pods(client, ns, pool) if p in (m0, m1, m2)} == {m0, m1}
            pinned = Counter(final[n] for n in instances)
            assert set(pinned) == {m0, m1} and abs(pinned[m0] - pinned[m1]) <= 2, pinned
            # Nova the whole time: never a node under two computes, each moved node moved once.
            handover_pool.assert_each_moved_once(watch, on_m2, m2, final)
            for reason in ("HandoverForcedDown", "HandoverJobCreated", "HandedOverNodes", "DeletedNovaService"):
                assert events(client, ns, reason), f"no {reason} Event"
            assert killed_pod["exit_code"] == 137
            assert any(s.hosts[n] == (m2,) for s in watch.samples if s.at >= killed_pod["at"]
                       for n in killed_pod["nodes"]), "the Job's pod was killed with a node of its batch left"
            # The Job's next pod finished the batch (skipping the nodes moved already): no later
            # Job carries the nodes left, and no Job failed.
            later = sorted(name for name, (_, moves) in jobs.seen.items()
                           if name != killed_pod["job"] and {n for n, _ in moves} & set(killed_pod["nodes"]))
            assert not later, f"the killed pod's Job did not finish its batch: {later} moved its nodes"
            assert not events(client, ns, "HandoverFailed")

            # Instances work afterwards, the retired member still gone: every handed-over server
            # stops and its Ironic node powers off. The one stopped while its host was dead never did.
            assert before_code == 202, (before_code, before_text)
            (lost,) = nova_stack.server_actions(stuck)
            assert lost["action"] == "stop" and not lost["events"]  # no nova-compute ever received it
            assert power(stuck_node) == "power on"
            code, text = nova_stack.server_action(stuck, {"os-stop": None})
            assert code == 409 and "powering-off" in text, (code, text)
            stop_at = time.monotonic()
            for node in on_m2:
                if node != stuck_node:
                    assert nova_stack.server_action(instances[node], {"os-stop": None})[0] == 202, node
            assert nova_stack.server_action(stuck, {"os-resetState": {"state": "active"}})[0] == 202
            assert nova_stack.server_action(stuck, {"os-stop": None})[0] == 202
            wait(lambda: all(power(n) == "power off" for n in on_m2), timeout=120, interval=0.5,
                 what="every handed-over node powered off by its new nova-compute")
            stopped_in = time.monotonic() - stop_at

            assert m2 not in member_pods(client, ns, pool) and m2 not in nova_stack.compute_services()

            per_node = (resharded_at - first_job_at) / (len(on_m2) - 1)
            cost = handover_cost(jobs, watch, events(client, ns, "HandedOverNodes"))
            print(f"handover scenario: {len(on_m2)} instance nodes handed over; first Job "
                  f"{first_job_at - retire_at:.1f}s after the scale-down (free nodes, a busy node, pod gone, "
                  f"forced down), all but the half move re-sharded {resharded_at - first_job_at:.1f}s after it "
                  f"({per_node:.1f}s per node, Jobs of 2, operator restarted while Ironic hung), service deleted "
                  f"{gone_at - resharded_at:.1f}s later (half move finished by hand meanwhile); {cost}; "
                  f"{len(on_m2)} handed-over servers stopped in {stopped_in:.1f}s; "
                  f"whole scenario {time.monotonic() - started:.0f}s")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)


def kill_a_job_pod_mid_batch(kube_api: KubeAPI, ns: str, kubelet: ProcessKubelet, nova: NovaStack) -> dict:
    """SIGKILL the pod of a handover Job between two of its nova-manage runs (some of its
    nodes moved in Nova, some not); returns {name, at (monotonic), nodes left}."""
    client = kube_api.client
    killed: dict = {}

    def kill_when_midway() -> bool:
        hosts = nova.hypervisor_hosts()
        for job in client.get(f"/apis/batch/v1/namespaces/{ns}/jobs", labelSelector=HANDOVER_JOBS)["items"]:
            moves = json.loads(job["metadata"]["annotations"][MOVES_ANNOTATION])
            left = [node for node, dest in moves if hosts.get(node) != [dest]]
            if not left or len(left) == len(moves) or (job.get("status") or {}).get("failed"):
                continue
            running = [p for p in client.get(f"/api/v1/namespaces/{ns}/pods",
                                             labelSelector=f"batch.kubernetes.io/job-name={job['metadata']['name']}")
                       ["items"] if p["status"].get("phase") == "Running"]
            if running:
                kubelet.kill(running[0]["metadata"]["name"])
                killed.update(name=running[0]["metadata"]["name"], job=job["metadata"]["name"],
                              at=time.monotonic(), nodes=left)
                return True
        return False

    kube_api.wait_for(kill_when_midway, timeout=120, interval=0.2, what="a handover Job's pod between two moves")

    def ended() -> bool:  # read before the Job, and its pods with it, are deleted
        status = client.get(f"/api/v1/namespaces/{ns}/pods/{killed['name']}")["status"]
        terminated = ((status.get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated")
        killed["exit_code"] = terminated and terminated["exitCode"]
        return bool(terminated)
    kube_api.wait_for(ended, timeout=30, interval=0.2, what="the killed pod's end reported")
    return killed


class JobWatch:
    """The pool's handover Jobs as they appear (polled every `period` s in a thread): name ->
    (first seen, time.monotonic(); its moves [(node, destination)]). Jobs are deleted once done,
    so the cost split needs them recorded while they exist."""

    def __init__(self, client, ns: str, period: float = 0.3) -> None:
        self.client, self.ns, self.period = client, ns, period
        self.seen: dict[str, tuple[float, list[tuple[str, str]]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> JobWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                items = self.client.get(f"/apis/batch/v1/namespaces/{self.ns}/jobs",
                                        labelSelector=HANDOVER_JOBS)["items"]
            except Exception:  # noqa: BLE001 - the fake API server restarting is no news here
                continue
            at = time.monotonic()
            for job in items:
                moves = json.loads(job["metadata"]["annotations"][MOVES_ANNOTATION])
                self.seen.setdefault(job["metadata"]["name"], (at, [tuple(m) for m in moves]))


def handover_cost(jobs: JobWatch, watch: NovaWatch, written: list[dict]) -> str:
    """The cost per handed-over node, split: nova-manage's own run (the time between two moves
    of one Job, as Nova's hypervisor list sampled every second shows them), from the Job's
    appearance until Nova lists the node under its new host, and the Ironic write (the
    HandedOverNodes Events: seconds per node of each batch)."""
    runs, listed = [], []
    for first_seen, moves in jobs.seen.values():
        times = sorted(t for t in (watch.first(lambda s, n=n, d=d: s.hosts.get(n) == (d,), after=first_seen)
                                   for n, d in moves) if t is not None)
        listed += [t - first_seen for t in times]
        runs += [b - a for a, b in zip(times, times[1:])]
    writes = []
    # The handover step's writes carry their time ("...; 0.30s)"); the audit's repair of a half
    # move finished by hand (spec.nova.repairMisplaced) may write that node first, untimed.
    for event in (e for e in written if "after Nova moved them" in e["message"]):
        count = int(event["message"].split(" of ", 1)[1].split()[0])
        seconds = float(event["message"].rsplit("; ", 1)[1].rstrip("s)"))
        writes.append(seconds / count)
    return (f"per node: nova-manage run {_spread(runs)}, Job created -> Nova lists the node {_spread(listed)}, "
            f"Ironic write {_spread(writes)}")


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.2f}s (min {ordered[0]:.2f}s, max {ordered[-1]:.2f}s, n={len(ordered)})"
