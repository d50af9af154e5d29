"""Ironic's own virtualenv (default .tools/ironic-venv, or $IRONIC_VENV): where it is, and
`ironic` installed into it. Ironic is a peer we talk to, not a dependency of ours; Keystone
(keystone_starter.py) installs into the same venv, beside Ironic's packages.

`install()` is idempotent and safe to run concurrently (a file lock serialises installers).
Only the standard library, like the starters that use it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from pathlib import Path

from testbed import service_process

REPO = Path(__file__).resolve().parents[1]
# Pinned for reproducible runs; 39.0.0 serves API 1.115 (shards need >= 1.82).
IRONIC_REQUIREMENT = "ironic==39.0.0"


class InstallError(service_process.ServiceError):
    """Ironic could not be installed, with a message a person can act on."""


def venv_dir() -> Path:
    return Path(os.environ.get("IRONIC_VENV", REPO / ".tools" / "ironic-venv"))


def install() -> Path:
    """Ensure `ironic` is installed in its own venv; return the venv's bin directory.

    Idempotent: a stamp file records the installed requirement; nothing runs when it
    matches. A file lock makes concurrent callers (two test sessions, the demo) wait for
    one installer instead of racing it.
    """
    target = venv_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = target / ".installed"
    with open(target.parent / (target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == IRONIC_REQUIREMENT \
                and (target / "bin" / "ironic").exists():
            return target / "bin"
        print(f"installing {IRONIC_REQUIREMENT} into {target} (~40 s, ~300 MB)", file=sys.stderr)
        if not (target / "bin" / "python").exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(target)
        pip = [str(target / "bin" / "python"), "-m", "pip", "install",
               "--disable-pip-version-check"]
        if os.environ.get("CI"):
            pip.append("--progress-bar=off")
        try:
            subprocess.run(pip + ["-q", IRONIC_REQUIREMENT], check=True)
        except subprocess.CalledProcessError as error:
            raise InstallError(f"pip could not install {IRONIC_REQUIREMENT} into {target} "
                               f"(exit {error.returncode}); see pip's output above") from None
        stamp.write_text(IRONIC_REQUIREMENT + "\n")
    return target / "bin"
