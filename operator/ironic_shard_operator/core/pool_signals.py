"""What a pool's status tells those who watch the operator rather than the CR: the gauges every
pool has from its first cycle, and one log line per condition change. Pure.

A pool that cannot start (Keystone unresolvable, a Secret missing, a spec that cannot be read)
never completes an Ironic observation, so nothing that needs one describes it. What its status
says is known every cycle: how many members it should have and has Ready, each condition with
its reason, the members Nova has forced down, the nodes a handover has in flight. `signals()`
reads those from the status the cycle just wrote (and, where the status cannot say yet, from the
spec), and `since_observed` says from when "seconds since the last Ironic observation" counts
before the first observation of this process: the last full listing the status records, else
the pool's creation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironic_shard_operator.core.pods import parse_time


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition as a gauge shows it: its type, reason, and whether it is True."""

    type: str
    reason: str
    true: bool


@dataclass(frozen=True, slots=True)
class PoolSignals:
    """The gauges of one pool after a cycle. None: not known (yet), so not exported."""

    members_desired: int | None
    members_ready: int
    conditions: tuple[Condition, ...]
    forced_down: int | None
    handover_in_flight: int | None
    since_observed: float | None


def signals(body: Mapping[str, Any], status: Mapping[str, Any]) -> PoolSignals:
    """The gauges of the pool `body` (its CR) whose status is now `status`."""
    nova = status.get("nova")
    handover = status.get("handover")
    return PoolSignals(
        members_desired=_desired(body.get("spec") or {}, status),
        members_ready=int(status.get("readyReplicas") or 0),
        conditions=tuple(Condition(str(c.get("type")), str(c.get("reason") or ""), c.get("status") == "True")
                         for c in status.get("conditions") or () if c.get("type")),
        forced_down=len(nova.get("forcedDown") or ()) if isinstance(nova, Mapping) else None,
        handover_in_flight=sum(int(s.get("inFlight") or 0) for s in handover.get("sources") or ())
        if isinstance(handover, Mapping) else None,
        since_observed=parse_time(((status.get("nodes") or {}).get("observedAt")))
        or parse_time((body.get("metadata") or {}).get("creationTimestamp")),
    )


def _desired(spec: Mapping[str, Any], status: Mapping[str, Any]) -> int | None:
    """The member count the pool steers towards: the status's once a plan said it, before that
    spec.replicas, or autoscale's minReplicas (the fewest it will have); None for a spec that
    says neither."""
    for value in (status.get("desiredReplicas"), spec.get("replicas")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    autoscale = spec.get("autoscale")
    if isinstance(autoscale, Mapping):
        minimum = autoscale.get("minReplicas", 1)
        return minimum if isinstance(minimum, int) and not isinstance(minimum, bool) else None
    return None


def condition_changes(pool_name: str, before: Sequence[Mapping[str, Any]] | None,
                      after: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per condition of `after` whose status or reason differs from `before` (None: this
    process has reported none yet, so every condition is news), for the operator's log. A message
    is written once: a later line of the same batch with the same message points up to it."""
    old = {c.get("type"): (c.get("status"), c.get("reason")) for c in before or ()}
    lines: list[str] = []
    said: dict[str, str] = {}
    for condition in after:
        kind, status, reason = condition.get("type"), condition.get("status"), condition.get("reason")
        if before is not None and old.get(kind) == (status, reason):
            continue
        was = old.get(kind)
        line = f"pool {pool_name}: {kind} is {status} {reason}" + (
            f" (was {was[0]} {was[1]})" if was is not None else "")
        message = condition.get("message") or ""
        if message in said:
            line += f" (message as for {said[message]})"
        elif message:
            said[message] = str(kind)
            line += f": {message}"
        lines.append(line)
    return lines
