"""Retire with handover, as Nova sees it: the real operator, real Ironic, the real Nova stack,
member pods run as REAL nova-compute processes and the handover Job's pod as a REAL
`nova-manage db ironic_compute_node_move` with the mounted config (testbed/process_kubelet.py).

3 members, 30 nodes of which half carry instances (seeded through Nova's objects, then recorded
in Ironic, as a boot does). Scale to 2: the retired member's free nodes move, its pod goes, its
service is forced down, every instance node is moved in Nova and then re-sharded, and Nova's
hypervisor list shows each under its new owner; each server's host is the new owner, the old
service is deleted, and pinned nodes per kept member differ by at most one. The operator is
killed while the first Job runs and restarted, and a Job's pod is killed between two of its
nova-manage runs (the Job's next pod skips the nodes moved already and finishes the batch):
the end is the same, and a sampler of Nova shows that no node ever moved twice and none was
listed under two computes.

Instances work afterwards: a server handed over is stopped through Nova's API and its Ironic
node powers off, while the retired member is gone. Before its node is handed over, the same
stop on a server of the member whose pod is gone and service forced down is accepted and then
never carried out (no nova-compute serves its host): its node stays powered on and the server
is stuck powering off, refusing further actions (409), until it is handed over and reset.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ironic_shard_operator.core.handover_job import MOVES_ANNOTATION
from testbed.ironic_service import IronicService
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

pytestmark = pytest.mark.nova

GRACE = 30
POLL = 5
NODES = 30


def test_retire_hands_over_every_instance_node_in_nova_then_ironic(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "ho", NODES)
    pool, (m0, m1, m2), resource_class, nodes, shards = \
        names.pool, names.members, names.resource_class, names.nodes, names.shards

    def nova_agrees() -> bool:
        return handover_pool.nova_agrees(nova_stack, shards)

    def power(node: str) -> str | None:
        return ironic.request("GET", f"/nodes/{node}?fields=power_state").json()["power_state"]

    def server_host(server: str, hosts: tuple[str, ...]) -> str | None:
        return handover_pool.server_host(nova_stack, server, hosts)

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as _kubelet:
        operator = OperatorProcess(kube_api, ns, "op-handover", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, "nova-manage", nova_stack.nova_conf.read_text())
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": GRACE}, ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": "nova-manage"}}, "maxConcurrent": 3}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards)

            # Half the nodes carry an instance (Nova first, then Ironic, as a boot records it,
            # and powered on, as a deploy leaves the node).
            owners = shards()
            instances = {}
            for member in (m0, m1, m2):
                for node in sorted(n for n, o in owners.items() if o == member)[:5]:
                    instances[node] = nova_stack.seed_instance(member, node)
                    ironic.request("PATCH", f"/nodes/{node}", json=[
                        {"op": "add", "path": "/instance_uuid", "value": instances[node]}])
                    ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power on"})
            wait(lambda: all(power(n) == "power on" for n in instances), timeout=60, interval=0.5,
                 what="the instance nodes powered on")
            on_m2 = {n for n in instances if owners[n] == m2}
            servers_of = {instances[n]: n for n in instances}
            # Jobs take a source's nodes by uuid: the last one goes in the second Job.
            stuck_node = max(on_m2)
            stuck = instances[stuck_node]

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=0.5) as watch, \
                    JobWatch(client, ns) as jobs:
                retire_at = time.monotonic()
                patch_spec(client, ns, pool, {"replicas": 2})
                wait(lambda: events(client, ns, "HandoverForcedDown"), timeout=GRACE + 6 * POLL, interval=0.5,
                     what="the retired member's service forced down")
                # Its pod is gone, its service forced down, its nodes not moved yet: a stop is
                # accepted by the API and never carried out.
                assert nova_stack.hypervisor_hosts()[stuck_node] == [m2]
                before_code, before_text = nova_stack.server_action(stuck, {"os-stop": None})
                assert server_host(stuck, (m0, m1, m2)) == m2
                wait(lambda: events(client, ns, "HandoverJobCreated"), timeout=GRACE + 6 * POLL, interval=0.5,
                     what="the first handover Job")
                first_job_at = time.monotonic()
                operator.kill()  # mid-batch: the Job runs on, the next operator derives the rest
                operator = OperatorProcess(kube_api, ns, "op-handover-2", tmp_path).start()
                killed_pod = kill_a_job_pod_mid_batch(kube_api, ns, _kubelet, nova_stack)

                wait(lambda: {shards()[n] for n in on_m2} <= {m0, m1}, timeout=180, interval=1,
                     what="every instance node of the retired member re-sharded")
                resharded_at = time.monotonic()
                wait(nova_agrees, timeout=3 * interval, interval=1, what="Nova agreeing with Ironic")
                wait(lambda: m2 not in nova_stack.compute_services(), timeout=60 + 3 * interval, interval=1,
                     what="the retired member's service deleted")
                gone_at = time.monotonic()
            # Each server's host is its node's new owner.
            final = shards()
            assert {s: server_host(s, (m0, m1, m2)) for s in servers_of} == \
                {s: final[n] for s, n in servers_of.items()}
            assert {p for p in member_pods(client, ns, pool) if p in (m0, m1, m2)} == {m0, m1}
            pinned = Counter(final[n] for n in instances)
            assert set(pinned) == {m0, m1} and abs(pinned[m0] - pinned[m1]) <= 1, pinned
            # Nova the whole time: never a node under two computes, each moved node moved once.
            handover_pool.assert_each_moved_once(watch, sorted(on_m2), m2, final)
            forced = watch.forced_down_times(m2)
            assert forced, "the retired member's service was forced down before its nodes moved"
            moved_at = {n: watch.first(lambda s, n=n: s.hosts[n] and s.hosts[n] != (m2,)) for n in on_m2}
            assert min(forced) <= min(moved_at.values())
            for reason in ("HandoverForcedDown", "HandoverJobCreated", "HandedOverNodes", "DeletedNovaService"):
                assert events(client, ns, reason), f"no {reason} Event"
            blocked = condition(get_pool(client, ns, pool), "ScaleDownBlocked")
            assert blocked["status"] == "False"
            assert killed_pod["exit_code"] == 137
            assert any(s.hosts[n] == (m2,) for s in watch.samples if s.at >= killed_pod["at"]
                       for n in killed_pod["nodes"]), "the Job's pod was killed with a node of its batch left"
            # The Job's next pod finished the batch (skipping the nodes moved already): no later
            # Job carries the nodes left, and no Job failed.
            later = sorted(name for name, (_, moves) in jobs.seen.items()
                           if name != killed_pod["job"] and {n for n, _ in moves} & set(killed_pod["nodes"]))
            assert not later, f"the killed pod's Job did not finish its batch: {later} moved its nodes"
            assert not events(client, ns, "HandoverFailed")

            # Instances work afterwards, the retired member still gone: a handed-over server stops
            # and its Ironic node powers off. The one stopped while its host was dead never did.
            assert before_code == 202, (before_code, before_text)
            (lost,) = nova_stack.server_actions(stuck)
            assert lost["action"] == "stop" and not lost["events"]  # no nova-compute ever received it
            assert power(stuck_node) == "power on"
            code, text = nova_stack.server_action(stuck, {"os-stop": None})
            assert code == 409 and "powering-off" in text, (code, text)
            handed = instances[min(on_m2)]
            stop_at = time.monotonic()
            assert nova_stack.server_action(handed, {"os-stop": None})[0] == 202
            assert nova_stack.server_action(stuck, {"os-resetState": {"state": "active"}})[0] == 202
            assert nova_stack.server_action(stuck, {"os-stop": None})[0] == 202
            wait(lambda: power(min(on_m2)) == power(stuck_node) == "power off", timeout=90, interval=0.5,
                 what="the handed-over nodes powered off by their new nova-compute")
            stopped_in = time.monotonic() - stop_at

            assert m2 not in member_pods(client, ns, pool) and m2 not in nova_stack.compute_services()

            per_node = (resharded_at - first_job_at) / len(on_m2)
            cost = handover_cost(jobs, watch, events(client, ns, "HandedOverNodes"))
            print(f"handover scenario: {len(on_m2)} instance nodes handed over; first Job "
                  f"{first_job_at - retire_at:.1f}s after the scale-down (free nodes, pod gone, forced down), "
                  f"all re-sharded {resharded_at - first_job_at:.1f}s after it ({per_node:.1f}s per node, "
                  f"Jobs of 3, operator killed once), service deleted {gone_at - resharded_at:.1f}s later; "
                  f"Ironic writes: {[e['message'] for e in events(client, ns, 'HandedOverNodes')]}; "
                  f"{cost}; a handed-over server stopped in {stopped_in:.1f}s; "
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
        for job in client.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]:
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
                items = self.client.get(f"/apis/batch/v1/namespaces/{self.ns}/jobs")["items"]
            except Exception:  # noqa: BLE001 - the fake API server restarting is no news here
                continue
            at = time.monotonic()
            for job in items:
                moves = json.loads(job["metadata"]["annotations"][MOVES_ANNOTATION])
                self.seen.setdefault(job["metadata"]["name"], (at, [tuple(m) for m in moves]))


def handover_cost(jobs: JobWatch, watch: NovaWatch, written: list[dict]) -> str:
    """The cost per handed-over node, split: nova-manage's own run (the time between two moves
    of one Job, as Nova's hypervisor list sampled every 0.5 s shows them), from the Job's
    appearance until Nova lists the node under its new host, and the Ironic write (the
    HandedOverNodes Events: seconds per node of each batch)."""
    runs, listed = [], []
    for first_seen, moves in jobs.seen.values():
        times = sorted(t for t in (watch.first(lambda s, n=n, d=d: s.hosts.get(n) == (d,), after=first_seen)
                                   for n, d in moves) if t is not None)
        listed += [t - first_seen for t in times]
        runs += [b - a for a, b in zip(times, times[1:])]
    writes = []
    for event in written:
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
