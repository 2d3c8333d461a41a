"""Whether an error is the database being unavailable for a while (a lock held too long, a
full disk, a server restarting or unreachable), and the driver's code that says why.

One answer for both who meet it: the API answers 503 (adapters/http/errors.py), and the
scheduler's jobs log one line when an outage starts and one when it ends instead of a
traceback at every run (scheduler/runner.py). The code only, never the driver's message,
which may quote a statement's values."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError


def unavailable(exc: BaseException) -> str | None:
    """`OperationalError (SQLITE_FULL)`, `AdminShutdown (57P01)`, ... if `exc` is the
    database unavailable, else None."""
    if not isinstance(exc, OperationalError):
        return None
    orig = exc.orig
    code = getattr(orig, "sqlite_errorname", None) or getattr(orig, "sqlstate", None)
    return f"{type(orig).__name__} ({code})" if code else type(orig).__name__
