"""What our webhook registrations at the makers share (Oura's subscriptions:
oura_subscriptions.py; Polar's webhook: polar_subscriptions.py): one call to the maker's
registration API with the application's credentials, whose failure is a
`SubscriptionFailed` naming the maker and the step, never a secret or a body."""

from __future__ import annotations

from typing import Any

import httpx


class SubscriptionFailed(Exception):
    """The maker refused or could not be reached: the message says which step (no secret);
    `status` is the maker's HTTP status (None: no answer, or one we could not read)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def call(
    http: httpx.Client,
    maker: str,
    method: str,
    url: str,
    step: str,
    *,
    headers: dict[str, str] | None = None,
    auth: tuple[str, str] | None = None,
    json: Any = None,
) -> httpx.Response:
    """The maker's answer to one registration call; a 4xx/5xx or no answer is raised."""
    try:
        answer = http.request(method, url, headers=headers, auth=auth, json=json)
    except httpx.HTTPError as exc:
        raise SubscriptionFailed(f"{maker} could not be reached ({step}).") from exc
    if answer.status_code >= 400:
        raise SubscriptionFailed(
            f"{maker} answered {answer.status_code} ({step}).", answer.status_code
        )
    return answer


def body(answer: httpx.Response, maker: str, step: str) -> Any:
    """The answer's JSON (None when empty); an unreadable one is a failure of the step."""
    if not answer.content:
        return None
    try:
        return answer.json()
    except ValueError as exc:
        raise SubscriptionFailed(f"{maker}'s answer was not JSON ({step}).") from exc
