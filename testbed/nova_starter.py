"""The real Nova control plane on 127.0.0.1, for tests and the demo (standard library only).

One *stack* = placement API + Nova compute API (both served by gunicorn from .tools/nova-venv) +
one nova-conductor, on MariaDB and RabbitMQ, with its own databases (`<id>_nova_api`,
`<id>_nova`, `<id>_nova_cell0`, `<id>_placement`) and its own RabbitMQ vhost `<id>`, so parallel
or stale stacks never share state. nova-compute processes (one per pool member) are started
against it with `spawn_compute(...)` and the member's config files in order. A real
nova-scheduler joins the stack only when a test asks the scheduler (`start_scheduler`: ~10 s and
~250 MB that the services/hypervisors tests do not need). Nothing here can boot
an instance (no Glance/Neutron/Cinder): hack/nova/select_destinations.py asks the scheduler
what a boot's conductor asks it.

Invariants:
- every process is started in its own session and recorded as `<run>/pids/<name>.pid`
  (service_process.py); `stop` ends exactly those process groups (SIGTERM, then SIGKILL),
  never anything found by name, and a recycled PID is recognised by its start time;
- `stop` leaves nothing behind: processes, databases, vhost, registry entry (and the run dir
  when it created it);
- every stack is registered in `<repo>/.run/nova/<id>.json`; `start` first reaps registered
  stacks that can no longer be used (owner process dead, or all its processes dead);
- `start` is all-or-nothing: on any failure it stops what it started and raises.

Commands (hack/nova/novastack.py runs `main`; tests use testbed/nova_stack.py): start, status,
compute-conf, stop. Only the standard library. Details: README.md, "The Nova starter".
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from testbed.ports import free_port
from testbed.procgroup import cpu_seconds as group_cpu_seconds, resident_bytes, start_time_of
from testbed.service_process import ServiceProcess, stop_all

REPO = Path(__file__).resolve().parents[1]
PEER_FILES = REPO / "hack" / "nova"
VENV = REPO / ".tools" / "nova-venv"
REGISTRY = REPO / ".run" / "nova"

MYSQL = ("mysql", "-uroot", "-h127.0.0.1", "--batch", "--skip-column-names")
RABBIT_URL = "rabbit://guest:guest@127.0.0.1:5672/{vhost}"
DB_URL = "mysql+pymysql://root@127.0.0.1/{name}?charset=utf8"
ADMIN_TOKEN = "admin:admin"  # <user>:<project>, understood by fake_authtoken and placement noauth2

# Test-speed timings, shared by the control plane and every compute (seconds).
TIMINGS = {
    "report_interval": 5,            # a compute's heartbeat
    "service_down_time": 20,         # API reports a service down after this long without one
    "periodic_fuzzy_delay": 0,
    "graceful_shutdown_timeout": 20,
    "manager_shutdown_timeout": 5,
}
UPDATE_RESOURCES_INTERVAL = 10  # a compute's resource-tracker cycle (picks up shard changes)
START_TIMEOUT = 180
SCHEDULER = "nova-scheduler"  # its process name, binary and service binary


class StackError(RuntimeError):
    """The stack could not be started, used or stopped; the message says which step and why."""


# ----------------------------------------------------------------------------- config rendering

def render_ini(sections: dict[str, dict[str, object]]) -> str:
    """INI text for oslo.config: sections and keys in the given order, values with str()."""
    lines: list[str] = []
    for section, options in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {value}" for key, value in options.items())
        lines.append("")
    return "\n".join(lines)


def _common_sections(state: dict) -> dict[str, dict[str, object]]:
    """Options every Nova process of this stack shares (bus, placement, timings)."""
    shared = {k: v for k, v in state["timings"].items() if k != "update_resources_interval"}
    return {
        "DEFAULT": {
            "transport_url": state["transport_url"],
            "state_path": state["state_path"],
            **shared,
        },
        "placement": {
            "auth_type": "admin_token",
            "endpoint": state["placement_url"],
            "token": ADMIN_TOKEN,
        },
        "oslo_concurrency": {"lock_path": str(Path(state["state_path"]) / "lock")},
    }


def render_control_conf(state: dict) -> str:
    """nova.conf of the control plane (API, conductor, nova-manage): the only one with databases."""
    sections = _common_sections(state)
    sections["DEFAULT"] = {"host": f"{state['id']}-control", **sections["DEFAULT"]}
    sections["api_database"] = {"connection": state["connections"]["nova_api"]}
    sections["database"] = {"connection": state["connections"]["nova"]}
    sections["conductor"] = {"workers": 1}
    # nova-api asks Neutron for the ports of every server it shows (their security groups) and
    # of one it deletes while its host is down; the test bed has no Neutron, so a stand-in with
    # no ports answers (hack/nova/neutron_standin.py, a TEST SETUP SHORTCUT like the seeded
    # instances' empty network).
    sections["neutron"] = {"auth_type": "none", "endpoint_override": state["neutron_url"]}
    # A deleted server's notification carries its image's URL, built from Glance's endpoint (no
    # request is made): with no Glance in the catalog, the delete itself fails. Nothing listens here.
    sections["glance"] = {"endpoint_override": "http://127.0.0.1:9/image"}
    # Read by nova-scheduler only (when a test starts it). Filters, weighers, host_subset_size
    # stay Nova's defaults (ComputeFilter rejects a disabled or down service); equal weights are
    # shuffled, as Nova recommends for Ironic: its nodes weigh the same, and without it every
    # one-instance boot goes to the same first node.
    sections["scheduler"] = {"workers": 1}
    sections["filter_scheduler"] = {"shuffle_best_same_weighed_hosts": True}
    return render_ini(sections)


def render_compute_conf(state: dict, ironic_url: str, ironic_username: str | None = None,
                        ironic_password: str | None = None) -> str:
    """The base nova.conf for a nova-compute with the Ironic driver against this stack.

    This is what a pool's Secret carries (key nova.conf). It sets no `host` and no
    `[ironic]shard`: the operator's per-member overlay (member.conf, read second) does.
    Ironic is reached at `ironic_url` without auth, or with HTTP basic auth when a username
    is given. Like a real deployment's compute config it has NO database connections:
    nova-compute reaches the databases only through the conductor (with
    `[api_database]connection` set, Nova 34's compute tries direct DB access and logs
    "No DB access allowed in nova-compute").
    """
    sections = _common_sections(state)
    sections["DEFAULT"] = {
        "compute_driver": "ironic.IronicDriver",
        **sections["DEFAULT"],
        "update_resources_interval": state["timings"]["update_resources_interval"],
        **({"debug": True} if state.get("compute_debug") else {}),
    }
    url = ironic_url.rstrip("/")
    if ironic_username:
        sections["ironic"] = {"auth_type": "http_basic", "endpoint": url,
                              "username": ironic_username, "password": ironic_password or ""}
    else:
        sections["ironic"] = {"auth_type": "none"}
    sections["ironic"]["endpoint_override"] = url
    # No Glance here: a power action's legacy notification formats the instance's image URL
    # from this list (never contacted) instead of looking Glance up in the catalog.
    sections["glance"] = {"api_servers": "http://127.0.0.1:9292"}
    return render_ini(sections)


def render_placement_conf(state: dict) -> str:
    """placement.conf: noauth2 (X-Auth-Token admin:admin), its own database."""
    return render_ini({
        "DEFAULT": {"debug": False},
        "api": {"auth_strategy": "noauth2"},
        "placement_database": {"connection": state["connections"]["placement"]},
    })


def render_api_paste(upstream: str) -> str:
    """Nova's own api-paste.ini with exactly one change: authtoken -> fake_authtoken (test only)."""
    real = "paste.filter_factory = keystonemiddleware.auth_token:filter_factory"
    if upstream.count(real) != 1:
        raise StackError("Nova's api-paste.ini no longer has exactly one keystonemiddleware "
                         "authtoken filter; testbed/nova_starter.py must learn the new layout")
    return upstream.replace(real, "paste.filter_factory = fake_authtoken:filter_factory")


# ----------------------------------------------------------------------------- processes

def _service(run_dir: Path, name: str) -> ServiceProcess:
    """The process recorded as `name` in `run_dir` (its pid file `<run>/pids/<name>.pid`)."""
    return ServiceProcess(Path(run_dir) / "pids" / f"{name}.pid", name, StackError)


def spawn(run_dir: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start `argv` in its own session, log to `<run>/logs/<name>.log`, record its pid file."""
    service = _service(run_dir, name)
    if service.leader_pid() is not None:
        raise StackError(f"process {name!r} is already running in {run_dir}")
    return service.start(argv, run_dir / "logs" / f"{name}.log",
                         env={**os.environ, **(env or {})}, cwd=run_dir).pid


def is_running(run_dir: Path, name: str) -> bool:
    """True while the process recorded as `name` is alive (same PID *and* start time)."""
    return pid_of(run_dir, name) is not None


def pid_of(run_dir: Path, name: str) -> int | None:
    """PID of the running process recorded as `name`, or None."""
    return _service(run_dir, name).leader_pid()


def terminate(run_dir: Path, names: str | list[str], sig: int = signal.SIGTERM,
              timeout: float = 30.0) -> None:
    """End the process groups recorded as `names` and forget them; returns when none is left.

    All groups get `sig` at once (so shutdowns overlap), then SIGKILL after `timeout`.
    `sig=SIGKILL` is a crash (no graceful shutdown), SIGTERM a clean stop.
    """
    stop_all([_service(run_dir, name) for name in ([names] if isinstance(names, str) else names)],
             sig, timeout)


def process_names(run_dir: Path) -> list[str]:
    """Names of all processes recorded in `run_dir` (running or not)."""
    pids = Path(run_dir) / "pids"
    return sorted(p.stem for p in pids.glob("*.pid")) if pids.is_dir() else []


def rss_bytes(run_dir: Path) -> dict[str, int]:
    """Resident memory per recorded process group (all processes of the group), in bytes."""
    usage = {}
    for name in process_names(run_dir):
        pid = pid_of(run_dir, name)
        if pid is not None:
            usage[name] = resident_bytes(pid)
    return usage


def cpu_seconds(run_dir: Path) -> dict[str, float]:
    """CPU time used so far per running recorded process group (bench/nova_bench.py)."""
    used = {}
    for name in process_names(run_dir):
        pid = pid_of(run_dir, name)
        if pid is not None:
            used[name] = group_cpu_seconds(pid)
    return used


def spawn_compute(state: dict, name: str, config_files: list[str | Path]) -> int:
    """Start one real `nova-compute --config-file F1 --config-file F2 ...` (files in that order).

    Later files override earlier ones, exactly as in a member pod (base nova.conf, then the
    operator's member.conf). Logs go to `<run>/logs/<name>.log`. Returns the PID.
    """
    argv = [str(VENV / "bin" / "nova-compute")]
    for config_file in config_files:
        if not Path(config_file).is_file():
            raise StackError(f"nova-compute {name!r}: config file {config_file} does not exist")
        argv += ["--config-file", str(config_file)]
    return spawn(Path(state["run_dir"]), name, argv)


# ----------------------------------------------------------------------------- MariaDB, RabbitMQ

def _run(argv: list[str] | tuple[str, ...], what: str, timeout: float = 300, **kwargs) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{what}: timed out after {timeout:.0f}s") from exc
    except FileNotFoundError as exc:
        raise StackError(f"{what}: {exc.filename} not found (run hack/nova/install.sh)") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise StackError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))
    return done.stdout


def _run_chains(chains: list[list[tuple[list[str], str]]]) -> None:
    """Run each chain's commands in order, all chains at once; raise the first failure."""
    errors: list[StackError] = []

    def run_chain(chain: list[tuple[list[str], str]]) -> None:
        try:
            for argv, what in chain:
                _run(argv, what)
        except StackError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run_chain, args=(chain,)) for chain in chains]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def sql(statement: str) -> str:
    return _run((*MYSQL, "-e", statement), f"MariaDB: {statement}", timeout=60)


def _databases(stack_id: str) -> dict[str, str]:
    return {role: f"{stack_id}_{role}" for role in ("nova_api", "nova", "nova_cell0", "placement")}


def _drop_storage(stack_id: str) -> None:
    """Drop the stack's databases and vhost (each step tolerates 'already gone')."""
    errors = []
    try:
        sql("; ".join(f"DROP DATABASE IF EXISTS `{db}`" for db in _databases(stack_id).values()))
    except StackError as exc:
        errors.append(str(exc))
    try:
        vhosts = _run(("rabbitmqctl", "-q", "list_vhosts"), "RabbitMQ: list vhosts", timeout=60)
        if stack_id in vhosts.split():
            _run(("rabbitmqctl", "-q", "delete_vhost", stack_id), "RabbitMQ: delete vhost", timeout=60)
    except StackError as exc:
        if "does not exist" not in str(exc):  # deleted by someone else meanwhile: already gone
            errors.append(str(exc))
    if errors:
        raise StackError("; ".join(errors))


def _create_storage(stack_id: str) -> None:
    sql("; ".join(f"CREATE DATABASE `{db}` CHARACTER SET utf8" for db in _databases(stack_id).values()))
    _run(("rabbitmqctl", "-q", "add_vhost", stack_id), "RabbitMQ: add vhost", timeout=60)
    _run(("rabbitmqctl", "-q", "set_permissions", "-p", stack_id, "guest", ".*", ".*", ".*"),
         "RabbitMQ: grant guest on vhost", timeout=60)


# ----------------------------------------------------------------------------- HTTP checks

def http_json(url: str, token: str | None = ADMIN_TOKEN, microversion: str | None = None,
              method: str = "GET", body: dict | None = None, timeout: float = 10,
              service: str = "compute") -> tuple[int, dict]:
    """One HTTP call with the test token; returns (status, decoded JSON body or {}).
    `microversion` is `service`'s (compute, or placement)."""
    headers = {"Accept": "application/json"}
    if token:
        headers["X-Auth-Token"] = token
    if microversion:
        headers["OpenStack-API-Version"] = f"{service} {microversion}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else {})
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else {}
        except ValueError:
            return exc.code, {"raw": raw.decode(errors="replace")}


def services(state: dict, **query: str) -> list[dict]:
    """Nova's os-services list (microversion 2.53: ids are UUIDs, forced_down shown)."""
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    status, body = http_json(f"{state['compute_url']}/os-services" + (f"?{qs}" if qs else ""),
                             microversion="2.53")
    if status != 200:
        raise StackError(f"GET os-services answered {status}: {body}")
    return body["services"]


def _wait(what: str, check, run_dir: Path, deadline: float, watch: list[str]) -> None:
    """Poll `check()` until truthy; fail fast if a watched process died, or at the deadline."""
    while True:
        for name in watch:
            if not is_running(run_dir, name):
                raise StackError(f"{name} exited while waiting for {what}; see "
                                 f"{run_dir / 'logs' / (name + '.log')}:\n{_log_tail(run_dir, name)}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, StackError):
            pass
        if time.monotonic() > deadline:
            raise StackError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _log_tail(run_dir: Path, name: str, lines: int = 20) -> str:
    log = run_dir / "logs" / f"{name}.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


# ----------------------------------------------------------------------------- lifecycle

def install() -> None:
    """Run hack/nova/install.sh (idempotent: a few seconds when everything is in place)."""
    _run(("bash", str(PEER_FILES / "install.sh")), "hack/nova/install.sh", timeout=1800)


def _alive(ref: dict | None) -> bool:
    """True while the process `ref` ({"pid", "start_time"}) runs; a dead one is never alive."""
    return bool(ref) and ref["start_time"] is not None and start_time_of(ref["pid"]) == ref["start_time"]


def reap_stale() -> list[str]:
    """Stop registered stacks nobody can use any more; returns their ids.

    A stack is stale when its owner process (the test session that started it) is dead, or when
    it has no owner (CLI) and none of its processes is alive.
    """
    reaped = []
    REGISTRY.mkdir(parents=True, exist_ok=True)
    # One reaper at a time: the xdist workers of one run all start by reaping, and two reaping the
    # same stack raced on its vhost ("Virtual host ... does not exist") and failed their setup.
    with open(REGISTRY / ".reap.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for entry in sorted(REGISTRY.glob("*.json")):
            try:
                state = json.loads(entry.read_text())
            except (OSError, ValueError):
                continue  # gone meanwhile (reaped or stopped): nothing to do
            run_dir = Path(state["run_dir"])
            owner_dead = state.get("owner") is not None and not _alive(state["owner"])
            nothing_runs = not any(is_running(run_dir, n) for n in process_names(run_dir))
            if owner_dead or (state.get("owner") is None and nothing_runs):
                stop(state)
                reaped.append(state["id"])
    return reaped


def start(run_dir: Path | None = None, owner_pid: int | None = None, timings: dict | None = None,
          compute_debug: bool = False) -> dict:
    """Start a fresh stack and return its state (also written to `<run>/stack.json`).

    `owner_pid`: the process that owns the stack (a test session); when it dies, the next
    `start` anywhere in this checkout reaps the stack. None = lives until `stop` (demo).
    `timings`: other values for TIMINGS' keys and `update_resources_interval` (bench/nova_bench.py
    runs Nova's defaults); `compute_debug`: computes log at DEBUG (the resource tracker's pass,
    start to "Final resource view", is logged at DEBUG only).
    """
    unknown = sorted(set(timings or {}) - {*TIMINGS, "update_resources_interval"})
    if unknown:
        raise StackError(f"unknown timings {unknown}: known are {sorted(TIMINGS)} and update_resources_interval")
    t0 = time.monotonic()
    install()
    reap_stale()
    phases = {"install check + reap": round(time.monotonic() - t0, 1)}
    stack_id = "ns" + secrets.token_hex(4)
    made_run_dir = run_dir is None
    run_dir = Path(run_dir or REGISTRY / stack_id).resolve()
    for sub in ("etc", "logs", "pids", "state/lock"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    nova_port, placement_port, neutron_port = free_port(), free_port(), free_port()
    databases = _databases(stack_id)
    state = {
        "id": stack_id,
        "run_dir": str(run_dir),
        "remove_run_dir": made_run_dir,
        "registry_entry": str(REGISTRY / f"{stack_id}.json"),
        # while starting, this process owns the stack (a concurrent reap must not take it)
        "owner": {"pid": os.getpid(), "start_time": start_time_of(os.getpid())},
        "venv": str(VENV),
        "nova_url": f"http://127.0.0.1:{nova_port}",
        "compute_url": f"http://127.0.0.1:{nova_port}/v2.1",
        "placement_url": f"http://127.0.0.1:{placement_port}",
        "neutron_url": f"http://127.0.0.1:{neutron_port}",
        "token": ADMIN_TOKEN,
        "transport_url": RABBIT_URL.format(vhost=stack_id),
        "vhost": stack_id,
        "databases": databases,
        "connections": {role: DB_URL.format(name=db) for role, db in databases.items()},
        "state_path": str(run_dir / "state"),
        "nova_conf": str(run_dir / "etc" / "nova.conf"),
        "timings": {**TIMINGS, "update_resources_interval": UPDATE_RESOURCES_INTERVAL, **(timings or {})},
        "compute_debug": compute_debug,
        "start_phases": phases,
    }
    REGISTRY.mkdir(parents=True, exist_ok=True)
    Path(state["registry_entry"]).write_text(json.dumps(state, indent=2))
    try:
        _bring_up(state)
    except BaseException:
        stop(state)
        raise
    state["owner"] = {"pid": owner_pid, "start_time": start_time_of(owner_pid)} if owner_pid else None
    state["start_seconds"] = round(time.monotonic() - t0, 1)
    (run_dir / "stack.json").write_text(json.dumps(state, indent=2))
    Path(state["registry_entry"]).write_text(json.dumps(state, indent=2))
    return state


def _bring_up(state: dict) -> None:
    run_dir = Path(state["run_dir"])
    etc = run_dir / "etc"
    phases = state["start_phases"]
    t0 = time.monotonic()
    _create_storage(state["id"])
    phases["databases + vhost"] = round(time.monotonic() - t0, 1)
    (etc / "nova.conf").write_text(render_control_conf(state))
    (etc / "placement.conf").write_text(render_placement_conf(state))
    (etc / "api-paste.ini").write_text(render_api_paste((VENV / "etc/nova/api-paste.ini").read_text()))

    bin_dir = VENV / "bin"
    manage = [str(bin_dir / "nova-manage"), "--config-file", state["nova_conf"]]
    # cell0's schema: the same `db sync --local_cell`, with [database] pointing at cell0
    (etc / "cell0.conf").write_text(render_ini({"database": {"connection": state["connections"]["nova_cell0"]}}))
    # Schema migrations are bound by MariaDB's DDL, not CPU: the four independent chains run
    # side by side (~15 s instead of ~35 s).
    _run_chains([
        [([*manage, "api_db", "sync"], "nova-manage api_db sync"),
         ([*manage, "cell_v2", "map_cell0", "--database_connection",
           state["connections"]["nova_cell0"]], "nova-manage cell_v2 map_cell0"),
         ([*manage, "cell_v2", "create_cell", "--name", "cell1"], "nova-manage cell_v2 create_cell")],
        [([*manage, "db", "sync", "--local_cell"], "nova-manage db sync (cell1)")],
        [([*manage, "--config-file", str(etc / "cell0.conf"), "db", "sync", "--local_cell"],
          "nova-manage db sync (cell0)")],
        [([str(bin_dir / "placement-manage"), "--config-file", str(etc / "placement.conf"),
           "db", "sync"], "placement-manage db sync")],
    ])
    phases["schemas and cells"] = round(time.monotonic() - t0 - phases["databases + vhost"], 1)

    gunicorn = [str(bin_dir / "gunicorn"), "--workers", "1", "--threads", "4", "--timeout", "120",
                "--no-control-socket"]
    spawn(run_dir, "placement-api",
          [*gunicorn, "--bind", state["placement_url"].removeprefix("http://"),
           "--name", f"placement-api-{state['id']}", "placement.wsgi.api:application"],
          env={"OS_PLACEMENT_CONFIG_DIR": str(etc)})
    spawn(run_dir, "nova-api",
          [*gunicorn, "--bind", state["nova_url"].removeprefix("http://"),
           "--name", f"nova-api-{state['id']}", "--pythonpath", str(PEER_FILES),
           "nova_api_wsgi:application"],
          env={"OS_NOVA_CONFIG_DIR": str(etc), "OS_NOVA_CONFIG_FILES": "api-paste.ini;nova.conf"})
    spawn(run_dir, "nova-conductor", [str(bin_dir / "nova-conductor"), "--config-file", state["nova_conf"]])
    spawn(run_dir, "neutron-standin",
          [*gunicorn, "--bind", state["neutron_url"].removeprefix("http://"),
           "--name", f"neutron-standin-{state['id']}", "--pythonpath", str(PEER_FILES), "neutron_standin:application"])

    deadline = time.monotonic() + START_TIMEOUT
    control = ["placement-api", "nova-api", "nova-conductor", "neutron-standin"]
    _wait("placement API", lambda: http_json(state["placement_url"] + "/")[0] == 200,
          run_dir, deadline, control)
    _wait("the Neutron stand-in", lambda: http_json(state["neutron_url"] + "/v2.0/ports")[0] == 200,
          run_dir, deadline, control)
    _wait("nova-conductor up in Nova's services list",
          lambda: any(s["binary"] == "nova-conductor" and s["state"] == "up" for s in services(state)),
          run_dir, deadline, control)
    phases["services up"] = round(time.monotonic() - t0 - sum(
        phases[p] for p in ("databases + vhost", "schemas and cells")), 1)


def start_scheduler(state: dict) -> float:
    """Start the stack's nova-scheduler (control plane config, one worker) unless it runs; return
    once it takes requests, with the seconds that took (0.0 when it already ran).

    "Takes requests" = its service has sent a heartbeat (`updated_at` set): Nova's service
    starts heartbeating only after its RPC server consumes the scheduler topic, and a call
    sent before that is dropped and would wait out the RPC timeout.
    """
    run_dir = Path(state["run_dir"])
    if is_running(run_dir, SCHEDULER):
        return 0.0
    t0 = time.monotonic()
    spawn(run_dir, SCHEDULER, [str(VENV / "bin" / "nova-scheduler"), "--config-file", state["nova_conf"]])
    _wait("nova-scheduler heartbeating in Nova's services list",
          lambda: any(s["binary"] == SCHEDULER and s["state"] == "up" and s["updated_at"]
                      for s in services(state, binary=SCHEDULER)),
          run_dir, time.monotonic() + START_TIMEOUT, [SCHEDULER])
    return round(time.monotonic() - t0, 1)


def stop(state: dict) -> None:
    """Stop everything of the stack and remove its storage; safe to call twice."""
    run_dir = Path(state["run_dir"])
    # computes first (they talk to the conductor while shutting down), then the control plane
    names = process_names(run_dir)
    control = [n for n in ("nova-api", "placement-api", "nova-conductor", SCHEDULER, "neutron-standin") if n in names]
    terminate(run_dir, [n for n in names if n not in control])
    terminate(run_dir, control)
    _drop_storage(state["id"])
    if state.get("remove_run_dir"):
        shutil.rmtree(run_dir, ignore_errors=True)
    Path(state["registry_entry"]).unlink(missing_ok=True)


def load(state_file: str | Path) -> dict:
    """The state of a running stack from its stack.json (or registry entry)."""
    try:
        return json.loads(Path(state_file).read_text())
    except (OSError, ValueError) as exc:
        raise StackError(f"cannot read stack state {state_file}: {exc}") from exc


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command line; `prog` names the command in usage and error lines."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start a stack; prints its state file")
    p_start.add_argument("--run-dir", type=Path)
    for name in ("status", "stop"):
        sub.add_parser(name).add_argument("state_file")
    p_conf = sub.add_parser("compute-conf", help="print a base nova.conf for a compute")
    p_conf.add_argument("state_file")
    p_conf.add_argument("--ironic-url", required=True)
    p_conf.add_argument("--ironic-username", help="HTTP basic auth (default: no auth)")
    p_conf.add_argument("--ironic-password")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            state = start(args.run_dir)
            print(Path(state["run_dir"]) / "stack.json")
        elif args.command == "status":
            state = load(args.state_file)
            run_dir = Path(state["run_dir"])
            print(json.dumps({"id": state["id"], "compute_url": state["compute_url"],
                              "processes": {n: is_running(run_dir, n) for n in process_names(run_dir)},
                              "rss_bytes": rss_bytes(run_dir)}, indent=2))
        elif args.command == "compute-conf":
            print(render_compute_conf(load(args.state_file), args.ironic_url,
                                      args.ironic_username, args.ironic_password), end="")
        elif args.command == "stop":
            stop(load(args.state_file))
    except StackError as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    return 0

