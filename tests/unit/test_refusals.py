"""core/refusals.py: a refused request is reported by its reason, the object and the API's own
message, and posted as a Warning Event once, not every cycle it is refused again."""

from __future__ import annotations

from ironic_shard_operator.core.pool_memory import memory_of
from ironic_shard_operator.core.refusals import news, refused

QUOTA = 'pods "rack-2" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'


def degraded(message: str, status: str = "True") -> str:
    """What the pool's memory keeps of a last status whose Degraded condition says `message`."""
    return memory_of({"conditions": [{"type": "Degraded", "status": status, "reason": "PodCreateRefused",
                                      "message": message}]}).degraded


def test_a_refusal_names_the_request_the_status_and_the_api_message():
    refusal = refused("create", "Pod", "rack-2", 403, QUOTA, "member rack-2 has no pod until this is fixed")
    assert refusal.reason == "PodCreateRefused"
    assert refusal.message == (f"the API server refused to create Pod rack-2 (HTTP 403): {QUOTA}; "
                               "member rack-2 has no pod until this is fixed")
    assert refused("read", "Secret", "nova-config", 403, "forbidden", "x").reason == "SecretReadRefused"


def test_a_refusal_is_news_once():
    refusal = refused("create", "Pod", "rack-2", 403, QUOTA, "member rack-2 has no pod until this is fixed")
    (event,) = news([refusal], memory_of(None).degraded)
    assert (event.reason, event.type, event.message) == ("PodCreateRefused", "Warning", refusal.message)
    assert news([refusal], degraded(refusal.message)) == []
    # Reported with other problems, or with another API message (quota usage changed): not news.
    assert news([refusal], degraded("Ironic is not answering; " + refusal.message.replace("pods=2", "pods=3"))) == []
    # Not reported (Degraded cleared, or says something else): news again.
    assert len(news([refusal], degraded(refusal.message, status="False"))) == 1
    other = refused("create", "Pod", "rack-3", 403, QUOTA, "member rack-3 has no pod until this is fixed")
    assert [e.message for e in news([refusal, other], degraded(refusal.message))] == [other.message]


def test_an_rbac_denial_says_how_the_chart_grants_it():
    """The operator's RBAC grants reading Secrets and running pools only in the namespaces its
    chart names: a pool elsewhere is told which value to change, not just that it was refused."""
    denied = ('secrets "nova-config" is forbidden: User "system:serviceaccount:iso:iso" cannot get resource '
              '"secrets" in API group "" in the namespace "rack-ns"')
    secret = refused("read", "Secret", "nova-config", 403, denied, "member pods are left as they are")
    assert secret.message == (
        f"the API server refused to read Secret nova-config (HTTP 403): {denied}; member pods are left as they "
        "are; the operator may do this only in the namespaces its chart names, and with rbac.secretNames set "
        "only the Secrets named there: add rack-ns to rbac.poolNamespaces (helm upgrade --reuse-values --set "
        "'rbac.poolNamespaces={...,rack-ns}'), or to watchNamespaces")
    pod = refused("create", "Pod", "rack-0", 403, denied.replace('get resource "secrets"', 'create resource "pods"'),
                  "member rack-0 has no pod until this is fixed")
    assert pod.message.endswith("add rack-ns to rbac.poolNamespaces (helm upgrade --reuse-values --set "
                                "'rbac.poolNamespaces={...,rack-ns}'), or to watchNamespaces")
    assert "rbac.secretNames" not in pod.message
    # A 403 that is no RBAC denial (a quota, Pod Security admission) has its own fix: no hint.
    assert "rbac.poolNamespaces" not in refused("create", "Pod", "rack-2", 403, QUOTA, "x").message
