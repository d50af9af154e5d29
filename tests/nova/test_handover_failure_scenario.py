"""Long failure with handover, and the refusals, as Nova sees them: the real operator, real
Ironic, the real Nova stack, member pods as REAL nova-compute processes and the handover Job's
pod as a REAL `nova-manage db ironic_compute_node_move` (testbed/process_kubelet.py).

3 members, 15 nodes; member 1 carries 4 instance nodes, one of them with a second instance in
Nova, and one whose server is deleted while member 1 is forced down (a local delete). `spec.handover.afterFailureSeconds` is short (and above `rebalanceAfterSeconds`), fencing
is Wait. Member 1's process is killed and its Kubernetes node goes away: its pod cannot be
proven gone, so nothing is handed over however long it stays (only its free nodes move).

The node comes back: the pod goes, and the member, failed for longer than afterFailureSeconds,
becomes a handover source, refused at once for the Secret's nova.conf without [database]
(Degraded / HandoverConfigInvalid naming the Secret; nothing changed in Nova or Ironic). A
handover that cannot start holds nothing: the member is not kept from its pod, comes back Ready
with its nodes, and its forced_down (a failure's) is cleared.

Member 1 then fails for good (its pod cannot start again), and the handover runs into the next
refusals, each with a clear condition and nothing changed in Nova or Ironic:
- database access that fails: the Job's nova-manage fails, Degraded / HandoverFailed led by the
  error, the Job tried again at once once the Secret is fixed and the failed Job deleted;
- the node with two instances: HandoverRefused naming the node, while the other two instance
  nodes are moved in Nova, then re-sharded, and their servers' hosts follow;
- the node whose server Nova deleted while member 1 was down: never moved, HandoverDeletedInNova
  names it with the fix (undeploy), and it stays with member 1.
Its pod starts again: member 1 is back with the refused node and free nodes; the nodes handed
over stay where they are.
"""

from __future__ import annotations

import base64
import configparser
import io
import time
from pathlib import Path

import pytest

from testbed.ironic_service import IronicService
from testbed.nova_stack import NovaStack
from testbed.operator_objects import create_secrets
from testbed.process_kubelet import PROCESS_IMAGE, ProcessKubelet
from tests.nova import handover_pool
from tests.nova.nova_watch import NovaWatch
from tests.nova.test_failover_scenario import CLOUD, clouds_yaml
from tests.support.kube_api import KubeAPI
from tests.support.operator_rbac import is_handover_grant
from tests.support.operator_harness import (
    POOLS, OperatorProcess, condition, events, get_pool, member_pods, pool_manifest, posted_events,
    ready_members,
)

pytestmark = pytest.mark.nova

GRACE = 10      # failover.rebalanceAfterSeconds
AFTER = 20      # handover.afterFailureSeconds (> GRACE: a CEL rule)
POLL = 5
NODES = 15
SECRET = "nova-manage"


def test_long_failure_hands_over_after_the_delay_and_refusals_change_nothing(
        kube_api: KubeAPI, kube_namespace: str, nova_stack: NovaStack, noauth_ironic: IronicService,
        tmp_path: Path) -> None:
    client, ns, wait, ironic = kube_api.client, kube_namespace, kube_api.wait_for, noauth_ironic
    started = time.monotonic()
    interval = nova_stack.timings["update_resources_interval"]
    names = handover_pool.fresh_pool(kube_api, ironic, "hf", NODES)
    pool, (m0, m1, m2), resource_class, nodes, shards = \
        names.pool, names.members, names.resource_class, names.nodes, names.shards

    def nova_agrees() -> bool:
        return handover_pool.nova_agrees(nova_stack, shards)

    def server_host(server: str) -> str | None:
        return handover_pool.server_host(nova_stack, server, (m0, m1, m2))

    def degraded() -> dict:
        return condition(get_pool(client, ns, pool), "Degraded")

    def jobs() -> list[dict]:
        return client.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]

    def set_manage_conf(text: str) -> None:
        client.patch(f"/api/v1/namespaces/{ns}/secrets/{SECRET}",
                     {"data": {"nova.conf": base64.b64encode(text.encode()).decode()}})

    with ProcessKubelet(client, ns, nova_stack, tmp_path / "kubelet") as kubelet:
        operator = OperatorProcess(kube_api, ns, "op-handover-failure", tmp_path).start()
        compute_conf = nova_stack.compute_conf(ironic.cloud)
        create_secrets(client, ns, clouds_yaml(nova_stack, ironic, nova_stack.compute_url), nova_conf=compute_conf)
        # A compute's nova.conf: no [database], no [api_database] (the refusal comes first).
        handover_pool.create_manage_secret(client, ns, SECRET, compute_conf)
        try:
            client.create(POOLS.format(ns=ns), pool_manifest(
                pool, cloud_name=CLOUD, resource_class=resource_class, image=PROCESS_IMAGE,
                failover={"rebalanceAfterSeconds": GRACE, "fencing": {"mode": "Wait"}, "podPendingTimeoutSeconds": 10},
                ironic={"pollIntervalSeconds": POLL},
                handover={"novaManageConfig": {"secretRef": {"name": SECRET}}, "afterFailureSeconds": AFTER,
                          "maxConcurrent": 3}))
            # Its novaManageConfig cannot run nova-manage: the deployment maps the hosts.
            handover_pool.wait_for_members(kube_api, ns, nova_stack, pool, (m0, m1, m2), shards,
                                           map_hosts_by_hand=True)

            # Member 1 carries 4 instance nodes; the third has a second instance in Nova, the fourth's
            # server is deleted while member 1 is down (a local delete).
            owners = shards()
            instance_nodes = sorted(n for n, o in owners.items() if o == m1)[:4]
            doubled, deleted = instance_nodes[2], instance_nodes[3]
            *seeded, extra = nova_stack.seed_instances(m1, [*instance_nodes, doubled])  # one run of the script
            instances = dict(zip(instance_nodes, seeded))
            for node in instance_nodes:
                ironic.request("PATCH", f"/nodes/{node}", json=[
                    {"op": "add", "path": "/instance_uuid", "value": instances[node]}])
            movable = instance_nodes[:2]
            free_m1 = {n for n, o in owners.items() if o == m1} - set(instance_nodes)
            kube_node = member_pods(client, ns, pool)[m1]["spec"]["nodeName"]
            assert all(p["spec"]["nodeName"] != kube_node
                       for name, p in member_pods(client, ns, pool).items() if name != m1)

            with NovaWatch(nova_stack, set(nodes), {m0, m1, m2}, period=1.0) as watch:
                # 1. Member 1's process dies and its Kubernetes node goes away (fencing Wait).
                kubelet.set_node_reachable(kube_node, False)
                kubelet.kill(m1)
                failed_at = time.monotonic()
                wait(lambda: not free_m1 & {n for n, o in shards().items() if o == m1},
                     timeout=GRACE + 6 * POLL, interval=0.5, what="member 1's free nodes re-owned after the grace")
                wait(lambda: watch.forced_down_times(m1), timeout=4 * POLL, interval=0.5,
                     what="member 1's service forced down")
                # Past afterFailureSeconds, its pod cannot be proven gone: nothing is handed over.
                wait(lambda: (p := member_pods(client, ns, pool).get(m1)) and p["metadata"].get("deletionTimestamp"),
                     timeout=GRACE + 6 * POLL, interval=0.5, what="member 1's pod deleted (and kept: node away)")
                time.sleep(max(0.0, failed_at + AFTER + 2 * POLL - time.monotonic()))
                assert not jobs() and not events(client, ns, "HandoverJobCreated")
                assert {n: shards()[n] for n in instance_nodes} == {n: m1 for n in instance_nodes}
                assert m1 in member_pods(client, ns, pool)

                # 2. The node comes back: the pod goes, the handover starts, and is refused at once for
                # the Secret's nova.conf without [database]. Nothing changes, and the member, which no
                # handover can help now, is not kept from its pod: it is back.
                kubelet.set_node_reachable(kube_node, True)
                back_at = time.monotonic()
                refused_conf = wait(lambda: (d := degraded()).get("reason") == "HandoverConfigInvalid" and d,
                                    timeout=6 * POLL, interval=0.5, what="Degraded HandoverConfigInvalid")
                assert refused_conf["status"] == "True"
                assert SECRET in refused_conf["message"] and "[database] connection" in refused_conf["message"]
                assert posted_events(client, ns, "HandoverConfigInvalid")
                wait(lambda: m1 in ready_members(client, ns, pool), timeout=120, interval=1,
                     what="member 1 back and Ready (no handover can run)")
                returned_at = time.monotonic()
                wait(lambda: not nova_stack.compute_services()[m1]["forced_down"], timeout=6 * POLL,
                     what="member 1's forced_down cleared")
                assert not jobs()
                assert {n: shards()[n] for n in instance_nodes} == {n: m1 for n in instance_nodes}
                assert {n: nova_stack.hypervisor_hosts()[n] for n in instance_nodes} == {n: [m1] for n in instance_nodes}

                # 3. Member 1 fails for good (its pod cannot start again), and the database access of
                # the Secret fails: the Job's nova-manage fails (each pod), the condition carries the
                # tail of its log, nothing moved.
                set_manage_conf(unreachable_databases(nova_stack.nova_conf.read_text()))
                kubelet.hold(m1)
                kubelet.kill(m1)
                failed = wait(lambda: (d := degraded()).get("reason") == "HandoverFailed" and d,
                              timeout=AFTER + 120, interval=0.5, what="Degraded HandoverFailed")
                # Led by the error its traceback ends in, so the Event (cut to 1 KiB) carries it.
                assert "Can't connect to MySQL server" in failed["message"].split("(log tail:")[0], failed
                assert "Can't connect to MySQL server" in posted_events(client, ns, "HandoverFailed")[-1]["message"]
                (failed_job,) = [j["metadata"]["name"] for j in jobs()]
                assert m1 not in member_pods(client, ns, pool)  # held while its handover has a Job
                # Meanwhile a user deletes the server on the fourth node: member 1's service is forced
                # down, so Nova deletes it locally (its record only), and Ironic keeps the node
                # deployed with the old instance_uuid.
                assert nova_stack.compute_services()[m1]["forced_down"]
                assert nova_stack.delete_server(instances[deleted]) == 204
                wait(lambda: not [s for s in nova_stack._get_all(f"/servers?all_tenants=1&uuid={instances[deleted]}",
                                                                 "servers")],
                     timeout=30, interval=0.5, what="the server deleted locally in Nova")
                assert {n: shards()[n] for n in instance_nodes} == {n: m1 for n in instance_nodes}
                assert {n: nova_stack.hypervisor_hosts()[n] for n in instance_nodes} == {n: [m1] for n in instance_nodes}

                # 4. The Secret fixed and the failed Job deleted (try again now, not after its backoff):
                # the two single-instance nodes move (Nova, then Ironic); the node with two instances is
                # refused, named, and left as it is.
                set_manage_conf(nova_stack.nova_conf.read_text())
                client.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{failed_job}", propagationPolicy="Background")
                fixed_at = time.monotonic()
                wait(lambda: {shards()[n] for n in movable} <= {m0, m2}, timeout=120, interval=1,
                     what="the single-instance nodes handed over")
                resharded_at = time.monotonic()
                refused = wait(lambda: [e for e in events(client, ns, "HandoverRefused") if doubled in e["message"]],
                               timeout=6 * POLL, interval=0.5, what="the node with two instances refused, by name")
                assert "more than one instance" in refused[-1]["message"]
                # The locally deleted server's node is never moved: named with the fix, Warning, status.
                gone = wait(lambda: [e for e in events(client, ns, "HandoverDeletedInNova") if deleted in e["message"]],
                            timeout=6 * POLL, interval=0.5, what="the node of the deleted server reported, by name")
                assert gone[-1]["type"] == "Warning" and "openstack baremetal node undeploy" in gone[-1]["message"]
                assert any(p["reason"] == "HandoverDeletedInNova" and deleted in p["message"]
                           for p in get_pool(client, ns, pool)["status"]["handover"]["problems"])
                assert shards()[deleted] == m1 and nova_stack.hypervisor_hosts()[deleted] == [m1]
                assert ironic.request("GET", f"/nodes/{deleted}?fields=instance_uuid").json()["instance_uuid"] == \
                    instances[deleted]  # Ironic never heard of the delete
                wait(nova_agrees, timeout=3 * interval, interval=2, what="Nova agreeing with Ironic")
                assert {instances[n]: server_host(instances[n]) for n in movable} == \
                    {instances[n]: shards()[n] for n in movable}
                assert shards()[doubled] == m1 and nova_stack.hypervisor_hosts()[doubled] == [m1]
                assert server_host(instances[doubled]) == m1 and server_host(extra) == m1

                # 5. Its pod starts again: member 1 is back with the refused node and free nodes; the
                # nodes handed over stay where they are.
                handed = {n: shards()[n] for n in movable}
                kubelet.release(m1)
                wait(lambda: m1 in ready_members(client, ns, pool), timeout=180, interval=1,
                     what="member 1 back and Ready again")
                wait(lambda: not nova_stack.compute_services()[m1]["forced_down"], timeout=6 * POLL,
                     what="member 1's forced_down cleared again")
                wait(lambda: any(o == m1 for n, o in shards().items() if n not in instance_nodes),
                     timeout=6 * POLL, interval=1, what="free nodes on member 1 again")
                wait(nova_agrees, timeout=3 * interval, interval=2, what="Nova agreeing at the end")
                final = shards()
                assert {n: final[n] for n in movable} == handed and final[doubled] == m1 and final[deleted] == m1
                wait(lambda: degraded().get("status") != "True", timeout=6 * POLL, interval=0.5,
                     what="Degraded cleared")
            handover_pool.assert_each_moved_once(watch, movable, m1, final)
            # The chart's identity used every handover grant (jobs, and pods/log for the failure).
            unused = [g for g in kube_api.audit.unused_grants(client, ns, operator.service_account) if is_handover_grant(g)]
            assert not unused, unused
            for reason in ("HandoverJobCreated", "HandedOverNodes"):
                assert events(client, ns, reason), f"no {reason} Event"
            print(f"handover failure scenario: free nodes moved, then nothing handed over while the pod could "
                  f"not be proven gone ({AFTER}s afterFailureSeconds); node back -> config refusal, member back "
                  f"{returned_at - back_at:.1f}s after its node returned; failed for good -> database refusal; "
                  f"fixed -> 2 nodes re-sharded {resharded_at - fixed_at:.1f}s later; whole scenario "
                  f"{time.monotonic() - started:.0f}s")
        finally:
            handover_pool.report_and_delete(kube_api, ns, pool, operator)


def unreachable_databases(nova_conf: str) -> str:
    """`nova_conf` with [database] and [api_database] pointing at a port nothing listens on,
    tried once (oslo.db would otherwise retry for 100 s)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(nova_conf)
    for section in ("database", "api_database"):
        parser[section]["connection"] = "mysql+pymysql://root@127.0.0.1:9/nova?charset=utf8"
        parser[section]["max_retries"] = "1"
        parser[section]["retry_interval"] = "1"
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()
