"""Databases the migration tests start from or compare with: the dumps main wrote before
migrations (tests/data), loaded into PostgreSQL with psql as a person would restore them,
and what autogenerate finds between a migrated database and the tables' metadata.

Plain functions, imported by the migration, audit and today's-main tests."""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from healthledger.adapters.persistence.engine.migrating import MigrationLine

# Databases written by main at bccbead, before migrations (docs/architecture.md, tests).
LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy_main"


def load_dump(url: str, dump: Path) -> None:
    """Run a gzipped SQL dump into the PostgreSQL database of `url` through psql (a dump's
    COPY blocks and backslash commands are psql's, not a driver's)."""
    target = sa.make_url(url)
    command = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target.database or ""]
    for flag, value in (("-h", target.host), ("-p", target.port), ("-U", target.username)):
        if value is not None:
            command += [flag, str(value)]
    env = {"PGPASSWORD": target.password} if target.password else {}
    with gzip.open(dump) as sql:
        subprocess.run(
            command,
            input=sql.read(),
            check=True,
            capture_output=True,
            env={**os.environ, **env},
        )


def schema_differences(url: str, line: MigrationLine, target: sa.MetaData) -> list[Any]:
    """What autogenerate would write in a new revision of `line`: nothing, if the
    migrations make exactly the metadata's schema."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": line.version_table})
            return list(compare_metadata(context, target))
    finally:
        engine.dispose()
