"""The pool's PodDisruptionBudget kept as core/podspec.render_budget wants it: read once a cycle,
created when missing, patched when it differs (a changed member count, a hand edit), else left
alone, so an unchanged cycle writes nothing. What decides is core/podspec.budget_change; this
only talks. A request the API server refuses is returned as a Refusal (core/refusals.py: the
pool's Degraded condition and one Warning Event say it), never raised: pods and Ironic go on.
"""

from __future__ import annotations

from ironic_shard_operator.adapters.kube import Kube, KubeRefused
from ironic_shard_operator.core import podspec
from ironic_shard_operator.core.refusals import Refusal, refused
from ironic_shard_operator.core.spec import Pool

CONSEQUENCE = "without it a node drain may evict several members at once"


async def keep_budget(kube: Kube, pool: Pool, running: int) -> Refusal | None:
    """Make the pool's budget the one for `running` members; the refusal, if any."""
    wanted = podspec.render_budget(pool, running)
    verb = "read"
    try:
        change = podspec.budget_change(await kube.get_budget(pool.namespace, pool.name), wanted, pool.uid)
        if change is None:
            return None
        verb, body = change
        if verb == "create":
            await kube.create_budget(pool.namespace, body)
        else:
            await kube.patch_budget(pool.namespace, pool.name, body)
    except KubeRefused as error:
        return refused({"patch": "write"}.get(verb, verb), "PodDisruptionBudget", pool.name, error.status,
                       error.api_message, CONSEQUENCE)
    return None
