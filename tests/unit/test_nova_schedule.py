"""When Nova is asked and audited: Disabled waits RECHECK_SECONDS, Unavailable backs off
(doubling, capped), Enabled asks every cycle and audits once per update interval."""

import pytest

from ironic_shard_operator.core.nova_policy import DISABLED, ENABLED, UNAVAILABLE
from ironic_shard_operator.core.nova_schedule import (
    AUDIT_BUSY_SHARE, AUDIT_LOOKAHEAD, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, RECHECK_SECONDS, NovaSchedule,
)

NOW = 1_800_000_000.0
INTERVAL = 60.0


def test_a_new_pool_asks_nova_and_audits_at_once():
    fresh = NovaSchedule()
    assert fresh.asks_nova(NOW, ironic_read=True)
    assert fresh.audit_due(NOW, INTERVAL)


def test_nova_never_answered_is_not_asked_while_ironic_cannot_be_read():
    assert not NovaSchedule().asks_nova(NOW, ironic_read=False)


def test_nova_that_answered_before_is_asked_even_while_ironic_cannot_be_read():
    assert NovaSchedule().answered_now().asks_nova(NOW, ironic_read=False)


def test_disabled_is_asked_again_after_the_recheck_time():
    disabled = NovaSchedule().after(DISABLED, NOW)
    assert not disabled.asks_nova(NOW + RECHECK_SECONDS - 1, ironic_read=True)
    assert disabled.asks_nova(NOW + RECHECK_SECONDS, ironic_read=True)


def test_unavailable_backs_off_doubling_up_to_the_maximum():
    schedule, waits = NovaSchedule(), []
    for _ in range(8):
        schedule = schedule.after(UNAVAILABLE, NOW)
        waits.append(schedule.retry_at - NOW)
    assert waits[:3] == [FIRST_BACKOFF_SECONDS, 2 * FIRST_BACKOFF_SECONDS, 4 * FIRST_BACKOFF_SECONDS]
    assert all(later == min(2 * earlier, MAX_BACKOFF_SECONDS) for earlier, later in zip(waits, waits[1:]))
    assert waits[-1] == MAX_BACKOFF_SECONDS


def test_nova_is_not_asked_while_backing_off():
    backing_off = NovaSchedule().after(UNAVAILABLE, NOW)
    assert not backing_off.asks_nova(NOW + FIRST_BACKOFF_SECONDS - 1, ironic_read=True)
    assert backing_off.asks_nova(NOW + FIRST_BACKOFF_SECONDS, ironic_read=True)


@pytest.mark.parametrize("state", [ENABLED, DISABLED])
def test_an_answer_ends_the_backoff(state):
    backed_off = NovaSchedule().after(UNAVAILABLE, NOW).after(UNAVAILABLE, NOW)
    later = NOW + 100
    after_answer = backed_off.after(state, later)
    # The next failure waits the first backoff again, not a doubled one.
    assert after_answer.after(UNAVAILABLE, later).retry_at == later + FIRST_BACKOFF_SECONDS


def test_enabled_asks_nova_every_cycle():
    enabled = NovaSchedule().after(UNAVAILABLE, NOW).after(ENABLED, NOW + FIRST_BACKOFF_SECONDS)
    assert enabled.asks_nova(NOW + FIRST_BACKOFF_SECONDS, ironic_read=True)


def test_the_audit_runs_once_per_update_interval():
    audited = NovaSchedule().audited(NOW)
    assert not audited.audit_due(NOW + INTERVAL - 1, INTERVAL)
    assert audited.audit_due(NOW + INTERVAL, INTERVAL)


def test_the_audit_time_is_kept_across_a_failure():
    failed = NovaSchedule().audited(NOW).after(UNAVAILABLE, NOW)
    assert not failed.audit_due(NOW + INTERVAL - 1, INTERVAL)


def test_a_new_cloud_is_asked_and_audited_at_once():
    schedule = NovaSchedule().answered_now().audited(NOW).after(DISABLED, NOW)
    new_cloud = schedule.for_new_cloud()
    assert new_cloud.asks_nova(NOW, ironic_read=True)
    assert new_cloud.audit_due(NOW, INTERVAL)
    # Its first failure waits the first backoff, not the old cloud's.
    assert schedule.after(UNAVAILABLE, NOW).after(UNAVAILABLE, NOW).for_new_cloud() \
        .after(UNAVAILABLE, NOW).retry_at == NOW + FIRST_BACKOFF_SECONDS


def test_an_audit_that_takes_long_keeps_nova_busy_at_most_its_share_of_the_time():
    # A member's interval is 15 s at 250 nodes; reading Nova's 1,000 hypervisors takes ~25 s.
    slow = NovaSchedule().audited(NOW, seconds=25.0)
    spacing = 25.0 / AUDIT_BUSY_SHARE
    assert slow.audit_spacing(15.0) == spacing > 15.0
    assert not slow.audit_due(NOW + spacing - 1, 15.0)
    assert slow.audit_due(NOW + spacing, 15.0)
    # A quick read (a small pool) keeps the members' interval.
    assert NovaSchedule().audited(NOW, seconds=0.5).audit_spacing(INTERVAL) == INTERVAL


def test_a_due_audit_waits_for_a_failover_one_spacing_at_most():
    """A failover's writes go before the audit's long read, but failures one after the other (or
    a member that keeps flapping) never keep the audit waiting more than one spacing."""
    schedule = NovaSchedule().audited(NOW, seconds=4.0)
    assert schedule.audit_lookahead() == AUDIT_LOOKAHEAD * 4.0
    due = NOW + schedule.audit_spacing(INTERVAL)
    waiting = schedule.audit_postponed(due)
    assert waiting.may_postpone_audit(due + 5, INTERVAL)
    assert waiting.audit_postponed(due + 5).postponed_at == due  # counted from the first wait
    assert not waiting.may_postpone_audit(due + schedule.audit_spacing(INTERVAL), INTERVAL)
    assert waiting.audited(due + 70, seconds=4.0).may_postpone_audit(due + 200, INTERVAL)


def test_before_any_read_no_grace_holds_the_audit_back():
    assert NovaSchedule().audit_lookahead() == 0.0
