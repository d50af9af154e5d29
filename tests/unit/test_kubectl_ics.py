"""`kubectl ics`'s pure parts: the status screen and the list of pools, the patches of retire,
fence and unfence, shell completion, the help of every command and argument, and the report
bundle's files. The commands as a user types them, against an API server, are in
tests/integration/test_kubectl_ics.py."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from ironic_shard_operator import kubectl_ics
from ironic_shard_operator.core import member_commands
from ironic_shard_operator.kubectl_ics import Lookups, OperatorView, completions, render_pools, render_status

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
LONG_FIX = ("cannot reach Keystone at https://keystone.example.internal:5000/v3 (cloud 'ironic'), asked for the "
            "baremetal endpoint in its catalog: Name or service not known; fix: the host name in the cloud's "
            "auth.auth_url does not resolve here: correct auth.auth_url, or make the name resolvable (END)")


def lease(holder="iso-ironic-shard-operator-7d4b9-x1", renewed="2027-01-15T07:59:57Z", namespace="iso-system"):
    return {"metadata": {"name": "ironic-shard-operator", "namespace": namespace},
            "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15}}


def pool(**status):
    return {"metadata": {"name": "rack-a", "namespace": "ops", "generation": 4, "resourceVersion": "77"},
            "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "lastCycleTime": "2027-01-15T07:55:00Z", "readyReplicas": 3,
                       "desiredReplicas": 3, "desiredReason": "spec.replicas: 3",
                       "members": [{"name": f"rack-a-{i}", "ready": True, "phase": "Ready", "nodes": 5,
                                    "pinnedNodes": 1} for i in range(3)],
                       "conditions": [{"type": "Ready", "status": "False", "reason": "IronicUnavailable",
                                       "message": LONG_FIX},
                                      {"type": "Degraded", "status": "True", "reason": "IronicUnavailable",
                                       "message": LONG_FIX}],
                       **status}}


def test_the_status_screen_shows_every_fix_in_full_the_leader_and_the_last_cycle():
    screen = render_status(pool(), [], OperatorView((lease(),)), NOW)
    flat = " ".join(screen.split())
    assert flat.count(LONG_FIX) == 2  # wrapped, never cut
    assert "…" not in screen and max(len(line) for line in screen.splitlines()) <= kubectl_ics.WIDTH
    assert "leader iso-ironic-shard-operator-7d4b9-x1 (Lease iso-system/ironic-shard-operator, renewed 3s ago)" \
        in flat
    assert "last cycle: 2027-01-15T07:55:00Z (5m ago); spec generation 4 observed" in flat


def test_the_status_screen_says_under_a_member_that_its_host_is_not_mapped_to_a_cell():
    fix = "Nova says host rack-a-2 is not mapped to any cell: map it: nova-manage cell_v2 discover_hosts --by-service"
    shown = pool(hostMapping={"members": [
        {"member": "rack-a-0", "service": "s-0", "state": "Mapped", "message": "Nova lists nodes under rack-a-0"},
        {"member": "rack-a-2", "service": "s-2", "state": "NotMapped", "reason": "HostNotMapped", "message": fix}]})
    lines = render_status(shown, [], OperatorView((lease(),)), NOW).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("rack-a-2"))
    below = " ".join(" ".join(lines[row + 1:row + 4]).split())
    assert below.startswith(f"cell mapping NotMapped: {fix}")
    assert "Nova lists nodes under rack-a-0" not in "\n".join(lines)  # a mapped host is no news
    assert kubectl_ics.summary(shown, [], None)["hostMapping"] == shown["status"]["hostMapping"]


def test_the_status_screen_says_when_the_operator_has_not_seen_the_spec_or_the_lease_is_stale():
    behind = pool()
    behind["metadata"]["generation"] = 5
    flat = " ".join(render_status(behind, [], OperatorView((lease(renewed="2027-01-15T07:59:00Z"),)), NOW).split())
    assert "spec generation 5, observed 4: the operator has not acted on the latest spec yet" in flat
    assert "renewed 60s ago: not renewed for longer than its 15s, a standby takes over" in flat
    assert "no Lease ironic-shard-operator found" in render_status(pool(), [], OperatorView(), NOW)
    refused = OperatorView(error='leases.coordination.k8s.io is forbidden: User "bob" cannot list')
    assert "cannot be read: leases.coordination.k8s.io is forbidden" in render_status(pool(), [], refused, NOW)


def test_every_pool_on_one_line_with_ready_degraded_and_the_last_cycle():
    calm = pool(conditions=[{"type": "Ready", "status": "True", "reason": "AllMembersReady", "message": ""},
                            {"type": "Degraded", "status": "False", "reason": "AllMembersReady", "message": ""}],
                nodes={"total": 15, "pinned": 3})
    calm["metadata"] = {**calm["metadata"], "name": "rack-b"}
    shown = render_pools([pool(), calm], OperatorView((lease(),)), NOW, all_namespaces=True, namespace=None)
    lines = shown.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("NAMESPACE")) - 1:]
    assert lines[1].split() == ["NAMESPACE", "NAME", "READY", "DEGRADED", "MEMBERS", "NODES", "PINNED", "LAST",
                                "CYCLE", "PAUSED"]
    assert lines[2].split()[:5] == ["ops", "rack-a", "False", "True", "(IronicUnavailable)"]
    assert lines[3].split() == ["ops", "rack-b", "True", "False", "3/3", "15", "3", "5m", "ago", "no"]
    one_namespace = render_pools([calm], OperatorView(), NOW, all_namespaces=False, namespace="ops")
    assert one_namespace.splitlines()[-2].split()[0] == "NAME"
    assert "No IronicComputeShard pools found in ops." in render_pools([], OperatorView(), NOW,
                                                                        all_namespaces=False, namespace="ops")


def test_json_and_yaml_carry_the_same_facts():
    facts = kubectl_ics.summary(pool(), [], OperatorView((lease(),)))
    assert facts["lastCycleTime"] == "2027-01-15T07:55:00Z" and facts["observedGeneration"] == 4
    assert facts["operator"]["leases"][0]["holder"] == "iso-ironic-shard-operator-7d4b9-x1"
    assert facts["conditions"][0]["message"] == LONG_FIX
    assert json.loads(kubectl_ics._dump(facts, "json")) == yaml.safe_load(kubectl_ics._dump(facts, "yaml"))


# --- retire, fence, unfence ---------------------------------------------------------------


def test_retire_lowers_replicas_and_names_the_member_guarded_by_the_resource_version():
    change = member_commands.retire(pool(), "rack-a-1")
    assert change.patch == {"metadata": {"resourceVersion": "77"},
                            "spec": {"replicas": 2, "retireMembers": ["rack-a-1"]}}
    assert "rack-a-1 retires (spec.replicas 3 -> 2" in change.message
    retiring = pool()
    retiring["spec"].update(replicas=2, retireMembers=["rack-a-1", "rack-a-7"])  # rack-a-7 has gone
    assert member_commands.retire(retiring, "rack-a-1").patch is None  # already the one going
    assert member_commands.retire(retiring, "rack-a-0").patch["spec"] == {
        "replicas": 1, "retireMembers": ["rack-a-1", "rack-a-0"]}
    retiring["spec"]["replicas"] = 0
    assert member_commands.retire(retiring, "rack-a-2").patch is None  # every member goes already


@pytest.mark.parametrize("spec, member, says", [
    ({"replicas": 3}, "rack-a-5", "rack-a-5 is no member of ironiccomputeshard/rack-a (its members: rack-a-0, "
                                  "rack-a-1, rack-a-2)"),
    ({"autoscale": {"maxReplicas": 5}}, "rack-a-1", "scales by node count (spec.autoscale)"),
])
def test_retire_refuses_what_it_cannot_do_saying_why(spec, member, says):
    body = pool()
    body["spec"] = spec
    with pytest.raises(member_commands.Refused) as refused:
        member_commands.retire(body, member)
    assert says in str(refused.value)


def test_fence_and_unfence_edit_fenced_members_only():
    fenced = member_commands.fence(pool(), "rack-a-2", True)
    assert fenced.patch == {"metadata": {"resourceVersion": "77"}, "spec": {"fencedMembers": ["rack-a-2"]}}
    body = pool()
    body["spec"]["fencedMembers"] = ["rack-a-2"]
    assert member_commands.fence(body, "rack-a-2", True).patch is None
    assert member_commands.fence(body, "rack-a-2", False).patch["spec"] == {"fencedMembers": []}
    assert member_commands.fence(pool(), "rack-a-2", False).patch is None
    with pytest.raises(member_commands.Refused):
        member_commands.fence(pool(), "rack-a-9", True)


def test_a_member_name_gives_its_pool():
    assert member_commands.pool_of("rack-1-0") == "rack-1"
    for bad in ("rack-a", "rack-a-01", "Rack-a-1", "-1"):
        with pytest.raises(member_commands.Refused):
            member_commands.pool_of(bad)


# --- help and completion ------------------------------------------------------------------


def subcommands() -> dict[str, argparse.ArgumentParser]:
    top = kubectl_ics.parser()
    return next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_command_and_argument_has_help():
    assert set(subcommands()) == set(kubectl_ics.COMMANDS)
    for name, sub in subcommands().items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.dest}"


def lookups() -> Lookups:
    return Lookups(pools=lambda: ["rack-a", "rack-b"], members=lambda: ["rack-a-0", "rack-a-1", "rack-b-0"],
                   fenced=lambda: ["rack-a-1"], namespaces=lambda: ["ops", "default"],
                   contexts=lambda: ["prod", "lab"])


@pytest.mark.parametrize("words, current, offered", [
    ([], "", list(kubectl_ics.COMMANDS)),
    ([], "re", ["report", "retire", "resume"]),
    (["status"], "", ["rack-a", "rack-b"]),
    (["report", "-n", "ops"], "rack-b", ["rack-b"]),
    (["retire"], "rack-a", ["rack-a-0", "rack-a-1"]),
    (["unfence"], "", ["rack-a-1"]),
    (["status", "-n"], "o", ["ops"]),
    (["status", "-o"], "", ["text", "json", "yaml"]),
    (["status", "--context"], "", ["prod", "lab"]),
    (["status", "rack-a"], "", []),
])
def test_completion_offers_commands_pools_members_and_option_values(words, current, offered):
    found, directive = completions(words, current, lookups())
    assert sorted(f.split("\t")[0] for f in found) == sorted(offered)
    assert directive == kubectl_ics.NO_FILE_COMPLETION


def test_completion_leaves_file_arguments_to_the_shell_and_offers_options():
    assert completions(["report", "rack-a", "--file"], "", lookups()) == ([], kubectl_ics.FILE_COMPLETION)
    found, _ = completions(["report"], "--t", lookups())
    assert [f.split("\t")[0] for f in found] == ["--tail-lines"] and "last N lines" in found[0]


def test_kubectl_complete_ics_prints_one_candidate_a_line_and_the_directive_last(capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # no cluster: commands only
    kubectl_ics.complete(["st", ""][:1])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines[:-1]] == ["status"] and lines[-1] == ":4"


# --- the report bundle ----------------------------------------------------------------------


def test_the_bundle_names_secrets_but_carries_no_credential():
    body = pool()
    body["spec"].update(novaConfig={"secretRef": {"name": "nova-config", "key": "nova.conf"}},
                        env=[{"name": "OS_PASSWORD", "value": "hunter2-env"}, {"name": "LOG", "value": "1"}])
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    files = kubectl_ics.bundle_files(
        pool=body, events={"IronicComputeShard/rack-a": []}, pods=[], jobs=[],
        logs={"rack-a-0/nova-compute": "connecting to rabbit://nova:hunter2-log@mq:5672/\nok\n"},
        operator=OperatorView((lease(),)), operator_logs={"iso-system/op-1": "password=hunter2-op\n"},
        secrets={"spec.novaConfig": {"name": "nova-config", "key": "nova.conf", "exists": True, "hasKey": True}},
        problems=["log of rack-a-1/nova-compute: container is waiting to start"], now=NOW)
    everything = "\n".join(files.values())
    assert "hunter2" not in everything
    assert yaml.safe_load(files["secrets.yaml"])["spec.novaConfig"]["name"] == "nova-config"
    assert "managedFields" not in files["pool.yaml"] and "LOG" in files["pool.yaml"]
    assert {"pool.yaml", "status.txt", "events.yaml", "pods.yaml", "jobs.yaml", "logs/rack-a-0.nova-compute.log",
            "operator/iso-system.op-1.log", "operator/leases.yaml", "README.txt"} <= set(files)
    assert "container is waiting to start" in files["README.txt"]


def test_the_status_screen_shows_each_members_tracker_interval_and_why_it_is_counted_out():
    members = [{"name": "rack-a-0", "ready": True, "phase": "Ready", "nodes": 300, "pinnedNodes": 0,
                "since": "2027-01-15T07:00:00Z", "updateResourcesIntervalSeconds": 15.0, "expectedPassSeconds": 15.0},
               {"name": "rack-a-1", "ready": False, "phase": "Creating", "nodes": 0, "pinnedNodes": 0,
                "since": "2027-01-15T07:59:00Z", "countedOut": "its Kubernetes node k-1 was deleted"}]
    lines = render_status(pool(members=members), [], OperatorView((lease(),)), NOW).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("rack-a-0"))
    assert "TRACKER" in lines[row - 1] and "15s/15s" in lines[row]
    out = next(i for i, line in enumerate(lines) if line.startswith("rack-a-1"))
    assert " - " in lines[out] and " ".join(lines[out + 1].split()) == "counted out: its Kubernetes node k-1 was deleted"
    assert max(len(line) for line in lines) <= kubectl_ics.WIDTH
