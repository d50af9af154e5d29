"""A running real Nova stack for Python callers (the tests; the demo's command is
hack/nova/nova_starter.py): configuration for its computes, openstacksdk connections, real
nova-compute processes, and reads of Nova's own API.

All process handling lives in testbed/nova_starter.py (the same code the command runs); this
module adds what needs openstacksdk.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import openstack

from ironic_shard_operator.adapters.nova import hypervisor_pages

from testbed import nova_starter
from testbed.nova_starter import StackError
from testbed.waiting import wait_for

# A host name as the tests give them (pool members `<pool>-<n>`, the stack's own hosts): safe
# to name in SQL as it is.
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")

# The microversion the operator's Nova adapter needs (service UUIDs, forced_down, hypervisor
# service host): every helper here speaks it too.
COMPUTE_MICROVERSION = "2.53"


def placement_resource_class(resource_class: str) -> str:
    """The Placement class Nova's Ironic driver reports an Ironic node's `resource_class` as
    (os_resource_classes.normalize_name): "bench-nova" -> "CUSTOM_BENCH_NOVA"."""
    return "CUSTOM_" + re.sub(r"[^0-9A-Za-z]+", "_", resource_class).upper()


@dataclass
class ComputeProcess:
    """One running `nova-compute --config-file ... --config-file ...` of a stack."""

    stack: "NovaStack"
    name: str
    pid: int
    config_files: tuple[Path, ...]

    @property
    def log_path(self) -> Path:
        return self.stack.run_dir / "logs" / f"{self.name}.log"

    def alive(self) -> bool:
        """True while this process (same PID and start time) runs."""
        return nova_starter.is_running(self.stack.run_dir, self.name) and \
            nova_starter.pid_of(self.stack.run_dir, self.name) == self.pid

    def kill(self) -> None:
        """Crash it: SIGKILL, no graceful shutdown (what a container failure looks like)."""
        nova_starter.terminate(self.stack.run_dir, self.name, sig=signal.SIGKILL)

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM, Nova's graceful shutdown); SIGKILL if it takes too long."""
        nova_starter.terminate(self.stack.run_dir, self.name, sig=signal.SIGTERM)


class NovaStack:
    """A running stack: where it answers, how to configure computes for it, how to query it.

    Invariant: every method talks to this stack only (its URLs, databases, vhost, run dir).
    """

    def __init__(self, state: dict) -> None:
        self.state = state
        self.id: str = state["id"]
        self.run_dir = Path(state["run_dir"])
        self.compute_url: str = state["compute_url"]      # http://127.0.0.1:P/v2.1
        self.placement_url: str = state["placement_url"]
        self.token: str = state["token"]                  # "admin:admin" (test auth filter)
        self.nova_conf = Path(state["nova_conf"])          # the control plane's config
        self.timings: dict[str, int] = state["timings"]
        self.start_seconds: float = state.get("start_seconds", 0.0)
        self.peak_rss: dict[str, int] = {}                # the largest sample of record_rss()
        self.last_probe_seconds: list[float] = []         # select_destinations' rounds, each
        self._admin: openstack.connection.Connection | None = None  # for the read helpers

    # -- configuration a pool's Secret carries
    def compute_conf(self, ironic_cloud: dict) -> str:
        """Base nova.conf for a nova-compute (Ironic driver) against this stack; no host/shard.

        `ironic_cloud` is Ironic's clouds.yaml entry (e.g. `ironic_service.cloud`): its
        endpoint, and its HTTP basic credentials when `auth_type` is http_basic.
        """
        auth = ironic_cloud.get("auth", {})
        url = ironic_cloud.get("baremetal_endpoint_override") or auth["endpoint"]
        if ironic_cloud.get("auth_type") == "http_basic":
            return nova_starter.render_compute_conf(self.state, url, auth["username"], auth["password"])
        return nova_starter.render_compute_conf(self.state, url)

    def cloud_config(self, token: str | None = None) -> dict:
        """A clouds.yaml `clouds:` entry for openstacksdk that reaches this Nova (as admin, or
        as `token` = "<user>:<project>")."""
        return {
            "auth_type": "admin_token",
            "auth": {"endpoint": self.compute_url, "token": token or self.token},
            "compute_endpoint_override": self.compute_url,
            "compute_api_version": COMPUTE_MICROVERSION,
        }

    def connection(self, token: str | None = None) -> openstack.connection.Connection:
        """A new openstacksdk connection to this Nova (admin unless `token` says otherwise).
        A request whose connection drops before any answer is sent again (`connect_retries`):
        Nova's gunicorn closes a keep-alive connection idle for 2 s, and a read that reuses it at
        that moment gets "Connection aborted" though Nova is up. The operator's own adapter
        handles that itself; this is the tests' reader of Nova."""
        return openstack.connect(load_yaml_config=False, load_envvars=False, connect_retries=3,
                                 **self.cloud_config(token))

    # -- processes
    def start_compute(self, name: str, config_files: list[str | Path]) -> ComputeProcess:
        """Start `nova-compute --config-file F1 --config-file F2 ...` with the files in that order.

        `name` labels the process (logs/<name>.log); use the member name. For a member that is
        the base nova.conf first, the operator's member.conf second.
        """
        files = tuple(Path(f) for f in config_files)
        pid = nova_starter.spawn_compute(self.state, name, list(files))
        return ComputeProcess(self, name, pid, files)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running process group of the stack (computes included)."""
        return nova_starter.rss_bytes(self.run_dir)

    def record_rss(self) -> dict[str, int]:
        """Sample `rss_bytes()`; `peak_rss` keeps the largest sample (the session summary's)."""
        sample = self.rss_bytes()
        if sum(sample.values()) > sum(self.peak_rss.values()):
            self.peak_rss = sample
        return sample

    # -- Nova operations a deployment does outside the operator
    def discover_hosts(self) -> str:
        """`nova-manage cell_v2 discover_hosts --by-service`: map new compute services to cell1."""
        done = subprocess.run(
            [str(Path(self.state["venv"]) / "bin" / "nova-manage"), "--config-file",
             str(self.nova_conf), "cell_v2", "discover_hosts", "--by-service", "--verbose"],
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise StackError(f"discover_hosts failed: {done.stderr or done.stdout}")
        return done.stdout

    def seed_instance(self, host: str, node: str) -> str:
        """TEST SETUP SHORTCUT (hack/nova/seed_instance.py): record an instance on `host`'s
        compute node `node` through Nova's own objects, as a boot would have; returns its UUID.
        Nothing here can boot a real one (no Glance/Cinder/Neutron). The compute node must
        exist, i.e. `host`'s nova-compute has listed `node` once."""
        return self.seed_instances(host, [node])[0]

    def seed_instances(self, host: str, nodes: list[str]) -> list[str]:
        """`seed_instance` for many nodes of one host in one run of the script (its imports
        cost seconds); the instance UUIDs in the order of `nodes`."""
        done = subprocess.run(
            [str(Path(self.state["venv"]) / "bin" / "python"),
             str(nova_starter.PEER_FILES / "seed_instance.py"), str(self.nova_conf), host, *nodes],
            capture_output=True, text=True, timeout=120 + 2 * len(nodes))
        if done.returncode != 0:
            raise StackError(f"seed_instance failed: {done.stderr[-2000:] or done.stdout}")
        instances = done.stdout.strip().splitlines()[-len(nodes):]
        if len(instances) != len(nodes):
            raise StackError(f"seed_instance printed {len(instances)} UUIDs for {len(nodes)} nodes: {done.stdout}")
        return instances

    def half_move(self, node: str, destination: str) -> None:
        """FAULT INJECTION: what `nova-manage db ironic_compute_node_move` leaves when it is killed
        between its two saves: the compute node of `node` moved to `destination`'s service, its
        instance still on the old host (written in the cell database, as nova-manage writes it)."""
        database = self.state["databases"]["nova"]
        nova_starter.sql(
            f"UPDATE `{database}`.compute_nodes cn JOIN `{database}`.services s ON s.host = '{destination}' "
            "AND s.`binary` = 'nova-compute' AND s.deleted = 0 "
            f"SET cn.host = '{destination}', cn.service_id = s.id WHERE cn.uuid = '{node}' AND cn.deleted = 0")

    def forget_hosts(self, hosts: Iterable[str]) -> None:
        """TEST HOUSEKEEPING: mark the compute services of `hosts` and their compute nodes
        deleted in the cell database, once the test that ran them has ended (its processes
        stopped). The session's stack outlives each test, and Nova's hypervisor list costs
        about 25 ms of nova-api per compute node it lists, every node ever registered: left
        behind, the earlier tests' nodes made every later listing (the tests sample it about
        once a second) seconds long. The API's own DELETE would refuse hosts that still carry
        the seeded instances, and nothing reads these records once their test has ended."""
        names = sorted(set(hosts))
        if not names:
            return
        bad = [h for h in names if not HOST_NAME.match(h)]
        if bad:
            raise StackError(f"forget_hosts: not a host name this stack's tests make: {bad}")
        listed = ", ".join(f"'{h}'" for h in names)
        database = self.state["databases"]["nova"]
        nova_starter.sql(
            f"UPDATE `{database}`.compute_nodes SET deleted = id, deleted_at = NOW() "
            f"WHERE host IN ({listed}) AND deleted = 0; "
            f"UPDATE `{database}`.services SET deleted = id, deleted_at = NOW() "
            f"WHERE host IN ({listed}) AND deleted = 0")

    def cell_sql(self, statement: str) -> str:
        """Run `statement` in the cell database (what an administrator does to finish a half move)."""
        return nova_starter.sql(f"USE `{self.state['databases']['nova']}`; {statement}")

    def delete_seeded_instance(self, instance: str) -> None:
        """TEST SETUP SHORTCUT: mark an instance `seed_instance` made deleted in Nova's
        database (hack/nova/seed_instance.py --delete), whatever its host's state."""
        done = subprocess.run(
            [str(Path(self.state["venv"]) / "bin" / "python"),
             str(nova_starter.PEER_FILES / "seed_instance.py"), str(self.nova_conf), "--delete", instance],
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise StackError(f"deleting a seeded instance failed: {done.stderr[-2000:] or done.stdout}")

    # -- reading Nova (its raw API, as any client sees it; independent of the operator's adapter)
    @property
    def _compute(self):
        """The admin connection's compute proxy, the connection made on first use."""
        if self._admin is None:
            self._admin = self.connection()
        return self._admin.compute

    def _get_json(self, url: str) -> dict:
        """The body of `GET url` at COMPUTE_MICROVERSION; StackError unless Nova answers 200."""
        response = self._compute.get(url, microversion=COMPUTE_MICROVERSION)
        if response.status_code != 200:
            raise StackError(f"GET {url}: HTTP {response.status_code} {response.text}")
        return response.json()

    def _get_all(self, path: str, key: str) -> list[dict]:
        """Every item of a paged Nova list (`<key>_links` next links followed)."""
        items: list[dict] = []
        url = path
        while url:
            body = self._get_json(url)
            items += body[key]
            url = next((link["href"] for link in body.get(f"{key}_links", [])
                        if link.get("rel") == "next"), None)
        return items

    def compute_services(self) -> dict[str, dict]:
        """nova-compute services by host: {host: {"id", "state", "status", "forced_down", ...}}."""
        return {s["host"]: s for s in self._get_all("/os-services?binary=nova-compute", "services")}

    def hypervisor_hosts(self) -> dict[str, list[str]]:
        """Nova's view of ownership: {Ironic node uuid: [compute hosts listing it]}."""
        def page(marker: str | None) -> list[dict]:
            # Pages of 100: nova-api spends ~20 ms per node on this list, and a sampler asking for
            # pages of 1,000 back to back held its one worker ~20 s per request, long enough for
            # the operator's own requests queued behind it to time out (bench/nova_bench.py).
            return self._get_json("/os-hypervisors/detail?limit=100"
                                  + (f"&marker={marker}" if marker else ""))["hypervisors"]

        owners: dict[str, list[str]] = {}
        # Read as the operator reads it: a page left short by a host not mapped to a cell is not the end
        for hypervisor in hypervisor_pages(page):
            owners.setdefault(hypervisor["hypervisor_hostname"], []).append(
                hypervisor["service"]["host"])
        return owners

    def host_mapped(self, host: str) -> bool:
        """Whether Nova has mapped `host` to a cell, as Nova says it: `GET /os-hosts/{host}` (served
        up to compute API 2.42) answers 404 "Host '<host>' is not mapped to any cell" without one."""
        response = self._compute.get(f"/os-hosts/{host}", microversion="2.42", raise_exc=False)
        if response.status_code not in (200, 404):
            raise StackError(f"GET /os-hosts/{host}: HTTP {response.status_code} {response.text}")
        return "is not mapped to any cell" not in response.text

    def placement_json(self, path: str) -> dict:
        """The body of Placement's `GET path` (microversion 1.14); StackError unless 200."""
        status, body = nova_starter.http_json(f"{self.placement_url}{path}", self.token,
                                              microversion="1.14", service="placement", timeout=60)
        if status != 200:
            raise StackError(f"GET {path}: HTTP {status} {body}")
        return body

    def resource_providers(self) -> dict[str, int]:
        """Placement's resource providers: {uuid: generation}. A provider deleted and created
        again (same uuid: an Ironic node's) starts again at generation 0."""
        return {p["uuid"]: p["generation"] for p in self.placement_json("/resource_providers")["resource_providers"]}

    def allocation_candidates(self, resource_class: str) -> set[str]:
        """The providers Placement offers for one unit of `resource_class` (an Ironic node's
        class, e.g. "bench-nova": CUSTOM_BENCH_NOVA), what the scheduler starts from."""
        return set(self.placement_json(
            f"/allocation_candidates?resources={placement_resource_class(resource_class)}:1")["provider_summaries"])

    def server_actions(self, server: str) -> list[dict]:
        """The actions recorded on `server`, oldest first, each with its `events` (an action a
        compute carried out has an event `compute_<action>_instance` with its result; one no
        compute received has none)."""
        actions = self._get_all(f"/servers/{server}/os-instance-actions", "instanceActions")
        return [self._get_json(f"/servers/{server}/os-instance-actions/{action['request_id']}")["instanceAction"]
                for action in sorted(actions, key=lambda a: a["start_time"])]

    def server_action(self, server: str, action: dict) -> tuple[int, str]:
        """POST /servers/<server>/action as an admin: (HTTP status, body). Nova answers 202
        when it accepted the action (the compute carries it out later), 409 when the server's
        state forbids it."""
        response = self._compute.post(f"/servers/{server}/action", json=action,
                                      microversion=COMPUTE_MICROVERSION, raise_exc=False)
        return response.status_code, response.text

    def delete_server(self, server: str) -> int:
        """A user's `openstack server delete SERVER` (as an admin): DELETE /servers/<server>; the
        HTTP status (204 accepted). With its host down or forced down, nova-api deletes it
        locally: its record only (its ports asked of the Neutron stand-in: none), nothing reaches
        Ironic."""
        response = self._compute.delete(f"/servers/{server}", microversion=COMPUTE_MICROVERSION, raise_exc=False)
        return response.status_code

    def set_forced_down(self, host: str, forced_down: bool) -> None:
        """An administrator's `openstack compute service set --down|--up HOST nova-compute`:
        PUT /os-services/<id> with forced_down, as any admin client does."""
        self._update_compute_service(host, {"forced_down": forced_down})

    def set_service_enabled(self, host: str, enabled: bool, reason: str = "") -> None:
        """An administrator's `openstack compute service set --enable|--disable
        [--disable-reason REASON] HOST nova-compute`: PUT /os-services/<id> with status (and
        disabled_reason when disabling). Nova's API also has the compute mark its nodes'
        providers COMPUTE_STATUS_DISABLED in Placement (an RPC cast: later)."""
        body: dict = {"status": "enabled" if enabled else "disabled"}
        if not enabled and reason:
            body["disabled_reason"] = reason
        self._update_compute_service(host, body)

    def _update_compute_service(self, host: str, body: dict) -> None:
        """PUT /os-services/<id of host's nova-compute> with `body`; StackError unless 200."""
        service = self.compute_services()[host]
        response = self._compute.put(f"/os-services/{service['id']}", json=body,
                                     microversion=COMPUTE_MICROVERSION, raise_exc=False)
        if response.status_code != 200:
            raise StackError(f"PUT /os-services/{service['id']} {body}: "
                             f"HTTP {response.status_code} {response.text}")

    # -- asking the real scheduler (hack/nova/select_destinations.py)
    def start_scheduler(self) -> float:
        """Start the stack's real nova-scheduler unless it runs (it is started only on demand);
        the seconds that took (0.0 when it already ran)."""
        return nova_starter.start_scheduler(self.state)

    def baremetal_flavor(self, resource_class: str) -> str:
        """The flavor a baremetal deployment defines for nodes of Ironic `resource_class`, as
        Nova's Ironic documentation has it: one unit of the node's custom class and no VCPU,
        MEMORY_MB or DISK_GB (extra specs `resources:CUSTOM_<RC>=1`, `resources:VCPU=0`, ...);
        created through Nova's API on first use (id = name = `baremetal-<rc>`); its name."""
        name = f"baremetal-{resource_class}"
        if self._compute.get(f"/flavors/{name}", microversion=COMPUTE_MICROVERSION,
                             raise_exc=False).status_code == 200:
            return name
        calls = [("/flavors", {"flavor": {"name": name, "id": name, "ram": 1, "vcpus": 1, "disk": 0}}),
                 (f"/flavors/{name}/os-extra_specs", {"extra_specs": {
                     f"resources:{placement_resource_class(resource_class)}": "1",
                     "resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}})]
        for url, body in calls:
            response = self._compute.post(url, json=body, microversion=COMPUTE_MICROVERSION,
                                          raise_exc=False)
            if response.status_code != 200:
                raise StackError(f"POST {url}: HTTP {response.status_code} {response.text}")
        return name

    def select_destinations(self, resource_class: str, count: int = 1) -> list[tuple[str, str]]:
        """Where the REAL nova-scheduler places one boot of `count` instances of the baremetal
        flavor of `resource_class`: [(host, node uuid)] per instance, or [] when it answers
        NoValidHost (it places all of them or none). TEST SETUP SHORTCUT for the API part of a
        boot (hack/nova/select_destinations.py): the RequestSpec the API would record, sent as
        the conductor sends it; the nodes it claims in Placement are released right after.
        Starts the scheduler on first use."""
        return self.select_destinations_rounds(resource_class, rounds=1, count=count)[0]

    def select_destinations_rounds(self, resource_class: str, rounds: int,
                                   count: int = 1) -> list[list[tuple[str, str]]]:
        """`select_destinations` asked `rounds` times, one boot after the other, in one run of
        the script (a run costs ~7 s of Nova's imports, a round 0.2-1 s).
        `last_probe_seconds` keeps each round's time."""
        self.start_scheduler()
        flavor = self.baremetal_flavor(resource_class)
        done = subprocess.run(
            [str(Path(self.state["venv"]) / "bin" / "python"),
             str(nova_starter.PEER_FILES / "select_destinations.py"), str(self.nova_conf), flavor,
             "--count", str(count), "--rounds", str(rounds)],
            capture_output=True, text=True, timeout=120 + 5 * rounds)
        if done.returncode != 0:
            raise StackError(f"select_destinations failed: {done.stderr[-2000:] or done.stdout}")
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        self.last_probe_seconds = answer["seconds"]
        return [[(host, node) for host, node in selected or []] for selected in answer["rounds"]]

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float,
                 interval: float = 1.0) -> None:
        """Poll `condition()` until true; fail with `what` after `timeout` seconds."""
        wait_for(condition, timeout=timeout, interval=interval, what=f"Nova showing {what}")


@contextmanager
def started_computes(stack: NovaStack) -> Iterator[Callable[[str, list], ComputeProcess]]:
    """Yield `start(name, config_files)`; every nova-compute it started is stopped on exit."""
    started: list[ComputeProcess] = []

    def start(name: str, config_files: list[str | Path]) -> ComputeProcess:
        process = stack.start_compute(name, config_files)
        started.append(process)
        return process

    try:
        yield start
    finally:
        nova_starter.terminate(stack.run_dir, [p.name for p in started])
