"""Outbound HTTPS: one TLS context per process, shared by every client the service makes
(the webhook dispatcher's, the OAuth token exchanges')."""

from __future__ import annotations

import functools
import ssl
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx


@functools.cache
def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default verification (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR when
    `trust_env`), built once: loading the roots costs about 20 ms per client, which every
    `build_service` paid twice, and an SSL context is meant to be shared between
    connections and threads."""
    return httpx.create_ssl_context(trust_env=trust_env)


def retry_after(value: str | None, now: datetime) -> timedelta | None:
    """How long a 429's (or 503's) Retry-After asks to wait: delta-seconds or an HTTP date
    (GMT), at most a day (a longer one is taken as a day); None if absent or unreadable.
    The webhook sender and the makers' readers read it the same way."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return timedelta(seconds=min(int(text), 86400))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    return max(timedelta(0), min(when - now, timedelta(days=1)))
