"""A real Keystone and an Ironic that enforces its policy through it, for a test session (a
pytest plugin, registered by the root conftest).

Ironic consults its policy only with `auth_strategy = keystone` (ironic/common/policy.py), so
this pair is what shows Ironic's own refusals, e.g. the 403 of `baremetal:node:update:shard`.
Keystone is testbed/keystone_starter.py (installed into Ironic's venv on first use, ~20 s);
it starts in ~15 s (db_sync, key setup, bootstrap) and stops with the session.

Ironic runs with one policy override (policy.yaml beside its ironic.conf, where oslo.config
finds it; oslo.policy reads it again whenever it changes): `baremetal:shards:get` is refused
to any user who also holds the role NO_SHARD_SUMMARY_ROLE, and is Ironic's default (a
system-scoped reader) for everyone else. A system admin with that role is what a deployment
whose policy keeps the shard summary from the operator's user looks like: it may list nodes
and set their shards, and GET /v1/shards answers it 403.

Where Keystone cannot be installed (pip refusing it beside Ironic's packages, no index), the
fixtures skip with that reason, printed as a warning too so nobody mistakes it for a pass.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testbed import keystone_starter
from testbed.ironic_service import IronicService, running_ironic

REPO = Path(__file__).resolve().parents[2]
NO_SHARD_SUMMARY_ROLE = "no-shard-summary"
# Ironic 39's default for baremetal:shards:get is SYSTEM_READER (ironic/common/policy.py);
# the override adds only the refusal of NO_SHARD_SUMMARY_ROLE in front of it.
POLICY_OVERRIDE = (
    f'"baremetal:shards:get": "not role:{NO_SHARD_SUMMARY_ROLE} and ((role:reader and system_scope:all) '
    'or (role:service and system_scope:all) or rule:service_role)"\n')


@dataclass(frozen=True)
class KeystoneService:
    """A running Keystone: its state directory, identity URL and bootstrap admin's password."""

    state_dir: Path
    url: str
    admin_password: str

    def user_cloud(self, ironic: IronicService, name: str, *, role: str,
                   system: bool = False, project: str | None = None, also: tuple[str, ...] = ()) -> dict:
        """A clouds.yaml entry (password auth against this Keystone, `ironic`'s endpoint) for
        user `name`, created (or reset) with `role` (and the roles `also`) on the system or on
        `project`."""
        password = secrets.token_urlsafe(12)
        keystone_starter.ensure_user(self.url, self.admin_password, name, password, role=role,
                                     system=system, project=project, also=also)
        scope = {"system_scope": "all"} if system else {
            "project_name": project or keystone_starter.SERVICE_PROJECT,
            "project_domain_id": "default"}
        return {**ironic.cloud, "auth": {"auth_url": self.url, "username": name,
                                         "password": password, "user_domain_id": "default",
                                         **scope}}


def _starter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.keystone_starter", *args], cwd=REPO,
                          capture_output=True, text=True)


@pytest.fixture(scope="session")
def keystone_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeystoneService]:
    """The real Keystone for the session (sqlite, fernet tokens, gunicorn on a free port)."""
    installed = _starter("install")
    if installed.returncode != 0:
        reason = f"Keystone cannot be installed here: {installed.stderr.strip()[-600:]}"
        warnings.warn(reason, stacklevel=1)
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("keystone")
    started = _starter("start", str(state))
    if started.returncode != 0:
        raise RuntimeError(f"testbed.keystone_starter start failed:\n{started.stderr}")
    lines = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    try:
        yield KeystoneService(state, lines["KEYSTONE_URL"], lines["KEYSTONE_ADMIN_PASSWORD"])
    finally:
        stopped = _starter("stop", str(state))
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="session")
def keystone_ironic(keystone_service: KeystoneService,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[IronicService]:
    """A real Ironic with `auth_strategy = keystone` (policy enforced, Ironic's scoped
    defaults, and POLICY_OVERRIDE); its `cloud` is Keystone's system-scoped admin."""
    with running_ironic(tmp_path_factory.mktemp("ironic-keystone"), auth="keystone",
                        keystone=keystone_service.state_dir) as service:
        (service.state_dir / "policy.yaml").write_text(POLICY_OVERRIDE)
        yield service
