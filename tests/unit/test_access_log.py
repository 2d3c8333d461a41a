"""uvicorn's access log as `serve` writes it (adapters/http/access_log.py): no query string,
no resolved client_user_id, and no path that names both a person and a health fact (issue
29: a maker or a kind of a person's data is a health fact, and a log line outlives the
erasure). The filter is exercised on real log records, as uvicorn emits them."""

from __future__ import annotations

import logging

import pytest
from healthledger.adapters.http.access_log import (
    ACCESS_LOGGER,
    AccessLogRedaction,
    health_words,
    path_words,
    redacted_path,
)

USER = "1b62592f-cc4e-5361-8b73-1ba0462f2294"
# A UUID as the path parameter also takes it: no hyphens (and starting with a letter).
USER_HEX = "ab62592fcc4e53618b731ba0462f2294"


@pytest.mark.parametrize(
    ("sent", "logged"),
    [
        # A maker's slug beside the user: a glucose monitor says the person is diabetic.
        (f"/v2/user/{USER}/freestyle_libre", "/v2/user/[redacted]/freestyle_libre"),
        # Kinds of data beside the user (summaries, timeseries, their raw and grouped forms).
        (f"/v2/summary/menstrual_cycle/{USER}", "/v2/summary/menstrual_cycle/[redacted]"),
        (f"/v2/summary/sleep/{USER}/raw", "/v2/summary/sleep/[redacted]/raw"),
        (
            f"/v2/timeseries/{USER}/insulin_injection/grouped",
            "/v2/timeseries/[redacted]/insulin_injection/grouped",
        ),
        (f"/v2/timeseries/{USER_HEX}/cholesterol/ldl", "/v2/timeseries/[redacted]/cholesterol/ldl"),
        (f"/v2/timeseries/{USER}/body_weight", "/v2/timeseries/[redacted]/body_weight"),
        # A sleep's id is derived from the user's: it names them too.
        (f"/v2/timeseries/sleep/{USER}/stream", "/v2/timeseries/sleep/[redacted]/stream"),
        # Whatever was sent in the id's place (an e-mail address, a team's own identifier).
        ("/v2/summary/sleep/ada.lovelace@example.org", "/v2/summary/sleep/[redacted]"),
        ("/v2/summary/glucose/Patient-42", "/v2/summary/glucose/[redacted]"),
        # A word is no exception: a name, a lower-case identifier.
        ("/v2/summary/sleep/alice", "/v2/summary/sleep/[redacted]"),
        ("/v2/user/jsmith42/freestyle_libre", "/v2/user/[redacted]/freestyle_libre"),
        (f"/v2/summary/sleep/{USER}/rawish", "/v2/summary/sleep/[redacted]/[redacted]"),
        # The query string goes as before.
        (
            f"/v2/summary/sleep/{USER}?start_date=2026-01-01",
            "/v2/summary/sleep/[redacted]?[redacted]",
        ),
        # Paths without a health fact keep their ids; the makers' own paths name no one.
        (f"/v2/user/{USER}", f"/v2/user/{USER}"),
        (f"/v3/order/{USER}/result", f"/v3/order/{USER}/result"),
        (f"/v2/user/{USER}/device", f"/v2/user/{USER}/device"),
        ("/makers/oura/webhook", "/makers/oura/webhook"),
        ("/v2/link/provider/password/oura", "/v2/link/provider/password/oura"),
        ("/v2/user/resolve/ada.lovelace@example.org", "/v2/user/resolve/[redacted]"),
        ("/?token=secret", "/?[redacted]"),
    ],
)
def test_a_path_naming_a_health_fact_names_no_one(sent: str, logged: str) -> None:
    assert redacted_path(sent) == logged


def test_the_words_are_the_catalogs() -> None:
    words = health_words()
    # Every maker of the catalog, the kinds of summaries and timeseries, the clients' aliases.
    assert {"freestyle_libre", "dexcom", "oura", "apple_health_kit"} <= words
    assert {"sleep", "menstrual_cycle", "glucose", "insulin_injection", "body_weight"} <= words
    # Words of our paths that say nothing of a body are not among them.
    assert not {"v2", "user", "order", "result", "device", "stream", "grouped"} & words


def test_the_paths_words_are_the_routes() -> None:
    words = path_words()
    # Each API's literal words, the makers' webhook path's and the cholesterol kinds'.
    assert {"v2", "v3", "summary", "timeseries", "grouped", "raw", "stream", "ldl"} <= words
    assert {"org", "team", "webhook", "makers", "resolve"} <= words
    # Never a parameter.
    assert not any(word.startswith("{") or "}" in word for word in words)
    assert not {"user_id", "alice"} & words


def test_the_filter_rewrites_uvicorns_record() -> None:
    record = logging.LogRecord(
        ACCESS_LOGGER,
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", f"/v2/user/{USER}/dexcom", "1.1", 200),
        None,
    )
    assert AccessLogRedaction().filter(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /v2/user/[redacted]/dexcom HTTP/1.1" 200'
