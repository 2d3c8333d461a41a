"""The distribution ships every package: `pip install .` (the README's first command) is
not editable, so a package missing from pyproject's list would import in development and
fail in production."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found == listed


def test_the_facade_imports_from_the_package_itself_and_only_when_asked() -> None:
    """`from healthledger import HealthLedger` (issue 34), without making every import of
    `healthledger.domain` build the service's imports."""
    import subprocess
    import sys

    script = (
        "import sys, healthledger.domain.errors\n"
        "assert 'healthledger.adapters.embedded' not in sys.modules\n"
        "from healthledger import HealthLedger\n"
        "from healthledger.adapters.embedded import HealthLedger as Facade\n"
        "assert HealthLedger is Facade\n"
        "try:\n"
        "    from healthledger import Nothing\n"
        "except ImportError:\n"
        "    print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd="/", check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
