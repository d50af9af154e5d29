"""A stand-in for nova-compute (Ironic driver), for the kind end-to-end test. A FAKE Nova.

Real nova-compute needs MariaDB, RabbitMQ, Placement and the Nova API running inside
the cluster; the kind e2e has none of them. What the e2e must prove is narrower: the config
files each member pod receives are the ones Nova would read, and they make it serve exactly
its shard. So this program reads the same files the same way (`--config-file A
--config-file B`, later files override earlier ones, oslo.config's ini syntax), takes the
options Nova's Ironic driver takes (`[DEFAULT]host`, `[ironic]shard`,
`[ironic]conductor_group`, `[ironic]auth_type` none or http_basic with `username` and
`password`, `[ironic]endpoint_override`), and lists its shard's nodes from the real Ironic
API every `--interval` seconds as nova-compute's resource tracker does. Each listing is
logged as one line (`listed host=... shard=... count=N nodes=uuid,uuid`). GET /healthz
answers 200 while the last listing succeeded recently, else 503 with the reason: the pod's
readiness probe.

Not supported (the stand-in refuses or ignores them, it never guesses): Keystone auth types,
`$var` interpolation, TLS options.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = logging.getLogger("ironic_shard_operator.testing.standin")

AUTH_TYPES = ("none", "http_basic")
NODE_FIELDS = ("uuid", "name", "shard", "conductor_group", "provision_state", "instance_uuid")


class ConfigError(ValueError):
    """A config file the stand-in (and Nova) cannot use; the message names file and option."""


# ---- reading config files the way oslo.config does ---------------------------------------

Sections = dict[str, dict[str, str]]


def parse_ini(text: str, source: str) -> Sections:
    """oslo.config's ini syntax: `[section]`, `key = value` or `key: value`, `#`/`;` comments
    at line start, indented continuation lines (joined with newlines), one pair of matching
    surrounding quotes stripped. Section names other than DEFAULT are case-insensitive.
    Within one file a repeated key keeps its last value (as for a single-valued option)."""
    sections: Sections = {}
    section: str | None = None
    key: str | None = None
    lines: list[str] = []

    def flush() -> None:
        nonlocal key
        if key is not None:
            assert section is not None
            sections.setdefault(section, {})[key] = _unquote("\n".join(lines))
            key = None

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        where = f"{source}:{number}"
        if not line:
            flush()
        elif line.startswith((" ", "\t")):
            if key is None:
                raise ConfigError(f"{where}: continuation line with nothing to continue: {raw!r}")
            lines.append(line.lstrip())
        else:
            flush()
            if line.startswith("["):
                if not line.endswith("]") or len(line) <= 2:
                    raise ConfigError(f"{where}: invalid section header {raw!r}")
                name = line[1:-1]
                section = name if name == "DEFAULT" else name.lower()
                sections.setdefault(section, {})
            elif line.startswith(("#", ";")):
                continue
            else:
                key, value = _split_assignment(line, where)
                if section is None:
                    raise ConfigError(f"{where}: option {key!r} outside any [section]")
                lines = [value]
    flush()
    return sections


def _split_assignment(line: str, where: str) -> tuple[str, str]:
    positions = [p for p in (line.find("="), line.find(":")) if p >= 0]
    if not positions:
        raise ConfigError(f"{where}: no '=' or ':' in {line!r}")
    cut = min(positions)
    key = line[:cut].strip()
    if not key:
        raise ConfigError(f"{where}: empty option name in {line!r}")
    return key, line[cut + 1:].strip()


def _unquote(value: str) -> str:
    if value and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def read_config_files(paths: Sequence[str]) -> Sections:
    """All files merged; an option in a later file overrides the same option earlier."""
    merged: Sections = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error
        for section, options in parse_ini(text, path).items():
            merged.setdefault(section, {}).update(options)
    return merged


@dataclass(frozen=True, slots=True)
class ComputeConfig:
    """The options of nova.conf this stand-in acts on."""

    host: str
    shard: str
    conductor_group: str | None
    endpoint: str
    auth_type: str
    username: str | None = None
    password: str | None = None


def compute_config(sections: Sections, sources: Sequence[str]) -> ComputeConfig:
    """Pick and check the options; a missing or unusable one raises ConfigError naming it."""
    files = ", ".join(sources)

    def required(section: str, option: str, why: str) -> str:
        value = sections.get(section, {}).get(option, "").strip()
        if not value:
            raise ConfigError(f"[{section}]{option} is not set in {files}: {why}")
        return value

    ironic = sections.get("ironic", {})
    auth_type = ironic.get("auth_type", "").strip() or "none"
    if auth_type not in AUTH_TYPES:
        raise ConfigError(
            f"[ironic]auth_type = {auth_type} is not supported by the stand-in "
            f"(only {' or '.join(AUTH_TYPES)}, with endpoint_override)")
    username = password = None
    if auth_type == "http_basic":
        username = required("ironic", "username", "http_basic needs a user")
        password = required("ironic", "password", "http_basic needs a password")
    return ComputeConfig(
        host=required("DEFAULT", "host", "the Nova service name of this member"),
        shard=required("ironic", "shard", "without it nova-compute would serve every node"),
        conductor_group=ironic.get("conductor_group", "").strip() or None,
        endpoint=required("ironic", "endpoint_override", "the Ironic API URL"),
        auth_type=auth_type,
        username=username,
        password=password,
    )


# ---- talking to Ironic --------------------------------------------------------------------


def ironic_connection(config: ComputeConfig):
    """An openstacksdk connection built the way Nova builds its Ironic client: a
    keystoneauth session with the configured auth plugin, the endpoint overridden."""
    from keystoneauth1 import session as ks_session
    from keystoneauth1.http_basic import HTTPBasicAuth
    from keystoneauth1.noauth import NoAuth
    from openstack import connection

    if config.auth_type == "http_basic":
        auth = HTTPBasicAuth(endpoint=config.endpoint, username=config.username,
                             password=config.password)
    else:
        auth = NoAuth(endpoint=config.endpoint)
    return connection.Connection(
        session=ks_session.Session(auth=auth),
        baremetal_endpoint_override=config.endpoint,
    )


def list_shard_nodes(conn, config: ComputeConfig) -> list[str]:
    """UUIDs of the nodes nova-compute with this config would serve, sorted."""
    query = {"shard": config.shard, "fields": list(NODE_FIELDS)}
    if config.conductor_group is not None:
        query["conductor_group"] = config.conductor_group
    return sorted(node.id for node in conn.baremetal.nodes(**query))


# ---- readiness ----------------------------------------------------------------------------


class Health:
    """Ready while the last listing succeeded less than `stale_after` seconds ago."""

    def __init__(self, stale_after: float, clock=time.monotonic) -> None:
        self._stale_after = stale_after
        self._clock = clock
        self._lock = threading.Lock()
        self._last_success: float | None = None
        self._last_error = "no listing yet"

    def succeeded(self) -> None:
        with self._lock:
            self._last_success = self._clock()

    def failed(self, reason: str) -> None:
        with self._lock:
            self._last_error = reason

    def status(self) -> tuple[bool, str]:
        with self._lock:
            if self._last_success is None:
                return False, self._last_error
            age = self._clock() - self._last_success
            if age > self._stale_after:
                return False, f"last successful listing {age:.0f}s ago: {self._last_error}"
            return True, "ok"


def serve_health(health: Health, addr: str, port: int) -> ThreadingHTTPServer:
    """GET /healthz: 200 "ok" when ready, else 503 with the reason. Other paths: 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path != "/healthz":
                self.send_error(404)
                return
            ready, reason = health.status()
            body = (reason + "\n").encode()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # probes are not news
            pass

    server = ThreadingHTTPServer((addr, port), Handler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server


# ---- the program ---------------------------------------------------------------------------


def parse_args(argv: Iterable[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ironic-shard-operator stand-in-compute",
        description="Stand-in for nova-compute (a fake Nova): lists its Ironic shard's nodes "
                    "as configured by nova.conf files, and reports readiness on /healthz.")
    parser.add_argument("--config-file", action="append", required=True, dest="config_files",
                        metavar="PATH", help="nova.conf-style file; later files override earlier")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between listings (default 10)")
    parser.add_argument("--health-port", type=int, default=8090,
                        help="port of GET /healthz (default 8090; 0 picks a free one)")
    parser.add_argument("--health-addr", default="0.0.0.0", help="address of /healthz")
    return parser.parse_args(None if argv is None else list(argv))


def main(argv: Iterable[str] | None = None) -> int:
    """Run until SIGTERM/SIGINT; exit 0 then, 2 on a config error (reason on stderr)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = compute_config(read_config_files(args.config_files), args.config_files)
    except ConfigError as error:
        print(f"stand-in-compute: {error}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    health = Health(stale_after=max(3 * args.interval, 30.0))
    server = serve_health(health, args.health_addr, args.health_port)
    LOG.info("started host=%s shard=%s conductor_group=%s endpoint=%s auth_type=%s healthz=%s:%d",
             config.host, config.shard, config.conductor_group or "", config.endpoint,
             config.auth_type, args.health_addr, server.server_port)
    conn = ironic_connection(config)
    try:
        while not stop.is_set():
            try:
                nodes = list_shard_nodes(conn, config)
            except Exception as error:  # any failure only makes the member unready
                reason = f"{type(error).__name__}: {error}"
                health.failed(reason)
                LOG.warning("listing failed host=%s shard=%s: %s", config.host, config.shard, reason)
            else:
                health.succeeded()
                LOG.info("listed host=%s shard=%s count=%d nodes=%s",
                         config.host, config.shard, len(nodes), ",".join(nodes))
            stop.wait(args.interval)
    finally:
        server.shutdown()
        server.server_close()
        conn.close()
    LOG.info("stopped host=%s shard=%s", config.host, config.shard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
