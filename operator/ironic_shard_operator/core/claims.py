"""The Conflict rule: two pools never claim the same Ironic node (invariant 8).

A pool claims the nodes its selector matches on one Ironic. When two claims may overlap,
the pool created first keeps writing and the later one is refused (condition Conflict)
and writes nothing until the overlap is gone.
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
    """What a pool claims of Ironic: its selector on one Ironic (`cloud`: cloud_identity(),
    None while its clouds.yaml has not been read). `created` orders pools: first come wins."""

    key: str
    created: str
    selector: Selector
    cloud: str | None = None


def earlier_overlap(me: PoolClaim, others: "Iterable[PoolClaim]") -> PoolClaim | None:
    """The first-created other pool that may select some of `me`'s nodes, if it came first.

    An unknown cloud counts as the same Ironic (refusing for one cycle is safe; writing
    the same node from two pools is not). Ties on creation time go by namespace/name.
    """
    rank = (me.created, me.key)
    rivals = sorted(
        (o for o in others
         if o.key != me.key and (o.created, o.key) < rank and o.selector.overlaps(me.selector)
         and (o.cloud is None or me.cloud is None or o.cloud == me.cloud)),
        key=lambda o: (o.created, o.key),
    )
    return rivals[0] if rivals else None


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
