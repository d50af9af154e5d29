"""The test bed's control plane (testbed/control_plane.py) as a run that was killed leaves it:
the next start, on any of several workers at once, stops it, one reaper at a time, and a plane
already gone is success."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from testbed import control_plane
from testbed.procgroup import start_time_of
from testbed.waiting import wait_for

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_a_plane_left_by_a_killed_run_is_reaped_once_by_concurrent_starts(tmp_path: Path) -> None:
    state = tmp_path / "left"
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from testbed import control_plane
        control_plane.start(Path({str(state)!r}))
        print("started", flush=True)
        time.sleep(3600)
        """)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert owner.stdout.readline().strip() == "started"
        plane = control_plane.running(state)
        assert plane is not None
        pids = [int((state / f"{component}.pid").read_text().split()[0]) for component in control_plane.COMPONENTS]
        owner.send_signal(signal.SIGKILL)  # an interrupted run: nothing of it stops the plane
        owner.wait(timeout=30)
        assert control_plane.running(state) is not None, "the plane should outlive its killed owner"

        reaped: list[list[Path]] = []
        errors: list[BaseException] = []

        def reap() -> None:  # as each xdist worker's first start does
            try:
                reaped.append(control_plane.reap_stale())
            except BaseException as error:  # noqa: BLE001 (reported below)
                errors.append(error)
        reapers = [threading.Thread(target=reap) for _ in range(3)]
        for reaper in reapers:
            reaper.start()
        for reaper in reapers:
            reaper.join(timeout=120)
        assert errors == []
        assert sorted(len(r) for r in reaped) == [0, 0, 1] and state.resolve() in sum(reaped, [])
        assert control_plane.running(state) is None
        wait_for(lambda: all(start_time_of(pid) is None for pid in pids), timeout=30,
                 what="every component of the reaped plane ended")
        assert not (state / "etcd-data").exists()  # its tmpfs data went with it
    finally:
        if owner.poll() is None:
            owner.kill()
        control_plane.stop(state)
