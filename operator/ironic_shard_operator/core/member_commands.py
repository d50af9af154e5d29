"""What `kubectl ics retire`, `fence` and `unfence` ask of a pool: the merge patch of its spec,
or why not. Pure: the pool's CR in, a patch (or a refusal) out.

Every patch carries the pool's `metadata.resourceVersion`, so the API server applies it only to
the pool as it was read: a concurrent change (another retire, `kubectl scale`) makes it fail
instead of counting a member twice. The operator honours the fields (core/planner.py:
spec.retireMembers, core/pods.py: spec.fencedMembers) and reports them (status.desiredReason
names the members retiring; status.members[].phase is Fenced).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ironic_shard_operator.core.model import POOL_NAME, Member, member_ordinal
from ironic_shard_operator.core.planner import retiring_members


class Refused(ValueError):
    """The command cannot do what was asked; the message says why and what to do instead."""


@dataclass(frozen=True, slots=True)
class Change:
    """A merge patch for the pool (None: nothing to change) and what to tell the user."""

    patch: Mapping[str, Any] | None
    message: str


def pool_of(member: str) -> str:
    """The pool a member name belongs to (`rack-a-1` -> `rack-a`); Refused for a name that is
    no member name."""
    pool, _, _ = member.rpartition("-")
    if not POOL_NAME.match(pool) or member_ordinal(pool, member) is None:
        raise Refused(f"{member!r} is no member name: members are named <pool>-<ordinal>, e.g. rack-a-1")
    return pool


def members_of(pool: Mapping[str, Any]) -> list[str]:
    """The member identities the operator last reported (status.members), by ordinal."""
    name = (pool.get("metadata") or {}).get("name") or ""
    names = [m.get("name") for m in (pool.get("status") or {}).get("members") or () if m.get("name")]
    return sorted((n for n in names if member_ordinal(name, n) is not None), key=lambda n: member_ordinal(name, n))


def _known_member(pool: Mapping[str, Any], member: str) -> list[str]:
    members = members_of(pool)
    if member not in members:
        name = (pool.get("metadata") or {}).get("name")
        raise Refused(f"{member} is no member of ironiccomputeshard/{name} "
                      f"(its members: {', '.join(members) or 'none reported yet'})")
    return members


def _guarded(pool: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": (pool.get("metadata") or {}).get("resourceVersion")}, "spec": dict(spec)}


def retire(pool: Mapping[str, Any], member: str) -> Change:
    """Retire `member`: spec.replicas one lower and the member in spec.retireMembers, in one
    write, so that it (and not the highest ordinal) is the one that goes. Names of
    spec.retireMembers that are no member any more are dropped (they have gone)."""
    spec = pool.get("spec") or {}
    name = (pool.get("metadata") or {}).get("name")
    members = _known_member(pool, member)
    if spec.get("autoscale") is not None:
        raise Refused(f"ironiccomputeshard/{name} scales by node count (spec.autoscale), which sets the member "
                      "count: lower spec.autoscale.maxReplicas to retire members, and name the one to go first in "
                      f"spec.retireMembers (kubectl patch ics {name} --type merge -p "
                      f"'{{\"spec\":{{\"retireMembers\":[\"{member}\"]}}}}')")
    listed = [m for m in spec.get("retireMembers") or () if m in members]
    replicas = int(spec.get("replicas") or 0)
    if member in retiring_members([Member(m, False) for m in members], replicas, listed):
        return Change(None, f"{member} is already retiring (spec.replicas {replicas}, spec.retireMembers "
                            f"{', '.join(listed) or 'none'})")
    listed = [m for m in listed if m != member] + [member]
    return Change(_guarded(pool, {"replicas": replicas - 1, "retireMembers": listed}),
                  f"ironiccomputeshard/{name}: {member} retires (spec.replicas {replicas} -> {replicas - 1}, "
                  f"spec.retireMembers {', '.join(listed)}): its free nodes move to other members, its nodes with "
                  "instances are handed over (spec.handover) or keep it until they are freed (condition "
                  "ScaleDownBlocked), then its pod and identity go. Follow it with: kubectl ics status " + str(name))


def fence(pool: Mapping[str, Any], member: str, fenced: bool) -> Change:
    """Fence (`fenced`) or unfence `member`: add it to spec.fencedMembers or take it out."""
    spec = pool.get("spec") or {}
    name = (pool.get("metadata") or {}).get("name")
    listed = list(spec.get("fencedMembers") or ())
    paused = " (the pool is paused: the operator acts once it is resumed)" if spec.get("paused") else ""
    if not fenced:
        if member not in listed:
            return Change(None, f"{member} is not fenced")
        listed.remove(member)
        return Change(_guarded(pool, {"fencedMembers": listed}),
                      f"ironiccomputeshard/{name}: {member} unfenced: the operator creates its pod again (same "
                      f"identity, same nodes){paused}")
    _known_member(pool, member)
    if member in listed:
        return Change(None, f"{member} is already fenced")
    return Change(_guarded(pool, {"fencedMembers": [*listed, member]}),
                  f"ironiccomputeshard/{name}: {member} fenced: the operator deletes its pod and creates none until "
                  f"`kubectl ics unfence {member}`; it is counted out at once: its Nova service is forced down and its "
                  f"free nodes move, without waiting for failover.rebalanceAfterSeconds{paused}")
