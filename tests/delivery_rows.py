"""Webhook deliveries' read-model rows as a test reads them: the rows hold their event
types sealed with the users' keys (ADR 0028), so each gets `event_type` opened as the
sender opens it."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from healthledger.adapters.composition import Service


def with_types(svc: Service, rows: Sequence[Any]) -> list[SimpleNamespace]:
    """The rows with `event_type` (None where the user's key is gone)."""
    types = svc.dispatcher.payloads.event_types(rows)
    return [
        SimpleNamespace(**row._mapping, event_type=found)
        for row, found in zip(rows, types, strict=True)
    ]
