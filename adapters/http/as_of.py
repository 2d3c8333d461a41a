"""The `as_of` query parameter of the team API's reads: answer as the same call answered
at that instant, from the log (`adapters/compliance/time_travel.py`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from healthledger.adapters.compliance.time_travel import INSTANT_EXAMPLE, parse_instant
from pydantic import BeforeValidator

# Longer than any ISO 8601 instant (with microseconds and an offset).
_MAX_LENGTH = 64


def _instant(value: Any) -> datetime | None:
    # Only the ISO 8601 text: pydantic's own datetime parsing would also take a number
    # (Unix time) or an instant without an offset (which instant is that?).
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > _MAX_LENGTH:
        raise ValueError(f"an instant is ISO 8601 with an offset, e.g. {INSTANT_EXAMPLE}")
    return parse_instant(value)


# An instant in a query parameter, for every route that takes one (`as_of`, the audit's
# `start` and `end`).
Instant = Annotated[datetime | None, BeforeValidator(_instant)]

AsOf = Annotated[
    Instant,
    Query(
        description="Ours: answer as this call answered at this instant (ISO 8601, with an "
        "offset), from the event log; a future instant is refused. Personal values erased "
        "since show as `<personal data: erased>`.",
        examples=[INSTANT_EXAMPLE],
    ),
]
