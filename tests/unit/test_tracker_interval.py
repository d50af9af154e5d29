"""Each member's resource-tracker interval from its share (core/tracker_interval.py): the steps,
the hysteresis that keeps a running member's interval, the fixed override, 0 nodes, and the
overlay that carries it (core/podspec.py) into nova.conf and into the audit's pace."""

from __future__ import annotations

import configparser

import pytest
from hypothesis import given, strategies as st

from ironic_shard_operator.core import podspec
from ironic_shard_operator.core.model import MemberLoad, NodeCounts, Plan
from ironic_shard_operator.core.nova_policy import NOVA_DEFAULT_UPDATE_INTERVAL, update_interval
from ironic_shard_operator.core.spec import InvalidSpec, read_pool
from ironic_shard_operator.core.tracker_interval import (
    IntervalSettings, TrackerInterval, decide, expected_pass_seconds, member_intervals, share, step_up, wanted,
)

DEFAULT = IntervalSettings()  # 0.05 s per node, at least 10 s


@pytest.mark.parametrize("nodes, seconds", [
    (0, 10), (1, 10), (200, 10), (201, 15), (300, 15), (301, 20), (400, 20), (401, 30), (600, 30),
    (601, 40), (1200, 60), (1201, 80), (1601, 120), (10000, 640),
])
def test_the_interval_is_the_cost_of_the_share_rounded_up_to_a_step(nodes, seconds):
    assert wanted(DEFAULT, nodes) == TrackerInterval(seconds, nodes)


@given(seconds=st.floats(0, 1e5), floor=st.integers(1, 600))
def test_a_step_is_at_least_the_cost_and_at_most_one_and_a_half_times_it(seconds, floor):
    step = step_up(seconds, floor)
    assert step >= max(seconds, floor) - 1e-6
    assert step <= max(1.5 * seconds, floor) + 1e-6
    ratio = step / floor
    assert any(abs(ratio - base * 2 ** k) < 1e-6 for base in (1, 1.5) for k in range(0, 40))


def test_a_running_member_keeps_its_interval_while_its_share_stays_within_twice():
    running = wanted(DEFAULT, 300)  # 15 s for 300 nodes
    for nodes in (150, 299, 450, 600):  # a member's failure in a pool of 2 or more: at most 2x
        assert decide(DEFAULT, nodes, running) == running
    assert decide(DEFAULT, 601, running) == TrackerInterval(40, 601)
    assert decide(DEFAULT, 149, running) == TrackerInterval(10, 149)


def test_a_share_that_computes_to_the_same_step_changes_nothing():
    running = TrackerInterval(10, 20)
    assert decide(DEFAULT, 150, running) is running  # out of the band, but 7.5 s still rounds to 10 s


def test_an_unknown_share_keeps_what_runs_and_a_member_with_none_starts_at_the_floor():
    running = TrackerInterval(30, 500)
    assert decide(DEFAULT, None, running) is running
    assert decide(DEFAULT, None, None) == TrackerInterval(10, 0)
    assert decide(DEFAULT, 0, None) == TrackerInterval(10, 0)


def test_fixed_seconds_wins_over_share_and_what_runs():
    fixed = IntervalSettings(fixed_seconds=25)
    for nodes, running in ((0, None), (5000, None), (100, TrackerInterval(60, 1200)), (None, TrackerInterval(10, 1))):
        assert decide(fixed, nodes, running) == TrackerInterval(25, None)


def test_each_member_gets_at_least_the_fair_share_so_a_failed_one_is_rendered_for_its_return():
    assert share(own=0, total=600, members=3) == 200
    assert share(own=340, total=600, members=3) == 340  # pinned nodes above the level
    assert share(own=0, total=0, members=0) == 0
    plan = Plan(desired_replicas=3, ring_members=("p-0", "p-2"), moves=(), members_to_create=(), members_to_delete=(),
                scale_down_blocked={}, loads=(MemberLoad("p-0", 900, 0, True), MemberLoad("p-1", 0, 0, False),
                                              MemberLoad("p-2", 900, 0, True)),
                counts=NodeCounts(total=1800))
    got = member_intervals(DEFAULT, ["p-0", "p-1", "p-2", "p-3"], plan, {"p-0": TrackerInterval(40, 600)})
    assert got == {"p-0": TrackerInterval(40, 600), "p-1": TrackerInterval(30, 600),
                   "p-2": TrackerInterval(60, 900), "p-3": TrackerInterval(30, 600)}
    assert member_intervals(DEFAULT, ["p-0"], None, {"p-0": TrackerInterval(40, 600)}) == {"p-0": TrackerInterval(40, 600)}
    assert expected_pass_seconds(DEFAULT, 900) == 45.0


def pool_with(**nova):
    return read_pool({"metadata": {"name": "rack-a", "namespace": "nova", "uid": "u"},
                      "spec": {"image": "nova:1", "novaConfig": {"secretRef": {"name": "n"}},
                               "cloud": {"secretRef": {"name": "c"}}, "replicas": 2, "nova": nova}})


def test_the_spec_reads_the_settings_and_refuses_bad_ones():
    assert pool_with().tracker == DEFAULT
    assert pool_with(updateResourcesInterval={"secondsPerNode": 0.2, "minSeconds": 5, "fixedSeconds": 30}).tracker == \
        IntervalSettings(0.2, 5, 30)
    for bad in ({"minSeconds": 0}, {"secondsPerNode": -1}, {"fixedSeconds": "ten"}):
        with pytest.raises(InvalidSpec, match="spec.nova.updateResourcesInterval"):
            pool_with(updateResourcesInterval=bad)


def test_the_members_nova_conf_carries_the_interval_and_reads_back_as_it_was_rendered():
    pool, interval = pool_with(), TrackerInterval(15, 300)
    overlay = podspec.member_conf(pool, "rack-a-0", interval)
    parsed = configparser.ConfigParser()
    parsed.read_string(overlay)
    assert parsed["DEFAULT"]["update_resources_interval"] == "15"
    assert parsed["DEFAULT"]["host"] == "rack-a-0" and parsed["ironic"]["shard"] == "rack-a-0"
    assert podspec.running_interval(overlay) == interval
    assert podspec.running_interval(podspec.member_conf(pool, "rack-a-0")) is None
    assert podspec.running_interval(podspec.member_conf(pool, "rack-a-0", TrackerInterval(25))) == TrackerInterval(25)
    configmap = podspec.render_configmap(pool, "rack-a-0", interval)
    assert configmap["data"]["member.conf"] == overlay


def test_a_new_interval_rolls_the_member_and_the_same_one_does_not():
    pool = pool_with()
    base = podspec.config_hash(pool, "rack-a-0", "d", TrackerInterval(15, 300))
    assert podspec.config_hash(pool, "rack-a-0", "d", TrackerInterval(15, 300)) == base
    assert podspec.config_hash(pool, "rack-a-0", "d", TrackerInterval(20, 400)) != base
    assert podspec.render_pod(pool, "rack-a-0", "d", TrackerInterval(15, 300))["metadata"]["annotations"][
        podspec.CONFIG_HASH] == base


def test_the_audit_is_paced_by_the_slowest_member():
    base = "[DEFAULT]\nupdate_resources_interval = 10\n"
    overlays = [podspec.member_conf(pool_with(), "rack-a-0", TrackerInterval(40, 600)),
                podspec.member_conf(pool_with(), "rack-a-1", TrackerInterval(15, 300)), None]
    assert update_interval(base, overlays) == 40
    assert update_interval(base, [None, "[DEFAULT]\nhost = x\n"]) == 10
    assert update_interval(None, [None]) == NOVA_DEFAULT_UPDATE_INTERVAL
