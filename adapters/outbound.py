"""Outbound HTTPS: one TLS context per process, shared by every client the service makes
(the webhook dispatcher's, the OAuth token exchanges')."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default verification (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR when
    `trust_env`), built once: loading the roots costs about 20 ms per client, which every
    `build_service` paid twice, and an SSL context is meant to be shared between
    connections and threads."""
    return httpx.create_ssl_context(trust_env=trust_env)
