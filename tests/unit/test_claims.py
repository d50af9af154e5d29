"""The Conflict rule (core/claims.py): pools on one cloud never share Ironic nodes, nor member
identities. Member identities `<name>-<n>` are the Nova compute hosts and the Ironic shard keys,
global to the cloud: two pools named alike in two namespaces would run the same hosts."""

from __future__ import annotations

from ironic_shard_operator.core.claims import PoolClaim, earlier_namesake, find_conflict
from ironic_shard_operator.core.model import Selector

FIRST, SECOND, THIRD = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"


def claim(key: str, created: str, cloud: str | None = "c1", resource_class: str | None = None) -> PoolClaim:
    return PoolClaim(key, created, Selector(resource_class=resource_class), cloud)


def test_the_later_of_two_namesakes_on_one_cloud_is_refused_and_told_why():
    earlier = claim("east/rack-a", FIRST, resource_class="gold")
    later = claim("west/rack-a", SECOND, resource_class="silver")  # disjoint nodes: still a clash
    assert earlier_namesake(later, [earlier, later]) == earlier
    assert find_conflict(earlier, [earlier, later]) is None
    found = find_conflict(later, [earlier, later])
    assert found is not None and found.reason == "SameName"
    why = found.message
    assert why.startswith(f"pool east/rack-a (created {FIRST}) has the same name on the same cloud")
    assert "member identities rack-a-<n> (the Nova compute hosts and Ironic shard keys)" in why
    assert "global to the cloud" in why


def test_namesakes_on_different_clouds_do_not_clash():
    earlier = claim("east/rack-a", FIRST, cloud="c1", resource_class="gold")
    later = claim("west/rack-a", SECOND, cloud="c2", resource_class="gold")
    assert find_conflict(later, [earlier, later]) is None


def test_an_unknown_cloud_counts_as_the_same_cloud():
    """A pool whose clouds.yaml has not been read yet may be on the same cloud: refused for now."""
    earlier = claim("east/rack-a", FIRST, cloud=None, resource_class="gold")
    later = claim("west/rack-a", SECOND, cloud="c1", resource_class="silver")
    assert find_conflict(later, [earlier, later]) is not None
    assert find_conflict(claim("west/rack-a", SECOND, cloud=None), [claim("east/rack-a", FIRST)]) is not None


def test_similar_names_are_no_namesakes():
    """`rack` and `rack-1` run rack-0, rack-1... and rack-1-0, rack-1-1...: no identity is shared."""
    pools = [claim("east/rack", FIRST, resource_class="a"), claim("west/rack-1", SECOND, resource_class="b"),
             claim("north/rack-10", THIRD, resource_class="c")]
    assert all(find_conflict(p, pools) is None for p in pools)


def test_ties_on_creation_time_go_by_namespace_then_name():
    a, b = claim("a-ns/rack", FIRST, resource_class="x"), claim("b-ns/rack", FIRST, resource_class="y")
    assert find_conflict(a, [a, b]) is None
    found = find_conflict(b, [a, b])
    assert found is not None and found.message.startswith("pool a-ns/rack ")


def test_a_namesake_is_named_before_an_overlap():
    """When both rules refuse a pool, the message names the clash no selector change can fix."""
    overlapping = claim("east/other", FIRST, resource_class="gold")
    namesake = claim("east/rack-a", SECOND, resource_class="silver")
    me = claim("west/rack-a", THIRD, resource_class="gold")
    found = find_conflict(me, [overlapping, namesake, me])
    assert found is not None and found.reason == "SameName" and found.message.startswith("pool east/rack-a ")
    alone = find_conflict(me, [overlapping, me])
    assert alone is not None and alone.reason == "OverlappingPool"
    assert alone.message.startswith("pool east/other ") and "overlapping Ironic nodes" in alone.message
