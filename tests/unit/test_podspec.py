"""Rendering a member's Pod and ConfigMap: identity, mounts, defaults, and the roll hash."""

import configparser
import dataclasses

from ironic_shard_operator.core import podspec
from ironic_shard_operator.core.spec import read_pool


def pool_with(**spec):
    base = {
        "image": "nova:1",
        "novaConfig": {"secretRef": {"name": "nova-conf", "key": "custom.conf"}},
        "cloud": {"secretRef": {"name": "cloud"}},
        "replicas": 2,
    }
    base.update(spec)
    return read_pool({"metadata": {"name": "rack-a", "namespace": "nova", "uid": "uid-7"}, "spec": base})


def test_pod_identity_labels_and_owner():
    pod = podspec.render_pod(pool_with(), "rack-a-1", "d1")
    meta = pod["metadata"]
    assert meta["name"] == "rack-a-1" and meta["namespace"] == "nova"
    assert meta["labels"] == {
        "app.kubernetes.io/name": "nova-compute",
        "ironicshards.io/pool": "rack-a",
        "ironicshards.io/member": "rack-a-1",
    }
    owner, = meta["ownerReferences"]
    assert owner == {"apiVersion": "ironicshards.io/v1alpha1", "kind": "IronicComputeShard",
                     "name": "rack-a", "uid": "uid-7", "controller": True}


def test_owner_references_need_no_permission_on_the_pools_finalizers():
    """blockOwnerDeletion: true on a pod or ConfigMap is refused by clusters that enforce
    owner-reference permissions unless the operator may update ironiccomputeshards/finalizers,
    which the chart does not grant: the operator never sets it."""
    pool = pool_with()
    for rendered in (podspec.render_pod(pool, "rack-a-0", "d1"), podspec.render_configmap(pool, "rack-a-0")):
        for owner in rendered["metadata"]["ownerReferences"]:
            assert owner.get("blockOwnerDeletion", False) is False, rendered["kind"]
            assert owner["controller"] is True


def test_pod_mounts_base_config_then_member_overlay_and_runs_both():
    pod = podspec.render_pod(pool_with(), "rack-a-1", "d1")
    container, = pod["spec"]["containers"]
    assert container["command"] == ["nova-compute", "--config-file", "/etc/nova/nova.conf",
                                    "--config-file", "/etc/nova/member.conf"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    secret = volumes[mounts["/etc/nova/nova.conf"]["name"]]["secret"]
    assert secret["secretName"] == "nova-conf"
    assert secret["items"] == [{"key": "custom.conf", "path": mounts["/etc/nova/nova.conf"]["subPath"]}]
    configmap = volumes[mounts["/etc/nova/member.conf"]["name"]]["configMap"]
    assert configmap["name"] == "rack-a-1-config"


def test_member_conf_sets_host_and_shard_and_conductor_group_when_selected():
    plain = configparser.ConfigParser()
    plain.read_string(podspec.member_conf(pool_with(), "rack-a-0"))
    assert plain["DEFAULT"]["host"] == "rack-a-0"
    assert plain["ironic"]["shard"] == "rack-a-0"
    assert "conductor_group" not in plain["ironic"]
    grouped = configparser.ConfigParser()
    grouped.read_string(podspec.member_conf(pool_with(selector={"conductorGroup": "cg1"}), "rack-a-0"))
    assert grouped["ironic"]["conductor_group"] == "cg1"
    cm = podspec.render_configmap(pool_with(), "rack-a-0")
    assert cm["metadata"]["name"] == "rack-a-0-config"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-7"
    assert cm["data"]["member.conf"] == podspec.member_conf(pool_with(), "rack-a-0")


def test_default_anti_affinity_spreads_members_and_user_affinity_replaces_it():
    pod = podspec.render_pod(pool_with(), "rack-a-0", "")
    term, = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"ironicshards.io/pool": "rack-a"}}
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    assert podspec.render_pod(pool_with(affinity=mine), "rack-a-0", "")["spec"]["affinity"] == mine


def test_user_pod_settings_are_copied():
    pool = pool_with(
        imagePullPolicy="Always", command=["/bin/run"], args=["--debug"],
        env=[{"name": "A", "value": "1"}], resources={"limits": {"memory": "1Gi"}},
        nodeSelector={"role": "compute"}, tolerations=[{"key": "k", "operator": "Exists"}],
        priorityClassName="high", serviceAccountName="nova",
        readinessProbe={"exec": {"command": ["true"]}}, livenessProbe={"exec": {"command": ["true"]}},
    )
    pod = podspec.render_pod(pool, "rack-a-0", "")
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert container["image"] == "nova:1" and container["imagePullPolicy"] == "Always"
    assert container["command"] == ["/bin/run"] and container["args"] == ["--debug"]
    assert container["env"] == [{"name": "A", "value": "1"}]
    assert container["resources"] == {"limits": {"memory": "1Gi"}}
    assert container["readinessProbe"] == {"exec": {"command": ["true"]}}
    assert spec["nodeSelector"] == {"role": "compute"}
    assert spec["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert spec["priorityClassName"] == "high" and spec["serviceAccountName"] == "nova"


def test_config_hash_rolls_on_what_restarts_the_process_only():
    pool = pool_with()
    base = podspec.config_hash(pool, "rack-a-0", "d1")
    assert podspec.render_pod(pool, "rack-a-0", "d1")["metadata"]["annotations"][podspec.CONFIG_HASH] == base
    assert podspec.config_hash(pool, "rack-a-0", "d1") == base  # stable
    assert podspec.config_hash(pool, "rack-a-1", "d1") != base  # overlay differs per member
    assert podspec.config_hash(pool, "rack-a-0", "d2") != base  # nova.conf content changed
    assert podspec.config_hash(pool_with(image="nova:2"), "rack-a-0", "d1") != base
    assert podspec.config_hash(pool_with(env=[{"name": "X", "value": "y"}]), "rack-a-0", "d1") != base
    assert podspec.config_hash(pool_with(selector={"conductorGroup": "g"}), "rack-a-0", "d1") != base
    # What does not reach the pod does not roll it.
    assert podspec.config_hash(pool_with(replicas=5), "rack-a-0", "d1") == base
    assert podspec.config_hash(dataclasses.replace(pool, paused=True), "rack-a-0", "d1") == base


def test_secret_digest_follows_the_key_content():
    one = {"data": {"nova.conf": "W0RFRkFVTFRd"}, "metadata": {"labels": {"a": "1"}}}
    relabelled = {"data": {"nova.conf": "W0RFRkFVTFRd"}, "metadata": {"labels": {"a": "2"}}}
    changed = {"data": {"nova.conf": "W0RFRkFVTFRdCg=="}}
    assert podspec.secret_digest(one, "nova.conf") == podspec.secret_digest(relabelled, "nova.conf")
    assert podspec.secret_digest(one, "nova.conf") != podspec.secret_digest(changed, "nova.conf")
    assert podspec.secret_digest(None, "nova.conf") == ""


def test_a_member_pod_has_defaults_a_hardened_cluster_accepts():
    """Unset: a RuntimeDefault seccomp profile, no privilege escalation, no capabilities (Pod
    Security "baseline", and "restricted" but for the image's user), members preferred one per
    Kubernetes node and spread evenly over zones (soft: one zone still runs them all)."""
    spec = podspec.render_pod(pool_with(), "rack-a-0", "")["spec"]
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    assert spec["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "nova-compute", "ironicshards.io/pool": "rack-a"}}}]
    assert "imagePullSecrets" not in spec


def test_pull_secrets_security_contexts_volumes_and_spread_are_the_users():
    restricted = {"runAsNonRoot": True, "runAsUser": 42436, "seccompProfile": {"type": "RuntimeDefault"}}
    container_context = {"readOnlyRootFilesystem": True}
    ca = {"name": "ca", "configMap": {"name": "private-ca"}}
    rack = {"maxSkew": 2, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule"}
    pool = pool_with(imagePullSecrets=[{"name": "registry"}], podSecurityContext=restricted,
                     securityContext=container_context, volumes=[ca],
                     volumeMounts=[{"name": "ca", "mountPath": "/etc/pki/ca", "readOnly": True}],
                     topologySpreadConstraints=[rack])
    spec = podspec.render_pod(pool, "rack-a-0", "")["spec"]
    (container,) = spec["containers"]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["securityContext"] == restricted and container["securityContext"] == container_context
    assert spec["volumes"][-1] == ca and [v["name"] for v in spec["volumes"]] == ["nova-conf", "member-conf", "ca"]
    assert container["volumeMounts"][-1] == {"name": "ca", "mountPath": "/etc/pki/ca", "readOnly": True}
    # A constraint without a selector would count no pod: it gets the pool's members.
    assert spec["topologySpreadConstraints"] == [{**rack, "labelSelector": {"matchLabels": {
        "app.kubernetes.io/name": "nova-compute", "ironicshards.io/pool": "rack-a"}}}]
    # An empty list is a choice: no spread over zones at all.
    assert "topologySpreadConstraints" not in podspec.render_pod(
        pool_with(topologySpreadConstraints=[]), "rack-a-0", "")["spec"]
    # Each of them reaches the pod, so each rolls the members when changed.
    base = podspec.config_hash(pool_with(), "rack-a-0", "d1")
    for change in ({"imagePullSecrets": [{"name": "registry"}]}, {"podSecurityContext": restricted},
                   {"securityContext": container_context}, {"volumes": [ca]},
                   {"volumes": [ca], "volumeMounts": [{"name": "ca", "mountPath": "/etc/pki/ca"}]},
                   {"topologySpreadConstraints": [rack]}):
        assert podspec.config_hash(pool_with(**change), "rack-a-0", "d1") != base, change


def test_the_disruption_budget_lets_one_running_member_go_at_a_time():
    pool = pool_with()
    budget = podspec.render_budget(pool, 3)
    assert budget["metadata"]["name"] == "rack-a" and budget["metadata"]["namespace"] == "nova"
    (owner,) = budget["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-7" and owner["controller"] is True
    # Member pods only (a handover Job's pods carry the pool label, not the app label).
    assert budget["spec"] == {"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {
        "matchLabels": {"app.kubernetes.io/name": "nova-compute", "ironicshards.io/pool": "rack-a"}}}
    assert podspec.render_budget(pool, 1)["spec"]["minAvailable"] == 0
    assert podspec.render_budget(pool, 0)["spec"]["minAvailable"] == 0


def test_the_budget_is_created_patched_when_it_differs_and_left_alone_when_not_the_pools():
    pool = pool_with()
    wanted = podspec.render_budget(pool, 3)
    assert podspec.budget_change(None, wanted, "uid-7") == ("create", wanted)
    stored = {**wanted, "status": {"disruptionsAllowed": 1}}
    assert podspec.budget_change(stored, wanted, "uid-7") is None  # nothing changed: no write
    assert podspec.budget_change(stored, podspec.render_budget(pool, 4), "uid-7") == (
        "patch", {"spec": {"minAvailable": 3}})
    edited = {**wanted, "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"x": "y"}}}}
    assert podspec.budget_change(edited, wanted, "uid-7") == ("patch", {"spec": {
        "minAvailable": 2, "maxUnavailable": None, "selector": wanted["spec"]["selector"],
        "unhealthyPodEvictionPolicy": "AlwaysAllow"}})
    someone_elses = {**wanted, "metadata": {"name": "rack-a", "ownerReferences": []}}
    assert podspec.budget_change(someone_elses, wanted, "uid-7") is None
