"""Use cases of webhook endpoints: create, update, disable, delete, read and rotate the
signing secret (management API, per team and environment; gaps.md Webhooks)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, InvalidRequest, WebhookEndpointNotFound
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.directory import TeamDirectory
from healthledger.domain.teams.teams import ENVIRONMENTS
from healthledger.domain.webhooks.endpoints import BY_CALLER, WebhookEndpoint, new_signing_secret
from healthledger.domain.webhooks.event_types import EventTypeCatalog

_SECRET_FIELD = "webhook_secret"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK = "loopback"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# One part of an IPv4 address as inet_aton reads it (and so getaddrinfo, and a browser's
# URL parser): decimal, 0x hexadecimal, or 0-prefixed octal.
_INET_ATON_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
# A host name as an allowed destination names it (case-free, no trailing dot).
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*"
)


def _aton_part(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    return int(part, 8) if part.startswith("0") else int(part)


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host such as `127.1`, `0x7f.0.0.1`, `0177.0.0.1` or
    `2130706433` stands for (inet_aton's shorthand forms, which resolvers and HTTP
    clients accept), or None if it is not one."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.fullmatch(p) for p in parts):
        return None
    values = [_aton_part(p) for p in parts]
    *leading, last = values
    if any(v > 255 for v in leading) or last >= 256 ** (5 - len(values)):
        return None
    number = 0
    for v in leading:
        number = number * 256 + v
    number = number * 256 ** (5 - len(values)) + last
    return ipaddress.IPv4Address(number)


def host_ip(host: str) -> IPAddress | None:
    """The IP address a URL's host is written as (brackets, a trailing dot, an IPv6 zone
    and inet_aton's shorthand forms allowed), or None for a name."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return _inet_aton(host)


def unwrapped(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped (::ffff:a.b.c.d) or 6to4 IPv6 address carries, else
    the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        return ip.ipv4_mapped or ip.sixtofour or ip
    return ip


def special_range(ip: IPAddress) -> str | None:
    """Which range that webhooks are not posted to by default holds `ip` (a name for a
    message), or None for a public address."""
    # A mapped address is the IPv4 address it carries; a 6to4 one is judged both ways.
    mapped = isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None
    for candidate in dict.fromkeys((unwrapped(ip),) if mapped else (unwrapped(ip), ip)):
        if candidate.is_unspecified:
            return "unspecified"
        if candidate.is_loopback:
            return "loopback"
        if candidate.is_link_local:
            return "link-local"
        if candidate.is_multicast:
            return "multicast"
        if candidate.is_private:
            return "private"
        if candidate.is_reserved:
            return "reserved"
        if not candidate.is_global:
            return "not publicly routable"
    return None


@dataclass(frozen=True)
class Destinations:
    """Where webhooks may go besides public addresses: the operator's named hosts (any
    address they resolve to) and CIDR ranges (HEALTHLEDGER_WEBHOOK_ALLOWED_DESTINATIONS),
    for receivers on premises. Empty: public addresses only."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Destinations:
        """From entries such as `hooks.internal`, `10.0.0.0/8`, `127.0.0.1`, `fd00::/8`;
        ValueError naming a malformed one."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip().rstrip(".").lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not _HOST_NAME.fullmatch(entry) or host_ip(entry) is not None:
                raise ValueError(f"{raw!r} is neither a host name nor an IP address or CIDR range")
            hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str) -> bool:
        """Whether `host` is a name the operator allows whatever it resolves to."""
        return host.strip("[]").rstrip(".").lower() in self.hosts

    def refusal(self, ip: IPAddress) -> str | None:
        """Why `ip` may not receive webhooks (`loopback`, `private`...), or None."""
        if any(
            c in network
            for c in (ip, unwrapped(ip))
            for network in self.networks
            if c.version == network.version
        ):
            return None
        return special_range(ip)


def address(host: str, port: int) -> tuple[str, int]:
    """A (host, port) pair compared case-free, with every loopback or wildcard name as one
    (an address in any of its spellings: `127.1`, `::ffff:127.0.0.1`...)."""
    name = host.strip("[]").rstrip(".").lower()
    ip = host_ip(name)
    if ip is None:
        return (_LOOPBACK if name == "localhost" else name, port)
    ip = unwrapped(ip)
    return (_LOOPBACK if ip.is_loopback or ip.is_unspecified else str(ip), port)


def url_address(url: str) -> tuple[str, int] | None:
    """The (host, port) an http(s) URL reaches, or None if it is not one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return address(parts.hostname, port or _DEFAULT_PORTS[parts.scheme])


def url_problem(
    url: str,
    own_addresses: Iterable[tuple[str, int]],
    destinations: Destinations = Destinations(),
) -> str | None:
    """Why `url` cannot receive webhooks (a message), or None. A host written as an
    address (or `localhost`) must be a public one, unless `destinations` allows it; a
    name is checked when each webhook is sent, against what it resolves to then."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return "url must not contain spaces or control characters."
    reached = url_address(url)
    if reached is None:
        return "url must be an absolute http or https URL with a host."
    if reached in set(own_addresses):
        return "url points at this service itself; webhooks must go to your own receiver."
    host = urlsplit(url).hostname or ""
    if destinations.allows_host(host):
        return None
    ip = host_ip(host)
    if ip is None and reached[0] == _LOOPBACK:
        ip = ipaddress.IPv4Address("127.0.0.1")
    refused = None if ip is None else destinations.refusal(ip)
    if refused is not None:
        return f"url points at a {refused} address; webhooks are sent to public addresses only."
    return None


@dataclass(frozen=True)
class SigningSecrets:
    """The secrets in force: the current one first; the previous one until it expires."""

    current: str
    previous: str | None
    previous_expires_at: datetime | None

    @property
    def in_force(self) -> list[str]:
        return [self.current, *([self.previous] if self.previous else [])]


class WebhookEndpoints:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        vault: PersonalDataVault,
        teams: TeamDirectory,
        catalog: EventTypeCatalog,
        own_addresses: Iterable[tuple[str, int]],
        destinations: Destinations = Destinations(),
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.vault = vault
        self.teams = teams
        self.catalog = catalog
        self.own_addresses = frozenset(own_addresses)
        # Where webhooks may go besides public addresses: checked at registration for a
        # URL written with an address, and by the dispatcher at each send (what the
        # URL's host resolves to then).
        self.destinations = destinations

    def create(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        *,
        url: str,
        description: str = "",
        filter_types: list[str] | None = None,
        disabled: bool = False,
        org_id: UUID | None = None,
    ) -> WebhookEndpoint:
        self._check_environment(environment)
        self.teams.team(team_id, org_id)
        self._check_url(url)
        wanted = self._checked_filters(filter_types or [])
        endpoint = WebhookEndpoint.create(
            ctx,
            self.clock(),
            team_id=team_id,
            environment=environment,
            url=url,
            description=description,
            filter_types=wanted,
            disabled=disabled,
            sealed_secret=self._seal(team_id, new_signing_secret()),
        )
        self._save(endpoint)
        return endpoint

    def endpoint(
        self, team_id: UUID, environment: str, endpoint_id: UUID, org_id: UUID | None = None
    ) -> WebhookEndpoint:
        """A live endpoint of this team and environment; anything else does not exist."""
        self.teams.team(team_id, org_id)
        endpoint = self.ledger.find(endpoint_id)
        if (
            not isinstance(endpoint, WebhookEndpoint)
            or endpoint.deleted_at is not None
            or endpoint.team_id != team_id
            or endpoint.environment != environment
        ):
            raise WebhookEndpointNotFound()
        return endpoint

    def update(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        endpoint_id: UUID,
        changes: dict[str, Any],
        org_id: UUID | None = None,
    ) -> WebhookEndpoint:
        """`changes` holds only the fields sent: url, description, disabled, filter_types.
        Every value is checked before anything is recorded."""
        endpoint = self.endpoint(team_id, environment, endpoint_id, org_id)
        fields = dict(changes)
        disabled = fields.pop("disabled", None)
        if "url" in fields:
            self._check_url(fields["url"])
        if "filter_types" in fields:
            fields["filter_types"] = self._checked_filters(fields["filter_types"] or [])
        now = self.clock()
        endpoint.update(ctx, now, **fields)
        if disabled is True:
            endpoint.disable(ctx, now, BY_CALLER)
        elif disabled is False:
            endpoint.enable(ctx, now, BY_CALLER)
        self._save(endpoint)
        return endpoint

    def disable(
        self, ctx: CommandContext, endpoint_id: UUID, reason: str
    ) -> WebhookEndpoint | None:
        """For the dispatcher (the system actor): stop delivering to an endpoint that is
        gone or has failed too long. A deleted or unknown endpoint is left alone."""
        endpoint = self.ledger.find(endpoint_id)
        if not isinstance(endpoint, WebhookEndpoint) or endpoint.deleted_at is not None:
            return None
        endpoint.disable(ctx, self.clock(), reason)
        self._save(endpoint)
        return endpoint

    def delete(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        endpoint_id: UUID,
        org_id: UUID | None = None,
    ) -> None:
        endpoint = self.endpoint(team_id, environment, endpoint_id, org_id)
        endpoint.delete(ctx, self.clock())
        self._save(endpoint)

    def rotate_secret(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        endpoint_id: UUID,
        org_id: UUID | None = None,
    ) -> SigningSecrets:
        endpoint = self.endpoint(team_id, environment, endpoint_id, org_id)
        endpoint.rotate_secret(ctx, self.clock(), self._seal(team_id, new_signing_secret()))
        self._save(endpoint)
        return self._secrets_of(endpoint)

    def secrets(
        self, team_id: UUID, environment: str, endpoint_id: UUID, org_id: UUID | None = None
    ) -> SigningSecrets:
        return self._secrets_of(self.endpoint(team_id, environment, endpoint_id, org_id))

    def signing_secrets(self, endpoint_id: UUID) -> list[str]:
        """The plain secrets a delivery is signed with now (the dispatcher's accessor):
        the current one, and the previous one during its 24 hours after a rotation. Empty
        for an unknown or deleted endpoint, or once the team's key is gone."""
        endpoint = self.ledger.find(endpoint_id)
        if not isinstance(endpoint, WebhookEndpoint) or endpoint.deleted_at is not None:
            return []
        opened = [
            self._open(endpoint.team_id, s) for s in endpoint.sealed_secrets_in_force(self.clock())
        ]
        return [s for s in opened if s is not None]

    # -- helpers --------------------------------------------------------------------------

    def _secrets_of(self, endpoint: WebhookEndpoint) -> SigningSecrets:
        sealed = endpoint.sealed_secrets_in_force(self.clock())
        current = self._open(endpoint.team_id, sealed[0])
        if current is None:  # the team's key is gone with the team
            raise WebhookEndpointNotFound()
        previous = self._open(endpoint.team_id, sealed[1]) if len(sealed) > 1 else None
        return SigningSecrets(
            current, previous, endpoint.previous_secret_expires_at if previous else None
        )

    def _seal(self, team_id: UUID, secret: str) -> str:
        # The team's own data key, as for custom credentials: the secret never rests in
        # clear, and it dies with the team.
        return self.vault.seal(team_id, {_SECRET_FIELD: secret})

    def _open(self, team_id: UUID, sealed: str) -> str | None:
        value = self.vault.open(team_id, sealed)
        return None if value is None else value[_SECRET_FIELD]

    def _check_environment(self, environment: str) -> None:
        if environment not in ENVIRONMENTS:
            raise InvalidRequest(
                f"environment must be one of {', '.join(ENVIRONMENTS)}.", "env", "path"
            )

    def _check_url(self, url: str) -> None:
        problem = url_problem(url, self.own_addresses, self.destinations)
        if problem is not None:
            raise InvalidRequest(problem, "url")

    def _checked_filters(self, filter_types: list[str]) -> list[str]:
        for entry in filter_types:
            problem = self.catalog.filter_problem(entry)
            if problem is not None:
                raise InvalidRequest(problem, "filter_types")
        return sorted(set(filter_types))

    def _save(self, *aggregates: Aggregate) -> None:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError as exc:
            raise ConcurrentChange() from exc
