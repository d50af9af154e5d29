"""The Conflict rule: two pools never claim the same Ironic node (invariant 8), nor the same
member identities.

A pool claims the nodes its selector matches on one Ironic, and the identities
`<name>-<n>` of its members on that cloud: they are the Nova compute hosts and the Ironic
shard keys, which are global to the cloud, whatever the Kubernetes namespace. When two
claims may clash, the pool created first keeps writing and the later one is refused
(condition Conflict) and writes nothing until the clash is gone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from ironic_shard_operator.core.clouds_yaml import CloudsYamlError, cloud_entry
from ironic_shard_operator.core.model import Selector
from ironic_shard_operator.core.spec import InvalidSpec


@dataclass(frozen=True, slots=True)
class PoolClaim:
    """What a pool claims of a cloud: its selector on one Ironic (`cloud`: cloud_identity(),
    None while its clouds.yaml has not been read) and, by its name, its members' identities.
    `key` is namespace/name; `created` orders pools: first come wins."""

    key: str
    created: str
    selector: Selector
    cloud: str | None = None

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]


def _earlier_on_same_cloud(me: PoolClaim, others: Iterable[PoolClaim]) -> list[PoolClaim]:
    """The other pools created before `me` that may talk to the same cloud, first-created first.

    An unknown cloud counts as the same cloud (refusing for one cycle is safe; writing the
    same node, or running the same Nova host, from two pools is not). Ties on creation time
    go by namespace/name.
    """
    rank = (me.created, me.key)
    return sorted((o for o in others
                   if o.key != me.key and (o.created, o.key) < rank
                   and (o.cloud is None or me.cloud is None or o.cloud == me.cloud)),
                  key=lambda o: (o.created, o.key))


def earlier_overlap(me: PoolClaim, others: Iterable[PoolClaim]) -> PoolClaim | None:
    """The first-created other pool that may select some of `me`'s nodes, if it came first."""
    return next((o for o in _earlier_on_same_cloud(me, others) if o.selector.overlaps(me.selector)), None)


def earlier_namesake(me: PoolClaim, others: Iterable[PoolClaim]) -> PoolClaim | None:
    """The first-created pool of the same name in another namespace on the same cloud, if it
    came first: its members have the same identities (`<name>-<n>`) as `me`'s."""
    return next((o for o in _earlier_on_same_cloud(me, others) if o.name == me.name), None)


@dataclass(frozen=True, slots=True)
class Conflict:
    """Why a pool must write nothing: the Conflict condition's reason and message."""

    reason: str  # SameName or OverlappingPool
    message: str


def find_conflict(me: PoolClaim, others: Iterable[PoolClaim]) -> Conflict | None:
    """Why `me` must write nothing, or None. A namesake is named first: no selector change
    can fix that clash. `others` may include `me`'s own claim (a claim with `me`'s key is
    ignored)."""
    others = list(others)
    if namesake := earlier_namesake(me, others):
        return Conflict("SameName", (
            f"pool {namesake.key} (created {namesake.created}) has the same name on the same cloud: "
            f"member identities {me.name}-<n> (the Nova compute hosts and Ironic shard keys) are "
            "global to the cloud, whatever the namespace; this pool writes nothing until one of the "
            "two is deleted (give each pool on a cloud a name of its own)"))
    if rival := earlier_overlap(me, others):
        return Conflict("OverlappingPool", (
            f"pool {rival.key} (created {rival.created}) selects overlapping Ironic nodes "
            "(conductorGroup/resourceClass); this pool writes nothing until the selectors "
            "are made disjoint or that pool is deleted"))
    return None


def cloud_identity(clouds_yaml: str, cloud_name: str) -> str:
    """A short digest of the Ironic a clouds.yaml entry points at (auth URL or endpoint).

    Two pools are compared for Conflict only when they talk to the same Ironic; credentials
    and other settings do not change which Ironic that is, so they are left out.
    Raises InvalidSpec saying what keeps the clouds.yaml from naming the cloud
    (clouds_yaml.cloud_entry: its syntax, its shape, or the missing cloud).
    """
    try:
        cloud = cloud_entry(clouds_yaml, cloud_name)
    except CloudsYamlError as error:
        raise InvalidSpec(f"spec.cloud: {error}") from None
    auth = cloud.get("auth") if isinstance(cloud.get("auth"), dict) else {}
    where = (
        cloud.get("baremetal_endpoint_override")
        or auth.get("endpoint")
        or auth.get("auth_url")
        or ""
    )
    return hashlib.sha256(str(where).rstrip("/").encode()).hexdigest()[:16]
