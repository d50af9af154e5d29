"""Pure rendering of a member's Pod, its per-member ConfigMap and the pool's PodDisruptionBudget.

A member `<pool>-<ordinal>` is at once the pod name, Nova's `[DEFAULT]host` and the Ironic shard
key; its overlay (host, shard, resource-tracker interval) is read after the user's nova.conf, so
it always applies. Invariants: every object is owned by the CR; the pod carries `CONFIG_HASH`
over everything that should restart the member (image, pod settings, overlay, the nova.conf
Secret key's content), and a stale pod is rolled one member at a time. The pod settings and
their defaults: docs/design.md, "Member pods".
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ironic_shard_operator.core.spec import GROUP, KIND, VERSION, Pool
from ironic_shard_operator.core.tracker_interval import TrackerInterval

POOL_LABEL = f"{GROUP}/pool"
MEMBER_LABEL = f"{GROUP}/member"
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "nova-compute"
CONFIG_HASH = f"{GROUP}/config-hash"
ZONE_KEY = "topology.kubernetes.io/zone"
# Unset spec.podSecurityContext / spec.securityContext: what nova-compute (and nova-manage) need,
# and no more: it talks HTTP and AMQP, needs no capability and no privilege escalation. Together
# they pass the Pod Security Standard "restricted" (Kubernetes v1.37), so a namespace labelled
# `pod-security.kubernetes.io/enforce: restricted` admits member pods and the Jobs' pods as they
# are. Who the process runs as is the pod's (`runAsNonRoot` there covers every container, even
# one whose spec.securityContext replaces the container default): Kolla's nova user, uid and gid
# 42436 (kolla/common/users.py), the user of the nova-compute-ironic images the examples run.
# Kolla's images say `USER nova`, a name: a kubelet refuses `runAsNonRoot` with a user it
# cannot check as a number, hence the numeric runAsUser. fsGroup makes volumes the user adds
# (an emptyDir, a CSI volume) writable by that user. Other images: set spec.podSecurityContext
# (openstack-helm's LOCI images run nova as 42424).
NOVA_UID = 42436
DEFAULT_POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True, "runAsUser": NOVA_UID, "runAsGroup": NOVA_UID, "fsGroup": NOVA_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DEFAULT_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

CONTAINER_NAME = "nova-compute"
NOVA_CONF_PATH = "/etc/nova/nova.conf"
MEMBER_CONF_PATH = "/etc/nova/member.conf"
MEMBER_CONF_KEY = "member.conf"
DEFAULT_COMMAND = (
    "nova-compute", "--config-file", NOVA_CONF_PATH, "--config-file", MEMBER_CONF_PATH,
)


def configmap_name(member: str) -> str:
    return f"{member}-config"


def pool_selector(pool_name: str) -> str:
    """The label selector that lists a pool's pods and ConfigMaps."""
    return f"{POOL_LABEL}={pool_name}"


def member_labels(pool_name: str) -> dict[str, str]:
    """The labels every member pod of `pool_name` carries, and no handover Job's pod: what the
    pool's PodDisruptionBudget and its default spread select."""
    return {APP_LABEL: APP_NAME, POOL_LABEL: pool_name}


# The overlay's interval line, and the comment after it naming the share it was computed for.
_INTERVAL_LINE = re.compile(r"^update_resources_interval = ([0-9.]+)$", re.M)
INTERVAL_FOR_NODES = "# update_resources_interval computed for {nodes} nodes (spec.nova.updateResourcesInterval)"
_FOR_NODES_LINE = re.compile(r"^# update_resources_interval computed for (\d+) nodes", re.M)


def member_conf(pool: Pool, member: str, interval: TrackerInterval | None = None) -> str:
    """The per-member nova.conf overlay: host and shard are the member's own name; with
    `interval`, its resource tracker's interval (and the share it was computed for)."""
    lines = ["[DEFAULT]", f"host = {member}"]
    if interval is not None:
        lines.append(f"update_resources_interval = {_seconds(interval.seconds)}")
        if interval.for_nodes is not None:
            lines.append(INTERVAL_FOR_NODES.format(nodes=interval.for_nodes))
    lines += ["", "[ironic]", f"shard = {member}"]
    if pool.selector.conductor_group is not None:
        lines.append(f"conductor_group = {pool.selector.conductor_group}")
    return "\n".join(lines) + "\n"


def _seconds(seconds: float) -> str:
    """An interval as nova.conf takes it (an integer option; tracker_interval gives whole seconds)."""
    return str(int(seconds))


def running_interval(overlay: str | None) -> TrackerInterval | None:
    """The interval an overlay renders (and the share it was computed for), None without one."""
    found = _INTERVAL_LINE.search(overlay or "")
    if found is None:
        return None
    nodes = _FOR_NODES_LINE.search(overlay or "")
    return TrackerInterval(float(found.group(1)), int(nodes.group(1)) if nodes else None)


def render_configmap(pool: Pool, member: str, interval: TrackerInterval | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(pool, configmap_name(member), member),
        "data": {MEMBER_CONF_KEY: member_conf(pool, member, interval)},
    }


def config_hash(pool: Pool, member: str, nova_conf_digest: str, interval: TrackerInterval | None = None) -> str:
    """Digest of everything that, when changed, must restart `member`'s process.

    `nova_conf_digest` is `secret_digest()` of the nova.conf Secret key ("" when unread);
    `interval` the resource-tracker interval its overlay renders.
    """
    settings = pool.pod
    document = {
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "container": _container(pool),
        "pod": _pod_spec_settings(pool),
        "volumes": extra_volumes(pool),
        "member.conf": member_conf(pool, member, interval),
        "nova.conf": nova_conf_digest,
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def secret_digest(secret: dict[str, Any] | None, key: str) -> str:
    """Digest of one key of a Secret as the API returns it (base64 data); "" if absent."""
    value = ((secret or {}).get("data") or {}).get(key)
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value else ""


def render_pod(pool: Pool, member: str, nova_conf_digest: str,
               interval: TrackerInterval | None = None) -> dict[str, Any]:
    """The member's Pod; `metadata.annotations[CONFIG_HASH]` is `config_hash(...)`. Its
    terminationGracePeriodSeconds is spec.terminationGracePeriodSeconds: asked to stop,
    nova-compute's graceful shutdown (bounded by nova.conf's graceful_shutdown_timeout) ends
    before the kubelet's SIGKILL."""
    metadata = _metadata(pool, member, member)
    metadata["annotations"] = {CONFIG_HASH: config_hash(pool, member, nova_conf_digest, interval)}
    spec: dict[str, Any] = {
        "containers": [_container(pool)],
        "volumes": [
            {
                "name": "nova-conf",
                "secret": {
                    "secretName": pool.nova_config.name,
                    "items": [{"key": pool.nova_config.key, "path": "nova.conf"}],
                },
            },
            {
                "name": "member-conf",
                "configMap": {
                    "name": configmap_name(member),
                    "items": [{"key": MEMBER_CONF_KEY, "path": MEMBER_CONF_KEY}],
                },
            },
            *extra_volumes(pool),
        ],
        "restartPolicy": "Always",
        # Outside CONFIG_HASH: a pod's grace only matters when it is deleted, and a change of it
        # alone rolls no member (pods made from now on carry it; docs/design.md).
        "terminationGracePeriodSeconds": pool.pod.grace_seconds,
        **_pod_spec_settings(pool),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _metadata(pool: Pool, name: str, member: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": pool.namespace,
        "labels": {APP_LABEL: APP_NAME, POOL_LABEL: pool.name, MEMBER_LABEL: member},
        "ownerReferences": [owner_reference(pool)],
    }


def render_budget(pool: Pool, running: int) -> dict[str, Any]:
    """The pool's PodDisruptionBudget (named as the pool, owned by it): of the `running` members
    the operator means to run (pods it keeps or creates), at most one may be disrupted at a
    time, so a node drain evicts one member and waits until its replacement is Ready before it
    evicts the next (the API server answers 429 meanwhile). `minAvailable: running - 1`, not
    `maxUnavailable: 1`: with maxUnavailable the disruption controller counts the members from
    the pool's scale subresource (spec.replicas), which an autoscaled pool does not set, and
    then allows no eviction at all. A member that is not Ready may always be evicted
    (unhealthyPodEvictionPolicy AlwaysAllow): it serves nothing, and a crash-looping member
    must not hold up a drain. The operator's own deletions (replacements, rolls, retirements)
    are no evictions and are not held up."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": pool.name, "namespace": pool.namespace, "labels": member_labels(pool.name),
                     "ownerReferences": [owner_reference(pool)]},
        "spec": {"minAvailable": max(running - 1, 0), "selector": {"matchLabels": member_labels(pool.name)},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


BUDGET_FIELDS = ("minAvailable", "maxUnavailable", "selector", "unhealthyPodEvictionPolicy")


def budget_change(current: Mapping[str, Any] | None, wanted: Mapping[str, Any],
                  pool_uid: str) -> tuple[str, dict[str, Any]] | None:
    """What to write so that the pool's budget is `wanted`: ("create", the object) when there is
    none, ("patch", a merge patch of its spec) when the pool's own budget differs, None when it
    is as wanted or is not the pool's (another owner's object of that name is left alone)."""
    if current is None:
        return "create", dict(wanted)
    owners = (current.get("metadata") or {}).get("ownerReferences") or ()
    if not any(ref.get("controller") and ref.get("uid") == pool_uid for ref in owners):
        return None
    have, want = current.get("spec") or {}, wanted["spec"]
    patch = {key: want.get(key) for key in BUDGET_FIELDS if have.get(key) != want.get(key)}
    return ("patch", {"spec": patch}) if patch else None


def owner_reference(pool: Pool) -> dict[str, Any]:
    """The controller reference to the pool that every object the operator creates carries."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": pool.name,
        "uid": pool.uid,
        "controller": True,
        # No blockOwnerDeletion. It only makes a *foreground* deletion of the pool wait for
        # this object, which nothing here relies on, and setting it needs `update` on
        # ironiccomputeshards/finalizers where the OwnerReferencesPermissionEnforcement
        # admission plugin runs (OpenShift, hardened clusters): a permission kept only to
        # satisfy that check, which every hand-written Role (rbac.create=false) would also
        # have to carry, or every pod create is refused. docs/operating.md, Permissions.
    }


def _container(pool: Pool) -> dict[str, Any]:
    settings = pool.pod
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": settings.image,
        "command": list(settings.command or DEFAULT_COMMAND),
        "volumeMounts": [
            {"name": "nova-conf", "mountPath": NOVA_CONF_PATH, "subPath": "nova.conf", "readOnly": True},
            {"name": "member-conf", "mountPath": MEMBER_CONF_PATH, "subPath": MEMBER_CONF_KEY,
             "readOnly": True},
            *extra_mounts(pool),
        ],
        "securityContext": container_security_context(pool),
    }
    optional = {
        "imagePullPolicy": settings.image_pull_policy,
        "args": list(settings.args) if settings.args is not None else None,
        "env": [dict(e) for e in settings.env] or None,
        "resources": _plain(settings.resources),
        "readinessProbe": _plain(settings.readiness_probe),
        "livenessProbe": _plain(settings.liveness_probe),
    }
    container.update({k: v for k, v in optional.items() if v is not None})
    return container


def shared_pod_settings(pool: Pool) -> dict[str, Any]:
    """The pod-level settings member pods and handover Job pods share: pull secrets, the pod
    security context (the user's, else DEFAULT_POD_SECURITY_CONTEXT), where they may run
    (nodeSelector, tolerations), priority and ServiceAccount. No Kubernetes token is mounted:
    nova-compute and nova-manage never talk to Kubernetes, so a pod gets no credential it would
    not use (the ServiceAccount still gives its imagePullSecrets)."""
    settings = pool.pod
    optional = {
        "automountServiceAccountToken": False,
        "imagePullSecrets": [{"name": name} for name in settings.image_pull_secrets] or None,
        "securityContext": _plain(settings.pod_security_context if settings.pod_security_context is not None
                                  else DEFAULT_POD_SECURITY_CONTEXT),
        "nodeSelector": _plain(settings.node_selector),
        "tolerations": [dict(t) for t in settings.tolerations] or None,
        "priorityClassName": settings.priority_class_name,
        "serviceAccountName": settings.service_account_name,
    }
    return {k: v for k, v in optional.items() if v is not None}


def container_security_context(pool: Pool) -> dict[str, Any]:
    """The container's security context: the user's, else DEFAULT_SECURITY_CONTEXT."""
    chosen = pool.pod.security_context
    return _plain(chosen if chosen is not None else DEFAULT_SECURITY_CONTEXT)


def extra_volumes(pool: Pool) -> list[dict[str, Any]]:
    """spec.volumes, as given (the operator's own volumes are named apart: core/spec.py)."""
    return [_plain(volume) for volume in pool.pod.volumes]


def extra_mounts(pool: Pool) -> list[dict[str, Any]]:
    """spec.volumeMounts, as given."""
    return [_plain(mount) for mount in pool.pod.volume_mounts]


def _pod_spec_settings(pool: Pool) -> dict[str, Any]:
    """Pod-level settings: the shared ones, plus the default spread of members over hosts
    (affinity) and zones (topologySpreadConstraints), each replaced when the user sets it."""
    settings = pool.pod
    affinity = _plain(settings.affinity) if settings.affinity is not None else _default_affinity(pool)
    return {**shared_pod_settings(pool), "affinity": affinity,
            **({"topologySpreadConstraints": spread} if (spread := _spread(pool)) else {})}


def _spread(pool: Pool) -> list[dict[str, Any]]:
    """The user's topologySpreadConstraints, each without a labelSelector (and matchLabelKeys)
    given the pool's members' (a constraint that selects no pod spreads nothing); unset: one
    soft spread over zones (`_default_spread`)."""
    given = pool.pod.topology_spread_constraints
    if given is None:
        return [_default_spread(pool)]
    spread = []
    for constraint in map(_plain, given):
        if "labelSelector" not in constraint and "matchLabelKeys" not in constraint:
            constraint["labelSelector"] = {"matchLabels": member_labels(pool.name)}
        spread.append(constraint)
    return spread


def _default_spread(pool: Pool) -> dict[str, Any]:
    """Prefer (not require) members spread evenly over zones: a zone lost takes as few as it
    can; a cluster of one zone, or whose nodes carry no zone label, still runs them all."""
    return {"maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": member_labels(pool.name)}}


def _default_affinity(pool: Pool) -> dict[str, Any]:
    """Prefer (not require) one member per Kubernetes node: a small cluster still runs all."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {POOL_LABEL: pool.name}},
                },
            }],
        },
    }


def _plain(value: Any) -> Any:
    """A deep plain-dict/list copy of a JSON-shaped value (mappings become dicts)."""
    if value is None:
        return None
    return json.loads(json.dumps(value, default=dict))
