"""How many members autoscale asks for.

Pure: `decide(settings, node_count)` reads nothing but its arguments.

The rule: ceil(nodes / maxNodesPerMember) members, kept within [minReplicas, maxReplicas].
"""

from __future__ import annotations

import math

from ironic_shard_operator.core.model import Autoscale, AutoscaleDecision


def decide(settings: Autoscale, node_count: int) -> AutoscaleDecision:
    """The member count for `node_count` managed nodes, and how it was reached."""
    by_nodes = math.ceil(node_count / settings.max_nodes_per_member)
    recommendation = max(settings.min_replicas, min(settings.max_replicas, by_nodes))
    return AutoscaleDecision(settings=settings, nodes=node_count, by_nodes=by_nodes,
                             recommendation=recommendation, desired=recommendation)
