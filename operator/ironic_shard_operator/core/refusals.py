"""Requests the Kubernetes API server refused, and how a pool reports them.

A refusal (403 Forbidden: RBAC, ResourceQuota, Pod Security admission; 422 Invalid: an invalid
pass-through affinity or probe; 400) gets the same answer every time until the object, the
permissions or the cluster's policy change. So a cycle does not stop at one: it goes on with
what does not depend on it (the Ironic side re-owns the free nodes of dead members), the
pool's Degraded condition names it (reason `<Kind><Verb>Refused`, the object, the API's own
message), and a Warning Event of that reason is posted once, when the refusal is news: the
last status did not report it already.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ironic_shard_operator.core.events import Event


# Every reason a refusal can have: the requests a cycle makes that the API server may refuse
# (the `reason` label of ironic_shard_kube_api_refusals_total).
REASONS = ("SecretReadRefused", "PodCreateRefused", "PodDeleteRefused", "ConfigMapWriteRefused",
           "ConfigMapDeleteRefused", "PodDisruptionBudgetReadRefused", "PodDisruptionBudgetCreateRefused",
           "PodDisruptionBudgetWriteRefused")


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused request: `reason` (e.g. PodCreateRefused) for the condition and the Event,
    `subject` the request in words ("create pod rack-a-0"), `message` the whole sentence."""

    reason: str
    subject: str
    message: str


# How an RBAC denial words the namespace it applies to (a real API server's 403 Forbidden).
_RBAC_DENIED = re.compile(r'cannot [a-z]+ resource "[^"]*" in API group "[^"]*" in the namespace "([^"]+)"')


def refused(verb: str, kind: str, name: str, status: int, api_message: str, consequence: str) -> Refusal:
    """The Refusal of `verb` (create, delete, read, write) on the `kind` object `name`, which the
    API server answered with `status` and `api_message`; `consequence` says what it holds up.
    An RBAC denial also says how the chart grants it (`grant_hint`)."""
    subject = f"{verb} {kind} {name}"
    message = f"the API server refused to {subject} (HTTP {status}): {api_message}; {consequence}"
    denied = _RBAC_DENIED.search(api_message) if status == 403 else None
    if denied:
        message += f"; {grant_hint(kind, denied.group(1))}"
    return Refusal(f"{kind}{verb.capitalize()}Refused", subject, message)


def grant_hint(kind: str, namespace: str) -> str:
    """What to change when the operator's RBAC denies it something in `namespace`: the chart
    grants reading Secrets and running pools (pods, ConfigMaps, Jobs, budgets) only in the
    namespaces it is given, never cluster-wide."""
    names = ", and with rbac.secretNames set only the Secrets named there" if kind == "Secret" else ""
    return (f"the operator may do this only in the namespaces its chart names{names}: add {namespace} to "
            f"rbac.poolNamespaces (helm upgrade --reuse-values --set 'rbac.poolNamespaces={{...,{namespace}}}'), "
            "or to watchNamespaces")


def news(refusals: Iterable[Refusal], degraded: str) -> list[Event]:
    """A Warning Event for each refusal the last status's Degraded condition (`degraded`, its
    message while True: PoolMemory.degraded) did not report."""
    return [Event(r.reason, r.message, "Warning") for r in refusals if f"refused to {r.subject} " not in degraded]
