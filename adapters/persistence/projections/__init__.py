"""Read models: projections of the event log into the SQL tables the API reads, one
module per context (`users`, `teams`, `connections`, `webhooks`), one entry point
(`read_models.ReadModels`), and the write-time erasure effects (`erasure`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection

# What a context's module gives the read models: per event class, what writes its rows
# in the transaction that stores the event.
Handlers = Mapping[type, Callable[[Connection, Any], None]]
