"""`make release` (hack/release.sh) as a platform team uses its artefacts: the image's hashed
lock installs offline from the built wheelhouse (with --require-hashes, as the Dockerfile does)
and the installed commands run; the chart carries the one version; the krew archive matches its
manifest and its kubectl-ics runs; the chart goes to the project's own OCI registry
(testbed/registry.py, Debian's docker-registry) and comes back the same.

Needs PyPI (the build and the wheelhouse download) and, for the OCI round trip, Debian's
docker-registry (skipped, saying why, where hack/registry.sh cannot install it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed import registry

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
HELM = REPO / ".tools" / "bin" / "helm"
# No pip configuration of this machine (extra indexes, find-links): only what the test names.
ISOLATED = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hack/release.sh's artefacts, built once per test run: the tests only read them, and each
    xdist worker that runs one of them would otherwise build the same release again (~33 s
    each). The workers' temp dirs share a parent; the first to take its lock builds there."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out, built = shared / "release" / "dist", shared / "release" / "built"
    with open(shared / "release.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not built.exists():
            shutil.rmtree(out, ignore_errors=True)  # what a failed build of another worker left
            done = subprocess.run(["bash", "hack/release.sh"], cwd=REPO, capture_output=True, text=True,
                                  env=dict(os.environ, DIST=str(out)), timeout=900)
            assert done.returncode == 0, f"hack/release.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
            built.touch()
    return out


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_release_holds_every_artefact_of_one_version(dist: Path) -> None:
    names = {p.name for p in dist.iterdir()}
    assert {f"ironic_shard_operator-{VERSION}-py3-none-any.whl", f"ironic_shard_operator-{VERSION}.tar.gz",
            f"ironic-shard-operator-{VERSION}.tgz", "image.lock", "wheelhouse", "krew", "CHANGELOG.md",
            f"kubectl-ics_v{VERSION}_linux_amd64.tar.gz", "SHA256SUMS"} <= names
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.glob("ironic_shard_operator-*")))
    with tarfile.open(dist / f"ironic-shard-operator-{VERSION}.tgz") as chart:
        meta = yaml.safe_load(chart.extractfile("ironic-shard-operator/Chart.yaml"))
        assert "ironic-shard-operator/rules/ironic-shard-operator.rules.yaml" in chart.getnames()
        assert not [n for n in chart.getnames() if "/ci/" in n]  # .helmignore
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
    assert f"## {VERSION}" in (dist / "CHANGELOG.md").read_text()
    for line in (dist / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name


def test_the_lock_installs_offline_from_the_wheelhouse_and_the_commands_run(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "image-venv"
    run(sys.executable, "-m", "venv", venv)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index", "--only-binary=:all:"]
    # exactly as the Dockerfile: the lock with --require-hashes, then our wheel without deps
    run(*pip, "--find-links", dist / "wheelhouse", "--require-hashes", "--no-deps", "-r", dist / "image.lock",
        env=ISOLATED)
    run(*pip, "--no-deps", dist / f"ironic_shard_operator-{VERSION}-py3-none-any.whl", env=ISOLATED)
    run(venv / "bin" / "python", "-m", "pip", "check", env=ISOLATED)
    assert "ironic-shard-operator run" in run(venv / "bin" / "ironic-shard-operator", "run", "--help").stdout
    assert "preflight" in run(venv / "bin" / "kubectl-ics", "--help").stdout
    # nothing the lock does not name: the venv holds the lock's packages, our own and pip's
    listed = json.loads(run(venv / "bin" / "python", "-m", "pip", "list", "--format", "json", env=ISOLATED).stdout)
    locked = {line.split("==")[0].lower() for line in (dist / "image.lock").read_text().splitlines()
              if line and line[0].isalpha()}
    assert {re.sub(r"[-_.]+", "-", p["name"]).lower() for p in listed} - locked == {"ironic-shard-operator", "pip"}


def test_a_tampered_wheel_is_refused_by_the_lock(dist: Path, tmp_path: Path) -> None:
    """--require-hashes is what makes the lock a lock: a changed file does not install."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for wheel in (dist / "wheelhouse").iterdir():
        (house / wheel.name).write_bytes(wheel.read_bytes())
    victim = sorted(house.iterdir())[0]
    victim.write_bytes(victim.read_bytes() + b"\0")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    done = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-index", "--find-links", house,
                           "--require-hashes", "--no-deps", "-r", dist / "image.lock"],
                          capture_output=True, text=True, env=ISOLATED, timeout=600)
    assert done.returncode != 0 and "DO NOT MATCH THE HASHES" in done.stderr.upper()


def test_the_krew_archive_matches_its_manifest_and_its_kubectl_ics_runs(dist: Path, tmp_path: Path) -> None:
    manifest = yaml.safe_load((dist / "krew" / "ics.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "ics"
    assert manifest["spec"]["version"] == f"v{VERSION}"
    [platform] = manifest["spec"]["platforms"]
    archive = dist / f"kubectl-ics_v{VERSION}_linux_amd64.tar.gz"
    assert platform["uri"].endswith("/" + archive.name)
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "plugin", filter="data")
    plugin = tmp_path / "plugin" / platform["bin"]
    done = run(plugin, "--help", env=ISOLATED | {"PEX_ROOT": str(tmp_path / "pex")})
    assert "preflight" in done.stdout and "status" in done.stdout


@pytest.fixture(scope="module")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    state = tmp_path_factory.mktemp("registry")
    try:
        coordinates = registry.start(state)
    except registry.CannotInstall as error:
        reason = f"the real OCI registry cannot be installed here, the chart's OCI round trip is skipped: {error}"
        warnings.warn(reason, stacklevel=1)
        pytest.skip(reason)
    yield coordinates
    registry.stop(state)


def test_the_chart_is_pushed_to_an_oci_registry_and_pulled_back_unchanged(dist: Path, oci_registry: dict[str, str],
                                                                        tmp_path: Path) -> None:
    env = dict(os.environ, HELM_CONFIG_HOME=str(tmp_path / "helm-config"), HELM_CACHE_HOME=str(tmp_path / "helm-cache"),
               HELM_REGISTRY_CONFIG=str(tmp_path / "helm-config" / "registry.json"))
    chart = dist / f"ironic-shard-operator-{VERSION}.tgz"
    reference = f"oci://{oci_registry['REGISTRY_HOST']}/charts"
    pushed = run(HELM, "push", chart, reference, "--ca-file", oci_registry["REGISTRY_CA"], env=env)
    assert f"{oci_registry['REGISTRY_HOST']}/charts/ironic-shard-operator:{VERSION}" in pushed.stdout + pushed.stderr
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    run(HELM, "pull", f"{reference}/ironic-shard-operator", "--version", VERSION, "--ca-file",
        oci_registry["REGISTRY_CA"], "--destination", pulled, env=env)
    assert (pulled / chart.name).read_bytes() == chart.read_bytes()
    shown = yaml.safe_load(run(HELM, "show", "chart", pulled / chart.name).stdout)
    assert (shown["version"], shown["appVersion"]) == (VERSION, VERSION)
