"""The real Keystone (PyPI `keystone`) on 127.0.0.1, for tests that need Ironic to enforce its
policy (Ironic consults its policy only with `auth_strategy = keystone`).

Commands (hack/keystone/service.py runs `main`): install (into Ironic's venv, never changing a
package Ironic runs on), start, stop, status; a STATE_DIR keeps one Keystone. Its users are made
through its API (`ensure_user`). Only the standard library. Details: README.md, "The Keystone
starter".
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from testbed import ironic_venv, service_process
from testbed.ports import free_port
from testbed.service_process import ServiceProcess

# Keystone 30 is the release beside Ironic 39 / Nova 34; its requirements install into
# Ironic's venv without changing any package there (pip is constrained to that venv's freeze).
KEYSTONE_REQUIREMENTS = ("keystone==30.0.0", "gunicorn==27.0.1")
ADMIN_USER = "admin"
REGION = "RegionOne"
SERVICE_PROJECT = "service"
START_TIMEOUT_SECONDS = 120.0  # ~3 s alone; CI runs other tiers beside it on 2 cores
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServiceError(service_process.ServiceError):
    """A problem installing, starting or stopping Keystone, with a message a person can act on."""


def install() -> Path:
    """Ensure Ironic's venv holds keystone and gunicorn; return its bin directory.

    Idempotent: a stamp records the installed requirements. pip is constrained to the venv's
    own freeze, so installing Keystone never changes a package Ironic runs on: where that
    cannot be (a requirement conflict) pip refuses and this raises, saying so.
    """
    bin_dir = ironic_venv.install()
    target = bin_dir.parent
    stamp = target / ".keystone-installed"
    wanted = "\n".join(KEYSTONE_REQUIREMENTS)
    with open(target.parent / (target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == wanted \
                and (bin_dir / "keystone-manage").exists() and (bin_dir / "gunicorn").exists():
            return bin_dir
        print(f"installing {' '.join(KEYSTONE_REQUIREMENTS)} into {target} (~10 s)",
              file=sys.stderr)
        python = str(bin_dir / "python")
        freeze = subprocess.run([python, "-m", "pip", "freeze", "--disable-pip-version-check"],
                                check=True, capture_output=True, text=True).stdout
        constraints = target / "ironic-constraints.txt"
        constraints.write_text("".join(line + "\n" for line in freeze.splitlines()
                                       if "==" in line and not line.startswith("-")))
        pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
               "-c", str(constraints)]
        if os.environ.get("CI"):
            pip.append("--progress-bar=off")
        try:
            subprocess.run(pip + list(KEYSTONE_REQUIREMENTS), check=True)
        except subprocess.CalledProcessError as error:
            raise ServiceError(
                f"pip could not install {' '.join(KEYSTONE_REQUIREMENTS)} into {target} without "
                f"changing Ironic's packages (exit {error.returncode}); see pip's output above"
            ) from None
        stamp.write_text(wanted + "\n")
    return bin_dir


def render_config(state: Path, port: int) -> None:
    """Write keystone.conf and the admin's password into `state` (a fresh directory)."""
    (state / "keystone.conf").write_text(f"""[DEFAULT]
log_dir = {state}
log_file = keystone.log
use_stderr = false
[database]
connection = sqlite:///{state}/keystone.sqlite
[token]
provider = fernet
[fernet_tokens]
key_repository = {state}/fernet-keys
[fernet_receipts]
key_repository = {state}/fernet-keys
[credential]
key_repository = {state}/credential-keys
""")
    password = state / "admin-password"
    password.write_text(secrets.token_urlsafe(18) + "\n")
    password.chmod(0o600)
    (state / "endpoint").write_text(f"http://127.0.0.1:{port}/v3\n")


def configured_url(state: Path) -> str:
    return (state / "endpoint").read_text().strip()


def admin_password(state: Path) -> str:
    return (state / "admin-password").read_text().strip()


def _call(method: str, url: str, body: dict | None = None,
          token: str | None = None) -> tuple[int, dict, dict]:
    """One JSON request to Keystone: (status, headers, body); never via a proxy."""
    request = urllib.request.Request(url, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              **({"X-Auth-Token": token} if token else {})})
    try:
        with _NO_PROXY.open(request, timeout=10) as response:
            text = response.read()
            return response.status, dict(response.headers), json.loads(text) if text else {}
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, dict(error.headers), json.loads(text) if text else {}


def admin_token(url: str, password: str) -> str:
    """A system-scoped token of the bootstrap admin (what creates projects, users, grants)."""
    status, headers, body = _call("POST", url + "/auth/tokens", {"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": ADMIN_USER, "domain": {"id": "default"}, "password": password}}},
        "scope": {"system": {"all": True}}}})
    if status != 201:
        raise ServiceError(f"Keystone at {url} issued no admin token: HTTP {status} {body}")
    return headers.get("X-Subject-Token") or headers["x-subject-token"]


def answers(state: Path) -> bool:
    """True when Keystone issues the admin a token."""
    try:
        admin_token(configured_url(state), admin_password(state))
        return True
    except (OSError, ValueError, ServiceError):
        return False


def ensure(url: str, token: str, kind: str, name: str, body: dict) -> str:
    """The id of the `kind` ("projects", "users", "roles") named `name`, created with `body`
    when absent (idempotent: a start again, or a second test asking, finds it)."""
    status, _, found = _call("GET", f"{url}/{kind}?name={name}", token=token)
    if status != 200:
        raise ServiceError(f"Keystone refused listing {kind}: HTTP {status} {found}")
    if found[kind]:
        return found[kind][0]["id"]
    status, _, made = _call("POST", f"{url}/{kind}", {kind[:-1]: {"name": name, **body}}, token)
    if status != 201:
        raise ServiceError(f"Keystone refused creating {kind[:-1]} {name}: HTTP {status} {made}")
    return made[kind[:-1]]["id"]


def ensure_user(url: str, password_of_admin: str, name: str, password: str, *,
                role: str, project: str | None = None, system: bool = False,
                also: tuple[str, ...] = ()) -> str:
    """A user of the default domain holding `role` (and the roles `also`, each created when
    absent) on `project` (by name) or on the system; created when absent, its password and
    grants set again when present. Returns its id."""
    token = admin_token(url, password_of_admin)
    user = ensure(url, token, "users", name, {"domain_id": "default", "password": password})
    _call("PATCH", f"{url}/users/{user}", {"user": {"password": password}}, token)
    # A password change revokes the user's tokens issued before it (identity/core.py
    # update_user: a revocation event). A token's issued_at has whole seconds, so one issued
    # later within this same second counts as revoked too and Ironic answers 401 with it:
    # the caller's first token is asked for in the next second.
    time.sleep(1.05 - time.time() % 1.0)
    if system:
        scope = f"{url}/system/users/{user}"
    else:
        project_id = ensure(url, token, "projects", project or SERVICE_PROJECT,
                            {"domain_id": "default"})
        scope = f"{url}/projects/{project_id}/users/{user}"
    for granted in (role, *also):
        role_id = ensure(url, token, "roles", granted, {})
        status, _, body = _call("PUT", f"{scope}/roles/{role_id}", token=token)
        if status not in (200, 201, 204):
            raise ServiceError(f"Keystone refused granting {granted} to {name}: HTTP {status} {body}")
    return user


def _process(state: Path) -> ServiceProcess:
    return ServiceProcess(state / "keystone.pid", "Keystone", ServiceError)


def running_pid(state: Path) -> int | None:
    return _process(state).running_pid()


def log_tail(state: Path, lines: int = 25) -> str:
    text = ""
    for name in ("keystone.log", "gunicorn.out"):
        if (state / name).exists():
            text += f"--- {name}\n" + service_process.last_lines(state / name, lines) + "\n"
    return text or "(no log)"


def _manage(bin_dir: Path, state: Path, *args: str) -> None:
    done = subprocess.run([str(bin_dir / "keystone-manage"), "--config-file",
                           str(state / "keystone.conf"), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ServiceError(f"keystone-manage {args[0]} failed (exit {done.returncode}):\n"
                           f"{done.stderr[-2000:]}\n{log_tail(state)}")


def start(state: Path, port: int | None = None) -> dict[str, str]:
    """Start Keystone for `state` (set up on first use) and wait until it issues tokens."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    bin_dir = install()
    if not (state / "keystone.conf").exists():
        render_config(state, port or free_port())
        user = str(os.getuid())
        group = str(os.getgid())
        _manage(bin_dir, state, "db_sync")
        _manage(bin_dir, state, "fernet_setup", "--keystone-user", user, "--keystone-group", group)
        _manage(bin_dir, state, "credential_setup", "--keystone-user", user,
                "--keystone-group", group)
        url = configured_url(state)
        # "--opt=value": a generated password may start with "-", which argparse would read as an option
        _manage(bin_dir, state, "bootstrap", f"--bootstrap-password={admin_password(state)}",
                "--bootstrap-username", ADMIN_USER, "--bootstrap-project-name", "admin",
                "--bootstrap-role-name", "admin", "--bootstrap-region-id", REGION,
                "--bootstrap-admin-url", url, "--bootstrap-public-url", url,
                "--bootstrap-internal-url", url)
    url = configured_url(state)
    coordinates = {"KEYSTONE_URL": url, "KEYSTONE_ADMIN_PASSWORD": admin_password(state)}
    pid = running_pid(state)
    if pid is not None and answers(state):
        return {**coordinates, "KEYSTONE_PID": str(pid)}
    if pid is not None:
        stop(state)
    port = url.rsplit(":", 1)[1].split("/")[0]
    # gunicorn takes its settings from ./gunicorn.conf.py, none from its command line:
    # Keystone's oslo.config parses sys.argv and refuses any argument it does not know.
    (state / "gunicorn.conf.py").write_text(
        f"wsgi_app = 'keystone.wsgi.api:application'\nbind = '127.0.0.1:{port}'\n"
        "workers = 1\nthreads = 4\n"
        "control_socket_disable = True  # else one socket in $HOME for every gunicorn\n")
    env = {**os.environ, "OS_KEYSTONE_CONFIG_FILES": str(state / "keystone.conf")}
    service = _process(state)
    process = service.start([str(bin_dir / "gunicorn")], state / "gunicorn.out", cwd=state, env=env)
    service.await_ready(
        process, lambda: answers(state), timeout=START_TIMEOUT_SECONDS, interval=0.2,
        exited=lambda code: (f"gunicorn (keystone) exited with code {code} before Keystone "
                             f"answered at {url}:\n{log_tail(state)}"),
        timed_out=lambda: (f"Keystone did not answer at {url} within "
                           f"{START_TIMEOUT_SECONDS:.0f} s:\n{log_tail(state)}"))
    token = admin_token(url, admin_password(state))
    ensure(url, token, "projects", SERVICE_PROJECT, {"domain_id": "default"})
    return {**coordinates, "KEYSTONE_PID": str(process.pid)}


def stop(state: Path) -> None:
    """End the service's process group: none of it is left when this returns (idempotent)."""
    _process(state).stop()


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command line; `prog` names the command in usage and error lines."""
    return service_process.command_line(
        argv, prog, __doc__.split("\n\n")[0], install=install,
        install_help="install keystone into Ironic's venv (idempotent)",
        start_help="start (or restart) the service of STATE_DIR",
        start_options=lambda starting: starting.add_argument(
            "--port", type=int, help="default: a free port (first start only)"),
        start=lambda args: start(args.state_dir, args.port), stop=stop,
        up=lambda state: (state / "endpoint").exists() and running_pid(state) is not None
        and answers(state))


if __name__ == "__main__":
    sys.exit(main())
