"""What makes a build reproducible, checked without building (tests/integration/test_release.py
builds): one version everywhere, a base image pinned by digest, every Python dependency of the
image pinned by hash and installed with --require-hashes, a CHANGELOG section per version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
LOCK = REPO / "requirements" / "image.lock"
DOCKERFILE = (REPO / "Dockerfile").read_text()


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, list[str]]:
    """{package: its hashes} of requirements/image.lock."""
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", LOCK.read_text(), flags=re.I):
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if match:
            out[normal(match.group(1))] = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
    return out


def test_the_chart_and_the_changelog_carry_pyprojects_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "ironic-shard-operator" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    assert re.search(rf"^## {re.escape(VERSION)}\b", (REPO / "CHANGELOG.md").read_text(), flags=re.M)


def test_the_base_image_is_pinned_by_digest() -> None:
    [default] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, flags=re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", default)
    assert re.findall(r"^FROM (\S+)", DOCKERFILE, flags=re.M) == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_every_dependency_of_the_image_is_pinned_by_hash_and_installed_with_require_hashes() -> None:
    packages = locked()
    assert all(packages.values()), [name for name, hashes in packages.items() if not hashes]
    wanted = {normal(re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]) for dep in PYPROJECT["project"]["dependencies"]}
    assert wanted <= set(packages)
    install = re.search(r"install --require-hashes[^\n]*\\\n\s*-r requirements/image.lock", DOCKERFILE)
    assert install, "the Dockerfile installs the lock with --require-hashes"
    assert "COPY requirements/image.lock" in DOCKERFILE
    assert "!requirements/image.lock" in (REPO / ".dockerignore").read_text().splitlines()
    # our own wheel adds nothing: no dependency, no build environment downloaded
    assert "pip wheel --no-deps --no-build-isolation" in DOCKERFILE
    assert "install --no-deps --no-index /wheels/*.whl" in DOCKERFILE


def test_the_krew_short_description_names_what_kubectl_ics_does_in_what_krew_search_shows() -> None:
    """`kubectl krew search` cuts a shortDescription to 50 characters; the plugin's commands
    (an undoing command, unfence or resume, goes with the one it undoes) are all named within."""
    from ironic_shard_operator.kubectl_ics import COMMANDS

    [short] = re.findall(r"^\s*shortDescription: (.+)$", (REPO / "hack" / "release.sh").read_text(), flags=re.M)
    assert len(short) <= 50, short
    named = set(re.findall(r"[a-z]+", short.lower()))
    assert set(COMMANDS) - {"unfence", "resume"} <= named, short
