"""The arithmetic of bench/nova_bench.py (bench/nova_measures.py): passes read from a
nova-compute log, windows, moves and churn from samples of Nova and Placement, the fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest

from bench.nova_measures import (
    PassLog, any_listed_live, changed_hypervisor, ended_elsewhere, linear_fit, listed_live, live_hosts, log_time,
    moved_instance_nodes, offered, ownership_windows, provider_churn, render_table, schedulable, seconds_per_node,
    service_flag, settled_since,
)

TASK = "oslo_service.periodic_task [None req-1 - - - - - -] Running periodic task ComputeManager"


def line(stamp: str, pid: int, text: str, level: str = "DEBUG") -> str:
    return f"2025-11-25 {stamp} {pid} {level} {text}"


def final(stamp: str, pid: int, node: str) -> str:
    return line(stamp, pid, f"nova.compute.resource_tracker [None req-1] Final resource view: name={node} "
                            "phys_ram=0MB used_ram=0MB")


def test_passes_from_a_log_two_processes_a_heartbeat_and_a_killed_pass() -> None:
    log = PassLog()
    log.feed([
        line("10:00:00.000", 7, "nova.service [-] Starting compute node (version 34.0.0)", "INFO"),
        final("10:00:02.000", 7, "n1"),
        final("10:00:03.500", 7, "n2"),
        line("10:00:03.600", 7, "nova.service [-] Creating RPC server for service: compute"),
        line("10:01:00.000", 7, f"{TASK}.update_available_resource run_periodic_tasks"),
        final("10:01:01.000", 7, "n1"),
        # the heartbeat thread sleeps meanwhile: not the end of the pass
        line("10:01:01.500", 7, "loopingcall [-] Fixed interval looping call "
                                "'nova.servicegroup.drivers.db.DbDriver._report_state' sleeping for 4.99 seconds"),
        final("10:01:02.250", 7, "n2"),
        line("10:01:02.300", 7, f"{TASK}._sync_power_states run_periodic_tasks"),
        "a continuation line of a traceback",
        line("10:02:00.000", 7, f"{TASK}.update_available_resource run_periodic_tasks"),
        final("10:02:01.000", 7, "n1"),  # then SIGKILL: never complete
        line("10:02:05.000", 9, "nova.service [-] Starting compute node (version 34.0.0)", "INFO"),
        final("10:02:06.000", 9, "n1"),
    ])
    log.feed([line("10:02:06.100", 9, "loopingcall [-] Dynamic interval looping call "
                                       "'nova.service.Service.periodic_tasks' sleeping for 2.00 seconds")])
    startup, steady, restarted = log.passes
    assert (startup.startup, startup.nodes, startup.seconds) == (True, 2, pytest.approx(3.5))
    assert (steady.startup, steady.nodes, steady.seconds) == (False, 2, pytest.approx(2.25))
    assert (restarted.pid, restarted.nodes, restarted.seconds) == (9, 1, pytest.approx(1.0))
    assert log.steady() == [steady]
    assert log.steady(after=steady.started + 1) == []
    assert steady.started == log_time("2025-11-25 10:01:00.000")


def test_the_compute_node_records_a_compute_took_from_another_host() -> None:
    log = PassLog()
    log.feed([line("10:00:00.000", 7, f"{TASK}.update_available_resource x"),
              line("10:00:01.250", 7, "nova.compute.resource_tracker [None req-1 - - - - - -] ComputeNode "
                                      "5c12454b-9e68 moving from ours-1 to ours-2", "INFO"),
              final("10:00:01.300", 7, "5c12454b-9e68")])
    assert [(m.node, m.source, m.at) for m in log.moved] == [
        ("5c12454b-9e68", "ours-1", log_time("2025-11-25 10:00:01.250"))]


def test_seconds_per_node_and_the_fit() -> None:
    log = PassLog()
    log.feed([line("10:00:00.000", 1, f"{TASK}.update_available_resource x"), final("10:00:04.000", 1, "a"),
              final("10:00:05.000", 1, "b"), line("10:00:06.000", 1, f"{TASK}._other x")])
    assert seconds_per_node(log.passes) == pytest.approx(2.5)
    assert seconds_per_node([]) is None
    slope, intercept = linear_fit([(100, 6.0), (200, 11.0), (400, 21.0)])
    assert (slope, intercept) == (pytest.approx(0.05), pytest.approx(1.0))
    assert linear_fit([(250, 1.0), (250, 2.0)]) is None


@dataclass(frozen=True)
class S:
    at: float
    hosts: dict[str, tuple[str, ...]]
    services: dict[str, dict] = field(default_factory=dict)
    providers: dict[str, int] = field(default_factory=dict)
    candidates: frozenset[str] = frozenset()


def test_windows_of_double_and_missing_ownership() -> None:
    samples = [S(0, {"a": ("h1",), "b": ("h1",)}),
               S(1, {"a": ("h1", "h2"), "b": ()}),
               S(2, {"a": ("h1", "h2"), "b": ("h2",)}),
               S(3, {"a": ("h2",), "b": ()})]
    windows = ownership_windows(samples, ["a", "b"])
    assert [(w.node, w.kind, w.start, w.end) for w in windows] == [
        ("a", "double", 1, 3), ("b", "missing", 1, 2), ("b", "missing", 3, 3)]
    assert windows[0].seconds == 2


def test_moves_flaps_and_instance_nodes() -> None:
    samples = [S(0, {"a": ("h1",), "b": ("h1",), "c": ("h3",)}),
               S(1, {"a": ("h2",), "b": (), "c": ("h3",)}),
               S(2, {"a": ("h1",), "b": ("h2",), "c": ("h3",)}),
               S(3, {"a": ("h2",), "b": ("h2",), "c": ("h3",)})]
    assert changed_hypervisor(samples, ["a", "b", "c"]) == {"a": 3, "b": 1}
    assert ended_elsewhere(samples, ["a", "b", "c"]) == {"a", "b"}
    assert moved_instance_nodes(samples, {"c": "h3", "b": "h1"}) == {"b"}


def test_provider_churn_counts_deletions_and_recreations() -> None:
    samples = [S(0, {}, providers={"a": 3, "b": 1, "c": 2}),
               S(1, {}, providers={"a": 4, "c": 2}),        # b deleted
               S(2, {}, providers={"a": 0, "b": 0, "c": 2}),  # a deleted and created again
               S(3, {}, providers={"a": 1, "b": 1, "c": 2})]
    assert provider_churn(samples, ["a", "b", "c"]) == {"a": 1, "b": 1}


def test_schedulable_needs_a_live_hypervisor_and_placement() -> None:
    killed = datetime(2025, 11, 25, 10, 0, tzinfo=timezone.utc).timestamp()
    services = {"dead": {"state": "up", "forced_down": False, "updated_at": "2025-11-25T09:59:58.000000"},
                "alive": {"state": "up", "forced_down": False, "updated_at": "2025-11-25T10:00:03.000000"},
                "forced": {"state": "up", "forced_down": True, "updated_at": "2025-11-25T10:00:03.000000"}}
    assert live_hosts(S(0, {}, services), killed) == {"alive"}
    sample = S(0, {"a": ("alive",), "b": ("dead",)}, services, candidates=frozenset({"a", "b"}))
    assert schedulable(sample, ["a"], killed)
    assert not schedulable(sample, ["a", "b"], killed)
    unoffered = S(0, {"a": ("alive",)}, services)
    assert listed_live(unoffered, ["a"], killed) and not offered(unoffered, ["a"])
    assert not schedulable(unoffered, ["a"], killed)


def test_a_recovery_phases_first_node_picked_up_and_the_victims_flags() -> None:
    killed = datetime(2025, 11, 25, 10, 0, tzinfo=timezone.utc).timestamp()
    services = {"victim": {"state": "down", "forced_down": False, "updated_at": "2025-11-25T09:59:58.000000"},
                "alive": {"state": "up", "forced_down": False, "updated_at": "2025-11-25T10:00:03.000000"},
                "forced": {"state": "up", "forced_down": True, "updated_at": "2025-11-25T10:00:03.000000"}}
    sample = S(0, {"a": ("alive",), "b": ("victim",), "c": ("forced",)}, services)
    assert any_listed_live(sample, ["a", "b"], killed) and not listed_live(sample, ["a", "b"], killed)
    assert not any_listed_live(sample, ["b", "c"], killed)  # under the dead one, under a forced-down one
    assert service_flag(sample, "victim", "down") and not service_flag(sample, "victim", "forced_down")
    assert service_flag(sample, "forced", "forced_down") and not service_flag(sample, "forced", "down")
    assert not service_flag(sample, "gone", "down") and not service_flag(sample, "gone", "forced_down")


def test_settled_since_is_the_start_of_the_last_run_of_equal_listings() -> None:
    samples = [S(0, {"a": ("h1",)}), S(1, {"a": ("h1", "h2")}), S(2, {"a": ("h2",)}), S(3, {"a": ("h2",)})]
    assert settled_since(samples, ["a"]) == 2
    assert settled_since(samples[:2], ["a"]) is None
    assert settled_since([], ["a"]) is None


def test_the_table() -> None:
    assert render_table(["(a)", "(b)"], [("cycle", ["1 s", "2 s"])]).splitlines() == [
        "| measure | (a) | (b) |", "| --- | --- | --- |", "| cycle | 1 s | 2 s |"]
