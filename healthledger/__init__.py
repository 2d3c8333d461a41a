"""healthledger: an event-sourced user lifecycle and compliance engine for a health-data,
device-linking and lab-testing API (README.md).

The code lives in three subpackages, `healthledger.domain`, `healthledger.adapters` and
`healthledger.scheduler` (ADR 0004). This module only gives embedders the short import:

    from healthledger import HealthLedger

`HealthLedger` is imported when first asked for (PEP 562), not with the package: importing
`healthledger.domain` must not build the service's imports (FastAPI, SQLAlchemy...).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

# In a source tree (a checkout, or a copy of one: a benchmark's baseline tree), the three
# subpackages are the folders beside this one, and they are this tree's, whatever else an
# editable install maps `healthledger.*` to. An installed wheel has them inside this
# folder, and no pyproject.toml above it.
_TREE = Path(__file__).resolve().parent.parent
if (_TREE / "pyproject.toml").is_file() and (_TREE / "domain" / "ledger.py").is_file():
    __path__.append(str(_TREE))

if TYPE_CHECKING:
    from healthledger.adapters.embedded import HealthLedger

__all__ = ["HealthLedger"]


def __getattr__(name: str) -> Any:
    if name == "HealthLedger":
        from healthledger.adapters.embedded import HealthLedger

        return HealthLedger
    raise AttributeError(f"module 'healthledger' has no attribute {name!r}")
