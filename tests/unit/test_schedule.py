"""When a pool's next cycle is due: the poll interval, or sooner when something falls due."""

from hypothesis import given, strategies as st

from ironic_shard_operator.core.model import Member
from ironic_shard_operator.core.schedule import FAILED_CYCLE_RETRY_SECONDS, IN_GRACE_RECHECK_SECONDS, next_delay

NOW = 1_800_000_000.0
POLL = 30.0
GRACE = 120.0


def delay(members=(), *, poll=POLL, failed=False, wake_after=None, moves_applied=0):
    return next_delay(poll_seconds=poll, members=members, rebalance_after_seconds=GRACE, now=NOW,
                      failed=failed, wake_after=wake_after, moves_applied=moves_applied)


def test_a_quiet_pool_waits_one_poll_interval():
    steady = [Member("p-0", ready=True, since=NOW - 999), Member("p-1", ready=False, since=None)]
    assert delay(steady) == POLL


def test_the_next_cycle_is_there_just_after_a_members_grace_ends():
    blinking = Member("p-1", ready=False, since=NOW - GRACE + 4)
    assert delay([blinking]) == 4.5
    assert delay([blinking], poll=2) == 2  # never later than the poll
    gone = Member("p-2", ready=False, since=NOW - GRACE - 1)  # out already: nothing to be there for
    assert delay([gone]) == POLL


def test_a_member_within_its_grace_is_looked_at_every_few_seconds():
    """Its Kubernetes node given the out-of-service taint (or deleted) changes no pod: the
    operator must find that certain failure itself, within seconds, not a poll (30 s) later."""
    lost = Member("p-1", ready=False, since=NOW - 1)
    assert delay([lost]) == IN_GRACE_RECHECK_SECONDS < POLL
    counted_out = Member("p-1", ready=False, since=NOW - 1, counted_out="its node was deleted")
    assert delay([counted_out]) == POLL  # out already: its nodes move in this cycle
    never_ready = Member("p-2", ready=False, since=None)
    assert delay([never_ready]) == POLL


def test_a_failed_ironic_is_retried_sooner():
    assert delay(failed=True) == FAILED_CYCLE_RETRY_SECONDS
    assert delay(failed=True, poll=4) == 4
    assert next_delay(poll_seconds=POLL, members=(), rebalance_after_seconds=GRACE, now=NOW, failed=True,
                      wake_after=None, moves_applied=0, retry_seconds=3) == 3


def test_a_pod_decision_falling_due_wakes_the_pool_a_second_after():
    assert delay(wake_after=0) == 1.0
    assert delay(wake_after=12) == 13.0


def test_written_moves_are_confirmed_a_second_later():
    assert delay(moves_applied=5) == 1.0
    assert delay(moves_applied=5, wake_after=0.5, failed=True) == 1.0


@given(poll=st.floats(0.1, 3600), lost=st.lists(st.one_of(st.none(), st.integers(0, 500)), max_size=4),
       failed=st.booleans(), wake_after=st.one_of(st.none(), st.floats(0, 3600)),
       moves=st.integers(0, 3))
def test_the_delay_is_positive_and_never_beyond_the_poll(poll, lost, failed, wake_after, moves):
    members = [Member(f"p-{i}", ready=since is None, since=None if since is None else NOW - since)
               for i, since in enumerate(lost)]
    found = delay(members, poll=poll, failed=failed, wake_after=wake_after, moves_applied=moves)
    assert 0 < found <= poll


def test_every_delay_comes_from_the_schedule():
    """A failed cycle retries soon, an invalid spec rarely, a Conflict every poll; the earliest
    of a pod decision, a handover retry and a handover step with more to do wakes the pool."""
    from ironic_shard_operator.core.schedule import (
        AFTER_MOVES_SECONDS, FAILED_CYCLE_RETRY_SECONDS, after_conflict, after_failed_cycle, after_invalid_spec,
        earliest_wake,
    )
    from ironic_shard_operator.core.handover import recorded_handover
    assert after_failed_cycle() == FAILED_CYCLE_RETRY_SECONDS < after_invalid_spec()
    assert after_conflict(30.0) == 30.0
    nothing = recorded_handover(None)
    assert earliest_wake(None, nothing, 0.0, False) is None
    assert earliest_wake(5.0, nothing, 0.0, True) == AFTER_MOVES_SECONDS
    section = recorded_handover({"sources": [{"member": "m", "nextRetryAt": "1970-01-01T00:00:40Z"}]})
    assert earliest_wake(50.0, section, 10.0, False) == 30.0
