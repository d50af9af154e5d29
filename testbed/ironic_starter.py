"""The real Ironic service (PyPI `ironic`), standalone on 127.0.0.1, for tests and the demo.

Commands (hack/ironic/service.py runs `main`, testbed/ironic_service.py runs the module): install,
start, stop, status. A STATE_DIR keeps one service's configuration, so a stopped service starts
again as it was; `stop` returns once nothing of its process group is left. Only the standard
library, so any python3 >= 3.9 runs it. Details: README.md, "The Ironic starter".
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

from testbed import keystone_starter, service_process
from testbed.ironic_venv import install, venv_dir
from testbed.ports import free_port
from testbed.service_process import ServiceProcess

REPO = Path(__file__).resolve().parents[1]
CONFIG_TEMPLATE = REPO / "hack" / "ironic" / "ironic.conf.template"
KEYSTONE_TEMPLATE = REPO / "hack" / "ironic" / "keystone.conf.template"
CLOUD_NAME = "ironic-test"
HTTP_BASIC_USER = "admin"
START_TIMEOUT_SECONDS = 180.0  # ~5 s alone; CI runs other tiers beside it on 2 cores
AUTH_STRATEGIES = ("noauth", "http_basic", "keystone")
# Ironic's own default [api]max_limit: the most items one page of a listing holds.
DEFAULT_MAX_LIMIT = 1000


class ServiceError(service_process.ServiceError):
    """A problem starting or stopping the service, with a message a person can act on."""


def render_config(state: Path, auth: str, host_ip: str, port: int, conductor_group: str,
                  pin_release: str | None, max_limit: int = DEFAULT_MAX_LIMIT,
                  keystone: Path | None = None) -> None:
    """Write ironic.conf, the credentials and clouds.yaml into `state` (a fresh directory).
    With auth "keystone", `keystone` is the state directory of a running Keystone
    (testbed/keystone_starter.py): Ironic's service user is made there, and clouds.yaml
    holds its system-scoped admin."""
    text = CONFIG_TEMPLATE.read_text()
    for marker, value in {"@HOST@": f"ironic-test-{port}", "@AUTH_STRATEGY@": auth,
                          "@STATE_DIR@": str(state), "@HOST_IP@": host_ip, "@PORT@": str(port),
                          "@CONDUCTOR_GROUP@": conductor_group,
                          "@MAX_LIMIT@": str(max_limit)}.items():
        text = text.replace(marker, value)
    if pin_release:
        text = text.replace("#pin_release_version =", f"pin_release_version = {pin_release}")
    url = f"http://{host_ip}:{port}"
    (state / "htpasswd").write_text("")
    if auth == "keystone":
        if keystone is None:
            raise ServiceError("--auth keystone needs --keystone STATE_DIR (a running Keystone)")
        keystone_url = keystone_starter.configured_url(keystone)
        admin_password = keystone_starter.admin_password(keystone)
        service_user, service_password = f"ironic-{port}", secrets.token_urlsafe(18)
        keystone_starter.ensure_user(keystone_url, admin_password, service_user,
                                     service_password, role="service",
                                     project=keystone_starter.SERVICE_PROJECT)
        fragment = KEYSTONE_TEMPLATE.read_text()
        for marker, value in {"@KEYSTONE_URL@": keystone_url, "@SERVICE_USER@": service_user,
                              "@SERVICE_PASSWORD@": service_password}.items():
            fragment = fragment.replace(marker, value)
        text += "\n" + fragment
        cloud = (f"    auth_type: password\n    auth:\n      auth_url: {keystone_url}\n"
                 f"      username: {keystone_starter.ADMIN_USER}\n"
                 f"      password: {admin_password}\n      user_domain_id: default\n"
                 f"      system_scope: all\n    region_name: {keystone_starter.REGION}\n")
    (state / "locks").mkdir(exist_ok=True)
    (state / "ironic.conf").write_text(text)

    if auth == "http_basic":
        password = secrets.token_urlsafe(18)
        # Only bcrypt entries are accepted by Ironic; its venv ships bcrypt.
        hashed = subprocess.run(
            [str(venv_dir() / "bin" / "python"), "-c",
             "import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), "
             "bcrypt.gensalt(rounds=4)).decode())", password],
            check=True, capture_output=True, text=True).stdout.strip()
        (state / "htpasswd").write_text(f"{HTTP_BASIC_USER}:{hashed}\n")
        cloud = (f"    auth_type: http_basic\n    auth:\n      username: {HTTP_BASIC_USER}\n"
                 f"      password: {password}\n      endpoint: {url}\n")
    elif auth == "noauth":
        cloud = f"    auth_type: none\n    auth:\n      endpoint: {url}\n"
    clouds = state / "clouds.yaml"
    clouds.write_text(f"clouds:\n  {CLOUD_NAME}:\n{cloud}    baremetal_endpoint_override: {url}\n")
    clouds.chmod(0o600)
    (state / "endpoint").write_text(url + "\n")


def configured_url(state: Path) -> str:
    return (state / "endpoint").read_text().strip()


def answers(url: str) -> bool:
    """True when the Ironic API root answers (it needs no credentials)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url + "/", timeout=2) as response:
            return "versions" in json.load(response)
    except (OSError, ValueError):
        return False


def _process(state: Path) -> ServiceProcess:
    return ServiceProcess(state / "ironic.pid", "Ironic", ServiceError)


def running_pid(state: Path) -> int | None:
    return _process(state).running_pid()


def log_tail(state: Path, lines: int = 25) -> str:
    return service_process.last_lines(state / "ironic.log", lines)


def start(state: Path, auth: str = "noauth", host_ip: str = "127.0.0.1",
          port: int | None = None, conductor_group: str = "",
          pin_release: str | None = None, max_limit: int = DEFAULT_MAX_LIMIT,
          keystone: Path | None = None) -> dict[str, str]:
    """Start the service for `state` and wait until its API answers; return its coordinates."""
    if max_limit < 1:
        raise ServiceError(f"--max-limit must be at least 1, got {max_limit}")
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    bin_dir = install()
    if not (state / "ironic.conf").exists():
        render_config(state, auth, host_ip, port or free_port(host_ip), conductor_group,
                      pin_release, max_limit, keystone.resolve() if keystone else None)
        subprocess.run([str(bin_dir / "ironic-dbsync"), "--config-file", str(state / "ironic.conf"),
                        "create_schema"], check=True, capture_output=True)
    url = configured_url(state)
    coordinates = {"IRONIC_URL": url, "OS_CLIENT_CONFIG_FILE": str(state / "clouds.yaml"),
                   "OS_CLOUD": CLOUD_NAME}
    pid = running_pid(state)
    if pid is not None and answers(url):
        return {**coordinates, "IRONIC_PID": str(pid)}
    if pid is not None:
        stop(state)
    service = _process(state)
    process = service.start([str(bin_dir / "ironic"), "--config-file", str(state / "ironic.conf")],
                            state / "ironic.out")
    service.await_ready(
        process, lambda: answers(url), timeout=START_TIMEOUT_SECONDS, interval=0.2,
        exited=lambda code: (f"ironic exited with code {code} before its API answered at "
                             f"{url}; last log lines:\n{log_tail(state)}"),
        timed_out=lambda: (f"ironic did not answer at {url} within {START_TIMEOUT_SECONDS:.0f} "
                           f"s; last log lines:\n{log_tail(state)}"))
    return {**coordinates, "IRONIC_PID": str(process.pid)}


def stop(state: Path) -> None:
    """End the service's process group: none of it is left when this returns (idempotent)."""
    _process(state).stop()


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command line; `prog` names the command in usage and error lines."""
    return service_process.command_line(
        argv, prog, __doc__.split("\n\n")[0], install=install,
        install_help="install ironic into its own venv (idempotent)",
        start_help="start (or restart) the service of STATE_DIR", start_options=_start_options,
        start=lambda args: start(args.state_dir, args.auth, args.host_ip, args.port,
                                 args.conductor_group, args.pin_release, args.max_limit,
                                 args.keystone),
        stop=stop, up=lambda state: (state / "endpoint").exists()
        and running_pid(state) is not None and answers(configured_url(state)))


def _start_options(starting: argparse.ArgumentParser) -> None:
    starting.add_argument("--auth", choices=AUTH_STRATEGIES, default="noauth")
    starting.add_argument("--host-ip", default="127.0.0.1", metavar="IP",
                          help="address to listen on (default 127.0.0.1; first start only)")
    starting.add_argument("--port", type=int, help="default: a free port (first start only)")
    starting.add_argument("--conductor-group", default="", metavar="NAME",
                          help="the conductor's group, also given to new nodes (default: none)")
    starting.add_argument("--pin-release", metavar="RELEASE",
                          help="act as an older Ironic release, e.g. zed (API max 1.80)")
    starting.add_argument("--max-limit", type=int, default=DEFAULT_MAX_LIMIT, metavar="N",
                          help="[api]max_limit, the most nodes one page of a listing holds "
                               f"(default {DEFAULT_MAX_LIMIT}, Ironic's own; first start only)")
    starting.add_argument("--keystone", type=Path, metavar="KEYSTONE_STATE_DIR",
                          help="with --auth keystone: the state directory of a running Keystone "
                               "(hack/keystone/service.py; first start only)")


if __name__ == "__main__":
    sys.exit(main())
