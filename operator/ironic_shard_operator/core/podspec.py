"""Pure rendering of a member's Pod and its per-member ConfigMap.

A member `<pool>-<ordinal>` is at once the pod name, Nova's `[DEFAULT]host` and the
Ironic shard key. Its pod reads the user's nova.conf (a Secret key, mounted at
/etc/nova/nova.conf) and then the member overlay (ConfigMap `<member>-config`, key
member.conf, mounted at /etc/nova/member.conf); later config files win in oslo.config,
so the overlay's host and shard always apply.

Both objects are owned by the CR (controller reference), so deleting the CR garbage-
collects them; the reference does not set blockOwnerDeletion (see `_metadata`). The pod carries `CONFIG_HASH` over everything that should
restart the member: image and pod settings, the overlay, and the content of the nova.conf
Secret key (its data, not its resourceVersion: a label change on the Secret does not roll
the pool). A pod whose annotation differs from the rendered one is stale and is rolled,
one member at a time (members.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ironic_shard_operator.core.spec import GROUP, KIND, VERSION, Pool

POOL_LABEL = f"{GROUP}/pool"
MEMBER_LABEL = f"{GROUP}/member"
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "nova-compute"
CONFIG_HASH = f"{GROUP}/config-hash"

CONTAINER_NAME = "nova-compute"
NOVA_CONF_PATH = "/etc/nova/nova.conf"
MEMBER_CONF_PATH = "/etc/nova/member.conf"
MEMBER_CONF_KEY = "member.conf"
DEFAULT_COMMAND = (
    "nova-compute", "--config-file", NOVA_CONF_PATH, "--config-file", MEMBER_CONF_PATH,
)


def configmap_name(member: str) -> str:
    return f"{member}-config"


def pool_selector(pool: str) -> str:
    """The label selector that lists a pool's pods and ConfigMaps."""
    return f"{POOL_LABEL}={pool}"


def member_conf(pool: Pool, member: str) -> str:
    """The per-member nova.conf overlay: host and shard are the member's own name."""
    lines = ["[DEFAULT]", f"host = {member}", "", "[ironic]", f"shard = {member}"]
    if pool.selector.conductor_group is not None:
        lines.append(f"conductor_group = {pool.selector.conductor_group}")
    return "\n".join(lines) + "\n"


def render_configmap(pool: Pool, member: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(pool, configmap_name(member), member),
        "data": {MEMBER_CONF_KEY: member_conf(pool, member)},
    }


def config_hash(pool: Pool, member: str, nova_conf_digest: str) -> str:
    """Digest of everything that, when changed, must restart `member`'s process.

    `nova_conf_digest` is `secret_digest()` of the nova.conf Secret key ("" when unread).
    """
    settings = pool.pod
    document = {
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "container": _container(pool),
        "pod": _pod_spec_settings(pool),
        "member.conf": member_conf(pool, member),
        "nova.conf": nova_conf_digest,
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def secret_digest(secret: dict[str, Any] | None, key: str) -> str:
    """Digest of one key of a Secret as the API returns it (base64 data); "" if absent."""
    value = ((secret or {}).get("data") or {}).get(key)
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value else ""


def render_pod(pool: Pool, member: str, nova_conf_digest: str) -> dict[str, Any]:
    """The member's Pod; `metadata.annotations[CONFIG_HASH]` is `config_hash(...)`."""
    metadata = _metadata(pool, member, member)
    metadata["annotations"] = {CONFIG_HASH: config_hash(pool, member, nova_conf_digest)}
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
        ],
        "restartPolicy": "Always",
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
        ],
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


def _pod_spec_settings(pool: Pool) -> dict[str, Any]:
    """Pod-level settings: the user's, plus the default spread of members over hosts."""
    settings = pool.pod
    affinity = _plain(settings.affinity) if settings.affinity is not None else _default_affinity(pool)
    optional = {
        "affinity": affinity,
        "nodeSelector": _plain(settings.node_selector),
        "tolerations": [dict(t) for t in settings.tolerations] or None,
        "priorityClassName": settings.priority_class_name,
        "serviceAccountName": settings.service_account_name,
    }
    return {k: v for k, v in optional.items() if v is not None}


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
