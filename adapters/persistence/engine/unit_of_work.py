"""The unit of work on SQLite: the process's write lock, held from a command's first read
to its last write.

Transactions do not change: each `Database.read()` and `Database.write()` inside a unit
is still its own. What the unit adds is that no other thread of this process writes
between the command's loads and its save, which is what lets the ledger trust a copy of
an aggregate it kept (ADR 0011). Another thread's command waits for this whole command,
not only for its write. A unit inside a unit (a command calling another) joins the
outer one. PostgreSQL takes no lock (`scoped`): the recorder's table lock serialises
writers there, and a unit only holds its reading of the log's head (ADR 0020).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection


class UnitOfWork:
    def __init__(self) -> None:
        # Re-entrant: a write inside a unit of work takes the lock the unit holds.
        self.lock = threading.RLock()
        self.state = threading.local()

    @property
    def active(self) -> bool:
        """Whether this thread is in a unit of work (and so holds the write lock)."""
        return bool(getattr(self.state, "active", False))

    @property
    def mark(self) -> Hashable | None:
        """The unit's change-mark reading (`Database.change_mark`), if it took one."""
        return getattr(self.state, "mark", None)

    @mark.setter
    def mark(self, value: Hashable | None) -> None:
        self.state.mark = value

    @property
    def reading(self) -> bool:
        """Whether this thread is reading on the writer's connection (`Database.read`)."""
        return bool(getattr(self.state, "reading", False))

    @reading.setter
    def reading(self, value: bool) -> None:
        self.state.reading = value

    @property
    def connection(self) -> Connection | None:
        """PostgreSQL: the unit's own connection, once it read or wrote (`Database`)."""
        return getattr(self.state, "connection", None)

    @connection.setter
    def connection(self, value: Connection | None) -> None:
        self.state.connection = value

    @property
    def in_use(self) -> bool:
        """Whether the unit's connection is in use (a read or a write on it)."""
        return bool(getattr(self.state, "in_use", False))

    @in_use.setter
    def in_use(self, value: bool) -> None:
        self.state.in_use = value

    def begin_statement(self) -> str:
        """What begins a transaction on the writer's connection: a write's takes SQLite's
        write lock at once; a read in a unit of work needs none."""
        return "BEGIN" if self.reading else "BEGIN IMMEDIATE"

    @contextmanager
    def held(self) -> Iterator[None]:
        if self.active:
            yield
            return
        with self.lock, self.scoped():
            yield

    @contextmanager
    def scoped(self) -> Iterator[None]:
        """The unit without the lock (PostgreSQL: the recorder's table lock serialises
        writers, and threads run their commands side by side): only its one mark reading
        (ADR 0020)."""
        if self.active:
            yield
            return
        self.state.active = True
        self.state.mark = None
        try:
            yield
        finally:
            self.state.active = False
            self.state.mark = None
