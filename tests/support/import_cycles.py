"""An import-linter contract type, `acyclic`: no module of `packages` imports itself back, through
any chain of imports. The `layers` contracts order the modules they name; this one covers every
module, named or not, at any depth (pyproject.toml registers it).

Each group of modules that import one another (a strongly connected component of the import
graph) breaks the contract; the report shows one loop through each group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class AcyclicContract(Contract):
    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        packages = tuple(self.packages)  # type: ignore[arg-type]
        modules = {m for m in graph.modules if m in packages or m.startswith(tuple(p + "." for p in packages))}
        imports = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
        loops = [loop_through(group, imports) for group in import_groups(imports)]
        return ContractCheck(kept=not loops, metadata={"loops": loops})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for loop in check.metadata["loops"]:
            output.print_error("These modules import each other: " + " -> ".join(loop), bold=False)
            output.new_line()


def import_groups(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The groups of two or more modules that import one another, each sorted (Tarjan's
    strongly connected components, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            child = next(pending, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(imports[child]))))
            elif child in on_stack:
                low[module] = min(low[module], index[child])
    return sorted(groups)


def loop_through(group: list[str], imports: Mapping[str, Set[str]]) -> list[str]:
    """One loop of imports through the group's first module, back to it (shortest, by breadth)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for imported in sorted(imports[module] & members):
                if imported == start:
                    loop = [start]
                    while module != start:
                        loop.insert(1, module)
                        module = came_from[module]
                    return loop + [start]
                if imported not in came_from:
                    came_from[imported] = module
                    following.append(imported)
        frontier = following
    raise AssertionError(f"{group} is not a group of modules importing one another")
