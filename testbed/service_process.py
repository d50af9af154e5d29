"""A peer service's process group, run by a starter (ironic_starter.py, keystone_starter.py,
registry.py, nova_starter.py): started with its leader recorded in a pid file, waited for until it
answers, and stopped as a whole; and the starters' shared command line (install, start, stop,
status).

A pid file holds "<pid> <start time>": a later process that reuses the PID is never taken for the
service, nor signalled. Only the standard library (see procgroup.py): the starters run under any
python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.procgroup import group_members, start_time_of

STOP_TIMEOUT_SECONDS = 20.0  # SIGTERM's bound; SIGKILL then gets KILL_TIMEOUT_SECONDS
KILL_TIMEOUT_SECONDS = 5.0


class ServiceError(Exception):
    """A problem installing, starting or stopping a service, with a message a person can act on.
    Each starter raises its own subclass; the command line reports any of them."""


@dataclass(frozen=True)
class ServiceProcess:
    """A service's process group, known by the pid file that holds its leader's PID.

    The pid file exists exactly while a group started by `start` may still be running: `stop`
    removes it only once no process of the group is left.
    """

    pidfile: Path
    name: str  # names the service in errors: "Ironic", "Keystone", "registry", "nova-api"
    error: type[Exception] = ServiceError  # what its failures raise

    def recorded(self) -> tuple[int, str | None] | None:
        """The leader's PID and start time from the pid file (no start time in a file written
        before it was recorded), or None without a pid file."""
        if not self.pidfile.exists():
            return None
        pid, _, start = self.pidfile.read_text().strip().partition(" ")
        return int(pid), start or None

    def running_pid(self) -> int | None:
        """The group's leader PID while any process of the group lives, else None."""
        recorded = self.recorded()
        return recorded[0] if recorded is not None and group_members(recorded[0]) else None

    def leader_pid(self) -> int | None:
        """The leader's PID while the process `start` started (same PID and start time) lives,
        else None (its exit status is collected if it was our child)."""
        recorded = self.recorded()
        if recorded is None:
            return None
        pid, start = recorded
        _reap(pid)
        return pid if start is not None and start_time_of(pid) == start else None

    def start(self, argv: list[str], log: Path, *, own_session: bool = True,
              **popen: Any) -> subprocess.Popen:
        """Start `argv` as the leader of a new process group (stdin closed, stdout and stderr
        appended to `log`) and record it in the pid file. `own_session=False` keeps it in this
        session, so that other processes may join its group (process_group=PID, Python 3.11+)."""
        grouping = {"start_new_session": True} if own_session else {"process_group": 0}
        with open(log, "ab") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, **grouping, **popen)
        self.pidfile.write_text(f"{process.pid} {start_time_of(process.pid) or ''}\n")
        return process

    def await_ready(self, process: subprocess.Popen, ready: Callable[[], bool], *,
                    timeout: float, interval: float, exited: Callable[[int], str],
                    timed_out: Callable[[], str]) -> None:
        """Return once `ready()` is true. If the leader `process` exits first, or `timeout`
        seconds pass, the group is stopped and `error` raised with the message `exited(code)` or
        `timed_out()` (both asked after the stop, so a log read then holds the whole story)."""
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None:
                self.stop()
                raise self.error(exited(process.returncode))
            if time.monotonic() > deadline:
                self.stop()
                raise self.error(timed_out())
            time.sleep(interval)

    def stop(self) -> None:
        """End the group: SIGTERM, then SIGKILL (see stop_all)."""
        stop_all([self])

    def _group(self) -> int | None:
        """The recorded group while it may hold our processes: its leader is the one recorded
        (same start time), or the leader is gone and the group lives on."""
        recorded = self.recorded()
        if recorded is None:
            return None
        pid, start = recorded
        _reap(pid)
        now = start_time_of(pid)
        ours = now == start if start is not None and now is not None else bool(group_members(pid))
        return pid if ours else None


def stop_all(services: Iterable[ServiceProcess], sig: int = signal.SIGTERM,
             timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """End the services' groups: nothing of them is left running when this returns, and their pid
    files are gone (idempotent). All get `sig` at once (so their shutdowns overlap; SIGKILL is a
    crash, SIGTERM a clean stop), then SIGKILL after `timeout` seconds; a service's `error` is
    raised (and its pid file kept) only when a process of it survives SIGKILL."""
    services = list(services)
    groups = {service: pgid for service in services if (pgid := service._group()) is not None}
    for pgid in groups.values():
        _signal_group(pgid, sig)
    if sig != signal.SIGKILL:
        _wait_until_gone(groups.values(), timeout)
        for pgid in groups.values():
            if group_members(pgid):
                _signal_group(pgid, signal.SIGKILL)
    _wait_until_gone(groups.values(), KILL_TIMEOUT_SECONDS)
    for service in services:
        pgid = groups.get(service)
        if pgid is not None and group_members(pgid):
            raise service.error(f"process group {pgid} of the {service.name} service survived SIGKILL")
        service.pidfile.unlink(missing_ok=True)


def _wait_until_gone(groups: Iterable[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(group_members(pgid) for pgid in groups) and time.monotonic() < deadline:
        for pgid in groups:
            _reap(pgid)
        time.sleep(0.1)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child (so it does not linger as a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def last_lines(log: Path, count: int) -> str:
    """The last `count` lines of `log`, or "(no NAME)" when there is no such file."""
    if not log.exists():
        return f"(no {log.name})"
    return "\n".join(log.read_text(errors="replace").splitlines()[-count:])


def command_line(argv: list[str] | None, prog: str | None, description: str, *,
                 install: Callable[[], object], install_help: str, start_help: str,
                 start_options: Callable[[argparse.ArgumentParser], object],
                 start: Callable[[argparse.Namespace], Mapping[str, str]],
                 stop: Callable[[Path], None], up: Callable[[Path], bool],
                 more: Mapping[str, Callable[[Path], None]] | None = None) -> int:
    """A starter's command line: `install` (prints what install() returns), `start STATE_DIR
    [start_options]` (prints its KEY=VALUE lines), `stop STATE_DIR`, `status STATE_DIR`
    (prints running or stopped; exits 0 when up(STATE_DIR), else 3), and the `more` commands
    of a STATE_DIR. A ServiceError exits 1 with its message; `prog` names the command."""
    more = more or {}
    parser = argparse.ArgumentParser(prog=prog, description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install", help=install_help)
    starting = commands.add_parser("start", help=start_help)
    starting.add_argument("state_dir", type=Path)
    start_options(starting)
    for name in ("stop", "status", *more):
        commands.add_parser(name).add_argument("state_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            print(install())
        elif args.command == "start":
            for key, value in start(args).items():
                print(f"{key}={value}")
        elif args.command == "stop":
            stop(args.state_dir.resolve())
        elif args.command == "status":
            running = up(args.state_dir.resolve())
            print("running" if running else "stopped")
            return 0 if running else 3
        else:
            more[args.command](args.state_dir.resolve())
    except ServiceError as error:
        parser.exit(1, f"{parser.prog}: {error}\n")
    return 0
