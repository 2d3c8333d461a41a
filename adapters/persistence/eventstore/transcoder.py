"""The ledger's transcoder: eventsourcing's JSON transcoder, with its transcodings found
by the value's class or one of its base classes, and the transcoding of dates.

freezegun's FakeDatetime (and FakeDate) are subclasses of datetime (and date): an
exact-type lookup, eventsourcing's, refuses to store them, so frozen-time tests could
not save. What is written is what eventsourcing's transcoder writes for the same value
(a test holds the two to the same bytes).
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from eventsourcing.persistence import (
    JSONTranscoder,
    Transcoding,
    TranscodingNotRegisteredError,
)


class DateAsISO(Transcoding):
    type = date
    name = "date_iso"

    def encode(self, obj: date) -> str:
        return obj.isoformat()

    def decode(self, data: str) -> date:
        return date.fromisoformat(data)


class LedgerTranscoder(JSONTranscoder):
    def __init__(self) -> None:
        super().__init__()
        # eventsourcing's encoder (the same options), with its default hook replaced.
        self.encoder = json.JSONEncoder(
            default=self.transcoded, separators=(",", ":"), ensure_ascii=False
        )
        self.register(DateAsISO())

    def transcoded(self, value: Any) -> dict[str, Any]:
        """What the JSON encoder writes for a value it cannot write itself: the
        `{"_type_": name, "_data_": data}` of the transcoding registered for the value's
        class, or else for the nearest of its base classes."""
        transcoding = self.types.get(type(value))  # nearly always: the class itself
        if transcoding is None:
            for cls in type(value).__mro__[1:]:
                transcoding = self.types.get(cls)
                if transcoding is not None:
                    break
        if transcoding is not None:
            return {"_type_": transcoding.name, "_data_": transcoding.encode(value)}
        raise TranscodingNotRegisteredError(
            f"Object of type {type(value)} is not serializable. Please define and "
            "register a custom transcoding for this type."
        )
