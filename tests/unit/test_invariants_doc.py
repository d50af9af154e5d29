"""docs/invariants.md stays true: every invariant (1-15) has its section, and every test and
every piece of code it cites still exists.

Read with `ast`, not by importing or collecting: no test module is imported, so this runs in
milliseconds and does not need the services the other tiers start.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "invariants.md"
PACKAGE = ROOT / "operator" / "ironic_shard_operator"
INVARIANTS = list(range(1, 16))

SECTION = re.compile(r"^## (\d+)\. ", re.M)
# A test as a pytest node id; a parametrized test may be cited with or without its parameters.
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+(?:::\w+)?)(\[[^\]`]*\])?`")
# Code under operator/ironic_shard_operator/: a module, or a name in it (`Class.method`).
CODE_REF = re.compile(r"`((?:core|adapters|controller|testing)/[\w/]+\.py)(?:::([\w.]+))?`")
NOT_YET = re.compile(r"not yet enforced", re.I)
NOT_YET_WITH_ISSUE = re.compile(r"not yet enforced: issue \d+", re.I)


def sections() -> dict[int, str]:
    """Invariant number -> the text of its section (up to the next heading of any section)."""
    text = DOC.read_text()
    found = {}
    for match in SECTION.finditer(text):
        rest = text[match.end():]
        end = re.search(r"^## ", rest, re.M)
        found[int(match.group(1))] = rest[:end.start()] if end else rest
    return found


def defined_tests(path: Path) -> set[str]:
    """The test functions pytest collects from `path`: module-level `test_*` functions and
    `test_*` methods of `Test*` classes (as `Class::test_x`)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.Assign):  # a hypothesis state machine's TestCase: `test_x = Machine.TestCase`
            names |= {t.id for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("test")}
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and item.name.startswith("test")}
    return names


def defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Functions, classes and assigned names defined directly in `body`."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def resolves(module: Path, dotted: str) -> bool:
    """Whether `dotted` (`name` or `Class.attribute`) is defined in `module`."""
    scope: list[ast.stmt] = ast.parse(module.read_text()).body
    for part in dotted.split("."):
        node = defined_names(scope).get(part)
        if node is None:
            return False
        scope = node.body if isinstance(node, ast.ClassDef) else []
    return True


def test_every_invariant_has_a_section_in_order():
    assert DOC.exists(), "docs/invariants.md is missing"
    numbers = [int(n) for n in SECTION.findall(DOC.read_text())]
    assert numbers == INVARIANTS, f"sections found: {numbers}; expected one per invariant 1-11, in order"


def test_every_invariant_cites_a_test_and_every_gap_names_its_issue():
    for number, text in sections().items():
        assert TEST_ID.search(text), f"invariant {number} cites no test"
        gaps, named = len(NOT_YET.findall(text)), len(NOT_YET_WITH_ISSUE.findall(text))
        assert gaps == named, f"invariant {number}: say 'Not yet enforced: issue N' for each gap"


def test_every_cited_test_exists():
    text = DOC.read_text()
    cited = TEST_ID.findall(text)
    assert len(cited) == len(re.findall(r"`tests/[^`]*::[^`]*`", text)), \
        "a test citation is not a node id (`tests/<path>.py::<test name>`)"
    missing = []
    known: dict[str, set[str]] = {}
    for path, name, _params in cited:
        file = ROOT / path
        if path not in known:
            known[path] = defined_tests(file) if file.exists() else set()
        if name not in known[path]:
            missing.append(f"{path}::{name}")
    assert not missing, "docs/invariants.md cites tests that do not exist (renamed or removed?): " \
        + ", ".join(sorted(set(missing)))


def test_every_cited_piece_of_code_exists():
    missing = []
    for path, dotted in CODE_REF.findall(DOC.read_text()):
        module = PACKAGE / path
        if not module.exists():
            missing.append(path)
        elif dotted and not resolves(module, dotted):
            missing.append(f"{path}::{dotted}")
    assert not missing, "docs/invariants.md cites code that does not exist (moved or renamed?): " \
        + ", ".join(sorted(set(missing)))
