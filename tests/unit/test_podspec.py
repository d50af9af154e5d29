"""Rendering a member's Pod and ConfigMap: identity, mounts, defaults, and the roll hash."""

import configparser
import dataclasses

from ironic_shard_operator.core import handover_job, host_mapping, podspec
from ironic_shard_operator.core.handover import JobBatch
from ironic_shard_operator.core.host_mapping import MappingBatch
from ironic_shard_operator.core.model import Move
from ironic_shard_operator.core.spec import JOB_GRACE_SECONDS, MEMBER_GRACE_SECONDS, read_pool


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


def test_every_pod_gets_its_termination_grace_from_the_spec_and_a_change_of_it_rolls_no_member():
    """Member pods take spec.terminationGracePeriodSeconds (nova-compute's graceful shutdown),
    both kinds of Job pods spec.handover.jobTerminationGracePeriodSeconds (the nova-manage run
    under way); a pod's grace only matters when it is deleted, so changing it rolls nobody."""
    pods = {what: spec["terminationGracePeriodSeconds"] for what, _, spec in _default_pods()}
    assert pods == {"member pod": MEMBER_GRACE_SECONDS, "handover Job's pod": JOB_GRACE_SECONDS,
                    "host-mapping Job's pod": JOB_GRACE_SECONDS}
    handover = {"novaManageConfig": {"secretRef": {"name": "nm"}}, "jobTerminationGracePeriodSeconds": 45}
    pods = {what: spec["terminationGracePeriodSeconds"]
            for what, _, spec in _default_pods(terminationGracePeriodSeconds=400, handover=handover)}
    assert pods == {"member pod": 400, "handover Job's pod": 45, "host-mapping Job's pod": 45}
    assert podspec.config_hash(pool_with(terminationGracePeriodSeconds=400), "rack-a-0", "d1") == \
        podspec.config_hash(pool_with(), "rack-a-0", "d1")


def test_secret_digest_follows_the_key_content():
    one = {"data": {"nova.conf": "W0RFRkFVTFRd"}, "metadata": {"labels": {"a": "1"}}}
    relabelled = {"data": {"nova.conf": "W0RFRkFVTFRd"}, "metadata": {"labels": {"a": "2"}}}
    changed = {"data": {"nova.conf": "W0RFRkFVTFRdCg=="}}
    assert podspec.secret_digest(one, "nova.conf") == podspec.secret_digest(relabelled, "nova.conf")
    assert podspec.secret_digest(one, "nova.conf") != podspec.secret_digest(changed, "nova.conf")
    assert podspec.secret_digest(None, "nova.conf") == ""


def test_a_member_pod_has_defaults_a_hardened_cluster_accepts():
    """Unset: Kolla's nova user (uid, gid and fsGroup 42436) as non-root, a RuntimeDefault
    seccomp profile, no privilege escalation, no capabilities (Pod Security "restricted":
    test_default_pods_pass_pod_security_restricted), members preferred one per Kubernetes node
    and spread evenly over zones (soft: one zone still runs them all)."""
    spec = podspec.render_pod(pool_with(), "rack-a-0", "")["spec"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 42436, "runAsGroup": 42436,
                                       "fsGroup": 42436, "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    assert spec["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "nova-compute", "ironicshards.io/pool": "rack-a"}}}]
    assert "imagePullSecrets" not in spec


# ---- Pod Security Standard "restricted" ----------------------------------------------------
# The pool namespaces carry `pod-security.kubernetes.io/enforce: restricted`. The rules below
# are those PodSecurity admission enforces for "restricted:latest" in Kubernetes v1.37: the
# checks of k8s.io/pod-security-admission v0.37.2 (policy/check_*.go; restricted = every
# baseline check plus the restricted ones), for a Linux pod in the host's user namespace. Each
# is named by its check ID.

_SAFE_SYSCTLS = {  # sysctls, as of v1.37
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}
_RESTRICTED_VOLUME_SOURCES = {  # restrictedVolumes: the inline volume sources allowed
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
    "projected", "secret"}
_DEFAULT_CAPABILITIES = {  # capabilities_baseline: what may be added at baseline
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}


def restricted_violations(metadata: dict, spec: dict) -> list[str]:
    """What PodSecurity "restricted:latest" (v1.37) refuses in a pod (its metadata and spec), one
    "checkID: detail" each; [] when it admits the pod."""
    bad: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = [*spec.get("initContainers", ()), *spec.get("containers", ()),
                  *spec.get("ephemeralContainers", ())]
    assert containers, "a pod with no container"

    def sc(container: dict) -> dict:
        return container.get("securityContext") or {}

    # hostNamespaces: spec.hostNetwork, hostPID, hostIPC undefined or false
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            bad.append(f"hostNamespaces: {field}")
    # hostPathVolumes: no spec.volumes[*].hostPath
    # restrictedVolumes: every volume one of the allowed inline sources
    for volume in spec.get("volumes", ()):
        sources = set(volume) - {"name"}
        if "hostPath" in sources:
            bad.append(f"hostPathVolumes: {volume['name']}")
        if len(sources) != 1 or not sources <= _RESTRICTED_VOLUME_SOURCES:
            bad.append(f"restrictedVolumes: {volume['name']} {sorted(sources)}")
    # sysctls: spec.securityContext.sysctls[*].name only the safe ones
    for sysctl in pod_sc.get("sysctls", ()):
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            bad.append(f"sysctls: {sysctl.get('name')}")
    # appArmorProfile: annotations runtime/default or localhost/*; fields RuntimeDefault or Localhost
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value in ("", "runtime/default") or value.startswith("localhost/")):
            bad.append(f"appArmorProfile: annotation {key}={value}")
    for where, context in [("pod", pod_sc), *((c["name"], sc(c)) for c in containers)]:
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            bad.append(f"appArmorProfile: {where} {apparmor}")
        # seLinuxOptions: type one of the container types; no user, no role
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in _SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            bad.append(f"seLinuxOptions: {where} {selinux}")
        # windowsHostProcess: never true
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            bad.append(f"windowsHostProcess: {where}")
        # runAsUser: never 0, at pod or container level
        if context.get("runAsUser") == 0:
            bad.append(f"runAsUser: {where} runs as uid 0")
    # runAsNonRoot: true at pod level (no container false), else true in every container
    pod_non_root = pod_sc.get("runAsNonRoot")
    if pod_non_root is False:
        bad.append("runAsNonRoot: pod sets false")
    # seccompProfile_restricted (and _baseline): RuntimeDefault or Localhost at pod level, or in
    # every container; a container that sets one sets one of those
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        bad.append(f"seccompProfile_restricted: pod {pod_seccomp}")
    for container in containers:
        name, context = container["name"], sc(container)
        # privileged: false or undefined
        if context.get("privileged"):
            bad.append(f"privileged: {name}")
        # allowPrivilegeEscalation: set to false, explicitly
        if context.get("allowPrivilegeEscalation") is not False:
            bad.append(f"allowPrivilegeEscalation: {name} does not set false")
        # capabilities_restricted: drop includes ALL, add at most NET_BIND_SERVICE
        # capabilities_baseline: add only from the runtime's default set
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or ()):
            bad.append(f"capabilities_restricted: {name} does not drop ALL")
        added = set(capabilities.get("add") or ())
        if added - {"NET_BIND_SERVICE"}:
            bad.append(f"capabilities_restricted: {name} adds {sorted(added)}")
        if added - _DEFAULT_CAPABILITIES:
            bad.append(f"capabilities_baseline: {name} adds {sorted(added - _DEFAULT_CAPABILITIES)}")
        # runAsNonRoot (per container)
        if context.get("runAsNonRoot") is False or (context.get("runAsNonRoot") is None and pod_non_root is not True):
            bad.append(f"runAsNonRoot: {name} may run as root")
        # seccompProfile_restricted (per container)
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp not in (None, "RuntimeDefault", "Localhost") or (seccomp is None and pod_seccomp is None):
            bad.append(f"seccompProfile_restricted: {name} {seccomp}")
        # procMount and procMount_restricted: Default or undefined
        if context.get("procMount") not in (None, "Default"):
            bad.append(f"procMount_restricted: {name}")
        # hostPorts: every ports[*].hostPort undefined or 0
        if any(port.get("hostPort") for port in container.get("ports", ())):
            bad.append(f"hostPorts: {name}")
        # hostProbesAndHostLifecycle: no host in probes' and lifecycle handlers' httpGet / tcpSocket
        handlers = [container.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(container.get("lifecycle") or {}).get(h) or {} for h in ("postStart", "preStop")]
        if any((handler.get(kind) or {}).get("host") for handler in handlers for kind in ("httpGet", "tcpSocket")):
            bad.append(f"hostProbesAndHostLifecycle: {name}")
    return bad


def _default_pods(**spec):
    """The member pod, the handover Job's pod and the host-mapping Job's pod of a pool with
    `spec` (and a handover config, unless `spec` has one): (what, metadata, pod spec)."""
    spec.setdefault("handover", {"novaManageConfig": {"secretRef": {"name": "nm", "key": "db.conf"}}})
    pool = pool_with(**spec)
    member = podspec.render_pod(pool, "rack-a-0", "d1")
    moves = (Move("n-1", "rack-a-1", "rack-a-0"),)
    handover = handover_job.render_job(pool, JobBatch("rack-a-1", "rack-a-1-handover-1", moves))
    mapping = host_mapping.render_job(pool, MappingBatch("rack-a-map-hosts-1", (("rack-a-0", "id-0"),)))
    return [("member pod", member["metadata"], member["spec"]),
            ("handover Job's pod", handover["spec"]["template"]["metadata"], handover["spec"]["template"]["spec"]),
            ("host-mapping Job's pod", mapping["spec"]["template"]["metadata"], mapping["spec"]["template"]["spec"])]


def test_default_pods_pass_pod_security_restricted():
    """With no podSecurityContext / securityContext, a namespace enforcing Pod Security
    "restricted" admits the member pods and both kinds of Job pods; so it does with the
    volumes a user adds of the kinds restricted allows (a CA bundle, a scratch emptyDir), and
    with a container securityContext of the user's that keeps the two container-only rules:
    the pod-level runAsNonRoot and seccomp profile still cover it."""
    for what, metadata, spec in _default_pods():
        assert restricted_violations(metadata, spec) == [], what
        assert spec["securityContext"]["runAsUser"] == 42436 and spec["securityContext"]["runAsNonRoot"], what
    extras = {"volumes": [{"name": "ca", "configMap": {"name": "private-ca"}}, {"name": "scratch", "emptyDir": {}}],
              "volumeMounts": [{"name": "ca", "mountPath": "/etc/pki/ca"}, {"name": "scratch", "mountPath": "/tmp"}]}
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}
    for what, metadata, spec in _default_pods(**extras, securityContext=hardened):
        assert restricted_violations(metadata, spec) == [], what


def test_a_privileged_override_is_what_restricted_refuses():
    """spec.securityContext replaces the container default as a whole: `{privileged: true}` is
    refused by "restricted" (and the API server says so: docs/operating.md), so are the old
    defaults without a non-root user, a hostPath volume and root as the pod's user."""
    for what, metadata, spec in _default_pods(securityContext={"privileged": True}):
        name = spec["containers"][0]["name"]
        assert restricted_violations(metadata, spec) == [
            f"privileged: {name}", f"allowPrivilegeEscalation: {name} does not set false",
            f"capabilities_restricted: {name} does not drop ALL"], what
    (_, metadata, spec), *_ = _default_pods(podSecurityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    assert restricted_violations(metadata, spec) == ["runAsNonRoot: nova-compute may run as root"]
    (_, metadata, spec), *_ = _default_pods(podSecurityContext={"runAsUser": 0, "runAsNonRoot": True,
                                                                "seccompProfile": {"type": "RuntimeDefault"}},
                                            volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}],
                                            volumeMounts=[{"name": "dev", "mountPath": "/dev"}])
    assert restricted_violations(metadata, spec) == [
        "hostPathVolumes: dev", "restrictedVolumes: dev ['hostPath']", "runAsUser: pod runs as uid 0"]


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
