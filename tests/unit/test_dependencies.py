"""pyproject.toml says why each runtime dependency is there and which modules import it: that
comment stays true. Every third-party module the package imports is a declared dependency, and
each dependency's comment names exactly the package's modules that import it."""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "ironic_shard_operator"


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them (prometheus_client = prometheus-client)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, str]:
    """Each runtime dependency's distribution name -> its comment."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    found = {}
    for line in block.splitlines():
        match = re.match(r'\s*"([A-Za-z0-9_.-]+)[^"]*",\s*(?:#\s*(.*))?$', line)
        if match:
            found[normalized(match[1])] = match[2] or ""
    return found


def importers() -> dict[str, set[str]]:
    """Distribution name -> the package's modules (paths under the package) importing it."""
    distributions = {module: [normalized(d) for d in dists] for module, dists in packages_distributions().items()}
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "ironic_shard_operator":
                    continue
                for distribution in distributions.get(top, [f"<not installed: {top}>"]):
                    found[distribution].add(str(path.relative_to(PACKAGE)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    assert sorted(set(importers()) - set(declared())) == []


def test_each_dependency_comment_names_exactly_the_modules_that_import_it():
    used = importers()
    for distribution, comment in declared().items():
        named = set(re.findall(r"[\w/]+\.py", comment))
        assert comment.split(":")[0].strip(), f"{distribution}: no reason given"
        assert named == used.get(distribution, set()), f"{distribution}: the comment names {sorted(named)}"
