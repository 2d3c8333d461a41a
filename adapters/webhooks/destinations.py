"""Where the webhook sender may connect: the address a URL's host resolves to, checked at
each new connection (not only at registration: DNS can change), and the connection made
to that checked address, so that a second resolution cannot swap it.

The check is the domain's (`Destinations`, `address` in `domain/webhooks/management.py`):
a loopback, private, link-local (the cloud metadata address 169.254.169.254 among them),
reserved, multicast or unspecified address is refused, IPv4-mapped IPv6 addresses are
judged by the IPv4 address they carry, unless the operator allows the host by name or
the address by range (HEALTHLEDGER_WEBHOOK_ALLOWED_DESTINATIONS); and never one of the
service's own (host, port) pairs. A refusal raises `DestinationRefused`, which the
dispatcher records as a failed attempt (`address_refused: ...`).

httpx has no hook between resolving and connecting, so the transport is our own
(`GuardedTransport`, an `httpx.BaseTransport`: httpx's documented way to plug a transport
in) over httpcore's connection pool made with `GuardedBackend`, an httpcore network
backend whose `connect_tcp` resolves, checks and connects to the checked address itself.
TLS still verifies the URL's host name (SNI and the certificate), and the Host header is
the URL's.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx
from healthledger.domain.webhooks.management import Destinations, address, host_ip

Resolver = Callable[[str, int], list[tuple[Any, ...]]]


class DestinationRefused(Exception):
    """No address the URL's host resolves to may receive webhooks; the message says why."""


def _resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


class GuardedBackend(httpcore.SyncBackend):
    def __init__(
        self,
        destinations: Destinations,
        own_addresses: Iterable[tuple[str, int]],
        resolve: Resolver = _resolve,
    ) -> None:
        self.destinations = destinations
        self.own_addresses = frozenset(own_addresses)
        self.resolve = resolve

    def refusal(self, host: str, ip: str, port: int) -> str | None:
        """Why `host` (resolved to `ip`) may not be posted to on `port`, or None."""
        if address(ip, port) in self.own_addresses or address(host, port) in self.own_addresses:
            return f"{ip} port {port} (this service itself)"
        if self.destinations.allows_host(host):
            return None
        parsed = host_ip(ip)
        kind = "unparsable" if parsed is None else self.destinations.refusal(parsed)
        return None if kind is None else f"{ip} ({kind})"

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            found = self.resolve(host, port)
        except OSError as exc:  # the name does not resolve
            raise httpcore.ConnectError(str(exc)) from exc
        refusals: list[str] = []
        checked: list[tuple[Any, ...]] = []
        for family, _type, _proto, _name, sockaddr in found:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = str(sockaddr[0]).split("%", 1)[0]
            reason = self.refusal(host, ip, port)
            if reason is None:
                checked.append(sockaddr)
            elif reason not in refusals:
                refusals.append(reason)
        if not checked:
            shown = ", ".join(refusals) or "no IP address"
            raise DestinationRefused(f"{host} resolves to {shown}, not a public address")
        last: OSError | None = None
        for sockaddr in checked:
            # The address just checked, never the name again.
            try:
                return super().connect_tcp(
                    str(sockaddr[0]),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = OSError(str(exc))
                continue
        raise httpcore.ConnectError(str(last))


# httpcore's errors as the httpx errors of the same name, which the dispatcher tells
# apart (a timeout from a refused or broken connection); the most specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


def _as_httpx(exc: Exception) -> Exception:
    for found, raised in _ERRORS:
        if isinstance(exc, found):
            return raised(str(exc))
    return exc


class _Body(httpx.SyncByteStream):
    """A response body read from httpcore's stream, closed with it."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.stream
        except Exception as exc:
            raise _as_httpx(exc) from exc

    def close(self) -> None:
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over httpcore's connection pool that connects through
    `GuardedBackend`: httpx's request in, httpx's response and errors out."""

    def __init__(
        self,
        backend: GuardedBackend,
        *,
        verify: ssl.SSLContext,
        limits: httpx.Limits,
    ) -> None:
        self.pool = httpcore.ConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        url = request.url
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            answer = self.pool.handle_request(sent)
        except DestinationRefused:
            raise
        except Exception as exc:
            raise _as_httpx(exc) from exc
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        self.pool.close()
