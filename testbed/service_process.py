"""A peer service run by a starter (ironic_starter.py, keystone_starter.py, registry.py): one
process group, its leader's PID in a pid file of the service's state directory, started,
waited for until it answers, and stopped as a whole; and the starters' shared command line
(install, start, stop, status).

Only the standard library (see procgroup.py): the starters run under any python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.procgroup import group_members

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
    name: str  # names the service in errors: "Ironic", "Keystone", "registry"
    error: type[Exception] = ServiceError  # what its failures raise

    def running_pid(self) -> int | None:
        """The group's leader PID while any process of the group lives, else None."""
        if not self.pidfile.exists():
            return None
        pid = int(self.pidfile.read_text())
        return pid if group_members(pid) else None

    def start(self, argv: list[str], log: Path, *, own_session: bool = True,
              **popen: Any) -> subprocess.Popen:
        """Start `argv` as the leader of a new process group (stdin closed, stdout and stderr
        appended to `log`) and record it in the pid file. `own_session=False` keeps it in this
        session, so that other processes may join its group (process_group=PID, Python 3.11+)."""
        grouping = {"start_new_session": True} if own_session else {"process_group": 0}
        with open(log, "ab") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, **grouping, **popen)
        self.pidfile.write_text(f"{process.pid}\n")
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
        """End the group: nothing of it is left running when this returns, and the pid file is
        gone (idempotent). SIGTERM, then SIGKILL after STOP_TIMEOUT_SECONDS; `error` is raised
        (and the pid file kept) only when a process survives SIGKILL."""
        if not self.pidfile.exists():
            return
        pgid = int(self.pidfile.read_text())
        for sig, bound in ((signal.SIGTERM, STOP_TIMEOUT_SECONDS),
                           (signal.SIGKILL, KILL_TIMEOUT_SECONDS)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + bound
            while group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not group_members(pgid):
                break
        if group_members(pgid):
            raise self.error(f"process group {pgid} of the {self.name} service survived SIGKILL")
        self.pidfile.unlink()


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
