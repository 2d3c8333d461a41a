"""uvicorn's access log, without query strings and without the identifiers of people:

- The link page's and the portal's URLs carry their token in the query (a link token
  connects a user's devices; a portal token shows a user's lab results), and a log must
  not become a way in: every query string goes.
- `GET /v2/user/resolve/{client_user_id}` carries the team's identifier of a person in
  its path (the spec puts it there; teams often use an e-mail address), and a log line
  would keep it after the person's erasure, which the log cannot redact: the rest of
  that path goes too.
- A path that names a health fact, a maker (`/v2/user/{user_id}/freestyle_libre`: a
  glucose monitor says the person is diabetic) or a kind of health data
  (`/v2/summary/menstrual_cycle/{user_id}`, `/v2/timeseries/{user_id}/insulin_injection`),
  names no one: every segment that is not a word of our routes' paths, a maker's slug or
  a kind goes: the user's id, a sleep's or a workout's id derived from it, whatever was
  sent in their place (an e-mail address, a team's own identifier, a name). The line
  still says which endpoint answered what, not whose fact it was (issue 29: the maker and
  the kinds of a person's data are health facts, sealed in the log and gone with the
  erasure; a log line would keep them beside the id).

Other paths stay: they hold ids, and words of our paths."""

from __future__ import annotations

import functools
import logging

ACCESS_LOGGER = "uvicorn.access"
REDACTED_QUERY = "[redacted]"
# Paths whose remainder, after the prefix, names a person.
PERSONAL_PATH_PREFIXES = ("/v2/user/resolve/",)


@functools.cache
def health_words() -> frozenset[str]:
    """The path segments that name a health fact: the makers' slugs, and the kinds of
    health data the summary and timeseries paths take (the official clients' aliases
    too)."""
    # Imported on first use: the catalogs and the routes load with the service anyway.
    from healthledger.adapters.http.timeseries import PATH_NAMES
    from healthledger.adapters.reference import provider_slugs
    from healthledger.domain.connections.providers import SUMMARY_RESOURCES

    return provider_slugs() | SUMMARY_RESOURCES | frozenset(PATH_NAMES)


@functools.cache
def path_words() -> frozenset[str]:
    """The literal segments of both APIs' route paths (`v2`, `summary`, `grouped`, `ldl`):
    what a path segment is when it is not a parameter. A parameter's value is kept only if
    it is a health word (a maker's slug, a kind): anything sent in an id's place goes,
    however much it looks like a word (`/v2/summary/sleep/ada`)."""
    from healthledger.adapters.http.management_api import MANAGEMENT_ROUTERS
    from healthledger.adapters.http.team_api import TEAM_ROUTERS

    return frozenset(
        segment
        for router in (*TEAM_ROUTERS, *MANAGEMENT_ROUTERS)
        for route in router.routes
        for segment in getattr(route, "path", "").split("/")
        if segment and not segment.startswith("{")
    )


def redacted_path(target: str) -> str:
    """A request target as the access log shows it."""
    path, found, _query = target.partition("?")
    for prefix in PERSONAL_PATH_PREFIXES:
        if path.startswith(prefix) and len(path) > len(prefix):
            path = prefix + REDACTED_QUERY
    segments = path.split("/")
    health = health_words()
    if any(segment in health for segment in segments):
        words = path_words()
        path = "/".join(
            segment if not segment or segment in health or segment in words else REDACTED_QUERY
            for segment in segments
        )
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
