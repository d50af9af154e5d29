"""The layer contract (pyproject.toml, [tool.importlinter]) holds, and it does bite.

`lint-imports` (import-linter) builds the package's import graph statically, so these tests
need no service. The second test breaks the contract on purpose in a copy of the package and
expects the linter to refuse it: a contract that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "ironic_shard_operator"
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
    ("core/planner.py", "import kopf", "core is pure"),
    ("core/status.py", "from ironic_shard_operator.adapters import ironic", "core is pure"),
    ("adapters/kube.py", "from ironic_shard_operator.controller import metrics",
     "adapters only talk"),
    ("controller/reconcile.py", "import testbed.kube_client", "the product never imports"),
], ids=["core imports kopf", "core imports an adapter", "adapter imports the controller",
        "the product imports a test peer"])
def test_a_deliberate_violation_fails(tmp_path: Path, module: str, line: str, contract: str) -> None:
    copy = tmp_path / "src" / "ironic_shard_operator"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # deliberate violation\n")
    done = lint_imports(tmp_path, tmp_path / "src")
    assert done.returncode != 0, done.stdout
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout, done.stdout
