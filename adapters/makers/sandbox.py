"""The makers' sandbox: every fake of the registry (`FAKE_MAKERS`) running on localhost,
and the settings that point the service at them (docs/operations.md, the makers' sandbox).

`healthledger fake-makers` runs them alone and prints those settings; `healthledger serve
--fake-makers` runs them beside the service with the settings applied, so that a new user
can sign in at a fake maker from the link page in a browser and see data arrive.

The fakes stand in for the makers' clouds on this machine only: `serve --fake-makers` is
refused unless the service itself is only reachable here (`refusal`), so that a flag left
in a production unit cannot point real people's sign-ins at a fake.
"""

from __future__ import annotations

import importlib
import ipaddress
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from healthledger.adapters.makers import FAKE_MAKERS, FakeMaker
from healthledger.adapters.settings import OAuthClientSetting, Settings
from pydantic import SecretStr

# The sandbox's OAuth client, registered at every fake: not a secret (the fakes hold no
# real person's data), printed with the settings.
SANDBOX_CLIENT_ID = "healthledger-sandbox"
SANDBOX_CLIENT_SECRET = "healthledger-sandbox-secret"


class RunningFake(Protocol):
    base: str

    def register(self, client_id: str, secret: str) -> None: ...


@runtime_checkable
class CallsBack(Protocol):
    """A fake that POSTs to our webhook (Garmin's deliveries; WHOOP's and Polar's
    notifications when asked)."""

    webhook_url: str | None


Runner = Callable[..., AbstractContextManager[RunningFake]]


@dataclass
class SandboxMakers:
    """The fakes running, by slug."""

    fakes: dict[str, RunningFake] = field(default_factory=dict)
    registry: Mapping[str, FakeMaker] = field(default_factory=dict)

    @property
    def bases(self) -> dict[str, str]:
        return {slug: fake.base for slug, fake in self.fakes.items()}

    def call_back(self, public_base_url: str) -> list[str]:
        """Point the fakes that call our webhooks (`webhook_url`: Garmin delivers its data
        there) at the service's `/makers/{slug}/webhook`; the slugs pointed."""
        pointed = []
        for slug, fake in self.fakes.items():
            if isinstance(fake, CallsBack):
                fake.webhook_url = f"{public_base_url.rstrip('/')}/makers/{slug}/webhook"
                pointed.append(slug)
        return pointed

    def settings_updates(self) -> dict[str, Any]:
        """What `Settings.model_copy(update=...)` takes to point the service at the fakes:
        each maker's OAuth endpoints and data API, and the sandbox client at each."""
        updates: dict[str, Any] = {
            "oauth_maker_urls": self.bases,
            "oauth_clients": {
                slug: OAuthClientSetting(
                    client_id=SANDBOX_CLIENT_ID, client_secret=SecretStr(SANDBOX_CLIENT_SECRET)
                )
                for slug in self.fakes
            },
        }
        for slug, fake in self.fakes.items():
            for name in self.registry[slug].url_settings:
                updates[name] = fake.base
        return updates

    def environment(self) -> dict[str, str]:
        """The same as HEALTHLEDGER_* environment variables (what `fake-makers` prints)."""
        env: dict[str, str] = {}
        for name, value in self.settings_updates().items():
            if name == "oauth_clients":
                value = {
                    slug: {
                        "client_id": client.client_id,
                        "client_secret": client.client_secret.get_secret_value(),
                    }
                    for slug, client in value.items()
                }
            text = json.dumps(value) if isinstance(value, dict) else str(value)
            env[f"HEALTHLEDGER_{name.upper()}"] = text
        return env


def _runner(fake: FakeMaker) -> Runner:
    module, _, function = fake.runner.partition(":")
    run: Runner = getattr(importlib.import_module(module), function)
    return run


@contextmanager
def running_fake_makers(
    host: str = "127.0.0.1",
    port: int | None = 0,
    *,
    registry: tuple[FakeMaker, ...] = FAKE_MAKERS,
) -> Iterator[SandboxMakers]:
    """Every fake of `registry` served in a thread of this process, the sandbox client
    registered at each. `port`: 0 for ports the system picks, None for each fake's
    default port, else the first of consecutive ports in the registry's order."""
    running = SandboxMakers(registry={fake.slug: fake for fake in registry})
    with ExitStack() as stack:
        for index, fake in enumerate(registry):
            chosen = fake.default_port if port is None else (port + index if port else 0)
            served = stack.enter_context(_runner(fake)(host=host, port=chosen))
            served.register(SANDBOX_CLIENT_ID, SANDBOX_CLIENT_SECRET)
            running.fakes[fake.slug] = served
        yield running


def _local(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refusal(settings: Settings) -> str | None:
    """Why `serve --fake-makers` must not run with these settings (None: it may). The fakes
    answer on this machine only, so a service that listens or is reached elsewhere is not
    a sandbox: a production deployment has a public address."""
    places = {
        "HEALTHLEDGER_HOST": settings.host,
        "HEALTHLEDGER_PUBLIC_BASE_URL": urlsplit(settings.public_base_url).hostname,
        "HEALTHLEDGER_LINK_URL": urlsplit(settings.link_url).hostname,
    }
    elsewhere = [name for name, host in places.items() if not _local(host)]
    if not elsewhere:
        return None
    return (
        "--fake-makers runs fake makers for a sandbox on this machine only, and "
        f"{', '.join(elsewhere)} {'is' if len(elsewhere) == 1 else 'are'} not a loopback "
        "address (127.0.0.1, ::1 or localhost): this looks like a deployment real people "
        "reach. Run the sandbox on localhost (docs/operations.md, the makers' sandbox)."
    )
