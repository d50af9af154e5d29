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
