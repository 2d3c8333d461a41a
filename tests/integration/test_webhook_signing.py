"""Webhook signatures verify with the receivers' own libraries: `standardwebhooks` with the
`webhook-*` headers, `svix` with the `svix-*` headers, also during a secret rotation, when
each secret alone verifies. The secrets are real endpoints' secrets, read back through the
service (so sealing and opening are part of the test)."""

from __future__ import annotations

import json
import time
from uuid import UUID

import pytest
import standardwebhooks
import svix.webhooks
from healthledger.adapters.composition import Service
from healthledger.adapters.webhooks.signing import (
    SigningError,
    new_message_id,
    signature,
    signed_headers,
)
from healthledger.domain.context import CommandContext

CTX = CommandContext(actor="test:actor", request_id="req-test")
BODY = json.dumps(
    {
        "event_type": "daily.data.sleep.created",
        "user_id": "3f1e3b57-8b1a-4e3c-9d2f-0a1b2c3d4e5f",
        "client_user_id": "user-42",
        "team_id": "8a0c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d",
        "data": {"data": [{"score": 88}], "source": {"provider": "oura", "type": "ring"}},
    },
    separators=(",", ":"),
).encode()


def _only(headers: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith(f"{prefix}-")}


def _verifies(secret: str, headers: dict[str, str], body: bytes = BODY) -> bool:
    """Both libraries agree: each is given only the header family it reads."""
    results = []
    for verifier, prefix in (
        (standardwebhooks.Webhook(secret), "webhook"),
        (svix.webhooks.Webhook(secret), "svix"),
    ):
        try:
            verifier.verify(body, _only(headers, prefix))
            results.append(True)
        except (standardwebhooks.WebhookVerificationError, svix.webhooks.WebhookVerificationError):
            results.append(False)
    assert results[0] == results[1], results
    return results[0]


@pytest.fixture
def team_id(service: Service) -> UUID:
    boot = service.bootstrap()
    assert boot is not None
    return boot.team_id


@pytest.fixture
def endpoint_id(service: Service, team_id: UUID) -> UUID:
    endpoint = service.webhooks.create(CTX, team_id, "sandbox", url="https://receiver.example/h")
    return endpoint.id


def test_the_standard_webhooks_test_vector() -> None:
    """The example of the Standard Webhooks specification, signed by our code."""
    assert (
        signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            b'{"test": 2432232314}',
        )
        == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_a_delivery_verifies_with_both_libraries(
    service: Service, team_id: UUID, endpoint_id: UUID
) -> None:
    secrets = service.webhooks.signing_secrets(endpoint_id)
    assert len(secrets) == 1
    message_id = new_message_id()
    headers = signed_headers(secrets, message_id, int(time.time()), BODY)
    assert set(headers) == {
        f"{prefix}-{name}"
        for prefix in ("webhook", "svix")
        for name in ("id", "timestamp", "signature")
    }
    assert headers["webhook-id"] == headers["svix-id"] == message_id
    assert headers["webhook-signature"] == headers["svix-signature"]
    assert headers["webhook-signature"].startswith("v1,")
    assert " " not in headers["webhook-signature"]
    assert _verifies(secrets[0], headers)

    # Anything changed on the way does not verify.
    assert not _verifies(secrets[0], headers, BODY.replace(b"88", b"89"))
    forged = {**headers, "webhook-id": "msg_other", "svix-id": "msg_other"}
    assert not _verifies(secrets[0], forged)
    other = service.webhooks.create(CTX, team_id, "sandbox", url="https://receiver.example/o")
    assert not _verifies(service.webhooks.signing_secrets(other.id)[0], headers)


def test_during_a_rotation_each_secret_alone_verifies(
    service: Service, team_id: UUID, endpoint_id: UUID
) -> None:
    (old,) = service.webhooks.signing_secrets(endpoint_id)
    rotated = service.webhooks.rotate_secret(CTX, team_id, "sandbox", endpoint_id)
    secrets = service.webhooks.signing_secrets(endpoint_id)
    assert secrets == [rotated.current, old]
    headers = signed_headers(secrets, new_message_id(), int(time.time()), BODY)
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert _verifies(rotated.current, headers)
    assert _verifies(old, headers)
    # A receiver still on the old secret, after the overlap, is signed for no more.
    only_new = signed_headers([rotated.current], new_message_id(), int(time.time()), BODY)
    assert _verifies(rotated.current, only_new)
    assert not _verifies(old, only_new)


def test_an_old_timestamp_is_refused_by_the_receivers(service: Service, endpoint_id: UUID) -> None:
    """The timestamp is signed, and receivers refuse stale ones (replay protection)."""
    secrets = service.webhooks.signing_secrets(endpoint_id)
    stale = signed_headers(secrets, new_message_id(), int(time.time()) - 3600, BODY)
    assert not _verifies(secrets[0], stale)


@pytest.mark.parametrize("secret", ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_"])
def test_malformed_secrets_are_refused_without_echoing_them(secret: str) -> None:
    with pytest.raises(SigningError) as raised:
        signature(secret, "msg_1", 1, b"{}")
    assert str(raised.value) in {
        "a signing secret starts with whsec_",
        "a signing secret is base64 after its prefix",
        "a signing secret is not empty",
    }


def test_a_delivery_needs_a_secret() -> None:
    with pytest.raises(SigningError):
        signed_headers([], "msg_1", 1, b"{}")
