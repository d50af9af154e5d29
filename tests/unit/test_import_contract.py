"""The import contracts (pyproject.toml, [tool.importlinter]) hold, and each of them bites.

`lint-imports` (import-linter) builds the import graph statically, so these tests need no
service. The second test breaks a contract on purpose in a copy of the package and the test bed
and expects the linter to refuse it: a contract that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = {"ironic_shard_operator": REPO / "operator" / "ironic_shard_operator", "testbed": REPO / "testbed"}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, python_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(python_path), str(REPO)]))
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120)


def test_the_package_keeps_its_layers() -> None:
    done = lint_imports(REPO, REPO / "operator")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("ironic_shard_operator/core/planner.py", "import kopf", "core is pure"),
    ("ironic_shard_operator/core/status.py", "from ironic_shard_operator.adapters import ironic", "core is pure"),
    ("ironic_shard_operator/adapters/kube.py", "from ironic_shard_operator.controller import metrics",
     "adapters only talk"),
    ("ironic_shard_operator/controller/reconcile.py", "import testbed.kube_client", "the product never imports"),
    ("ironic_shard_operator/controller/reconcile.py", "from ironic_shard_operator.controller import pool_loop",
     "no import cycles"),
    ("ironic_shard_operator/core/ring.py", "from ironic_shard_operator.core import planner", "no import cycles"),
    ("testbed/keystone_starter.py", "from testbed import ironic_starter", "no import cycles"),
    ("ironic_shard_operator/controller/leader.py", "from ironic_shard_operator.controller import metrics",
     "the controller is layered"),
    ("testbed/ports.py", "from testbed import waiting", "the test bed is layered"),
    ("ironic_shard_operator/adapters/ironic/errors.py", "from ironic_shard_operator.adapters.ironic import writes",
     "the Ironic adapter is layered"),
    ("testbed/api_paths.py", "from testbed import waiting", "the test bed is layered"),
], ids=["core imports kopf", "core imports an adapter", "adapter imports the controller",
        "the product imports a test peer", "the loop imports the cycle imports the loop",
        "a loop inside core", "the Keystone and Ironic starters import each other",
        "a controller module imports one beside it", "a test bed module imports one above it",
        "the Ironic adapter's errors import its writes",
        "a test bed module imports one beside it"])
def test_a_deliberate_violation_fails(tmp_path: Path, module: str, line: str, contract: str) -> None:
    for name, source in SOURCES.items():
        shutil.copytree(source, tmp_path / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / module
    target.write_text(target.read_text() + f"\n{line}  # deliberate violation\n")
    done = lint_imports(tmp_path, tmp_path / "src")
    assert done.returncode != 0, done.stdout
    verdicts = [line.split() for line in done.stdout.splitlines() if line.startswith(contract)]
    assert verdicts and verdicts[0][-1] == "BROKEN", done.stdout
