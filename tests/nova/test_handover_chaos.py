"""Handover chaos with real Nova: random faults during a retire and a long failure at
once, the handover's invariants checked every second, the seed printed so a failure replays
(`CHAOS_SEED=<seed>`).

The real operator, real Ironic (behind a forwarder that can make it slow), the real Nova stack
(its API behind a forwarder the operator alone goes through, so it can go away), member pods as
REAL nova-compute processes, handover Jobs' pods as REAL nova-manage runs (testbed/process_kubelet.py).

3 members, 12 nodes, 2 instance nodes each. One member retires (scale 3 -> 2) while another
fails for good (its nova-compute killed, its pod cannot start again): both hand their instance
nodes to the last one. For FAULT_SECONDS, every few seconds, one fault drawn by the seed:
- the operator killed and restarted, with Ironic slow (no plan for its first cycles) or not;
- a running handover Job's pod killed (SIGKILL);
- a handover Job deleted by someone;
- the novaManageConfig Secret broken, then restored (a blocker appearing and clearing);
- Nova's API away for the operator, then back;
- a scale change back up (the retire cancelled mid-way), then down again;
- a node of the retiring member busy (wait call-back) for a while, then settled;
- a half move injected (what nova-manage killed between its two saves leaves) on an instance
  node of the failed member while its handover holds it (no pod), Nova still listing it there.
The test is bounded by construction, not by a timed assertion: FAULT_SECONDS of faults
between a setup and a settling that each wait on conditions (generous bounds, stretched by
TEST_DEADLINE_SCALE); it prints how long each phase took (under 4 minutes in all on CI's two
cores, setup included).
Every second (two checks in a row, so that reading Kubernetes, Nova and Ironic one after the
other cannot make a violation up): no member has a pod while a Job of it runs, a pod of one of
its Jobs may run, or a node Ironic still gives it is listed under another host in Nova; no node
is in two running Job pods at once. Then the faults stop, and every node with an instance ends
with compute-node host == instance host == Ironic shard == the member that stays; a half move a
killed pod left (nova-manage killed between its two saves) must have been reported
HandoverIncomplete, and is finished by hand as the message says before that end is checked.
"""

from __future__ import annotations

import base64
import json
import os
import random
import threading
import time
from pathlib import Path

import pytest

from ironic_shard_operator.core.handover_job import MOVES_ANNOTATION
from testbed.ironic_service import IronicService, set_provision_state_directly_in_db
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, get_pool, patch_spec, pool_manifest,
)
from tests.support.switchable_proxy import SwitchableProxy

pytestmark = pytest.mark.nova

GRACE = 10      # failover.rebalanceAfterSeconds
AFTER = 20      # handover.afterFailureSeconds
POLL = 5
NODES = 12
FAULT_SECONDS = 50
SECRET = "nova-manage"
FAULTS = ("restart", "restart_slow", "kill_job_pod", "delete_job", "blocker", "nova_away", "scale_back",
          "busy_node", "half_move")


def test_handovers_keep_their_invariants_under_random_faults(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"handover chaos: seed {seed} (replay: CHAOS_SEED={seed})")
    rng = random.Random(seed)
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    names = handover_pool.fresh_pool(kube_api, ironic, "hx", NODES)
    pool, (m0, m1, m2), resource_class, shards = names.pool, names.members, names.resource_class, names.shards
    manage_conf = nova_stack.nova_conf.read_text()

    def set_manage_conf(text: str) -> None:
        client.patch(f"/api/v1/namespaces/{ns}/secrets/{SECRET}",
                     {"data": {"nova.conf": base64.b64encode(text.encode()).decode()}})

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as kubelet, \
            SwitchableProxy(ironic.url) as slow_ironic, SwitchableProxy(nova_stack.compute_url) as nova_api:
        operator = OperatorProcess(kube_api, ns, "op-chaos-0", tmp_path).start()
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_api.url(nova_stack.compute_url),
                                               ironic_url=slow_ironic.url(ironic.url)),
                       nova_conf=nova_stack.compute_conf(ironic.cloud))
        handover_pool.create_manage_secret(client, ns, SECRET, manage_conf)
        checker = InvariantChecker(client, ns, nova_stack, names)
        faults: list[str] = []
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": GRACE, "podPendingTimeoutSeconds": 10},
                ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": SECRET}}, "maxConcurrent": 2,
                          "afterFailureSeconds": AFTER}))
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards)
            instances = handover_pool.seed_instances(nova_stack, ironic, shards(), (m0, m1, m2), 2,
                                                     power_on=False)
            checker.instances = dict(instances)
            setup_done = time.monotonic()

            with checker:
                patch_spec(client, ns, pool, {"replicas": 2})  # m2 retires
                kubelet.hold(m1)  # m1 fails for good: killed, and no pod of its name starts again
                kubelet.kill(m1)
                chaos = Chaos(rng, client, ns, kubelet, nova_stack, ironic, names, instances, checker)
                fault_until, n = time.monotonic() + FAULT_SECONDS, 0
                while time.monotonic() < fault_until:
                    time.sleep(rng.uniform(3, 7))  # the fault's pace: the seed's, not a wait for a condition
                    fault = rng.choice(FAULTS)
                    n += 1
                    faults.append(fault)
                    if fault.startswith("restart"):
                        operator.kill()
                        if fault == "restart_slow":
                            slow_ironic.delay(5.0)
                        operator = OperatorProcess(kube_api, ns, f"op-chaos-{n}", tmp_path).start()
                        if fault == "restart_slow":
                            time.sleep(rng.uniform(8, 15))
                            slow_ironic.delay(0)
                    elif fault == "blocker":
                        set_manage_conf("[DEFAULT]\ndebug = true\n")
                        time.sleep(rng.uniform(5, 12))
                        set_manage_conf(manage_conf)
                    elif fault == "nova_away":
                        nova_api.off()
                        time.sleep(rng.uniform(5, 12))
                        nova_api.on()
                    else:
                        getattr(chaos, fault)()
                faults_done = time.monotonic()
                print(f"handover chaos: faults {faults}; {chaos.done}; setup {setup_done - started:.0f}s, "
                      f"faults {faults_done - setup_done:.0f}s")

                # The faults stop. A half move (a killed pod's, or injected) is reported, then
                # finished by hand as its message says.
                def settled() -> bool:
                    half = checker.half_moves()
                    if half:
                        reported = json.dumps((get_pool(client, ns, pool).get("status") or {}).get("handover"))
                        for node, host in half.items():
                            if f"UPDATE instances SET host='{host}'" in reported and node in reported:
                                nova_stack.cell_sql(f"UPDATE instances SET host='{host}' "
                                                    f"WHERE uuid='{instances[node]}' AND deleted=0")
                                checker.finished_by_hand.add(node)
                        return False
                    hosts = nova_stack.hypervisor_hosts()
                    final = shards()
                    return all(final[node] == m0 and hosts.get(node) == [m0] for node in instances) \
                        and not client.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
                wait(settled, timeout=240, interval=2, what="every instance node with the member that stays")
            assert not checker.violations, checker.violations[:5]
            assert checker.checks > FAULT_SECONDS // 2, f"only {checker.checks} checks ran"
            for node, server in instances.items():
                assert handover_pool.server_host(nova_stack, server, (m0, m1, m2)) == m0, (node, server)
            print(f"handover chaos: seed {seed}, {len(faults)} faults, {checker.checks} checks, "
                  f"half moves finished by hand: {sorted(checker.finished_by_hand)}; setup "
                  f"{setup_done - started:.0f}s, faults {faults_done - setup_done:.0f}s, settled "
                  f"{time.monotonic() - faults_done:.0f}s after; whole test {time.monotonic() - started:.0f}s")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)
            print(f"handover chaos: seed {seed} (replay: CHAOS_SEED={seed}), faults {faults}")


class Chaos:
    """The faults that act on the pool's world (the module doc); each one acts only where it
    means what it says, else it does nothing (`done` says what each did)."""

    def __init__(self, rng: random.Random, client, ns: str, kubelet: ProcessKubelet, nova: NovaStack,
                 ironic: IronicService, names: handover_pool.PoolNames, instances: dict[str, str],
                 checker: InvariantChecker) -> None:
        self.rng, self.client, self.ns, self.kubelet, self.nova, self.ironic = rng, client, ns, kubelet, nova, ironic
        self.names, self.instances, self.checker = names, instances, checker
        self.done: list[str] = []

    def kill_job_pod(self) -> None:
        running = [p["metadata"]["name"] for p in job_pods(self.client, self.ns)
                   if p["status"].get("phase") == "Running"]
        if running:
            try:
                self.kubelet.kill(self.rng.choice(running))
                self.done.append("job pod killed")
            except ValueError:  # it ended meanwhile
                pass

    def delete_job(self) -> None:
        jobs = self.client.get(f"/apis/batch/v1/namespaces/{self.ns}/jobs")["items"]
        if jobs:
            self.client.delete(f"/apis/batch/v1/namespaces/{self.ns}/jobs/"
                               f"{self.rng.choice(jobs)['metadata']['name']}", propagationPolicy="Background")
            self.done.append("job deleted")

    def scale_back(self) -> None:
        """Scaled back up (the retire cancelled mid-way), then down again."""
        patch_spec(self.client, self.ns, self.names.pool, {"replicas": 3})
        time.sleep(self.rng.uniform(4, 10))
        patch_spec(self.client, self.ns, self.names.pool, {"replicas": 2})
        self.done.append("scaled back up and down")

    def busy_node(self) -> None:
        """A node of the retiring member mid-operation (a rebuild's wait call-back), then settled
        back to the state it had."""
        mine = sorted(n for n, o in self.names.shards().items() if o == self.names.members[2])
        if not mine:
            return
        node = self.rng.choice(mine)
        before = self.ironic.request("GET", f"/nodes/{node}?fields=provision_state,target_provision_state").json()
        set_provision_state_directly_in_db(self.ironic, [node], "wait call-back", "active")
        time.sleep(self.rng.uniform(4, 10))
        set_provision_state_directly_in_db(self.ironic, [node], before["provision_state"],
                                           before["target_provision_state"])
        self.done.append(f"node {node} busy")

    def half_move(self) -> None:
        """A half move, as only nova-manage killed between its saves leaves one, once there is a
        node for it within 10 s (else nothing): see `_half_move`."""
        deadline = time.monotonic() + 10
        while not self._half_move() and time.monotonic() < deadline:
            time.sleep(0.5)

    def _half_move(self) -> bool:
        """On an instance node of the failed member while its handover holds it (status.handover
        says held, no pod object of its name), that Nova still lists under it and no Job pod
        carries: its compute node to the member that stays, its instance left on the failed one."""
        m0, m1 = self.names.members[0], self.names.members[1]
        section = (get_pool(self.client, self.ns, self.names.pool).get("status") or {}).get("handover") or {}
        if not any(e.get("member") == m1 and e.get("held") for e in section.get("sources") or ()) \
                or m1 in self.checker.member_pods():
            return False
        hosts = self.nova.hypervisor_hosts()
        carried = {node for pod in job_pods(self.client, self.ns)
                   if pod["status"].get("phase") not in ("Succeeded", "Failed")
                   for node, _ in json.loads(pod["metadata"]["annotations"][MOVES_ANNOTATION])}
        owners = self.names.shards()
        candidates = sorted(n for n in self.instances if owners.get(n) == m1 and hosts.get(n) == [m1]
                            and n not in carried)
        if not candidates:
            return False
        node = self.rng.choice(candidates)
        self.nova.half_move(node, m0)
        self.done.append(f"half move of {node}")
        return True


def job_pods(client, ns: str) -> list[dict]:
    return client.get(f"/api/v1/namespaces/{ns}/pods",
                      labelSelector="ironicshards.io/component=handover")["items"]


class InvariantChecker:
    """Checks the handover invariants every second in a thread (module doc); a violation counts
    only when two checks in a row see it."""

    def __init__(self, client, ns: str, nova: NovaStack, names: handover_pool.PoolNames) -> None:
        self.client, self.ns, self.nova, self.names = client, ns, nova, names
        self.instances: dict[str, str] = {}
        self.violations: list[str] = []
        self.finished_by_hand: set[str] = set()
        self.checks = 0
        self._last: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-invariants")

    def __enter__(self) -> InvariantChecker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def half_moves(self) -> dict[str, str]:
        """node -> the host of its compute node, for instance nodes whose instance Nova places
        on another host (a nova-manage killed between its two saves)."""
        hosts = self.nova.hypervisor_hosts()
        found = {}
        for node, server in self.instances.items():
            listed = hosts.get(node) or []
            if len(listed) == 1:
                placed = handover_pool.server_host(self.nova, server, self.names.members)
                if placed is not None and placed != listed[0]:
                    found[node] = listed[0]
        return found

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                seen = self._violations()
            except Exception:  # noqa: BLE001 - a failed read is a missing check, not a finding
                continue
            self.checks += 1
            self.violations += sorted(seen & self._last)  # seen twice in a row
            self._last = seen

    def member_pods(self) -> set[str]:
        """The pool's member pod objects."""
        return {p["metadata"]["name"] for p in self.client.get(
            f"/api/v1/namespaces/{self.ns}/pods", labelSelector=f"ironicshards.io/pool={self.names.pool}")["items"]}

    def _violations(self) -> set[str]:
        # Jobs, their pods, Nova and Ironic first, member pods last: a member pod seen after
        # them existed when they were read (module doc).
        jobs = self.client.get(f"/apis/batch/v1/namespaces/{self.ns}/jobs",
                               labelSelector="ironicshards.io/component=handover")["items"]
        running_pods = [p for p in job_pods(self.client, self.ns)
                        if p["status"].get("phase") not in ("Succeeded", "Failed")]
        hosts = self.nova.hypervisor_hosts()
        shards = self.names.shards()
        member_pods = self.member_pods()
        found = set()
        in_flight: dict[str, str] = {}
        for job in jobs:
            if not any(c.get("status") == "True" and c["type"] in ("Complete", "Failed")
                       for c in (job.get("status") or {}).get("conditions") or ()):
                in_flight.setdefault(job["metadata"]["labels"]["ironicshards.io/member"], f"Job {job['metadata']['name']}")
        carried: dict[str, str] = {}
        for pod in running_pods:
            source = pod["metadata"]["labels"]["ironicshards.io/member"]
            in_flight.setdefault(source, f"pod {pod['metadata']['name']}")
            for node, _ in json.loads(pod["metadata"]["annotations"][MOVES_ANNOTATION]):
                if node in carried:
                    found.add(f"node {node} in two running Job pods: {carried[node]} and {pod['metadata']['name']}")
                carried[node] = pod["metadata"]["name"]
        for node in self.instances:
            listed = hosts.get(node) or []
            if shards.get(node) and listed and listed != [shards[node]]:
                in_flight.setdefault(shards[node], f"node {node} moved in Nova, not in Ironic")
        for member, why in in_flight.items():
            if member in member_pods:
                found.add(f"member {member} has a pod while {why}")
        return found
