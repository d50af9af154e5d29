"""What the last status recorded, read back once at the start of a cycle: the pool's memory.

The operator keeps nothing of a pool outside its resource: since when a member is not Ready,
the autoscale window, each handover's phase, the services it forced down, the guard's clocks,
what it already reported. Each cycle writes them into status and the next reads them back
here, once, into `PoolMemory`; every decision reads that, never the raw status. A restart, a
new leader or an upgraded operator starts from the same memory. An entry the operator would
not have written is dropped, never trusted. Pure.

status.handover, status.nova and status.hostMapping are read by the modules that write them
(core/handover.py::recorded_handover, core/nova_policy.py::recorded_nova,
core/host_mapping.py::recorded_mapping), called from here, once per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironic_shard_operator.core import model
from ironic_shard_operator.core.handover import RecordedHandover, recorded_handover
from ironic_shard_operator.core.host_mapping import RecordedMapping, recorded_mapping
from ironic_shard_operator.core.nova_policy import RecordedNova, recorded_nova
from ironic_shard_operator.core.pods import parse_time


@dataclass(frozen=True, slots=True)
class RecordedHold:
    """A free node the shard-write guard held, as status.guard.nodes recorded it."""

    consumers: tuple[str, ...]
    since: float | None
    leaked: bool


@dataclass(frozen=True, slots=True)
class PoolMemory:
    """The last status, read back (`memory_of`).

    `members`: each member's readiness and since when, why it was counted out, its Kubernetes
    node (status.members); `autoscale`: the scale-down window (status.autoscale); `guard`: the
    held free nodes by uuid (status.guard); `degraded`: what the Degraded condition reported
    ('' when it was not True); `handover`: each handover's last recorded step; `nova`: the
    forced_down flags and retired identities the Nova cycle recorded; `host_mapping`: each
    member's host mapping as recorded.
    """

    members: Mapping[str, model.Member] = field(default_factory=dict)
    autoscale: model.AutoscaleHistory = field(default_factory=model.AutoscaleHistory)
    guard: Mapping[str, RecordedHold] = field(default_factory=dict)
    degraded: str = ""
    handover: RecordedHandover = field(default_factory=RecordedHandover)
    nova: RecordedNova = field(default_factory=RecordedNova)
    host_mapping: RecordedMapping = field(default_factory=RecordedMapping)


def memory_of(status: Mapping[str, Any] | None) -> PoolMemory:
    """The pool's memory from its last status (empty for none)."""
    status = status or {}
    return PoolMemory(members=since_of(status), autoscale=autoscale_history_of(status),
                      guard=recorded_holds(status.get("guard")), degraded=_degraded(status),
                      handover=recorded_handover(status.get("handover")), nova=recorded_nova(status.get("nova")),
                      host_mapping=recorded_mapping(status.get("hostMapping")))


def since_of(status: Mapping[str, Any] | None) -> dict[str, model.Member]:
    """The members' readiness as the last status recorded it (for member_readiness)."""
    out = {}
    for entry in (status or {}).get("members") or ():
        if isinstance(entry, Mapping) and entry.get("name"):
            out[entry["name"]] = model.Member(
                name=entry["name"], ready=bool(entry.get("ready")), since=parse_time(entry.get("since")),
                counted_out=entry.get("countedOut") or None, kubernetes_node=entry.get("kubernetesNode") or None)
    return out


def autoscale_history_of(status: Mapping[str, Any] | None) -> model.AutoscaleHistory:
    """The scale-down stabilization's history as the last status recorded it (empty when there
    is none, or it is not what the operator writes)."""
    section = (status or {}).get("autoscale")
    try:
        recommendation = section.get("recommendation")
        peaks = tuple(model.AutoscalePeak(int(p["replicas"]), parse_time(p["lastWanted"]))
                      for p in section.get("peaks") or ())
    except (AttributeError, KeyError, TypeError, ValueError):
        return model.AutoscaleHistory()
    if not isinstance(recommendation, int) or any(p.last_wanted is None for p in peaks):
        return model.AutoscaleHistory()
    return model.AutoscaleHistory(recommendation, peaks)


def recorded_holds(section: Mapping[str, Any] | None) -> dict[str, RecordedHold]:
    """status.guard's held nodes by uuid."""
    found = {}
    for entry in (section or {}).get("nodes") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("node"), str):
            since = entry.get("since")
            found[entry["node"]] = RecordedHold(tuple(entry.get("consumers") or ()),
                                                parse_time(since) if isinstance(since, str) else None,
                                                bool(entry.get("leaked")))
    return found


def _degraded(status: Mapping[str, Any]) -> str:
    """The message of the Degraded condition while it was True; '' otherwise."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Degraded":
            return str(condition.get("message") or "") if condition.get("status") == "True" else ""
    return ""
