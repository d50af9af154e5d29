"""Which members' Nova compute services are disabled for their retire, and enabled again. Pure.

Invariant 14 (docs/invariants.md): no build can be placed on a member from the moment its retire
starts. Nova's scheduler sends no build to a disabled service (ComputeFilter), while the service
goes on serving the instances it has. So a retiring member's service is disabled with a reason
that names the operator and the pool (`disabled_reason`) in the cycle its retire starts, before
any of its free nodes moves (controller/cloud_side.py runs this between the Nova side and the
Ironic writes); its free nodes move only once Nova shows it disabled (`moves_wait_for`). A
member that stops retiring (scaled back up, its retire cancelled) is enabled again, but only
when the operator disabled it: a service disabled for any other reason is an administrator's,
and stays as they left it (invariant 11: the operator changes only what it manages).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ironic_shard_operator.core.nova_policy import ServiceRecord

# The start of every reason the operator disables a service with (Nova keeps at most 255 characters).
DISABLED_BY = "ironic-shard-operator"


def disabled_reason(pool_key: str) -> str:
    """The reason a retiring member of the pool `pool_key` (namespace/name) is disabled with."""
    return f"{DISABLED_BY}: retiring from pool {pool_key}; no new builds, its instances are handed over"[:255]


def disabled_by_operator(service: ServiceRecord, pool_key: str) -> bool:
    """Whether `service` is disabled, by this operator for this pool's retire."""
    return not service.enabled and service.disabled_reason == disabled_reason(pool_key)


@dataclass(frozen=True, slots=True)
class ServiceSwitch:
    """One write: disable `host`'s service with `reason`, or enable it (`reason` None)."""

    host: str
    reason: str | None

    @property
    def disables(self) -> bool:
        return self.reason is not None


def switches(*, pool_key: str, retiring: Iterable[str], identities: Iterable[str],
             services: Mapping[str, ServiceRecord]) -> tuple[ServiceSwitch, ...]:
    """The writes that make Nova agree: every retiring member's service that is enabled is
    disabled; every other member's service that this operator disabled for this pool is
    enabled again. A member with no service in Nova needs none; nothing else is touched."""
    leaving = set(retiring)
    found = []
    for host in sorted(set(identities) | leaving):
        service = services.get(host)
        if service is None:
            continue
        if host in leaving and service.enabled:
            found.append(ServiceSwitch(host, disabled_reason(pool_key)))
        elif host not in leaving and disabled_by_operator(service, pool_key):
            found.append(ServiceSwitch(host, None))
    return tuple(found)


def moves_wait_for(retiring: Iterable[str], services: Mapping[str, ServiceRecord] | None) -> frozenset[str]:
    """The retiring members whose free nodes do not move this cycle: Nova does not show their
    service disabled yet (a disable refused or not sent), or Nova's services could not be read
    (`services` None). A retiring member with no service in Nova has nothing to place builds on."""
    leaving = set(retiring)
    if services is None:
        return frozenset(leaving)
    return frozenset(m for m in leaving if m in services and services[m].enabled)
