"""The makers' webhook verifiers this deployment has (the `MakerWebhooks` port,
domain/connections/maker_notices.py): one per maker whose app credentials are set,
keyed by our provider slug, as the route `/makers/{provider}/webhook` finds them.

A maker's verifier is added here (one entry, built from settings), never in the route.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from healthledger.adapters.providers.fitbit_webhooks import FitbitWebhooks
from healthledger.adapters.providers.garmin_webhooks import GarminWebhooks
from healthledger.adapters.providers.oura_webhooks import OuraWebhooks
from healthledger.adapters.providers.polar_webhooks import PolarWebhooks
from healthledger.adapters.providers.whoop_webhooks import WhoopWebhooks
from healthledger.adapters.providers.withings_webhooks import WithingsWebhooks
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.maker_notices import MakerWebhooks


def maker_webhooks(
    settings: Settings, stored_secret: Callable[[str], str | None] = lambda provider: None
) -> dict[str, MakerWebhooks]:
    """The verifiers of the makers whose service client (HEALTHLEDGER_OAUTH_CLIENTS) is
    set: their notifications are signed with its secret, where the maker signs them, or
    with the key the maker gave when our webhook was made (`stored_secret`, by maker)."""
    found: dict[str, MakerWebhooks] = {}
    oura = settings.oauth_clients.get("oura")
    if oura is not None:
        found["oura"] = OuraWebhooks(
            oura.client_secret.get_secret_value(), oura_verification_token(settings)
        )
    if "withings" in settings.oauth_clients:
        # Withings Notify is not signed: a notice only prompts a sync of the window it
        # names, read with our own token (docs/makers/withings.md#notify-webhooks-in).
        found["withings"] = WithingsWebhooks()
    fitbit = settings.oauth_clients.get("fitbit")
    if fitbit is not None:
        # Signed with the client secret; the handshake's code is the one Fitbit's console
        # shows for our subscriber (docs/makers/fitbit.md#subscriptions-webhooks-in).
        code = settings.fitbit_subscriber_verification_code
        found["fitbit"] = FitbitWebhooks(
            fitbit.client_secret.get_secret_value(),
            None if code is None else code.get_secret_value(),
        )
    whoop = settings.oauth_clients.get("whoop_v2")
    if whoop is not None:
        # Signed with the client secret (docs/makers/whoop.md#webhooks-in).
        found["whoop_v2"] = WhoopWebhooks(whoop.client_secret.get_secret_value())
    garmin = settings.oauth_clients.get("garmin")
    if garmin is not None:
        # Not signed: our consumer key in its header, pings fetched only from Garmin's
        # API with our own token (docs/makers/garmin.md#pushes-and-pings).
        found["garmin"] = GarminWebhooks(garmin.client_id)
    if "polar" in settings.oauth_clients:
        # Signed with the key Polar gave when `makers subscribe` made our webhook, read
        # at each notification; else the setting, for a webhook made by hand
        # (docs/makers/polar.md#webhooks-in).
        by_hand = settings.polar_webhook_signature_secret

        def polar_secret() -> str | None:
            stored = stored_secret("polar")
            if stored is not None:
                return stored
            return None if by_hand is None else by_hand.get_secret_value()

        found["polar"] = PolarWebhooks(polar_secret)
    return found


def oura_verification_token(settings: Settings) -> str:
    """The token our Oura subscriptions carry: the setting, else derived from the client
    secret (never the secret itself: Oura sends the token back in a URL)."""
    if settings.oura_webhook_verification_token is not None:
        return settings.oura_webhook_verification_token.get_secret_value()
    client = settings.oauth_clients["oura"]
    secret = client.client_secret.get_secret_value().encode()
    return hmac.new(secret, b"healthledger oura webhook verification", hashlib.sha256).hexdigest()
