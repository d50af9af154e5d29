"""The process kubelet's task containers (testbed/task_pods.py) keep a container's PID 1 rules,
so a handover Job's script is tested against what a real kubelet does to it: SIGTERM reaches
only the container's main process, which ignores it without a handler, and whatever else runs
in the container dies with it."""

from __future__ import annotations

import time
from pathlib import Path

from testbed.task_pods import start_task


def _run(tmp_path: Path, script: str):
    return start_task(["/bin/sh", "-c", script], tmp_path, tmp_path / "out.log", tmp_path)


def _wait_for_output(task, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in task.output():
        assert time.monotonic() < deadline and task.alive(), task.output()
        time.sleep(0.02)


def test_sigterm_is_ignored_by_a_shell_without_a_trap_until_sigkill_after_the_grace(tmp_path: Path) -> None:
    task = _run(tmp_path, "echo started; sleep 30; echo never")
    _wait_for_output(task, "started")
    began = time.monotonic()
    task.terminate(grace=1.0)
    assert time.monotonic() - began >= 1.0  # it lived through SIGTERM for the whole grace period
    assert task.exit_code() == 137 and "never" not in task.output()


def test_a_trapped_sigterm_lets_the_command_under_way_finish_and_nothing_else_start(tmp_path: Path) -> None:
    task = _run(tmp_path, "stopping=; trap 'stopping=1' TERM; echo started; sleep 1; echo first done; "
                          "[ -n \"$stopping\" ] && exit 143; sleep 1; echo second done")
    _wait_for_output(task, "started")
    task.terminate(grace=20.0)
    assert task.exit_code() == 143
    assert "first done" in task.output() and "second done" not in task.output()


def _running(token: str) -> bool:
    """Whether any process on the machine has `token` in its command line."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


def test_kill_ends_every_process_of_the_container(tmp_path: Path) -> None:
    token = "1234.5678"  # a unique `sleep` argument to find the container's second process by
    task = _run(tmp_path, f"sleep {token} & echo started; wait")
    _wait_for_output(task, "started")
    assert _running(f"sleep {token}")
    task.kill()
    assert task.exit_code() == 137
    deadline = time.monotonic() + 30
    while _running(f"sleep {token}"):  # the kernel kills it with the namespace's PID 1
        assert time.monotonic() < deadline, "a process of the killed container lives on"
        time.sleep(0.05)
