"""Run-to-completion containers of the process kubelet: a Job pod's `nova-manage ...` or
`sh -c SCRIPT` run FOR REAL, its mount paths mapped to the files made from the pod's volumes, as
PID 1 of a PID namespace of its own (so signals and the container's end behave as in a
container). Details: README.md, "Task pods"."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHELLS = ('sh', 'bash')


def is_task(container: dict[str, Any]) -> bool:
    """Whether the container runs a task (nova-manage, or a shell script), not nova-compute."""
    argv = list(container.get('command') or []) + list(container.get('args') or [])
    if not argv:
        return False
    program = Path(argv[0]).name
    return program == 'nova-manage' or (program in SHELLS and '-c' in argv[1:])


def map_mount_paths(argv: list[str], mounts: dict[str, Path]) -> list[str]:
    """`argv` with every mount path (the longest that matches, as a whole path prefix) replaced
    by the local path it was materialised at."""
    if not mounts:
        return list(argv)
    ordered = sorted(mounts, key=len, reverse=True)
    pattern = re.compile('|'.join(re.escape(path.rstrip('/')) for path in ordered) + r'(?![\w.-])')
    local = {path.rstrip('/'): str(target) for path, target in mounts.items()}
    return [pattern.sub(lambda match: local[match.group(0)], argument) for argument in argv]


@dataclass
class TaskProcess:
    """One run of a task container: its process group, its output file, its exit code."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    killed_with: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exit_code(self) -> int | None:
        """None while it runs; 128 + N when signal N ended it, as a container runtime reports."""
        code = self.popen.poll()
        if code is None:
            return None
        if self.killed_with is not None:  # (unshare cannot pass a SIGKILL of its child on)
            return 128 + self.killed_with
        return 128 - code if code < 0 else code

    def output(self) -> str:
        return self.log_path.read_text(errors='replace') if self.log_path.exists() else ''

    def kill(self) -> None:
        self.killed_with = signal.SIGKILL
        self._signal(signal.SIGKILL)
        self.popen.wait()

    def terminate(self, grace: float) -> None:
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            self.kill()
        self.popen.wait()

    def _signal(self, sig: int) -> None:
        """Signal the container's PID 1 (the first child of `unshare`, in its own PID namespace)."""
        try:
            os.kill(self._init_pid(), sig)
        except ProcessLookupError:
            pass

    def _init_pid(self) -> int:
        """The pid (outside its namespace) of the container's PID 1; `unshare` itself until it
        has forked (for a moment after the start)."""
        deadline = time.monotonic() + 1.0
        while self.alive():
            try:
                children = Path(f'/proc/{self.popen.pid}/task/{self.popen.pid}/children').read_text().split()
            except OSError:
                break
            if children:
                return int(children[0])
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return self.popen.pid


def start_task(argv: list[str], tools: Path, log_path: Path, cwd: Path) -> TaskProcess:
    """Start `argv` as PID 1 of a PID namespace of its own (module doc) in its own session,
    tools from `tools` first on PATH, output to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open('wb') as log:
        popen = subprocess.Popen(['unshare', '--pid', '--fork', '--kill-child', '--', *argv],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 cwd=cwd, start_new_session=True,
                                 env={**os.environ, 'PATH': f'{tools}{os.pathsep}{os.environ.get("PATH", "")}'})
    return TaskProcess(popen, log_path)
