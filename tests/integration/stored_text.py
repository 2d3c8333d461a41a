"""Everything a service's database holds, as one text: what a test searches for a secret
or a personal value that must never be stored in clear."""

from __future__ import annotations

import sqlalchemy as sa
from healthledger.adapters.composition import Service


def stored_text(svc: Service) -> str:
    """Every row of every table, each as its repr."""
    with svc.db.read() as conn:
        tables = sa.inspect(conn).get_table_names()
        return " ".join(
            str(row)
            for table in tables
            for row in conn.execute(sa.text(f'SELECT * FROM "{table}"'))
        )
