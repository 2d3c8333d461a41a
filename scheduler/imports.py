"""The import job the scheduler wakes: run the uploaded exports whose import is due
(domain/connections/imports.py). An upload's `Received` wakes it at once; its interval
finds the imports that a restart or another process's crash left due."""

from __future__ import annotations

from healthledger.domain.connections.imports import DataImport, Imports


def makes_an_import_due(event: object) -> bool:
    """Whether a committed event gives the import worker work at once: an upload."""
    return isinstance(event, DataImport.Received)


def run_due_imports(imports: Imports) -> int:
    """Run the imports that are due; how many this worker ran."""
    return imports.run_due()
