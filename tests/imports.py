"""What a module imports, read from its source: the import-boundary tests' one way to see
a dependency, whether the import sits at the top, inside a function or under
TYPE_CHECKING (each is a dependency a reader has to follow)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path, package: str) -> list[str]:
    """Every module `path` imports, absolute (relative imports resolved against `package`,
    the package that holds the module)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            # `from x import y` imports x, and y may be a module of it: x.y names both.
            found.extend(f"{base}.{alias.name}" for alias in node.names)
    return found


def package_of(path: Path, root: Path, root_package: str) -> str:
    """The dotted package that holds `path` (a module under `root`, which is
    `root_package`): a package's `__init__.py` is held by the package itself."""
    parts = list(path.relative_to(root).parent.parts)
    return ".".join([root_package, *parts])
