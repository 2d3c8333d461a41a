"""uvicorn's access log, without query strings: the link page's and the portal's URLs carry
their token in the query (a link token connects a user's devices; a portal token shows a
user's lab results), and a log must not become a way in. The path stays (ids only)."""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"
REDACTED_QUERY = "[redacted]"


class QueryStringRedaction(logging.Filter):
    """Replaces the query string of uvicorn's access log line (`'%s - "%s %s HTTP/%s" %d'`:
    client, method, path with query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, found, _query = args[2].partition("?")
            if found:
                record.args = (args[0], args[1], f"{path}?{REDACTED_QUERY}", *args[3:])
        return True


def redact_access_log_queries() -> None:
    """Install the redaction on uvicorn's access logger (once: it is a filter instance
    per process). Filters outlive uvicorn's own logging configuration, which adds
    handlers and levels but removes no filter."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, QueryStringRedaction) for f in logger.filters):
        logger.addFilter(QueryStringRedaction())
