"""What the real-Nova handover scenarios share: a pool of three real nova-compute members with
spec.handover brought up and checked against Nova, the questions they ask Nova about it, and
the report and clean-up at their end (tests/nova/test_handover_*.py)."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from testbed.ironic_service import IronicService, available_nodes, shards_of, unique_resource_class
from testbed.operator_objects import install_crd
from testbed.nova_stack import NovaStack
from testbed.waiting import DEADLINE_SCALE, wait_for
from tests.nova.nova_watch import NovaWatch
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import POOLS, OperatorProcess, get_pool, ready_members

Shards = Callable[[], dict[str, str | None]]
# The longest time between two samples of Nova a history may have (a node's two listings
# shorter than that could go unseen); stretched with the other deadlines on a loaded machine,
# where one read of Nova's API can itself take seconds.
MAX_SAMPLE_GAP = 6.0 * DEADLINE_SCALE


@dataclass(frozen=True)
class PoolNames:
    """A fresh pool name, its three members, and `count` available Ironic nodes of a fresh
    resource class (the pool's selector)."""

    pool: str
    members: tuple[str, str, str]
    resource_class: str
    nodes: list[str]
    ironic: IronicService

    def shards(self) -> dict[str, str | None]:
        """Each node's Ironic shard."""
        return shards_of(self.ironic, self.resource_class)


def fresh_pool(kube_api: KubeAPI, ironic: IronicService, prefix: str, count: int) -> PoolNames:
    """Skips off the test bed's control plane (the Job's pod runs on the process kubelet); installs the
    CRD and makes the nodes available."""
    if kube_api.plane is None:
        pytest.skip("the handover Job's pod runs on the process kubelet (the test bed's control plane only)")
    pool = f"{prefix}{uuid.uuid4().hex[:6]}"
    install_crd(kube_api.client)
    resource_class = unique_resource_class(prefix)
    members = (f"{pool}-0", f"{pool}-1", f"{pool}-2")
    return PoolNames(pool, members, resource_class, available_nodes(ironic, count, resource_class), ironic)


def create_manage_secret(client, ns: str, name: str, nova_conf: str) -> None:
    """The novaManageConfig Secret: `nova_conf` under key nova.conf."""
    client.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {"nova.conf": base64.b64encode(nova_conf.encode()).decode()}})


def seed_instances(nova: NovaStack, ironic: IronicService, owners: dict[str, str | None],
                   members: tuple[str, ...], per_member: int, *, power_on: bool = True) -> dict[str, str]:
    """An instance on the first `per_member` nodes (by uuid) each of `members` owns: recorded in
    Nova first, then in Ironic, as a boot records it, and powered on (waited for) as a deploy
    leaves the node. node -> instance uuid."""
    instances = {}
    for member in members:
        nodes = sorted(n for n, o in owners.items() if o == member)[:per_member]
        for node, instance in zip(nodes, nova.seed_instances(member, nodes) if nodes else ()):  # one run per member
            instances[node] = instance
            ironic.request("PATCH", f"/nodes/{node}", json=[
                {"op": "add", "path": "/instance_uuid", "value": instance}])
            if power_on:
                ironic.request("PUT", f"/nodes/{node}/states/power", json={"target": "power on"})
    if power_on:
        wait_for(lambda: all(ironic.request("GET", f"/nodes/{n}?fields=power_state").json()["power_state"]
                             == "power on" for n in instances), timeout=60, interval=0.5,
                 what="the instance nodes powered on")
    return instances


def nova_agrees(nova: NovaStack, shards: Shards) -> bool:
    """Nova lists every node of `shards()` under exactly its shard's compute."""
    listed = nova.hypervisor_hosts()
    return all(listed.get(node, []) == [shard] for node, shard in shards().items())


def server_host(nova: NovaStack, server: str, hosts: tuple[str, ...]) -> str | None:
    """The host Nova places `server` on (the summary list filtered by host: the seeded
    instances have no network cache, which the detail view needs); None unless exactly one."""
    found = [h for h in hosts if any(s["id"] == server for s in nova._get_all(
        f"/servers?all_tenants=1&host={h}", "servers"))]
    return found[0] if len(found) == 1 else None


def wait_for_members(kube_api: KubeAPI, ns: str, nova: NovaStack, pool: str, members: tuple[str, ...],
                     shards: Shards, *, map_hosts_by_hand: bool = False) -> None:
    """Every member's nova-compute up and mapped to a cell, its pod Ready, the nodes adopted and
    Nova listing each under its shard's compute. The operator's host-mapping Jobs map the
    members' hosts (the pool's novaManageConfig), unless `map_hosts_by_hand` (a novaManageConfig
    nova-manage cannot use): then the test runs the deployment's host discovery itself."""
    wait = kube_api.wait_for
    wait(lambda: all(nova.compute_services().get(m, {}).get("state") == "up" for m in members),
         timeout=120, interval=1, what="the nova-compute services up")
    if map_hosts_by_hand:
        nova.discover_hosts()
    wait(lambda: ready_members(kube_api.client, ns, pool) == sorted(members), timeout=60, what="the members Ready")
    # Adopted once each host is mapped (no node goes to a host Nova cannot schedule to): a Job's pod after the Ready
    wait(lambda: set(shards().values()) == set(members), timeout=120, what="nodes adopted")
    wait(lambda: nova_agrees(nova, shards), timeout=12 * nova.timings["update_resources_interval"], interval=2,
         what="every node listed under its shard's compute (the hosts mapped to a cell)")
    if not map_hosts_by_hand:
        wait(lambda: mapped_members(kube_api.client, ns, pool) >= set(members), timeout=60, interval=1,
             what="status.hostMapping: every member Mapped")
        wait(lambda: not host_mapping_jobs(kube_api.client, ns), timeout=60, interval=1,
             what="the host-mapping Jobs deleted once their outcome is on record")


def mapped_members(client, ns: str, pool: str) -> set[str]:
    """The members status.hostMapping records as mapped to a cell."""
    section = get_pool(client, ns, pool).get("status", {}).get("hostMapping") or {}
    return {e["member"] for e in section.get("members") or () if e.get("state") == "Mapped"}


def host_mapping_jobs(client, ns: str) -> list[dict]:
    """The namespace's host-mapping Jobs (the operator's, core/host_mapping.py)."""
    return client.get(f"/apis/batch/v1/namespaces/{ns}/jobs",
                      labelSelector="ironicshards.io/component=host-mapping")["items"]


def assert_each_moved_once(watch: NovaWatch, nodes: list[str], source: str, final: dict[str, str | None]) -> None:
    """Nova the whole time: never a node under two computes, each of `nodes` listed first under
    `source`, then once under its final owner, with no other change. A read of Nova's API that
    failed (a reset connection on a loaded box) is a missing sample, not a finding: the
    history must stay dense all the same (no gap of MAX_SAMPLE_GAP seconds, at most one read
    in 20 failed)."""
    gaps = [b.at - a.at for a, b in zip(watch.samples, watch.samples[1:])]
    assert len(watch.errors) <= len(watch.samples) // 20 and max(gaps, default=0.0) < MAX_SAMPLE_GAP, \
        (f"{len(watch.errors)} failed reads of {len(watch.samples)}, longest gap {max(gaps, default=0.0):.1f}s",
         watch.errors[:3])
    twice, node = watch.longest_listed_twice()
    assert node is None, f"node {node} listed under two computes for {twice:.1f}s"
    for n in nodes:
        seen = [s.hosts[n] for s in watch.samples if s.hosts[n]]
        changes = sum(1 for a, b in zip(seen, seen[1:]) if a != b)
        assert changes == 1 and seen[0] == (source,) and seen[-1] == (final[n],), (n, seen)


def report_and_delete(kube_api: KubeAPI, ns: str, pool: str, operator: OperatorProcess) -> None:
    """The pool's status, the namespace's Events and the operator's log printed; the pool
    deleted (waited for) and the operator stopped, whatever fails."""
    client = kube_api.client
    pools = {p["metadata"]["name"]: p for p in client.get(POOLS.format(ns=ns))["items"]}
    print("----- status -----\n" + (repr(pools[pool].get("status")) if pool in pools else "(no such pool)"))
    print("----- events -----\n" + "\n".join(f"{e.get('reason')}: {e.get('message')}" for e in
                                            client.get(f"/api/v1/namespaces/{ns}/events")["items"]))
    try:
        if pool in pools:  # a pool the API server refused never existed: the test's own error stands
            client.delete(f"{POOLS.format(ns=ns)}/{pool}")
        kube_api.wait_for(lambda: not client.get(POOLS.format(ns=ns))["items"], timeout=60, what="the pool deleted")
    finally:
        print(f"----- operator -----\n{operator.log()[-20000:]}")
        operator.stop()


class PodSightings:
    """Every time a pod of `names` was seen (polled every `period` s in a thread): name ->
    [time.monotonic()]. Pods of a held member must never be seen while it is held."""

    def __init__(self, client, ns: str, names: set[str], period: float = 0.3) -> None:
        self.client, self.ns, self.names, self.period = client, ns, names, period
        self.seen: dict[str, list[float]] = {name: [] for name in names}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-sightings")

    def __enter__(self) -> PodSightings:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def between(self, name: str, start: float, end: float) -> list[float]:
        return [t for t in self.seen[name] if start <= t <= end]

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                items = self.client.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
            except Exception:  # noqa: BLE001 - a missed poll is a missing sample, not a finding
                continue
            at = time.monotonic()
            for pod in items:
                if pod["metadata"]["name"] in self.names:
                    self.seen[pod["metadata"]["name"]].append(at)
