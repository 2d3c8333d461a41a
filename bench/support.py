"""What several benchmarks share: timing a side's turns, and fresh PostgreSQL schemas.

Imported as `support` (`python bench/<name>.py` puts bench/ first on sys.path)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote

import sqlalchemy as sa


@dataclass
class Clocks:
    """Wall and CPU time spent by one side, summed over its timed blocks."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def time(self, run: Callable[[int], None], indexes: range) -> None:
        cpu_start = time.process_time()
        start = time.perf_counter()
        for i in indexes:
            run(i)
        self.seconds += time.perf_counter() - start
        self.cpu_seconds += time.process_time() - cpu_start


@contextlib.contextmanager
def fresh_schema(url: str, prefix: str) -> Iterator[str]:
    """A new schema in `url`'s database; `url` with that schema first on the search path.
    Dropped afterwards."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        separator = "&" if "?" in url else "?"
        yield f"{url}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL as psycopg's connection string."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
