"""The event-sourced application every use case writes through: one log, one outbox.

The recorder is injected by the composition root (an adapter); the ledger hands it the
domain events next to their stored form, so that read models and erasure effects are
written in the same transaction as the events that cause them.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from copy import deepcopy
from datetime import UTC, date, datetime
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar
from uuid import UUID

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    Repository,
)
from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    InfrastructureFactory,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    Tracking,
    Transcoder,
    Transcoding,
    UUIDAsHex,
)
from eventsourcing.utils import get_topic
from healthledger.domain.identifiers import uuid_hex
from healthledger.domain.timestamps import iso_text
from healthledger.domain.users.user import ERASED, CheapCopy, User

Clock = Callable[[], datetime]


class LogMark(Protocol):
    """The unit of work's reading of the log's "changed by another writer" counter
    (`LedgerRepository`), taken at the first call if none was; with `existing`, only a
    reading taken before the call (None if there is none)."""

    def __call__(self, *, existing: bool = False) -> Hashable | None: ...


def no_log_mark(*, existing: bool = False) -> None:
    return None


def utc_now() -> datetime:
    return datetime.now(UTC)


class DateAsISO(Transcoding):
    type = date
    name = "date_iso"

    def encode(self, obj: date) -> str:
        return obj.isoformat()

    def decode(self, data: str) -> date:
        return date.fromisoformat(data)


class LedgerTranscoder(JSONTranscoder):
    """eventsourcing's JSON transcoder, with two differences; what it writes is the same
    (a test holds the two to the same bytes).

    A transcoding is found by the value's class or any base class: freezegun's
    FakeDatetime (and FakeDate) are subclasses of datetime (and date); an exact-type
    lookup would refuse to store them, so frozen-time tests could not save.

    And it is quicker. A dict (an event's state, a snapshot's) is written field by
    field: a string by the C escaper the JSON encoder itself uses, None as null, and a
    value of a type whose transcoding writes plain text (`_PLAIN_TEXT`: UUIDs,
    datetimes, dates) straight into its `{"_type_":...,"_data_":"..."}` wrapper; any
    other value (numbers, lists, dicts, a subclass such as FakeDatetime) goes to the C
    encoder `json.JSONEncoder.encode` would make, made once. eventsourcing's path called
    a Python hook per UUID or datetime, which made a dict for the C encoder to walk: a
    stored event cost about 65,000 instructions, two thirds of them that. (A function
    compiled per event class, with no loop, measured no cheaper than this loop: the
    cost is in the values.) An event's state holds no cycles: the circular-reference
    check is left out.
    """

    def __init__(self) -> None:
        super().__init__()
        # Per type: the transcoding's name and encode function (`register`).
        self._encoders: dict[type, tuple[str, Callable[[Any], Any]]] = {}
        # Per exact type whose transcoding writes plain text (`_PLAIN_TEXT`): the
        # wrapper's text up to the data's opening quote, and what writes the data.
        self._plain: dict[type, tuple[str, Callable[[Any], str]]] = {}
        # Per key of a dict: its JSON text with the colon (keys are attribute names, a
        # small set; `_KEYS_KEPT` bounds it all the same).
        self._keys: dict[str, str] = {}
        c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
        self._iterencode: Callable[[Any, int], Any] | None = None
        if c_make_encoder is not None:  # CPython's _json accelerator is present
            self._iterencode = c_make_encoder(
                None,  # markers: no circular check
                self._encode_obj,
                encode_basestring,  # ensure_ascii=False
                None,  # indent
                ":",
                ",",
                False,  # sort_keys
                False,  # skipkeys
                True,  # allow_nan
            )

    def register(self, transcoding: Transcoding) -> None:
        super().register(transcoding)
        plain = _PLAIN_TEXT.get(type(transcoding))
        encode = transcoding.encode if plain is None else plain
        self._encoders[transcoding.type] = (transcoding.name, encode)
        if plain is None:
            self._plain.pop(transcoding.type, None)
        else:
            opening = '{"_type_":' + encode_basestring(transcoding.name) + ',"_data_":"'
            self._plain[transcoding.type] = (opening, plain)

    def encode(self, obj: Any) -> bytes:
        iterencode = self._iterencode
        if iterencode is None:
            return super().encode(obj)
        if type(obj) is not dict:
            return "".join(iterencode(obj, 0)).encode()
        keys, plain = self._keys, self._plain
        fields: list[str] = []
        for key, value in obj.items():
            key_text = keys.get(key)
            if key_text is None:
                if type(key) is not str:
                    return "".join(iterencode(obj, 0)).encode()
                key_text = encode_basestring(key) + ":"
                if len(keys) < _KEYS_KEPT:
                    keys[key] = key_text
            kind = type(value)
            if kind is str:
                fields.append(key_text + encode_basestring(value))
            elif value is None:
                fields.append(key_text + "null")
            else:
                wrapper = plain.get(kind)
                if wrapper is None:
                    fields.append(key_text + "".join(iterencode(value, 0)))
                else:
                    fields.append(key_text + wrapper[0] + wrapper[1](value) + '"}')
        return ("{" + ",".join(fields) + "}").encode()

    def _encode_obj(self, o: Any) -> dict[str, Any]:
        # The value's own class first (every UUID and datetime of every event), then its
        # bases.
        found = self._encoders.get(type(o))
        if found is None:
            for cls in type(o).__mro__[1:]:
                found = self._encoders.get(cls)
                if found is not None:
                    break
            else:
                return super()._encode_obj(o)
        return {"_type_": found[0], "_data_": found[1](o)}


_KEYS_KEPT = 1024


# eventsourcing's transcodings whose data is plain text that needs no JSON escaping
# (hex digits; digits, "-", ":", "T", "." and "+"), and what writes that text: the
# remembered UUID hex (`uuid_hex`), the command's ISO text made once (`iso_text`), a
# date's C `isoformat`. Their own `encode` methods write the same text, less directly.
_PLAIN_TEXT: dict[type[Transcoding], Callable[[Any], str]] = {
    UUIDAsHex: uuid_hex,
    DatetimeAsISO: iso_text,
    DateAsISO: date.isoformat,
}


class LedgerMapper(Mapper[UUID]):
    """eventsourcing's `Mapper`, with each event class's topic and class version looked
    up once, and the `StoredEvent` made without its frozen dataclass `__init__` (four
    `object.__setattr__` calls, half its cost): the same four attributes, set in its
    `__dict__`. What it stores is the same (a test holds it to eventsourcing's own)."""

    def __init__(self, transcoder: Transcoder) -> None:
        super().__init__(transcoder)
        self._classes: dict[type, tuple[str, int]] = {}

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        cls = type(domain_event)
        known = self._classes.get(cls)
        if known is None:
            known = self._classes[cls] = (get_topic(cls), getattr(cls, "class_version", 1))
        topic, class_version = known
        state = domain_event.__dict__.copy()
        originator_id = state.pop("originator_id")
        originator_version = state.pop("originator_version")
        if class_version > 1:
            state["class_version"] = class_version
        stored = _new_stored_event(StoredEvent)
        stored.__dict__.update(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=topic,
            state=self.transcoder.encode(state),
        )
        return stored


_new_stored_event = object.__new__


class LedgerRepository(Repository[UUID]):
    """eventsourcing's repository, plus the aggregates this ledger knows to be current.

    The cache of `Repository` is fast-forwarded on every get: one SELECT for events newer
    than the cached copy, because another process may have written some. That SELECT and
    its lock bookkeeping were the largest cost of a delete or undo after the commit. Here
    a cheaper question answers it when it can: `log_mark()` is a reading that stays the
    same while no writer other than this ledger changes the log (SQLite's
    `data_version`, read in a unit of work, which holds the process's write lock). An
    aggregate this ledger saved or loaded when the mark read M is still current while
    the mark reads M, so it is handed out without a query.

    Why it is right: the mark is read before the load, or before the save's commit, it
    is stored with, so a change by another writer after it changes the mark and forces
    the fast-forward; this ledger's own saves run in a unit of work, under the same lock
    as every marked get, and keep what they save before their commit (a failed commit
    takes it back), all before releasing the lock. A unit of work
    takes one reading, at its first load; a save with none takes the last one taken. A
    mark of None (PostgreSQL, or no unit of work) always takes the fast-forward. A stale
    copy could only cost a command a version conflict, never a wrong write: the event
    store refuses it.
    """

    def __init__(self, *args: Any, log_mark: LogMark, maxsize: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log_mark = log_mark
        self._maxsize = maxsize
        # Private copies (`_private`), apart from eventsourcing's cache (whose entries gets
        # outside any unit of work fast-forward in place); a get hands out an aggregate of
        # its own (`_restore`). Least recently used first. Read and written only in a
        # unit of work (under its lock), except `forget`, whose one dict operation is
        # atomic. Keyed by the id's int: hashing and comparing a UUID are Python calls.
        self._current: OrderedDict[int, tuple[Hashable, type | None, Any]] = OrderedDict()

    def get(self, aggregate_id: UUID, *, version: int | None = None, **kwargs: Any) -> Any:
        mark = self._log_mark() if version is None and not kwargs else None
        if mark is None:
            return super().get(aggregate_id, version=version, **kwargs)
        key = aggregate_id.int
        entry = self._current.get(key)
        if entry is not None and entry[0] == mark:
            self._current.move_to_end(key)
            return _restore(entry[1], entry[2])
        aggregate = super().get(aggregate_id)
        self._keep(key, mark, aggregate)
        return aggregate

    def saved(self, aggregates: Iterable[Aggregate]) -> Hashable | None:
        """Keep aggregates a save is about to commit, with the mark for them, which it
        returns: the unit's reading (taken at a load) or the connection's last one, both
        from before the commit (never a new reading); None if there is none, and then
        what was kept of them is dropped. `Ledger.save` calls it before its commit and
        `forget`s them if the commit fails, in one unit of work: no other command sees
        them in between.

        Copied: the saved object is the caller's, who may go on changing it."""
        mark = self._log_mark(existing=True)
        for aggregate in aggregates:
            key = aggregate.id.int
            if mark is None:
                self._current.pop(key, None)
            else:
                self._keep(key, mark, aggregate)
        return mark

    def forget(self, aggregate_ids: Iterable[UUID]) -> None:
        for aggregate_id in aggregate_ids:
            self._current.pop(aggregate_id.int, None)

    def _keep(self, key: int, mark: Hashable, aggregate: Aggregate) -> None:
        """Keep a private copy of `aggregate` with `mark`, as the most recently used."""
        current = self._current
        # Setting a key keeps its place: only one kept already moves to the end.
        kept = key in current
        cls, private = _private(aggregate)
        current[key] = (mark, cls, private)
        if kept:
            current.move_to_end(key)
        if len(current) > self._maxsize:
            current.popitem(last=False)


def _private(aggregate: Any) -> tuple[type | None, Any]:
    """What the repository keeps of an aggregate: for a `CheapCopy` one (all of the
    ledger's but the mirror's), its class and a copy of its attribute dict (its values
    are immutable and events replace them: a shallow copy is a deep one), one C call;
    for any other, a deep copy."""
    cls = type(aggregate)
    if issubclass(cls, CheapCopy):
        return cls, aggregate.__dict__.copy()
    return None, deepcopy(aggregate)


def _restore(cls: type | None, kept: Any) -> Any:
    """An aggregate of the caller's own from what `_private` kept: with no pending events
    (the kept dict may share the saved object's list, which its owner may fill)."""
    if cls is None:
        return deepcopy(kept)
    clone = cls.__new__(cls)
    clone.__dict__.update(kept)
    clone._pending_events = []
    return clone


class Ledger(Application[UUID]):
    name = "healthledger"

    def __init__(
        self,
        factory: InfrastructureFactory,
        *,
        user_snapshot_interval: int = 50,
        aggregate_cache_size: int = 10_000,
        unit_of_work: Callable[[], AbstractContextManager[Any]] = nullcontext,
        log_mark: LogMark = no_log_mark,
    ):
        self._given_factory = factory
        # The scope of one command's loads and saves (the persistence adapter decides
        # what it holds for them; each save is still its own transaction). An attribute,
        # not a method: every command and every save enters one.
        self.unit_of_work: Callable[[], AbstractContextManager[Any]] = unit_of_work
        self._log_mark = log_mark
        # Long-lived users replay from a snapshot; erasure deletes their snapshots.
        self.snapshotting_intervals = {User: user_snapshot_interval}
        env = {"IS_SNAPSHOTTING_ENABLED": "y"}
        if aggregate_cache_size > 0:
            # An LRU cache of aggregates, fast-forwarded from the log on every get (one
            # query for newer events), so it is right when other processes write too.
            env[self.AGGREGATE_CACHE_MAXSIZE] = str(aggregate_cache_size)
            env[self.AGGREGATE_CACHE_FASTFORWARD] = "y"
        super().__init__(env=env)

    def construct_factory(self, env: Any) -> InfrastructureFactory:
        return self._given_factory

    def construct_repository(self) -> LedgerRepository:
        maxsize = int(self.env.get(self.AGGREGATE_CACHE_MAXSIZE) or 0)
        return LedgerRepository(
            self.events,
            snapshot_store=self.snapshots,
            cache_maxsize=maxsize or None,
            fastforward=True,
            log_mark=self._log_mark if maxsize else no_log_mark,
            maxsize=max(maxsize, 1),
        )

    @property
    def repository(self) -> LedgerRepository:
        return self._repository  # type: ignore[return-value]

    def construct_mapper(self) -> LedgerMapper:
        return LedgerMapper(self.construct_transcoder())

    def construct_transcoder(self) -> Transcoder:
        transcoder = LedgerTranscoder()
        self.register_transcodings(transcoder)
        return transcoder

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        transcoder.register(UUIDAsHex())
        transcoder.register(DecimalAsStr())
        transcoder.register(DatetimeAsISO())
        transcoder.register(DateAsISO())

    def save(self, *objs: Any, tracking: Tracking | None = None, **kwargs: Any) -> None:
        """Save aggregates' pending events in one transaction; with `tracking`, also a
        follower's position in the notification log (the outbox's exactly-once step).

        What `Application.save` does for aggregates (the only objects we save), in fewer
        steps: the events are mapped and handed to the recorder together with their
        domain form (`LedgerRecorder.insert_events`), with no `ProcessingEvent`,
        `Recording` or `Notification` objects around them (nothing here reads them; the
        application's `notify` hooks are not used). A save is a unit of work of its own,
        or part of the caller's: what it saved is known current before another command of
        this process can load it (`LedgerRepository`).
        """
        events: list[Any] = []
        aggregates: list[Aggregate] = []
        # The snapshots due after the save (`_take_snapshots`): an aggregate of a type in
        # `snapshotting_intervals` whose event lands on a multiple of the interval.
        snapshots_due: list[tuple[Aggregate, int]] = []
        intervals = self.snapshotting_intervals
        for aggregate in objs:
            if aggregate is not None:
                new = aggregate.collect_events()
                events.extend(new)
                aggregates.append(aggregate)
                interval = intervals.get(type(aggregate))
                if interval is not None:
                    for event in new:
                        if event.originator_version % interval == 0:
                            snapshots_due.append((aggregate, event.originator_version))
        to_stored_event = self.mapper.to_stored_event
        stored = [to_stored_event(event) for event in events]
        repository: LedgerRepository = self._repository  # type: ignore[assignment]
        with self.unit_of_work():
            # What is saved here is the freshest copy there is: the next command on it (a
            # delete after a create, say) starts from a copy, not the database. Known
            # current (a mark, read before the commit) it is one of the repository's own.
            # Kept before the commit, not after: no other command can look (the unit of
            # work holds the lock until after the commit), a failed save forgets it
            # below, and the copies are made while the aggregates are in the CPU's
            # caches; after a durable commit's wait, each memory access costs several
            # times as much (measured: 17 µs after, against 4 µs before).
            mark = repository.saved(aggregates)
            try:
                # The recorder gets the domain events too: it projects them into the read
                # models and applies erasure effects inside the transaction that stores
                # them.
                self.recorder.insert_events(
                    stored, tracking=tracking, aggregate_events=events, **kwargs
                )
            except BaseException:
                repository.forget(aggregate.id for aggregate in aggregates)
                raise
            # With no mark (PostgreSQL), the saved aggregates go to eventsourcing's
            # cache, from which loads fast-forward: only once they are committed.
            cache = repository.cache
            if mark is None and cache is not None:
                for aggregate in aggregates:
                    cache.put(aggregate.id, aggregate)
        if snapshots_due:
            self._take_snapshots(snapshots_due)

    def _take_snapshots(self, due: list[tuple[Aggregate, int]]) -> None:
        # `Application._take_snapshots`, for aggregates whose events apply themselves (all
        # of ours), with the due versions found by `save`. Erasure deletes a user's
        # snapshots in its own transaction; a snapshot taken after it (snapshots follow
        # the save) would bring one back: erased users never are.
        if self.snapshots is None:
            return
        for aggregate, version in due:
            if isinstance(aggregate, User) and aggregate.status == ERASED:
                continue
            self.take_snapshot(aggregate.id, version=version)

    def find(self, aggregate_id: UUID, version: int | None = None) -> Aggregate | None:
        try:
            return self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            return None


class UsesLedger(Protocol):
    ledger: Ledger


S = TypeVar("S", bound=UsesLedger)
P = ParamSpec("P")
R = TypeVar("R")


def command(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a use case's method in one unit of work of its ledger (`Ledger.unit_of_work`)."""

    @functools.wraps(method)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.ledger.unit_of_work():
            return method(self, *args, **kwargs)

    return run
