"""core/refusals.py: a refused request is reported by its reason, the object and the API's own
message, and posted as a Warning Event once, not every cycle it is refused again."""

from __future__ import annotations

from ironic_shard_operator.core.refusals import news, refused

QUOTA = 'pods "rack-2" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'


def degraded(message: str, status: str = "True") -> dict:
    return {"conditions": [{"type": "Degraded", "status": status, "reason": "PodCreateRefused", "message": message}]}


def test_a_refusal_names_the_request_the_status_and_the_api_message():
    refusal = refused("create", "Pod", "rack-2", 403, QUOTA, "member rack-2 has no pod until this is fixed")
    assert refusal.reason == "PodCreateRefused"
    assert refusal.message == (f"the API server refused to create Pod rack-2 (HTTP 403): {QUOTA}; "
                               "member rack-2 has no pod until this is fixed")
    assert refused("read", "Secret", "nova-config", 403, "forbidden", "x").reason == "SecretReadRefused"


def test_a_refusal_is_news_once():
    refusal = refused("create", "Pod", "rack-2", 403, QUOTA, "member rack-2 has no pod until this is fixed")
    (event,) = news([refusal], None)
    assert (event.reason, event.type, event.message) == ("PodCreateRefused", "Warning", refusal.message)
    assert news([refusal], degraded(refusal.message)) == []
    # Reported with other problems, or with another API message (quota usage changed): not news.
    assert news([refusal], degraded("Ironic is not answering; " + refusal.message.replace("pods=2", "pods=3"))) == []
    # Not reported (Degraded cleared, or says something else): news again.
    assert len(news([refusal], degraded(refusal.message, status="False"))) == 1
    other = refused("create", "Pod", "rack-3", 403, QUOTA, "member rack-3 has no pod until this is fixed")
    assert [e.message for e in news([refusal, other], degraded(refusal.message))] == [other.message]
