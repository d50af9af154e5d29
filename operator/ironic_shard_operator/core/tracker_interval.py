"""How often each member's resource tracker runs: `[DEFAULT]update_resources_interval` of its
nova.conf overlay, from its share of the pool's nodes. Pure.

A member serves a node only from its next `update_available_resource` pass, so the shorter its
interval, the sooner a node moved to it is served. A pass costs about `seconds_per_node` per
node (Nova reads every node from Ironic and reports it to Placement), and a member of a sharded
pool has only its share of the nodes: its interval is that cost, never below `min_seconds`,
rounded up to a step (`STEP_FACTORS`: 1, 1.5, 2, 3, 4, 6, 8, ... x `min_seconds`) so that the
value does not follow every node that comes or goes.

A new interval restarts the member (its config hash changes), so a running member keeps the
interval it runs while its share stays within a factor HYSTERESIS of the share that interval
was computed for: a member's failure (k members -> k-1: at most 2x the share each) rolls
nobody. `fixed_seconds` overrides all of this.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ironic_shard_operator.core.model import Plan

# Shares within this factor (up or down) of what the running interval was computed for keep it.
HYSTERESIS = 2.0


@dataclass(frozen=True, slots=True)
class IntervalSettings:
    """spec.nova.updateResourcesInterval: the cost of a pass per node, the floor, an override."""

    seconds_per_node: float = 0.05
    min_seconds: float = 10.0
    fixed_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class TrackerInterval:
    """An interval in seconds and the share (nodes) it was computed for (None: fixed, or not
    known: a member that ran none the operator rendered)."""

    seconds: float
    for_nodes: int | None = None


def step_up(seconds: float, min_seconds: float) -> float:
    """The smallest step (min_seconds x 1, 1.5, 2, 3, 4, 6, 8, 12, ...: 2^k and 1.5 x 2^k) at or
    above `seconds`; `min_seconds` for anything at or below it."""
    if seconds <= min_seconds:
        return min_seconds
    factor = seconds / min_seconds
    power = 2.0 ** math.floor(math.log2(factor))
    for step in (power, 1.5 * power, 2 * power):
        if step * min_seconds >= seconds - 1e-9:
            return step * min_seconds
    return 2 * power * min_seconds  # pragma: no cover (2 x power always reaches it)


def wanted(settings: IntervalSettings, nodes: int) -> TrackerInterval:
    """The interval for a member with `nodes` nodes, from nothing running: whole seconds (Nova's
    option is an integer), so that what an overlay renders reads back as the same value."""
    if settings.fixed_seconds is not None:
        return TrackerInterval(float(math.ceil(settings.fixed_seconds)))
    nodes = max(0, nodes)
    return TrackerInterval(float(math.ceil(step_up(settings.seconds_per_node * nodes, settings.min_seconds))), nodes)


def decide(settings: IntervalSettings, nodes: int | None, running: TrackerInterval | None) -> TrackerInterval:
    """The interval a member should run with `nodes` nodes (None: its share is not known this
    cycle) while it runs `running` (None: no overlay, or one without an interval).

    Invariants: `fixed_seconds` wins; the running interval is kept (as it is, with the share it
    was computed for) while the share is unknown, or within HYSTERESIS of that share, or when
    computing again gives the same seconds; otherwise the interval is computed again.
    """
    if settings.fixed_seconds is not None:
        return wanted(settings, 0)
    if nodes is None:
        return running if running is not None else wanted(settings, 0)
    if running is not None and running.for_nodes is not None and _within(nodes, running.for_nodes):
        return running
    fresh = wanted(settings, nodes)
    return running if running is not None and running.seconds == fresh.seconds else fresh


def _within(nodes: int, for_nodes: int) -> bool:
    """Whether `nodes` is within HYSTERESIS of `for_nodes` (0 nodes: only 0, or a share that
    still fits the floor, counts as within)."""
    return for_nodes / HYSTERESIS <= nodes <= max(for_nodes, 1) * HYSTERESIS


def share(own: int, total: int, members: int) -> int:
    """A member's share of the pool's nodes for its interval: its own nodes once the plan is
    applied, and at least the fair share (`total` over `members`), so a member out of the ring
    (failed, just created) is rendered for the share it serves once it is back."""
    fair = math.ceil(total / members) if members > 0 else total
    return max(own, fair)


def member_intervals(settings: IntervalSettings, members: Iterable[str], plan: Plan | None,
                     running: Mapping[str, TrackerInterval | None]) -> dict[str, TrackerInterval]:
    """Each member's interval (`decide`): from its share in `plan` (None: shares unknown, each
    keeps what it runs), and `running`, what its overlay renders now (core/podspec.py)."""
    loads = {load.name: load.nodes for load in plan.loads} if plan is not None else {}
    out = {}
    for member in members:
        nodes = None if plan is None else share(loads.get(member, 0), plan.counts.total, plan.desired_replicas)
        out[member] = decide(settings, nodes, running.get(member))
    return out


def expected_pass_seconds(settings: IntervalSettings, nodes: int) -> float:
    """What a pass over `nodes` nodes is expected to take at `seconds_per_node`."""
    return round(settings.seconds_per_node * max(0, nodes), 3)
