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
from collections.abc import Iterable, Iterator, MutableMapping

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
        if self._owners:
            yield from self._walk(bisect_right(self._positions, stable_hash(key)))

    def place(self, keys: Iterable[str], room: MutableMapping[str, int]) -> list[str | None]:
        """For each key in turn, the first member of its preference order with `room` left,
        taking one unit of that member's room (None: no member has room left).

        The same answers as walking `preference(key)` key by key. Built for a first
        assignment (100,000 keys): the common case, the first choice having room, costs one
        hash and one bisection, and the walk runs on a ring of the members with room, rebuilt
        (same points, `among`) whenever more than half of its members have filled up.
        """
        ring = self.among(m for m in self.members if room[m] > 0)
        positions, owners, count = ring._positions, ring._owners, len(ring._owners)
        blake2b, from_bytes = hashlib.blake2b, int.from_bytes
        placed: list[str | None] = []
        append = placed.append
        filled = 0
        for key in keys:
            if not count:
                append(None)
                continue
            # stable_hash(key), inlined: this loop is a first assignment's cost
            start = bisect_right(positions, from_bytes(blake2b(key.encode(), digest_size=8).digest(), "big"))
            member = owners[start % count]
            left = room[member]
            if left <= 0:
                member = next((m for m in ring._walk(start) if room[m] > 0), None)  # type: ignore[assignment]
                if member is None:
                    append(None)
                    continue
                left = room[member]
            append(member)
            room[member] = left - 1
            if left == 1:
                filled += 1
                if filled * 2 > len(ring.members):
                    ring = ring.among(m for m in ring.members if room[m] > 0)
                    positions, owners, count, filled = ring._positions, ring._owners, len(ring._owners), 0
        return placed

    def _walk(self, start: int) -> Iterator[str]:
        """Every member exactly once, in the order met clockwise from point index `start`."""
        owners = self._owners
        count = len(owners)
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
