"""The log of a pool's condition changes (core/pool_signals.py): one INFO line per change,
every condition at the first cycle a process runs for the pool, nothing when nothing changed."""

from __future__ import annotations

from ironic_shard_operator.core.pool_signals import condition_changes


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_the_first_cycle_of_a_process_logs_every_condition_once():
    now = [condition("Ready", "False", "IronicUnavailable", "the token request to Keystone at "
                                                             "http://keystone.invalid:5000/v3 failed"),
           condition("Degraded", "True", "IronicUnavailable", "same")]
    assert condition_changes("ns/rack-a", None, now) == [
        "pool ns/rack-a: Ready is False IronicUnavailable: the token request to Keystone at "
        "http://keystone.invalid:5000/v3 failed",
        "pool ns/rack-a: Degraded is True IronicUnavailable: same"]


def test_a_message_several_conditions_share_is_written_once():
    why = "cloud 'c': auth_type 'passwrod' is not an auth plugin"
    now = [condition("Ready", "False", "CloudConfigInvalid", why), condition("Progressing", "False", "Blocked", why),
           condition("Degraded", "True", "CloudConfigInvalid", why)]
    lines = condition_changes("ns/rack-a", None, now)
    assert lines == [f"pool ns/rack-a: Ready is False CloudConfigInvalid: {why}",
                     "pool ns/rack-a: Progressing is False Blocked (message as for Ready)",
                     "pool ns/rack-a: Degraded is True CloudConfigInvalid (message as for Ready)"]


def test_only_a_changed_status_or_reason_is_news_not_a_changed_message():
    before = [condition("Ready", "False", "MembersNotReady", "1/3 ready"),
              condition("Degraded", "False", "MembersStarting", "")]
    after = [condition("Ready", "False", "MembersNotReady", "2/3 ready"),
             condition("Degraded", "True", "MemberFailing", "rack-a-1 is Replacing")]
    assert condition_changes("ns/rack-a", before, after) == [
        "pool ns/rack-a: Degraded is True MemberFailing (was False MembersStarting): rack-a-1 is Replacing"]
    assert condition_changes("ns/rack-a", after, after) == []


def test_a_condition_new_to_the_status_is_news():
    before = [condition("Ready", "True", "AllMembersReady")]
    after = [*before, condition("Conflict", "True", "SameName", "ns2/rack-a runs on the same cloud")]
    assert condition_changes("ns/rack-a", before, after) == [
        "pool ns/rack-a: Conflict is True SameName: ns2/rack-a runs on the same cloud"]
