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

httpx has no hook between resolving and connecting, so the transport is httpx's own with
its connection pool made over `GuardedBackend`, an httpcore network backend whose
`connect_tcp` resolves, checks and connects to the checked address itself. TLS still
verifies the URL's host name (SNI and the certificate), and the Host header is the URL's.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterable
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


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport (its request and exception mapping) over a pool that connects
    through `GuardedBackend`."""

    def __init__(
        self,
        backend: GuardedBackend,
        *,
        verify: ssl.SSLContext,
        limits: httpx.Limits,
    ) -> None:
        super().__init__(verify=verify, trust_env=False, limits=limits)
        self._pool.close()
        self._pool = httpcore.ConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )
