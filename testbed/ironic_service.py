"""The real Ironic service for Python callers: a running service (`running_ironic`, started and
stopped through ironic_starter.py's command) and helpers that fill it with nodes, through its API
or, as SETUP SHORTCUTS named so, directly in its database. Callers that share one service keep to
their own resource class. Details: README.md, "Ironic for Python callers"."""

from __future__ import annotations

import datetime
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import ironic_starter

REPO = Path(__file__).resolve().parents[1]
MICROVERSION = {"X-OpenStack-Ironic-API-Version": "1.82"}


@dataclass
class IronicService:
    """One running (or stopped) Ironic service and the coordinates to reach it."""

    state_dir: Path
    url: str
    clouds_yaml: str
    cloud_name: str

    @property
    def database(self) -> Path:
        return self.state_dir / "ironic.sqlite"

    @property
    def cloud(self) -> dict[str, Any]:
        """The clouds.yaml entry, parsed (a copy: change it freely for error cases)."""
        return yaml.safe_load(self.clouds_yaml)["clouds"][self.cloud_name]

    def start(self) -> None:
        """Start again after `stop()`: same port, credentials and database."""
        _run_starter("start", self.state_dir)

    def stop(self) -> None:
        _run_starter("stop", self.state_dir)

    def freeze(self) -> None:
        """SIGSTOP the service's process group: it still accepts connections (the kernel
        queues them) and answers nothing, as a hung Ironic does. `thaw()` resumes it."""
        os.killpg(self._process_group(), signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the service's process group (after `freeze()`); harmless when running."""
        os.killpg(self._process_group(), signal.SIGCONT)

    def _process_group(self) -> int:
        pid = ironic_starter.running_pid(self.state_dir)  # the starter's group leader
        if pid is None:
            raise RuntimeError(f"the Ironic service of {self.state_dir} is not running")
        return pid

    def connection(self) -> Any:
        """A fresh openstacksdk connection to this service."""
        from openstack import connection
        from openstack.config import loader

        region = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False) \
            .get_one(**self.cloud)
        return connection.Connection(config=region)

    def cloud_at(self, url: str) -> dict[str, Any]:
        """This service's clouds.yaml entry with Ironic reached at `url` instead (a forwarder in
        front of it: tests.support.switchable_proxy)."""
        cloud = {**self.cloud, "baremetal_endpoint_override": url}
        cloud["auth"] = {**cloud["auth"], "endpoint": url}
        return cloud

    def adapter(self, resource_class: str, *, url: str | None = None, **options: Any) -> Any:
        """An IronicAdapter for the pool of nodes with `resource_class`, reaching Ironic at `url`
        when given (`cloud_at`)."""
        from ironic_shard_operator.adapters.ironic import IronicAdapter
        from ironic_shard_operator.core.model import Selector

        clouds: Any = self.clouds_yaml if url is None else {"clouds": {self.cloud_name: self.cloud_at(url)}}
        return IronicAdapter.from_clouds_yaml(
            clouds, self.cloud_name, selector=Selector(resource_class=resource_class), **options)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """A raw API call (microversion 1.82) for test setup; raises on HTTP errors."""
        session = getattr(self, "_session", None)
        if session is None:
            session = self._session = self.connection().session
        response = session.request(f"{self.url}/v1{path}", method, headers=MICROVERSION,
                                   raise_exc=False, **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: HTTP {response.status_code} {response.text}")
        return response


def _run_starter(command: str, state_dir: Path, *options: str) -> dict[str, str]:
    """Run the starter's `command` for `state_dir` in a process of its own (the service it
    starts is then no child of ours); return the KEY=VALUE lines it printed."""
    args = [command, str(Path(state_dir).resolve()), *options]
    done = subprocess.run([sys.executable, "-m", "testbed.ironic_starter", *args],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"testbed.ironic_starter {' '.join(args)} failed "
                           f"(exit {done.returncode}):\n{done.stderr}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


@contextmanager
def running_ironic(state_dir: Path, *, auth: str = "http_basic", conductor_group: str = "",
                   pin_release: str | None = None, max_limit: int | None = None,
                   keystone: Path | None = None) -> Iterator[IronicService]:
    """Start a service in `state_dir`, yield it, and stop it whatever happens. `max_limit`:
    Ironic's [api]max_limit (the starter's default, Ironic's own 1000, when None). `keystone`:
    with auth "keystone", the state directory of a running Keystone (its cloud is then that
    Keystone's system-scoped admin)."""
    options = ["--auth", auth, "--conductor-group", conductor_group]
    if keystone is not None:
        options += ["--keystone", str(Path(keystone).resolve())]
    if pin_release:
        options += ["--pin-release", pin_release]
    if max_limit is not None:
        options += ["--max-limit", str(max_limit)]
    coordinates = _run_starter("start", state_dir, *options)
    service = IronicService(
        state_dir=Path(state_dir),
        url=coordinates["IRONIC_URL"],
        clouds_yaml=Path(coordinates["OS_CLIENT_CONFIG_FILE"]).read_text(),
        cloud_name=coordinates["OS_CLOUD"],
    )
    try:
        yield service
    finally:
        service.stop()


_classes = itertools.count()


def unique_resource_class(name: str) -> str:
    """A resource class no other test uses, so each test's pool holds only its own nodes."""
    return f"test-{name}-{next(_classes)}-{uuid.uuid4().hex[:6]}".lower().replace("_", "-")


def enrol_nodes(service: IronicService, count: int, *, resource_class: str,
                shard: str | None = None) -> list[str]:
    """Create `count` fake-hardware nodes through the API (enroll state); return uuids."""
    uuids = []
    for _ in range(count):
        body: dict[str, Any] = {"driver": "fake-hardware", "resource_class": resource_class}
        if shard is not None:
            body["shard"] = shard
        uuids.append(service.request("POST", "/nodes", json=body).json()["uuid"])
    return uuids


def available_nodes(ironic: IronicService, count: int, resource_class: str,
                    timeout: float = 60.0) -> list[str]:
    """`count` fake-hardware nodes made `available` through Ironic's API (enroll -> manage ->
    provide), all nodes moving at once."""
    nodes = enrol_nodes(ironic, count, resource_class=resource_class)
    for target, expect in (("manage", "manageable"), ("provide", "available")):
        for node in nodes:
            ironic.request("PUT", f"/nodes/{node}/states/provision", json={"target": target})
        deadline = time.monotonic() + timeout
        while True:
            listed = ironic.request(
                "GET", f"/nodes?resource_class={resource_class}&fields=uuid,provision_state").json()
            states = {n["uuid"]: n["provision_state"] for n in listed["nodes"]}
            if all(states.get(node) == expect for node in nodes):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes did not all reach {expect}: {states}")
            time.sleep(0.2)
    return nodes


def seed_nodes_directly_in_db(service: IronicService, count: int, *, resource_class: str,
                              conductor_group: str = "", shard: str | None = None,
                              powered_off: bool = False) -> list[str]:
    """SETUP SHORTCUT: `count` available fake-hardware nodes, cloned in Ironic's database.

    The first node is created and made `available` through the API (enroll -> manageable
    -> available, driven by Ironic's conductor); the rest are copies of its row with new
    uuids. `conductor_group` may name a group no conductor serves (the API would refuse to
    create such nodes): they exist, are listed and filtered, but nothing can act on them.
    `powered_off`: the first node is powered off through the API before it is copied, so every
    node has a power state (Nova's resource tracker reserves a node whose power state is
    unknown: Placement offers it to no one).
    """
    template = enrol_nodes(service, 1, resource_class=resource_class)[0]
    set_provision_state(service, template, "manage", "manageable")
    set_provision_state(service, template, "provide", "available")
    if powered_off:
        service.request("PUT", f"/nodes/{template}/states/power", json={"target": "power off"})
        deadline = time.monotonic() + 30
        while service.request("GET", f"/nodes/{template}?fields=power_state").json()["power_state"] != "power off":
            if time.monotonic() > deadline:
                raise AssertionError(f"node {template} not powered off within 30 s")
            time.sleep(0.1)
    wait_unlocked(service, template)  # else the copies would carry the conductor's lock
    uuids = [template] + [str(uuid.uuid4()) for _ in range(count - 1)]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(service.database, timeout=30) as db:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM nodes WHERE uuid = ?", (template,)).fetchone())
        row.update(conductor_group=conductor_group, shard=shard, created_at=now,
                   updated_at=None, name=None, reservation=None)
        del row["id"]
        columns = list(row)
        db.execute("UPDATE nodes SET conductor_group = ?, shard = ? WHERE uuid = ?",
                   (conductor_group, shard, template))
        db.executemany(
            f"INSERT INTO nodes ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            ([*(node if c == "uuid" else row[c] for c in columns)] for node in uuids[1:]))
    return uuids


def set_provision_state(service: IronicService, node: str, target: str, expect: str,
                        timeout: float = 30.0, **body: Any) -> None:
    """Ask Ironic for a provision-state transition and wait until the node reaches `expect`."""
    service.request("PUT", f"/nodes/{node}/states/provision", json={"target": target, **body})
    deadline = time.monotonic() + timeout
    while True:
        state = service.request("GET", f"/nodes/{node}?fields=provision_state,last_error").json()
        if state["provision_state"] == expect:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node} stuck in {state} waiting for {expect}")
        time.sleep(0.1)


def wait_unlocked(service: IronicService, node: str, timeout: float = 30.0) -> None:
    """Wait until no conductor holds `node`'s lock (it is released just after the state
    change a workflow reports)."""
    deadline = time.monotonic() + timeout
    while service.request("GET", f"/nodes/{node}?fields=reservation").json()["reservation"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node} still locked after {timeout:.0f} s")
        time.sleep(0.05)


def claim_for_instance(service: IronicService, nodes: Sequence[str]) -> None:
    """Set an instance_uuid on `nodes`, as Nova does when it schedules onto a node."""
    for node in nodes:
        service.request("PATCH", f"/nodes/{node}", json=[
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())}])


def set_provision_state_directly_in_db(service: IronicService, nodes: Sequence[str],
                                      provision_state: str, target: str | None) -> None:
    """SETUP SHORTCUT: put `nodes` in a transitional provision state (e.g. "deploying"
    towards "active") by writing Ironic's database.

    With fake-hardware every workflow finishes within milliseconds, and this Ironic drops
    `hold` steps from manual cleaning, so no API call leaves a node in such a state long
    enough to test against. The API then reports the state like any other. (A restarted
    service fails such nodes, as Ironic does with workflows a dead conductor held.)
    """
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(service.database, timeout=30) as db:
        db.executemany(  # provision_updated_at: now, so no workflow timeout fails them early
            "UPDATE nodes SET provision_state = ?, target_provision_state = ?, "
            "provision_updated_at = ? WHERE uuid = ?",
            ((provision_state, target, now, node) for node in nodes))


def lock_directly_in_db(service: IronicService, nodes: Sequence[str], conductor: str = "another-conductor") -> None:
    """FAULT INJECTION: `nodes` locked by `conductor` (their `reservation`), as a conductor holds
    a node while it works on it (a deploy that just started): Ironic refuses to change them
    (409 NodeLocked, after its own retries) until the lock goes. No conductor of this service
    holds that name, so the lock stays until cleared with `conductor=None`."""
    with sqlite3.connect(service.database, timeout=30) as db:
        db.executemany("UPDATE nodes SET reservation = ? WHERE uuid = ?", ((conductor, node) for node in nodes))


def assign_shards_directly_in_db(service: IronicService,
                                 owners: Mapping[str, str | None]) -> None:
    """SETUP SHORTCUT: write node shards in Ironic's database, e.g. to start a test from a
    pool some earlier cycle converged, without paying ~50 ms per PATCH for it."""
    with sqlite3.connect(service.database, timeout=30) as db:
        db.executemany("UPDATE nodes SET shard = ? WHERE uuid = ?",
                       ((shard, node) for node, shard in owners.items()))


def _nodes(service: IronicService, query: str) -> Iterator[dict[str, Any]]:
    """Every node a listing `query` (a path with its query string) returns, page after page."""
    marker = None
    while True:
        page = service.request("GET", query + (f"&marker={marker}" if marker else "")).json()
        yield from page["nodes"]
        if not page.get("next"):  # Ironic links a next page while a page is full (max_limit)
            return
        marker = page["nodes"][-1]["uuid"]


def shards_of(service: IronicService, resource_class: str) -> dict[str, str | None]:
    """Every node of `resource_class` and its shard, read through the API."""
    return {n["uuid"]: n["shard"] for n in _nodes(
        service, f"/nodes?resource_class={resource_class}&fields=uuid,shard&limit=1000")}


def shard_updates(service: IronicService, resource_class: str) -> dict[str, tuple[str | None, float | None]]:
    """Every node of `resource_class`: its shard and when Ironic last changed the node (epoch
    seconds, None if never), read through the API (`updated_at`, which no `fields` can ask for:
    the detailed listing). One read after the fact instead of polling while writes happen."""
    def epoch(stamp: str | None) -> float | None:
        return None if stamp is None else datetime.datetime.fromisoformat(stamp).timestamp()
    return {n["uuid"]: (n["shard"], epoch(n["updated_at"])) for n in _nodes(
        service, f"/nodes/detail?resource_class={resource_class}&limit=1000")}
