"""Events whose facts the domain reads in clear and the log holds only sealed (ADR 0032).

A connection's provider and resource availability, a resource feed's provider and
resource, are health facts (a glucose monitor says the person is diabetic), yet the pull
engine, the dispatcher and the answers read them on every step. Rather than carrying
ciphertext through the domain, an event declares them (`SEALED_FACTS`) and this mapper
stores them together, sealed with the stream owner's data key, under `sealed_facts`;
reading the record back opens them. Once the owner's key is destroyed they read as what
the event declares for an erased fact (the placeholder, an empty availability), and no
key is ever made to seal for someone who has none: the record then holds the
placeholder itself (what a redaction of an erased user's old record writes, ADR 0028).

Mostly founding events hold such facts (a connection's, a feed's, a link token's, an
OAuth flow's, a sign-in's, a delivery's), besides a few later ones (a reconnection, a
feed's pulls and syncs, a maker's notice, a demo device's failures), so a replay opens a
few values per stream, and the aggregate cache (ADR 0011) keeps the result. An event
keeps its sealed form in `sealed_facts` beside the opened facts (set on the event being
recorded, too): what the read models hold, copied from the log.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, Mapper, StoredEvent, UUIDAsHex
from healthledger.adapters.persistence.eventstore.transcoder import LedgerTranscoder
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher, canonical_json
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from sqlalchemy import select

# The stored field that holds an event's sealed facts.
SEALED_FACTS_FIELD = "sealed_facts"


def sealed_facts_of(event: Any) -> str | None:
    """The sealed form of the facts an event declares, as its record holds it: what a
    read model copies (set by the mapper on the event it records or reads); None for an
    old version that held them in clear (until the start redacts it)."""
    sealed = vars(event).get(SEALED_FACTS_FIELD)
    return None if sealed is None else str(sealed)


class FactKeys(Protocol):
    """The owner's data key, as the mapper uses it: never made here."""

    def seal_fact(self, user_id: UUID, value: Any) -> str | None:
        """`value` sealed with the user's key; None when the user has none (erased)."""
        ...

    def open_fact(self, user_id: UUID, sealed: str) -> Any | None:
        """The value; None when the user's key is gone."""
        ...


class NoFactKeys(Exception):
    """A defect: a ledger built without keys (the webhook receiver's mirror, a bare
    test ledger) was asked to store an event whose facts are sealed."""


class FactSealingMapper(Mapper[UUID]):
    """eventsourcing's mapper, sealing and opening the facts events declare."""

    facts: FactKeys | None = None

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        declared = getattr(type(domain_event), "SEALED_FACTS", None)
        if not declared:
            return super().to_stored_event(domain_event)
        if self.facts is None:
            raise NoFactKeys(f"{type(domain_event).__qualname__}: no keys to seal its facts")
        state = dict(vars(domain_event))
        clear = {name: state.pop(name) for name in declared}
        # An event about no user (a team-level webhook delivery) has no key to seal with:
        # it holds the placeholder, and keeps in clear elsewhere what is not personal.
        owner = state["user_id"]
        sealed = None if owner is None else self.facts.seal_fact(owner, sealable_facts(clear))
        state[SEALED_FACTS_FIELD] = ERASED_PLACEHOLDER if sealed is None else sealed
        # The event being recorded keeps its sealed form too: the projections copy the
        # log's own ciphertext into the read models, so that a rebuild makes the same
        # rows (the read models' check compares them byte for byte).
        vars(domain_event)[SEALED_FACTS_FIELD] = state[SEALED_FACTS_FIELD]
        # The same event with its facts replaced: what the base class encodes (a copy, its
        # attributes then the stored state's: its fields are not the dataclass's any more).
        stand_in = copy.copy(domain_event)
        vars(stand_in).clear()
        vars(stand_in).update(state)
        return super().to_stored_event(stand_in)

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        event = super().to_domain_event(stored_event)
        declared = getattr(type(event), "SEALED_FACTS", None)
        if declared:
            # `sealed_facts` stays on the event beside the facts opened from it.
            state = vars(event)
            sealed = state[SEALED_FACTS_FIELD]
            opened = None
            if sealed != ERASED_PLACEHOLDER and self.facts is not None:
                opened = opened_facts(self.facts.open_fact(state["user_id"], sealed))
            # Without the key (or without keys at all: a replay's copy holds none), each
            # fact reads as the event declares an erased one.
            if opened is None:
                opened = {name: _fresh(erased) for name, erased in declared.items()}
            state.update(opened)
        return event


# How facts are written inside their seal: the log's own encoding, so that a fact JSON has
# no form for (a pull's window, a sync's days) is sealed as the record would hold it in
# clear. Facts JSON writes as they are (a provider, an availability) are sealed unchanged,
# so the values sealed before dates were (and the read models' copies) open the same.
_FACTS_TRANSCODER = LedgerTranscoder()
# The transcodings the application registers on the log's transcoder (eventsourcing's
# Application.register_transcodings): a datetime must not be taken for a date.
for _transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
    _FACTS_TRANSCODER.register(_transcoding)


def sealable_facts(facts: dict[str, Any]) -> Any:
    """The facts as the JSON value a user's cipher seals."""
    return json.loads(_FACTS_TRANSCODER.encode(facts))


def opened_facts(value: Any | None) -> dict[str, Any] | None:
    """`sealable_facts`' value, opened (None: the key is gone), back as the facts: what a
    read of a read model's sealed copy uses too."""
    return None if value is None else dict(_FACTS_TRANSCODER.decode(canonical_json(value)))


def _fresh(value: Any) -> Any:
    """An erased fact's value, not shared between events (an availability is a dict, a
    notice's resources a list)."""
    return value.copy() if isinstance(value, dict | list) else value


class StoredKeys:
    """`FactKeys` over the key store: the user's stored key (or the new key of a user
    being created in this process), never a key made for someone who has none."""

    def __init__(self, key_store: KeyStore) -> None:
        self.key_store = key_store
        # A batch's users' keys read at once (`preloaded`), per thread.
        self._batch = threading.local()

    @contextmanager
    def preloaded(self, user_ids: Collection[UUID]) -> Iterator[None]:
        """Within it, on this thread, these users' facts are sealed and opened with their
        keys read in one query, not one read (and unwrap) per event: a round of the
        webhook outbox records, and a broker publisher's round loads, hundreds of
        deliveries (issue 35). A user without a key (erased) seals and opens nothing, as
        at a read per event made when the batch began."""
        wanted = set(user_ids) - set(self.key_store.new_keys)
        if not wanted or getattr(self._batch, "ciphers", None) is not None:
            yield  # nothing to read, or within an outer batch (its keys stand)
            return
        keys = self.key_store.tables.keys
        with self.key_store.db.read() as conn:
            rows = conn.execute(
                select(keys.c.user_id, keys.c.wrapped_key).where(keys.c.user_id.in_(wanted))
            ).all()
        ciphers: dict[UUID, UserCipher | None] = dict.fromkeys(wanted)
        for row in rows:
            ciphers[row.user_id] = self.key_store.cipher_of(row.user_id, bytes(row.wrapped_key))
        self._batch.ciphers = ciphers
        try:
            yield
        finally:
            self._batch.ciphers = None

    def _cipher(self, user_id: UUID) -> UserCipher | None:
        new_key = self.key_store.new_keys.get(user_id)
        if new_key is not None:
            return UserCipher(user_id, new_key)
        batch: dict[UUID, UserCipher | None] | None = getattr(self._batch, "ciphers", None)
        if batch is not None and user_id in batch:
            return batch[user_id]
        return self.key_store.cipher(user_id)

    def seal_fact(self, user_id: UUID, value: Any) -> str | None:
        cipher = self._cipher(user_id)
        return None if cipher is None else cipher.seal(value)

    def open_fact(self, user_id: UUID, sealed: str) -> Any | None:
        cipher = self._cipher(user_id)
        return None if cipher is None else cipher.open(sealed)


def keys_preloaded(
    mapper: Mapper[UUID], user_ids: Collection[UUID]
) -> AbstractContextManager[None]:
    """`StoredKeys.preloaded` of a ledger's mapper (nothing for one without stored keys:
    a bare test ledger, the receiver's mirror)."""
    facts = getattr(mapper, "facts", None)
    if isinstance(facts, StoredKeys):
        return facts.preloaded(user_ids)
    return nullcontext()
