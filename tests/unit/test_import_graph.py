"""The import boundaries of issue 27, checked on the source: no cycle between the adapter
packages (each can be read, and changed, from the ones it depends on down), and the users
context reaches no other context (a user's deletion cascades through the port that the
other contexts implement, wired by the composition root)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import healthledger.adapters
import healthledger.domain

from tests.imports import imported_modules, package_of

ADAPTERS = "healthledger.adapters"
DOMAIN = "healthledger.domain"


def folder_of(package: object) -> Path:
    (folder,) = (Path(p) for p in package.__path__)  # type: ignore[attr-defined]
    return folder


def top_level(module: str, root: str) -> str | None:
    """The part of `root` that `module` belongs to: `healthledger.adapters.http.users`
    belongs to `http`, `healthledger.adapters.cli` to `cli`; None outside `root` (or for
    `root` itself, which holds nothing)."""
    if not module.startswith(root + "."):
        return None
    return module[len(root) + 1 :].split(".")[0]


def dependencies(folder: Path, root: str) -> dict[str, set[str]]:
    """Each part of `root` (a subpackage or a loose module) and the other parts it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        part = relative.parts[0].removesuffix(".py")
        if part == "__init__":
            continue
        targets = graph.setdefault(part, set())
        for module in imported_modules(path, package_of(path, folder, root)):
            target = top_level(module, root)
            if target is not None and target != part:
                targets.add(target)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's algorithm):
    each is a set of parts that import one another round a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycle_between_adapter_packages() -> None:
    graph = dependencies(folder_of(healthledger.adapters), ADAPTERS)
    # The scan sees the packages the map names, and the edges that make the layers.
    assert {"persistence", "http", "compliance", "answers", "operations", "composition"} <= set(
        graph
    )
    assert "persistence" in graph["http"]
    assert cycles(graph) == []


def test_the_users_context_imports_no_other_context() -> None:
    domain = folder_of(healthledger.domain)
    contexts = {p.name for p in domain.iterdir() if (p / "__init__.py").exists()}
    assert {"users", "connections", "labs", "webhooks", "teams"} <= contexts
    users = domain / "users"
    reached = {
        f"{path.name}: {module}"
        for path in sorted(users.rglob("*.py"))
        for module in imported_modules(path, package_of(path, domain, DOMAIN))
        if top_level(module, DOMAIN) in contexts - {"users"}
    }
    assert reached == set()


def test_the_cycle_check_finds_a_cycle_and_only_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_scan_sees_every_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "http"
    package.mkdir()
    (package / "routes.py").write_text(
        "from ..persistence import queries\n"
        "def later() -> None:\n"
        "    import healthledger.adapters.compliance.audit\n"
    )
    (tmp_path / "persistence.py").write_text("from .http import routes\n")
    graph = dependencies(tmp_path, ADAPTERS)
    assert graph == {"http": {"persistence", "compliance"}, "persistence": {"http"}}
    assert cycles(graph) == [["http", "persistence"]]
