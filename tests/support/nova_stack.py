"""pytest plugin: the real Nova stack (hack/nova) for a test session, and real nova-compute processes.

Register with `pytest_plugins = ["tests.support.nova_stack"]`. Fixtures:

- `nova_stack` (session): a running `testbed.nova_stack.NovaStack` (placement + Nova API +
  nova-conductor on MariaDB and RabbitMQ, own databases and vhost); stopped with everything it
  started at session end.
- `nova_computes` (function): a `start(name, config_files)` callable; every nova-compute it started
  is stopped when the test ends.
- every test that uses the stack has the compute hosts it registered forgotten once it ended
  (`NovaStack.forget_hosts`): a later test's hypervisor listings only pay for its own nodes.

The session summary gets one line: how long the stack took to start, and its peak memory.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from testbed import nova_starter
from testbed.nova_stack import ComputeProcess, NovaStack, started_computes

_session_stacks: list[NovaStack] = []  # the stacks this process started, for the summary


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per Nova stack the session used: start time and peak resident memory; and, where
    a Nova stack ran (in this process or its xdist workers), MariaDB's peak of connections
    against its limit (the peak since MariaDB started: the tiers share one server)."""
    if any("tests/nova/" in str(report.fspath) for reports in terminalreporter.stats.values()
           for report in reports if hasattr(report, "fspath")):
        try:
            peak = nova_starter.sql("SHOW GLOBAL STATUS LIKE 'Max_used_connections'").split()[-1]
            limit = nova_starter.sql("SHOW VARIABLES LIKE 'max_connections'").split()[-1]
            terminalreporter.write_line(f"mariadb: peak {peak} connections of max_connections {limit}")
        except nova_starter.StackError as error:
            terminalreporter.write_line(f"mariadb: connections not read ({error})")
    for stack in _session_stacks:
        line = f"nova stack: started in {stack.start_seconds:.1f} s"
        rss = stack.peak_rss
        if rss:
            parts = ", ".join(f"{name} {size / 2**20:.0f}" for name, size in sorted(rss.items()))
            line += f"; peak RSS {sum(rss.values()) / 2**20:.0f} MiB ({parts})"
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def nova_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NovaStack]:
    """The real Nova stack for this test session (installed on first use; ~20 s to start)."""
    state = nova_starter.start(tmp_path_factory.mktemp("nova-stack"), owner_pid=os.getpid())
    stack = NovaStack(state)
    _session_stacks.append(stack)
    try:
        yield stack
    finally:
        nova_starter.stop(state)


@pytest.fixture(autouse=True)
def _forget_the_tests_hosts(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the session's Nova stack: the compute hosts it registered are
    forgotten (NovaStack.forget_hosts), so a later test's hypervisor listings stay as cheap as
    its own nodes make them. Torn down after the test's own fixtures (its computes stopped)."""
    if "nova_stack" not in request.fixturenames:
        yield
        return
    stack: NovaStack = request.getfixturevalue("nova_stack")
    before = set(stack.compute_services())
    yield
    stack.forget_hosts(set(stack.compute_services()) - before)


@pytest.fixture
def nova_computes(nova_stack: NovaStack) -> Iterator[Callable[[str, list], ComputeProcess]]:
    """`start(name, config_files)` for nova-compute processes that are stopped after the test."""
    with started_computes(nova_stack) as start:
        yield start
