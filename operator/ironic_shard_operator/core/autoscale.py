"""How many members autoscale asks for: up at once, down only once the lower count has held.

Pure: `decide(settings, node_count, history, now)` reads nothing but its arguments.

The recommendation is ceil(nodes / maxNodesPerMember) members within [minReplicas,
maxReplicas]. The member count is the highest recommendation of the last
`scaleDownStabilizationSeconds` (the HorizontalPodAutoscaler's scale-down rule), so:
- a higher recommendation applies at once;
- a lower one applies only once no higher one was wanted for a whole window: a node
  count that wanders across a boundary faster than the window never retires a member
  (each retirement would move a share of the free nodes twice);
- a recommendation counts until the cycle that sees the next one, so a window in which
  the operator saw nothing (it was down, or Ironic could not be read) never lowers the
  count: the lower count must be seen, then hold for the window;
- a lowered maxReplicas applies at once (the count is bounded again).

What the rule needs from one cycle to the next is `AutoscaleHistory`, kept in the pool's
status (status.autoscale), not in memory, so an operator restart keeps the decision. It is
bounded: its peaks are distinct member counts (at most 1,000, the CRD's bound on maxReplicas).
"""

from __future__ import annotations

import math

from ironic_shard_operator.core.model import Autoscale, AutoscaleDecision, AutoscaleHistory, AutoscalePeak


def decide(settings: Autoscale, node_count: int, history: AutoscaleHistory = AutoscaleHistory(),
           now: float = 0.0) -> AutoscaleDecision:
    """The member count for `node_count` managed nodes at `now`, given what earlier cycles
    kept (`history`); the decision carries the history for the next cycle."""
    by_nodes = math.ceil(node_count / settings.max_nodes_per_member)
    recommendation = max(settings.min_replicas, min(settings.max_replicas, by_nodes))
    window = settings.scale_down_stabilization_seconds
    peaks = list(history.peaks)
    if history.recommendation is not None and history.recommendation != recommendation:
        peaks.append(AutoscalePeak(history.recommendation, now))  # it was wanted until now
    kept: list[AutoscalePeak] = []
    for peak in reversed(peaks):  # newest first: keep a peak only above every later one
        if peak.replicas > recommendation and now - peak.last_wanted < window \
                and (not kept or peak.replicas > kept[-1].replicas):
            kept.append(peak)
    kept.reverse()
    desired = min(settings.max_replicas, max([recommendation, *(p.replicas for p in kept)]))
    held_until = None
    if desired > recommendation:  # until the last peak at or above `desired` leaves the window
        held_until = max(p.last_wanted for p in kept if p.replicas >= desired) + window
    return AutoscaleDecision(settings=settings, nodes=node_count, by_nodes=by_nodes,
                             recommendation=recommendation, desired=desired,
                             history=AutoscaleHistory(recommendation, tuple(kept)), held_until=held_until)
