"""An IronicComputeShard custom resource, read into typed settings.

`read_pool(body)` turns the CR body (a plain dict, as the API returns it) into a `Pool`:
the planner's `model.PoolSpec` plus everything the member, status and adapter code need.
It never touches the network. Bad input raises `InvalidSpec` whose message names the
field (`spec.failover.fencing.mode: ...`), so a user sees in the CR's status what to fix.
The CRD schema refuses most bad values first; this is the second line, and the only one
when the CRD in the cluster is older than the operator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ironic_shard_operator.core import model
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.tracker_interval import IntervalSettings

GROUP = "ironicshards.io"
VERSION = "v1alpha1"
PLURAL = "ironiccomputeshards"
KIND = "IronicComputeShard"

FENCING_MODES = ("Wait", "OutOfServiceTaint", "ForceAfter")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# The volumes and files of a member pod (and of a handover Job's pod) that are the operator's
# own: spec.volumes and spec.volumeMounts may not take them (core/podspec.py, handover_job.py).
RESERVED_VOLUMES = ("nova-conf", "member-conf", "nova-manage-conf")
RESERVED_MOUNT_PATHS = ("/etc/nova/nova.conf", "/etc/nova/member.conf", "/etc/nova/handover/nova.conf")
# The defaults of spec.terminationGracePeriodSeconds (member pods: Nova 34's own shutdown bound,
# graceful_shutdown_timeout 180 s, plus 20 s) and spec.handover.jobTerminationGracePeriodSeconds
# (the Jobs' pods: over 7 times the slowest nova-manage move measured under load, 16.3 s), and
# their ceiling (the CRD's maximum). How they were chosen: docs/design.md, "Termination grace
# periods" (bench/grace_bench.py).
MEMBER_GRACE_SECONDS = 200
JOB_GRACE_SECONDS = 120
MAX_GRACE_SECONDS = 3600


class InvalidSpec(ValueError):
    """A CR spec the operator cannot act on; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """One key of a Secret in the pool's namespace."""

    name: str
    key: str


@dataclass(frozen=True, slots=True)
class Fencing:
    """When the operator may forget a pod whose Kubernetes node is unreachable.

    Wait: never; OutOfServiceTaint: once the node carries node.kubernetes.io/out-of-service;
    ForceAfter: force-delete `force_after_seconds` after the node became unreachable.
    """

    mode: str = "Wait"
    force_after_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Failover:
    """spec.failover beyond the grace, which lives with what the planner reads
    (model.PoolSpec.rebalance_after_seconds)."""

    pod_pending_timeout_seconds: float = 300.0
    fencing: Fencing = Fencing()


@dataclass(frozen=True, slots=True)
class IronicSettings:
    poll_interval_seconds: float = 30.0
    max_concurrent_writes: int = 4
    writes_per_second: float = 20.0
    full_resync_seconds: float = 600.0


@dataclass(frozen=True, slots=True)
class Handover:
    """spec.handover: moving nodes that carry instances (core/handover.py).

    `nova_manage_config` is the nova.conf with database access the Jobs mount;
    `on_scale_down` hands over a retired member's nodes; `after_failure_seconds` (None:
    never) those of a member not Ready that long whose pod is gone; `max_concurrent` bounds
    the nodes in flight at once; `job_grace_seconds` is the terminationGracePeriodSeconds of
    the Jobs' pods (the nova-manage run under way when a pod is asked to stop ends within it).
    """

    nova_manage_config: SecretKeyRef
    on_scale_down: bool = True
    after_failure_seconds: float | None = None
    max_concurrent: int = 10
    job_grace_seconds: int = JOB_GRACE_SECONDS


@dataclass(frozen=True, slots=True)
class PodSettings:
    """The user's pod settings, copied verbatim into every member pod (core/podspec.py; the
    handover Jobs' pods take the image, pull secrets, security contexts, volumes and placement).

    Mapping-valued fields hold the API's own JSON shapes (they are passed through, not
    interpreted). None means "not set": the pod renderer applies its default (affinity,
    topology spread, security contexts); an empty list set is a choice (no spread at all).
    `grace_seconds` is the member pods' terminationGracePeriodSeconds: nova-compute's graceful
    shutdown ends within it.
    """

    image: str
    image_pull_policy: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[Mapping[str, Any], ...] = ()
    resources: Mapping[str, Any] | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    service_account_name: str | None = None
    readiness_probe: Mapping[str, Any] | None = None
    liveness_probe: Mapping[str, Any] | None = None
    image_pull_secrets: tuple[str, ...] = ()
    pod_security_context: Mapping[str, Any] | None = None
    security_context: Mapping[str, Any] | None = None
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    topology_spread_constraints: tuple[Mapping[str, Any], ...] | None = None
    grace_seconds: int = MEMBER_GRACE_SECONDS


@dataclass(frozen=True, slots=True)
class Pool:
    """Everything the operator reads from one IronicComputeShard."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: str  # metadata.creationTimestamp, RFC 3339: orders pools for Conflict
    spec: model.PoolSpec
    pod: PodSettings
    nova_config: SecretKeyRef
    cloud: SecretKeyRef
    cloud_name: str
    selector: Selector
    failover: Failover
    ironic: IronicSettings
    repair_misplaced: bool = False
    # spec.nova.leakedAllocationSeconds: a free node the guard holds this long for Placement
    # allocations, with no instance on it, is reported as a leaked allocation (core/guard_holds.py).
    leaked_allocation_seconds: float = 600.0
    paused: bool = False
    handover: Handover | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    fenced_members: tuple[str, ...] = ()  # spec.fencedMembers: no pod runs for them (core/pods.py)
    # spec.nova.updateResourcesInterval: each member's resource-tracker interval (core/tracker_interval.py).
    tracker: IntervalSettings = IntervalSettings()

    @property
    def key(self) -> str:
        """`namespace/name`: how logs, locks and conflict messages name the pool."""
        return f"{self.namespace}/{self.name}"


def read_pool(body: Mapping[str, Any]) -> Pool:
    """Typed settings of one CR body; raises InvalidSpec naming the first bad field."""
    meta = body.get("metadata") or {}
    name = meta.get("name") or ""
    if not model.POOL_NAME.match(name):
        raise InvalidSpec(
            f"metadata.name: {name!r} must be a lowercase RFC 1123 label of at most 52 "
            "characters (it prefixes every member name, Nova host and Ironic shard key)"
        )
    spec = _mapping(body.get("spec"), "spec")
    replicas, autoscale = _replicas(spec)
    failover_raw = _mapping(spec.get("failover"), "spec.failover")
    failover, grace = _failover(failover_raw), _grace(failover_raw)
    return Pool(
        namespace=meta.get("namespace") or "default",
        name=name,
        uid=meta.get("uid") or "",
        generation=int(meta.get("generation") or 0),
        created=meta.get("creationTimestamp") or "",
        spec=model.PoolSpec(
            name=name,
            replicas=replicas,
            autoscale=autoscale,
            rebalance_after_seconds=grace,
            retire_first=_members(spec.get("retireMembers"), "spec.retireMembers", name),
        ),
        pod=_pod_settings(spec),
        nova_config=_secret_ref(spec, "novaConfig", default_key="nova.conf"),
        cloud=_secret_ref(spec, "cloud", default_key="clouds.yaml"),
        cloud_name=_str(_mapping(spec.get("cloud"), "spec.cloud").get("cloudName", "ironic"),
                        "spec.cloud.cloudName"),
        selector=_selector(_mapping(spec.get("selector"), "spec.selector")),
        failover=failover,
        ironic=_ironic(_mapping(spec.get("ironic"), "spec.ironic")),
        repair_misplaced=_bool(_mapping(spec.get("nova"), "spec.nova").get("repairMisplaced", False),
                               "spec.nova.repairMisplaced"),
        leaked_allocation_seconds=_number(_mapping(spec.get("nova"), "spec.nova").get(
            "leakedAllocationSeconds", 600), "spec.nova.leakedAllocationSeconds", minimum=1),
        paused=_bool(spec.get("paused", False), "spec.paused"),
        labels=dict(meta.get("labels") or {}),
        handover=_handover(spec, grace),
        fenced_members=_members(spec.get("fencedMembers"), "spec.fencedMembers", name),
        tracker=_tracker(_mapping(_mapping(spec.get("nova"), "spec.nova").get("updateResourcesInterval"),
                                  "spec.nova.updateResourcesInterval")),
    )


def _tracker(raw: Mapping[str, Any]) -> IntervalSettings:
    """spec.nova.updateResourcesInterval (the CRD bounds each field; these checks repeat its floors)."""
    path = "spec.nova.updateResourcesInterval"
    fixed = raw.get("fixedSeconds")
    return IntervalSettings(
        seconds_per_node=_number(raw.get("secondsPerNode", 0.05), f"{path}.secondsPerNode", minimum=0),
        min_seconds=_number(raw.get("minSeconds", 10), f"{path}.minSeconds", minimum=1),
        fixed_seconds=None if fixed is None else _number(fixed, f"{path}.fixedSeconds", minimum=1))


# --- field readers --------------------------------------------------------------------


def _replicas(spec: Mapping[str, Any]) -> tuple[int, model.Autoscale | None]:
    has_replicas = spec.get("replicas") is not None
    has_autoscale = spec.get("autoscale") is not None
    if has_replicas and has_autoscale:
        raise InvalidSpec(
            "spec: spec.replicas and spec.autoscale are mutually exclusive: remove "
            "spec.autoscale to scale by hand (kubectl scale), or spec.replicas to scale by node count")
    if has_autoscale:
        raw = _mapping(spec["autoscale"], "spec.autoscale")
        autoscale = model.Autoscale(
            min_replicas=_int(raw.get("minReplicas", 1), "spec.autoscale.minReplicas", minimum=0),
            max_replicas=_int(raw.get("maxReplicas", 10), "spec.autoscale.maxReplicas", minimum=1),
            max_nodes_per_member=_int(raw.get("maxNodesPerMember", 500),
                                      "spec.autoscale.maxNodesPerMember", minimum=1),
            scale_down_stabilization_seconds=_number(raw.get("scaleDownStabilizationSeconds", 300),
                                                     "spec.autoscale.scaleDownStabilizationSeconds", minimum=0),
        )
        if autoscale.min_replicas > autoscale.max_replicas:
            raise InvalidSpec(
                f"spec.autoscale: minReplicas ({autoscale.min_replicas}) is above "
                f"maxReplicas ({autoscale.max_replicas})"
            )
        return autoscale.min_replicas, autoscale  # replicas is unused while autoscale is set
    if has_replicas:
        return _int(spec["replicas"], "spec.replicas", minimum=0), None
    raise InvalidSpec("spec: set spec.replicas (a fixed number of members, e.g. 3) or spec.autoscale")


def _pod_settings(spec: Mapping[str, Any]) -> PodSettings:
    image = spec.get("image")
    if not isinstance(image, str) or not image.strip():
        raise InvalidSpec("spec.image: required, the nova-compute container image")
    if any(c.isspace() for c in image):
        raise InvalidSpec(f"spec.image: {image!r} is no container image reference: it holds whitespace "
                          "(e.g. registry.example.com/nova-compute:2024.1)")
    policy = spec.get("imagePullPolicy")
    if policy is not None and policy not in PULL_POLICIES:
        raise InvalidSpec(f"spec.imagePullPolicy: {policy!r} is not one of {', '.join(PULL_POLICIES)}")
    volumes = _volumes(spec.get("volumes"))
    return PodSettings(
        image=image,
        image_pull_policy=policy,
        command=_strings(spec.get("command"), "spec.command"),
        args=_strings(spec.get("args"), "spec.args"),
        env=tuple(_list_of_mappings(spec.get("env"), "spec.env")),
        resources=_optional_mapping(spec.get("resources"), "spec.resources"),
        node_selector=_optional_mapping(spec.get("nodeSelector"), "spec.nodeSelector"),
        tolerations=tuple(_list_of_mappings(spec.get("tolerations"), "spec.tolerations")),
        affinity=_optional_mapping(spec.get("affinity"), "spec.affinity"),
        priority_class_name=_optional_str(spec.get("priorityClassName"), "spec.priorityClassName"),
        service_account_name=_optional_str(spec.get("serviceAccountName"), "spec.serviceAccountName"),
        readiness_probe=_optional_mapping(spec.get("readinessProbe"), "spec.readinessProbe"),
        liveness_probe=_optional_mapping(spec.get("livenessProbe"), "spec.livenessProbe"),
        image_pull_secrets=_pull_secrets(spec.get("imagePullSecrets")),
        pod_security_context=_optional_mapping(spec.get("podSecurityContext"), "spec.podSecurityContext"),
        security_context=_optional_mapping(spec.get("securityContext"), "spec.securityContext"),
        volumes=volumes,
        volume_mounts=_volume_mounts(spec.get("volumeMounts"), {str(v["name"]) for v in volumes}),
        topology_spread_constraints=None if spec.get("topologySpreadConstraints") is None else tuple(
            _list_of_mappings(spec["topologySpreadConstraints"], "spec.topologySpreadConstraints")),
        grace_seconds=_grace_seconds(spec.get("terminationGracePeriodSeconds", MEMBER_GRACE_SECONDS),
                                     "spec.terminationGracePeriodSeconds"),
    )


def _grace_seconds(value: Any, path: str) -> int:
    """A pod's terminationGracePeriodSeconds: whole seconds, 1 to MAX_GRACE_SECONDS (0 would be
    a SIGKILL at once: no graceful shutdown at all)."""
    seconds = _int(value, path, minimum=1)
    if seconds > MAX_GRACE_SECONDS:
        raise InvalidSpec(f"{path}: must be at most {MAX_GRACE_SECONDS}, got {seconds}")
    return seconds


def _pull_secrets(value: Any) -> tuple[str, ...]:
    """spec.imagePullSecrets: the Secrets' names, each once."""
    names: list[str] = []
    for i, item in enumerate(_list_of_mappings(value, "spec.imagePullSecrets")):
        name = _str(item.get("name"), f"spec.imagePullSecrets[{i}].name")
        if name not in names:
            names.append(name)
    return tuple(names)


def _volumes(value: Any) -> tuple[Mapping[str, Any], ...]:
    """spec.volumes: core/v1 Volumes, each named once, none with a name of the operator's own."""
    volumes = _list_of_mappings(value, "spec.volumes")
    seen: set[str] = set()
    for i, volume in enumerate(volumes):
        name = _str(volume.get("name"), f"spec.volumes[{i}].name")
        if name in RESERVED_VOLUMES:
            raise InvalidSpec(f"spec.volumes[{i}].name: {name!r} is the operator's own volume "
                              f"({', '.join(RESERVED_VOLUMES)}): name yours otherwise")
        if name in seen:
            raise InvalidSpec(f"spec.volumes[{i}].name: {name!r} is named twice")
        seen.add(name)
    return tuple(volumes)


def _volume_mounts(value: Any, volumes: set[str]) -> tuple[Mapping[str, Any], ...]:
    """spec.volumeMounts: each of a volume of spec.volumes, at a path that is not one of the
    operator's files."""
    mounts = _list_of_mappings(value, "spec.volumeMounts")
    for i, mount in enumerate(mounts):
        name = _str(mount.get("name"), f"spec.volumeMounts[{i}].name")
        if name not in volumes:
            raise InvalidSpec(f"spec.volumeMounts[{i}].name: {name!r} is no volume of spec.volumes")
        path = _str(mount.get("mountPath"), f"spec.volumeMounts[{i}].mountPath")
        if path.rstrip("/") in RESERVED_MOUNT_PATHS:
            raise InvalidSpec(f"spec.volumeMounts[{i}].mountPath: {path} is a file the operator mounts itself")
    return tuple(mounts)


def _secret_ref(spec: Mapping[str, Any], field_name: str, *, default_key: str, path: str = "spec") -> SecretKeyRef:
    where = f"{path}.{field_name}"
    outer = spec.get(field_name)
    if outer is None:
        raise InvalidSpec(f"{where}.secretRef: required (a Secret holding {default_key})")
    ref = _mapping(_mapping(outer, where).get("secretRef"), f"{where}.secretRef")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidSpec(f"{where}.secretRef.name: required (a Secret holding {default_key})")
    return SecretKeyRef(name=name, key=_str(ref.get("key", default_key), f"{where}.secretRef.key"))


def _selector(raw: Mapping[str, Any]) -> Selector:
    return Selector(
        conductor_group=_optional_str(raw.get("conductorGroup"), "spec.selector.conductorGroup"),
        resource_class=_optional_str(raw.get("resourceClass"), "spec.selector.resourceClass"),
    )


def _failover(raw: Mapping[str, Any]) -> Failover:
    fencing_raw = _mapping(raw.get("fencing"), "spec.failover.fencing")
    mode = fencing_raw.get("mode", "Wait")
    if mode not in FENCING_MODES:
        raise InvalidSpec(f"spec.failover.fencing.mode: {mode!r} is not one of {', '.join(FENCING_MODES)}")
    force_after = fencing_raw.get("forceAfterSeconds")
    if mode == "ForceAfter":
        if force_after is None:
            raise InvalidSpec("spec.failover.fencing.forceAfterSeconds: required when mode is ForceAfter")
        force_after = _number(force_after, "spec.failover.fencing.forceAfterSeconds", minimum=0)
    elif force_after is not None:
        raise InvalidSpec("spec.failover.fencing.forceAfterSeconds: applies only to mode ForceAfter; "
                          "remove it or set mode: ForceAfter")
    return Failover(
        pod_pending_timeout_seconds=_number(raw.get("podPendingTimeoutSeconds", 300),
                                            "spec.failover.podPendingTimeoutSeconds", minimum=1),
        fencing=Fencing(mode=mode, force_after_seconds=force_after),
    )


def _grace(raw: Mapping[str, Any]) -> float:
    """spec.failover.rebalanceAfterSeconds: how long a member that lost readiness still counts as ready."""
    return _number(raw.get("rebalanceAfterSeconds", 120), "spec.failover.rebalanceAfterSeconds", minimum=0)


def _handover(spec: Mapping[str, Any], grace: float) -> Handover | None:
    """spec.handover, or None when it is absent (nodes with instances then block scale-down)."""
    if spec.get("handover") is None:
        return None
    raw = _mapping(spec["handover"], "spec.handover")
    after = raw.get("afterFailureSeconds")
    if after is not None:
        after = _number(after, "spec.handover.afterFailureSeconds", minimum=1)
        if after <= grace:
            raise InvalidSpec(
                f"spec.handover.afterFailureSeconds: {after:g} must be greater than "
                f"spec.failover.rebalanceAfterSeconds ({grace:g}): a member's "
                "free nodes move first, its nodes with instances only after it stayed failed longer")
    on_scale_down = _bool(raw.get("onScaleDown", True), "spec.handover.onScaleDown")
    if not on_scale_down and after is None:
        raise InvalidSpec("spec.handover: with onScaleDown false and no afterFailureSeconds it does "
                          "nothing: set one of them, or remove spec.handover")
    return Handover(
        nova_manage_config=_secret_ref(raw, "novaManageConfig", default_key="nova.conf", path="spec.handover"),
        on_scale_down=on_scale_down,
        after_failure_seconds=after,
        max_concurrent=_int(raw.get("maxConcurrent", 10), "spec.handover.maxConcurrent", minimum=1),
        job_grace_seconds=_grace_seconds(raw.get("jobTerminationGracePeriodSeconds", JOB_GRACE_SECONDS),
                                         "spec.handover.jobTerminationGracePeriodSeconds"),
    )


def _ironic(raw: Mapping[str, Any]) -> IronicSettings:
    return IronicSettings(
        poll_interval_seconds=_number(raw.get("pollIntervalSeconds", 30),
                                      "spec.ironic.pollIntervalSeconds", minimum=1),
        max_concurrent_writes=_int(raw.get("maxConcurrentWrites", 4),
                                   "spec.ironic.maxConcurrentWrites", minimum=1),
        writes_per_second=_number(raw.get("writesPerSecond", 20),
                                  "spec.ironic.writesPerSecond", minimum=0.1),
        full_resync_seconds=_number(raw.get("fullResyncSeconds", 600),
                                    "spec.ironic.fullResyncSeconds", minimum=1),
    )


def _members(value: Any, path: str, pool_name: str) -> tuple[str, ...]:
    """A list of this pool's member names (`<pool>-<ordinal>`), each once, in the order given."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidSpec(f"{path}: must be a list of member names, got {type(value).__name__}")
    names: list[str] = []
    for item in value:
        if not isinstance(item, str) or model.member_ordinal(pool_name, item) is None:
            raise InvalidSpec(f"{path}: {item!r} is no member of pool {pool_name} "
                              f"(members are {pool_name}-0, {pool_name}-1, ...)")
        if item not in names:
            names.append(item)
    return tuple(names)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpec(f"{path}: must be an object, got {type(value).__name__}")
    return value


def _optional_mapping(value: Any, path: str) -> Mapping[str, Any] | None:
    return None if value is None else _mapping(value, path)


def _list_of_mappings(value: Any, path: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidSpec(f"{path}: must be a list, got {type(value).__name__}")
    return [_mapping(item, f"{path}[{i}]") for i, item in enumerate(value)]


def _strings(value: Any, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise InvalidSpec(f"{path}: must be a list of strings")
    return tuple(value)


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidSpec(f"{path}: must be a non-empty string")
    return value


def _optional_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidSpec(f"{path}: must be true or false, got {value!r}")
    return value


def _int(value: Any, path: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(f"{path}: must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidSpec(f"{path}: must be at least {minimum}, got {value}")
    return value


def _number(value: Any, path: str, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSpec(f"{path}: must be a number, got {value!r}")
    if value < minimum:
        raise InvalidSpec(f"{path}: must be at least {minimum:g}, got {value}")
    return float(value)
