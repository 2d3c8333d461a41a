"""uvicorn's access log, without query strings and without the identifiers of people:

- The link page's and the portal's URLs carry their token in the query (a link token
  connects a user's devices; a portal token shows a user's lab results), and a log must
  not become a way in: every query string goes.
- `GET /v2/user/resolve/{client_user_id}` carries the team's identifier of a person in
  its path (the spec puts it there; teams often use an e-mail address), and a log line
  would keep it after the person's erasure, which the log cannot redact: the rest of
  that path goes too.

Other paths stay: they hold ids, slugs and kinds only."""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"
REDACTED_QUERY = "[redacted]"
# Paths whose remainder, after the prefix, names a person.
PERSONAL_PATH_PREFIXES = ("/v2/user/resolve/",)


def redacted_path(target: str) -> str:
    """A request target as the access log shows it."""
    path, found, _query = target.partition("?")
    for prefix in PERSONAL_PATH_PREFIXES:
        if path.startswith(prefix) and len(path) > len(prefix):
            path = prefix + REDACTED_QUERY
    return f"{path}?{REDACTED_QUERY}" if found else path


class AccessLogRedaction(logging.Filter):
    """Rewrites the request target of uvicorn's access log line (`'%s - "%s %s HTTP/%s"
    %d'`: client, method, path with query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], redacted_path(args[2]), *args[3:])
        return True


def redact_access_log() -> None:
    """Install the redaction on uvicorn's access logger (once: it is a filter instance
    per process). Filters outlive uvicorn's own logging configuration, which adds
    handlers and levels but removes no filter."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, AccessLogRedaction) for f in logger.filters):
        logger.addFilter(AccessLogRedaction())
