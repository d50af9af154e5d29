"""The nova-compute stand-in against the real Ironic service: it serves exactly the shard
its config files name, follows Ironic without restarts, and is unready when it cannot list.

The stand-in runs as its own process, as in a member pod, and is always stopped again.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.ironic_service import (
    IronicService, enrol_nodes, seed_nodes_directly_in_db, unique_resource_class,
)

pytestmark = pytest.mark.integration

WAIT_SECONDS = 30.0


class StandIn:
    """One running stand-in process and the lines it logged."""

    def __init__(self, config_files: list[Path]) -> None:
        args = [sys.executable, "-m", "ironic_shard_operator.testing.standin", "--interval", "0.5",
                "--health-addr", "127.0.0.1", "--health-port", "0"]
        for path in config_files:
            args += ["--config-file", str(path)]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        started = self.wait_for(r"started .* healthz=127\.0\.0\.1:(\d+)")
        self.health_url = f"http://127.0.0.1:{started.group(1)}/healthz"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = WAIT_SECONDS) -> re.Match[str]:
        """The first line from now on that matches `pattern`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f} s; "
                                     f"lines so far:\n" + "\n".join(self.seen[-20:])) from None
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match

    def listed(self) -> set[str]:
        """The node uuids of the next listing the stand-in logs."""
        nodes = self.wait_for(r"listed host=\S+ shard=\S+ count=\d+ nodes=(\S*)").group(1)
        return set(nodes.split(",")) - {""}

    def health(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.health_url, timeout=5) as response:
                return response.status, response.read().decode().strip()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode().strip()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def stand_ins() -> Iterator[list[StandIn]]:
    """Start stand-ins with `start(...)` by appending; every one is stopped afterwards."""
    started: list[StandIn] = []
    yield started
    for stand_in in started:
        stand_in.stop()


def write_configs(tmp_path: Path, service: IronicService, member: str, *,
                  password: str | None = None, conductor_group: str | None = None
                  ) -> list[Path]:
    """The user's base nova.conf and the operator's member overlay, in that order."""
    auth = service.cloud["auth"]
    base = tmp_path / "nova.conf"
    base.write_text(
        "[DEFAULT]\nhost = not-this-one\ntransport_url = rabbit://nova:secret@rabbit:5672/\n\n"
        "[ironic]\nauth_type = http_basic\n"
        f"username = {auth['username']}\npassword = {password or auth['password']}\n"
        f"endpoint_override = {service.url}\nshard = not-this-one-either\n")
    overlay = tmp_path / "member.conf"
    lines = ["[DEFAULT]", f"host = {member}", "", "[ironic]", f"shard = {member}"]
    if conductor_group:
        lines.append(f"conductor_group = {conductor_group}")
    overlay.write_text("\n".join(lines) + "\n")
    return [base, overlay]


def test_it_serves_exactly_the_shard_of_its_overlay_and_follows_ironic(
        ironic_service, tmp_path, stand_ins):
    rc = unique_resource_class("standin")
    mine, theirs = f"{rc}-0", f"{rc}-1"
    my_nodes = enrol_nodes(ironic_service, 3, resource_class=rc, shard=mine)
    their_nodes = enrol_nodes(ironic_service, 2, resource_class=rc, shard=theirs)
    enrol_nodes(ironic_service, 1, resource_class=rc)  # unsharded: nobody's

    stand_ins.append(StandIn(write_configs(tmp_path, ironic_service, mine)))
    stand_in = stand_ins[0]
    assert stand_in.listed() == set(my_nodes)
    assert stand_in.health() == (200, "ok")
    assert re.search(f"started host={mine} shard={mine} ", stand_in.seen[0])

    # The operator moves a node to this member: the next listing has it, no restart.
    ironic_service.request("PATCH", f"/nodes/{their_nodes[0]}",
                           json=[{"op": "replace", "path": "/shard", "value": mine}])
    deadline = time.monotonic() + WAIT_SECONDS
    while (listed := stand_in.listed()) != set(my_nodes) | {their_nodes[0]}:
        assert time.monotonic() < deadline, f"still listing {listed}"

    assert stand_in.stop() == 0
    stand_in.wait_for(f"stopped host={mine} shard={mine}")


def test_the_conductor_group_of_the_overlay_narrows_the_listing(
        ironic_service, tmp_path, stand_ins):
    rc = unique_resource_class("standin-group")
    member = f"{rc}-0"
    grouped = seed_nodes_directly_in_db(ironic_service, 3, resource_class=rc,
                                        conductor_group="rack-x", shard=member)
    enrol_nodes(ironic_service, 2, resource_class=rc, shard=member)  # default group

    stand_ins.append(StandIn(write_configs(tmp_path, ironic_service, member,
                                           conductor_group="rack-x")))
    assert stand_ins[0].listed() == set(grouped)


def test_a_member_that_cannot_list_is_unready_and_says_why(ironic_service, tmp_path, stand_ins):
    member = unique_resource_class("standin-denied")
    stand_ins.append(StandIn(write_configs(tmp_path, ironic_service, member,
                                           password="wrong-password")))
    stand_in = stand_ins[0]
    stand_in.wait_for(f"listing failed host={member} shard={member}: .*401")
    status, reason = stand_in.health()
    assert status == 503
    assert "401" in reason
    assert stand_in.process.poll() is None  # unready, not crashed: the kubelet decides


def test_a_config_without_a_shard_is_refused_before_touching_ironic(ironic_service, tmp_path):
    base, _overlay = write_configs(tmp_path, ironic_service, "unused")
    base.write_text(base.read_text().replace("shard = not-this-one-either\n", ""))
    done = subprocess.run([sys.executable, "-m", "ironic_shard_operator.testing.standin",
                           "--config-file", str(base), "--health-port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "[ironic]shard is not set" in done.stderr
