"""Consistent hashing: for every node, a preference order over the pool's members.

The order depends only on member names and the node's UUID — no process seed, no dict or
set iteration order — so every operator replica, before and after a restart, computes the
same answer. Each member sits at POINTS_PER_MEMBER pseudo-random points of a 64-bit circle;
a key's preference order is the sequence of distinct members met walking clockwise from the
key's own point. Adding or removing one member only changes the first choice of the keys
whose walk meets that member first (about 1/len(members) of them).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Iterator

POINTS_PER_MEMBER = 64


def stable_hash(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def ring_digest(members: Iterable[str]) -> str:
    """A short fingerprint of a membership: equal digests mean equal rings."""
    joined = "\n".join(sorted(set(members)))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


class HashRing:
    """The preference order of `members` for any key; immutable once built."""

    def __init__(self, members: Iterable[str], points_per_member: int = POINTS_PER_MEMBER) -> None:
        self.members: tuple[str, ...] = tuple(sorted(set(members)))
        # Ties between equal points (astronomically rare) break by member name.
        points = sorted(
            (stable_hash(f"{member}#{index}"), member)
            for member in self.members
            for index in range(points_per_member)
        )
        self._positions = [position for position, _ in points]
        self._owners = [member for _, member in points]

    def among(self, members: Iterable[str]) -> HashRing:
        """This ring with only `members` left: the same points, so every key's preference
        order is this ring's order with the others skipped. Costs no hashing."""
        keep = set(members) & set(self.members)
        ring = HashRing.__new__(HashRing)
        ring.members = tuple(m for m in self.members if m in keep)
        pairs = [(p, m) for p, m in zip(self._positions, self._owners) if m in keep]
        ring._positions = [p for p, _ in pairs]
        ring._owners = [m for _, m in pairs]
        return ring

    def preference(self, key: str) -> Iterator[str]:
        """Every member exactly once, most preferred for `key` first."""
        owners = self._owners
        count = len(owners)
        if not count:
            return
        start = bisect_right(self._positions, stable_hash(key))
        seen: set[str] = set()
        wanted = len(self.members)
        for step in range(count):
            member = owners[(start + step) % count]
            if member not in seen:
                seen.add(member)
                yield member
                if len(seen) == wanted:
                    return

    def owner(self, key: str) -> str | None:
        """The first choice for `key` (None for an empty ring)."""
        return next(self.preference(key), None)
