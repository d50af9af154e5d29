"""The order tests are handed to the xdist workers: the long tiers first.

hack/test.sh runs three workers with `--dist load --maxschedchunk 1`: each worker is handed the
next test whenever its queue runs low, in collection order. With xdist's default chunks, a
worker whose queue runs low gets up to a quarter of all the tests left as one contiguous block;
collected as pytest finds them (e2e, integration, nova, unit), the 21 real-Nova tests (the
longest 2-3.5 minutes each) could all land in one block on one worker, run one after the other
while the others, their unit tests done, waited. One test at a time and longest tier first,
the short tests fill the gaps at the end (the longest-processing-time-first rule). The order
within a tier is pytest's own, and a run of a single tier or file is unchanged.
"""

from __future__ import annotations

import pytest

# Tiers by the length of their tests, longest first; anything else keeps its place after them.
TIER_ORDER = ("nova", "integration", "e2e", "unit")


def tier_rank(item: pytest.Item) -> int:
    """The place of `item`'s tier (tests/<tier>/...) in TIER_ORDER; unknown tiers last."""
    parts = item.nodeid.split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=tier_rank)  # stable: pytest's order within a tier
