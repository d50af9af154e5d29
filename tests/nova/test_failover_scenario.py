"""Failover as Nova sees it: the real operator, real Ironic, the real Nova stack, and member pods
run as REAL nova-compute processes (testbed/process_kubelet.py) with exactly the config the
operator renders (the pool's nova.conf Secret, then the member's overlay ConfigMap).

Nova's own hypervisor list is the judge: every node under exactly the compute whose member owns
its shard; a member replaced within the grace moves nothing and is not forced down; a killed
member whose outage outlasts the grace keeps its pinned nodes, its free nodes go to the others
(and come back), its service is forced down and cleared when it is back; a member whose
readiness probe fails while its nova-compute lives on and heartbeats (Nova lists it up) past the
grace is forced down, and none of its free nodes changes shard before Nova lists it forced down
(invariant 13: Ironic and Nova sampled together), then comes back with them; a member fenced
while its nova-compute runs (a certain failure) is counted out at once, forced down before any of
its free nodes moves, and comes back once unfenced; a member removed by
scale-down leaves no service behind, even when Nova's API was away while it went; a node with an
instance given another live member's shard by hand is given back at once to its instance's
host (Nova and the instance agree), with an Event. The pool has no
novaManageConfig: new members' hosts (the first three, and member 2's identity taken up again
with a new Nova service) are reported not mapped to a cell (Degraded HostNotMapped, a Warning
each), and given no node, until the test maps them by hand. A sampler watches Nova the whole
time: no node is ever listed under two computes for longer than one update interval.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.ironic_service import IronicService, available_nodes, shards_of, unique_resource_class
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets, install_crd
from testbed.ports import free_port
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from testbed.waiting import DEADLINE_SCALE
from tests.nova.nova_watch import NovaWatch
from tests.support.switchable_proxy import SwitchableProxy
from tests.support.kube_api import KubeAPI
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, http_get, member_pods, patch_spec,
    pool_manifest, posted_events, ready_members, settle,
)

pytestmark = pytest.mark.nova

# failover.rebalanceAfterSeconds until step 2, stretched with the tests' deadlines: step 2 needs
# a killed member's replacement back within it, which took over 30 s on a loaded two-core box.
RESTART_GRACE = int(30 * DEADLINE_SCALE)
# failover.rebalanceAfterSeconds from step 3 on (patched in before it): the outages there are
# meant to outlast it, and each step waits for it.
GRACE = 15
POLL = 5            # ironic.pollIntervalSeconds
NODES = 30
CLOUD = "nova-and-ironic"



def clouds_yaml(stack: NovaStack, noauth_ironic: IronicService, compute_url: str, ironic_url: str | None = None) -> str:
    """One cloud with both endpoints, as a Keystone catalog would give them (Ironic's at
    `ironic_url` when given: a forwarder in front of it)."""
    cloud = stack.cloud_config()
    cloud.pop("compute_api_version")  # the adapter sets its microversion per request
    cloud["auth"]["endpoint"] = cloud["compute_endpoint_override"] = compute_url
    cloud["baremetal_endpoint_override"] = ironic_url or noauth_ironic.url
    return yaml.safe_dump({"clouds": {CLOUD: cloud}})


def test_failover_as_nova_sees_it(kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack,
                                  noauth_ironic: IronicService, tmp_path: Path) -> None:
    client, ns, wait = kube_api.client, kube_namespace, kube_api.wait_for
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    pool = f"fo{uuid.uuid4().hex[:6]}"  # Nova hosts outlive the test in the session's stack
    m0, m1, m2 = (f"{pool}-{i}" for i in range(3))

    install_crd(kube_api.client)
    resource_class = unique_resource_class("failover")
    nodes = available_nodes(noauth_ironic, NODES, resource_class)
    metrics_port = free_port()
    unready = tmp_path / "unready"  # a file named after a pod here fails its readiness probe
    unready.mkdir()

    def shards() -> dict[str, str | None]:
        return shards_of(noauth_ironic, resource_class)

    def nova_agrees() -> bool:
        """Nova lists every node under exactly the compute whose member owns its shard."""
        listed = nova_stack.hypervisor_hosts()
        return all(listed.get(node, []) == [shard] for node, shard in shards().items())

    def nova_status() -> dict:
        return get_pool(client, ns, pool).get("status", {}).get("nova") or {}

    def degraded() -> dict:
        return condition(get_pool(client, ns, pool), "Degraded")

    def mapped_members() -> set[str]:
        section = get_pool(client, ns, pool).get("status", {}).get("hostMapping") or {}
        return {e["member"] for e in section.get("members") or () if e["state"] == "Mapped"}

    def nova_metric(name: str, **labels: str) -> float:
        """A sample of the operator's /metrics, as Prometheus parses it (0 when absent)."""
        wanted = {**labels, "pool": f"{ns}/{pool}"}
        return next((sample.value for family in text_string_to_metric_families(
                        http_get(metrics_port, "/metrics"))
                     for sample in family.samples if sample.name == name and sample.labels == wanted), 0.0)

    with SwitchableProxy(nova_stack.compute_url) as nova_api, \
            ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as kubelet, \
            OperatorProcess(kube_api, ns, "op-nova", tmp_path, METRICS_PORT=str(metrics_port)) as operator:
        create_secrets(client, ns, clouds_yaml(nova_stack, noauth_ironic, nova_api.url(nova_stack.compute_url)),
                       nova_conf=nova_stack.compute_conf(noauth_ironic.cloud))
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": RESTART_GRACE}, ironic={"pollIntervalSeconds": POLL},
                readinessProbe={"exec": {"command": ["sh", "-c", f'test ! -e {unready}/"$HOSTNAME"']},
                                "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 1}))

            # 1. Three real computes come up: new Nova hosts, not mapped to a cell. Without a
            # novaManageConfig the operator maps none: it says so (HostNotMapped, with the fix)
            # until the deployment's host discovery has mapped them.
            wait(lambda: all(nova_stack.compute_services().get(m, {}).get("state") == "up"
                             for m in (m0, m1, m2)), timeout=120, interval=1,
                 what="three nova-compute services up")
            wait(lambda: ready_members(client, ns, pool) == [m0, m1, m2], timeout=60,
                 what="three Ready member pods")
            reported = wait(lambda: (c := degraded())["reason"] == "HostNotMapped" and c, timeout=6 * POLL,
                            what="Degraded HostNotMapped")
            assert all(m in reported["message"] for m in (m0, m1, m2)), reported
            assert "nova-manage cell_v2 discover_hosts --by-service" in reported["message"]
            assert {m for m in (m0, m1, m2) for e in events(client, ns, "HostNotMapped") if m in e["message"]} \
                == {m0, m1, m2}
            assert not [j for j in client.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]]
            # No node goes to a host Nova cannot schedule to: Nova would list it under no compute
            assert not set(shards().values()) & {m0, m1, m2}, "nodes given to members not mapped to a cell"
            nova_stack.discover_hosts()
            wait(lambda: mapped_members() == {m0, m1, m2}, timeout=4 * interval, interval=1,
                 what="status.hostMapping: every member Mapped once discovered by hand")
            wait(lambda: set(shards().values()) == {m0, m1, m2}, timeout=60, what="nodes adopted")
            wait(nova_agrees, timeout=6 * interval, interval=2,
                 what="every node listed under the compute of its shard")
            up_at = time.monotonic() - started
            assert wait(nova_status, timeout=2 * POLL, what="status.nova")["state"] == "Enabled"

            # Instances on members 0 and 1 (recorded in Nova, then in Ironic, as a boot does).
            owners = shards()
            pinned = {**{n: m1 for n in sorted(n for n, o in owners.items() if o == m1)[:3]},
                      **{n: m0 for n in sorted(n for n, o in owners.items() if o == m0)[:2]}}
            for host in (m0, m1):  # one run of the seeding script per host
                mine = [n for n, h in pinned.items() if h == host]
                for node, instance in zip(mine, nova_stack.seed_instances(host, mine)):
                    noauth_ironic.request("PATCH", f"/nodes/{node}", json=[
                        {"op": "add", "path": "/instance_uuid", "value": instance}])
            pinned_on_m1 = {n for n, o in pinned.items() if o == m1}
            service_m1 = nova_stack.compute_services()[m1]["id"]
            service_m2 = nova_stack.compute_services()[m2]["id"]
            nova_stack.record_rss()

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}) as watch:
                # 2. Member 0's process dies and its replacement is back within the grace:
                # nothing moves, its service is not forced down.
                before = shards()
                old_uid = member_pods(client, ns, pool)[m0]["metadata"]["uid"]
                restarted_at = time.monotonic()
                kubelet.kill(m0)
                wait(lambda: (p := member_pods(client, ns, pool).get(m0)) and p["metadata"]["uid"]
                     != old_uid and m0 in ready_members(client, ns, pool), timeout=RESTART_GRACE,
                     what="member 0 replaced and Ready within the grace")
                back_within = time.monotonic() - restarted_at
                assert shards() == before
                assert not watch.forced_down_times(m0)

                # 3. Member 1's process dies; its replacement is slow to start (held). At the same
                # time member 2's readiness probe starts failing while its nova-compute lives on:
                # it heartbeats, Nova lists it up, the scheduler could still place builds there.
                # Both outages outlast the grace, from here on the shorter GRACE.
                patch_spec(client, ns, pool, {"failover": {"rebalanceAfterSeconds": GRACE}})
                wait(lambda: get_pool(client, ns, pool).get("status", {}).get("observedGeneration")
                     == get_pool(client, ns, pool)["metadata"]["generation"], timeout=4 * POLL,
                     what="the shorter grace observed")
                free_m1 = {n for n, o in shards().items() if o == m1} - pinned_on_m1
                free_m2 = {n for n, o in shards().items() if o == m2}
                old_uid = member_pods(client, ns, pool)[m1]["metadata"]["uid"]
                kubelet.hold(m1)
                order = ShardsAndForcedDown(noauth_ironic, resource_class, nova_stack, m2, set(free_m2)).start()
                killed_at = time.monotonic()
                kubelet.kill(m1)
                (unready / m2).touch()
                wait(lambda: m2 not in ready_members(client, ns, pool), timeout=30, interval=0.5,
                     what="member 2 NotReady (its readiness probe fails)")
                unready_at = time.monotonic()
                assert kubelet.container(m2).process.alive()
                wait(lambda: (p := member_pods(client, ns, pool).get(m1))
                     and p["metadata"]["uid"] != old_uid, timeout=60, what="a new pod for member 1")
                # After the grace their free nodes are re-owned in Ironic, then listed by Nova
                # under their new owners within one update interval; their services are forced
                # down (member 2's before any of its free nodes moved).
                wait(lambda: not free_m1 & {n for n, o in shards().items() if o == m1},
                     timeout=GRACE + 4 * POLL, interval=0.5, what="member 1's free nodes re-owned")
                moved_at = time.monotonic()
                wait(lambda: not free_m2 & {n for n, o in shards().items() if o == m2},
                     timeout=GRACE + 4 * POLL, interval=0.5, what="member 2's free nodes re-owned")
                order.stop()
                wait(nova_agrees, timeout=2 * interval + 5, interval=2,  # + the tracker's own work
                     what="the re-owned nodes listed under their new computes")
                listed_at = time.monotonic()
                wait(lambda: watch.forced_down_times(m1), timeout=2 * POLL,
                     what="member 1's service forced down")
                assert {n: o for n, o in shards().items() if n in pinned_on_m1} == \
                    {n: m1 for n in pinned_on_m1}

                # It comes back (same pod name, same Nova host): flag cleared, nodes return.
                kubelet.release(m1)
                back = wait(lambda: (p := member_pods(client, ns, pool).get(m1)) and
                            m1 in ready_members(client, ns, pool) and p, timeout=90,
                            what="member 1 Ready again")
                ready_at = time.monotonic()
                wait(lambda: not nova_stack.compute_services()[m1]["forced_down"], timeout=2 * POLL,
                     what="forced_down of member 1 cleared")
                cleared_at = time.monotonic()
                # Member 2's probe passes again: Ready, its flag cleared.
                (unready / m2).unlink()
                wait(lambda: m2 in ready_members(client, ns, pool), timeout=60, what="member 2 Ready again")
                wait(lambda: not nova_stack.compute_services()[m2]["forced_down"], timeout=2 * POLL,
                     what="forced_down of member 2 cleared")
                # Invariant 13: member 2 heartbeated past its grace; no free node left it before
                # Nova listed it forced down (Ironic read first, then Nova, in every sample).
                forced_m2 = min(watch.forced_down_times(m2))
                assert forced_m2 >= unready_at + GRACE - 2, "member 2 forced down within its grace"
                assert any(s.services.get(m2, {}).get("state") == "up" for s in watch.samples
                           if unready_at + GRACE - 10 <= s.at < forced_m2), "member 2's service was not up past its grace"
                assert order.moved_while_up == [], order.moved_while_up[:3]
                assert order.samples > 0 and order.first_moved is not None, (order.samples, order.first_moved)
                # Both get their share of free nodes back.
                wait(lambda: sorted(Counter(shards().values()).values()) == [NODES // 3] * 3,
                     timeout=4 * POLL, what="free nodes back on members 1 and 2")
                wait(nova_agrees, timeout=3 * interval, interval=2,
                     what="Nova listing every node under its owner again")
                assert back["metadata"]["uid"] != old_uid
                assert nova_stack.compute_services()[m1]["id"] == service_m1  # same Nova service

                # 3b. A certain failure does not wait for the grace: member 2 fenced
                # (spec.fencedMembers, as `kubectl ics fence` writes it) while its nova-compute
                # runs and heartbeats. It is counted out at once: its service forced down "at
                # once" (not after the grace), and none of its free nodes leaves it before Nova
                # lists it forced down (invariant 13, sampled as in step 3); then unfenced, back.
                free_m2 = {n for n, o in shards().items() if o == m2}
                fenced_order = ShardsAndForcedDown(noauth_ironic, resource_class, nova_stack, m2,
                                                   set(free_m2)).start()
                fenced_at = time.monotonic()
                patch_spec(client, ns, pool, {"fencedMembers": [m2]})
                wait(lambda: not free_m2 & {n for n, o in shards().items() if o == m2},
                     timeout=GRACE + 4 * POLL, interval=0.5, what="fenced member 2's free nodes re-owned")
                fenced_moved_at = time.monotonic()
                fenced_order.stop()
                counted = wait(lambda: [e for e in events(client, ns, "MemberCountedOut") if m2 in e["message"]],
                               timeout=2 * POLL, what="MemberCountedOut for member 2")
                assert "spec.fencedMembers" in counted[0]["message"]
                at_once = wait(lambda: [e for e in events(client, ns, "ForcedDown")
                                        if m2 in e["message"] and "at once" in e["message"]],
                               timeout=2 * POLL, what="member 2 forced down at once (counted out, not by the grace)")
                assert fenced_order.moved_while_up == [], fenced_order.moved_while_up[:3]
                assert fenced_order.first_moved is not None and fenced_order.first_forced is not None
                patch_spec(client, ns, pool, {"fencedMembers": []})  # as `kubectl ics unfence` leaves it
                wait(lambda: m2 in ready_members(client, ns, pool), timeout=90, what="member 2 unfenced and Ready")
                wait(lambda: not nova_stack.compute_services()[m2]["forced_down"], timeout=4 * POLL,
                     what="forced_down of member 2 cleared once unfenced")
                wait(lambda: sorted(Counter(shards().values()).values()) == [NODES // 3] * 3,
                     timeout=4 * POLL, what="free nodes back on member 2")
                wait(nova_agrees, timeout=3 * interval, interval=2, what="Nova agreeing after the fence")

                # 4. Scale to 2 while Nova's API, and the Placement this cloud names behind the
                # same address, are away from the operator: member 2 is live, so its free nodes
                # leave it only by guarded moves, which never write blind (Placement not
                # answering): they stay, and so does its pod. Once both answer again, member 2
                # (no instance) goes and its service is deleted.
                kept_free = {n for n, o in shards().items() if o == m2}
                nova_api.off()
                patch_spec(client, ns, pool, {"replicas": 2})
                unavailable = wait(lambda: (s := nova_status()).get("state") == "Unavailable" and s,
                                   timeout=4 * POLL, what="status.nova Unavailable")
                assert "not answering" in unavailable["message"]
                settle(3 * POLL)  # three polls: a blind write would have happened by now
                assert kept_free and {n for n, o in shards().items() if o == m2} == kept_free
                assert m2 in member_pods(client, ns, pool)
                assert m2 in nova_stack.compute_services()  # nobody could delete it yet
                nova_api.on()
                back_on = time.monotonic()
                wait(lambda: set(member_pods(client, ns, pool)) == {m0, m1}, timeout=90,
                     what="member 2's pod removed once Placement answers")
                wait(lambda: m2 not in nova_stack.compute_services(), timeout=60 + 2 * interval,
                     interval=1, what="member 2's service deleted once Nova answers")
                deleted_after = time.monotonic() - back_on
                wait(nova_agrees, timeout=3 * interval, interval=2, what="Nova agreeing at 2 members")
                assert set(shards().values()) == {m0, m1}
                nova_stack.record_rss()

                # 5. Someone sets the shard of a node with an instance by hand, to the other live
                # member: no compute serves it any more, while Nova and its instance still name m1,
                # a live member. The audit reports it misplaced and gives it back to m1 at once,
                # without spec.nova.repairMisplaced (Event MisplacedNodeReturned), then clears.
                misplaced = sorted(pinned_on_m1)[0]
                noauth_ironic.request("PATCH", f"/nodes/{misplaced}", json=[
                    {"op": "add", "path": "/shard", "value": m0}])
                wait(lambda: shards()[misplaced] == m1, timeout=2 * interval + 3 * POLL,
                     what="the misplaced node given back to its instance's host")
                (returned,) = posted_events(client, ns, "MisplacedNodeReturned")
                assert f"node {misplaced} from {m0} back to {m1}" in returned["message"], returned
                wait(lambda: not any(nova_status().get("findings", {}).values()),
                     timeout=2 * interval + 2 * POLL, what="the audit clear again")
                wait(lambda: degraded()["status"] == "False", timeout=2 * POLL,
                     what="Degraded cleared")
                assert nova_metric("ironic_shard_nova_actions_total", action="misplaced_returned") == 1
                assert nova_metric("ironic_shard_nova_actions_total", action="misplaced_handed_over") == 0

                # 6. Scale back to 3: member 2's identity returns, with a new Nova service (step 4
                # deleted the old one, and Nova its host mapping): a new host, reported not mapped
                # until it is mapped by hand, however mapped its name was before.
                patch_spec(client, ns, pool, {"replicas": 3})
                wait(lambda: nova_stack.compute_services().get(m2, {}).get("state") == "up", timeout=120,
                     interval=1, what="member 2's new service up")
                assert nova_stack.compute_services()[m2]["id"] != service_m2
                again = wait(lambda: (c := degraded())["reason"] == "HostNotMapped" and c, timeout=6 * POLL,
                             what="Degraded HostNotMapped for member 2's new service")
                assert m2 in again["message"] and m0 not in again["message"]
                assert m2 not in shards().values(), "nodes given to member 2 before its new host was mapped"
                nova_stack.discover_hosts()
                wait(lambda: mapped_members() == {m0, m1, m2} and degraded()["status"] == "False",
                     timeout=4 * interval + 2 * POLL, interval=1, what="member 2 mapped again, Degraded cleared")
                wait(nova_agrees, timeout=4 * interval, interval=2, what="Nova agreeing at 3 members again")

            # Nova over the whole scenario.
            assert not watch.errors, watch.errors[:3]
            twice, node = watch.longest_listed_twice()
            assert twice <= interval, f"node {node} listed under two computes for {twice:.0f}s"
            assert watch.where(pinned_on_m1) == {(m1,)}, "a pinned node left member 1"
            forced = watch.forced_down_times(m1)
            assert forced and min(forced) >= killed_at + GRACE - 1, "forced down within the grace"
            assert max(forced) <= cleared_at
            final = nova_status()
            assert final["state"] == "Enabled" and final["forcedDown"] == [] and final["waiting"] == []
            for reason in ("ForcedDown", "ForcedDownCleared", "NovaUnavailable", "NovaAvailable",
                           "DeletedNovaService", "NovaAudit", "NovaAuditClear", "MisplacedNodeReturned", "HostNotMapped",
                           "HostMapped"):
                assert events(client, ns, reason), f"no {reason} Event"
            assert nova_metric("ironic_shard_nova_actions_total", action="forced_down_set") >= 1
            # Every flag cleared was one the operator set (nobody else forced a service down
            # here); a member slow to turn Ready again under load may be forced down twice.
            assert 1 <= nova_metric("ironic_shard_nova_actions_total", action="forced_down_cleared") \
                <= nova_metric("ironic_shard_nova_actions_total", action="forced_down_set")
            assert nova_metric("ironic_shard_nova_actions_total", action="service_deleted") == 1
            # The pool's full listings are counted by reason: its first one at least.
            assert nova_metric("ironic_shard_full_listings_total", reason="no_listing_yet") >= 1
            operator_rss = next(int(line.split()[1]) for line in Path(
                f"/proc/{operator.process.pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:")) / 1024
            assert not watch.forced_down_times(m0)
            print(f"failover scenario: members up and Nova agreeing {up_at:.0f}s after start; "
                  f"member 0 replaced and Ready {back_within:.1f}s after its kill (nothing moved); "
                  f"free nodes re-owned {moved_at - killed_at:.1f}s after the kill (grace {GRACE}s), "
                  f"listed by Nova {listed_at - moved_at:.1f}s later (update interval {interval}s); "
                  f"forced down {min(forced) - killed_at:.1f}s after the kill, cleared "
                  f"{cleared_at - ready_at:.1f}s after Ready; member 2 (probe failing, heartbeating) "
                  f"forced down {forced_m2 - unready_at:.1f}s after NotReady, its first free node seen moved "
                  f"{order.first_moved - (order.first_forced or order.first_moved):.1f}s after Nova first listed "
                  f"it forced down ({order.samples} samples of Ironic then Nova); member 2 fenced: forced down "
                  f"{fenced_order.first_forced - fenced_at:.1f}s and its free nodes re-owned "
                  f"{fenced_moved_at - fenced_at:.1f}s after the fence (grace {GRACE}s, {len(at_once)} ForcedDown "
                  f"at once); removed member's service deleted "
                  f"{deleted_after:.1f}s after Nova's API came back; longest listed twice "
                  f"{twice:.1f}s; operator RSS {operator_rss:.0f} MiB; "
                  f"whole scenario {time.monotonic() - started:.0f}s")
        finally:
            try:
                client.delete(f"{POOLS.format(ns=ns)}/{pool}")
                wait(lambda: not client.get(POOLS.format(ns=ns))["items"], timeout=60,
                     what="the pool deleted (the operator removes its finalizer)")
            finally:
                print(f"----- operator -----\n{operator.log()[-20000:]}")


@dataclass
class ShardsAndForcedDown:
    """Samples, every `period` s in a thread, the Ironic shards of the pool's nodes and THEN
    `member`'s Nova service: a sample in which a node seen on `member` before (`nodes` from the
    start) is elsewhere while Nova does not list `member` forced down is a free node that left it
    before Nova listed it so. The flag, once set, stays until the member is Ready again (after this
    sampler stops), so reading Ironic first cannot make one up."""

    ironic: IronicService
    resource_class: str
    nova: NovaStack
    member: str
    nodes: set[str]
    period: float = 0.2

    def __post_init__(self) -> None:
        self.moved_while_up: list[tuple[float, list[str], dict]] = []
        self.first_moved: float | None = None
        self.first_forced: float | None = None  # the first sample whose Nova read lists it forced down
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="shards-and-forced-down")

    def start(self) -> ShardsAndForcedDown:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                owners = shards_of(self.ironic, self.resource_class)
                service = self.nova.compute_services().get(self.member, {})
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a finding
                continue
            at = time.monotonic()
            self.samples += 1
            self.nodes |= {n for n, owner in owners.items() if owner == self.member}
            moved = sorted(n for n in self.nodes if owners.get(n) != self.member)
            if moved and self.first_moved is None:
                self.first_moved = at
            if service.get("forced_down") and self.first_forced is None:
                self.first_forced = at
            if moved and not service.get("forced_down"):
                self.moved_while_up.append((at, moved, service))
