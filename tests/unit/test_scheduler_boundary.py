"""The scheduler depends on the domain only: the composition root (an adapter) wires it,
and its jobs take the ports they need. An import of an adapter from `scheduler/` would
bring back the cycle between the two."""

from __future__ import annotations

import sys
from pathlib import Path

import healthledger.scheduler

from tests.imports import imported_modules

# What a scheduler module may import, besides the standard library.
ALLOWED = ("healthledger.domain", "healthledger.scheduler", "apscheduler")
PACKAGE = "healthledger.scheduler"


def allowed(module: str) -> bool:
    if module == "__future__" or module.split(".")[0] in sys.stdlib_module_names:
        return True
    return any(module == root or module.startswith(root + ".") for root in ALLOWED)


def test_the_scheduler_imports_the_domain_and_never_an_adapter() -> None:
    (folder,) = (Path(p) for p in healthledger.scheduler.__path__)
    modules = sorted(folder.rglob("*.py"))
    assert {m.stem for m in modules} >= {"runner", "pulls", "erasure", "webhooks"}
    bad = {
        f"{path.relative_to(folder)}: {module}"
        for path in modules
        for module in imported_modules(path, PACKAGE)
        if not allowed(module)
    }
    assert bad == set()


def test_the_check_sees_an_adapter_import_in_every_form(tmp_path: Path) -> None:
    module = tmp_path / "job.py"
    module.write_text(
        "import healthledger.adapters.composition\n"
        "from healthledger.adapters.composition import Service\n"
        "from healthledger import adapters\n"
        "from .. import adapters as relative\n"
        "def late():\n"
        "    from ..adapters.settings import Settings\n"
    )
    found = [m for m in imported_modules(module, PACKAGE) if not allowed(m)]
    assert found == [
        "healthledger.adapters.composition",
        "healthledger.adapters.composition.Service",
        "healthledger.adapters",
        "healthledger.adapters",
        "healthledger.adapters.settings.Settings",
    ]
    assert allowed("healthledger.domain.ledger.Clock") and allowed("__future__.annotations")
