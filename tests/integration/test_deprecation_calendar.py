"""The deprecation calendar (gaps.md, Deprecations and their dates): the shipped data, the
pure rules at an instant, and the scheduler applying each cut-over once its date has
passed (at start too, for dates that passed while the service was down), idempotently."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

import pytest
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.reference import (
    ReferenceDataError,
    deprecation_calendar,
    parse_deprecation_calendar,
    rules_at,
    still_accepted_deprecations,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.webhooks.deprecation_calendar import (
    CALENDAR_ID,
    CONNECTION_SOURCE_REMOVED,
    HYPNOGRAM_EVENTS_REMOVED,
    IS_FINAL_REMOVED,
    SOURCE_LEGACY_FIELDS_REMOVED,
    CutOverNotDue,
    DeprecationCalendar,
)

from tests.recorded import logged_events

IS_FINAL_DATE = datetime(2024, 6, 30, tzinfo=UTC)
SOURCE_DATE = datetime(2024, 7, 31, tzinfo=UTC)
HYPNOGRAM_DATE = datetime(2025, 1, 31, tzinfo=UTC)
JUST = timedelta(microseconds=1)
CTX = CommandContext.system(SCHEDULER)
HYPNOGRAM_TYPES = {
    "historical.timeseries.hypnogram.created",
    "daily.timeseries.hypnogram.created",
    "daily.timeseries.hypnogram.updated",
}

# -- the data -------------------------------------------------------------------------------


def test_the_calendar_holds_the_dates_of_gaps_md() -> None:
    assert [(c.effective_on, c.key) for c in deprecation_calendar()] == [
        (date(2024, 6, 30), IS_FINAL_REMOVED),
        (date(2024, 7, 31), CONNECTION_SOURCE_REMOVED),
        (date(2024, 7, 31), SOURCE_LEGACY_FIELDS_REMOVED),
        (date(2025, 1, 31), HYPNOGRAM_EVENTS_REMOVED),
    ]
    assert {s.key for s in still_accepted_deprecations()} == {
        "area_info_lab_parameter",
        "x_service_org_key_header",
    }


def test_a_calendar_file_missing_a_cut_over_is_refused() -> None:
    text = (
        '{"cut_overs": [{"key": "historical_is_final_removed", "effective_on": "2024-06-30",'
        ' "what": "w", "before": "b", "after": "a"}], "still_accepted": []}'
    )
    with pytest.raises(ReferenceDataError, match="must list each cut-over key once"):
        parse_deprecation_calendar(text, "broken.json")
    with pytest.raises(ReferenceDataError, match="not valid JSON"):
        parse_deprecation_calendar("{", "broken.json")


# -- the rules at an instant (pure) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("instant", "is_final", "legacy_source", "connection_source", "hypnogram"),
    [
        (datetime(2024, 1, 1, tzinfo=UTC), True, True, True, True),
        (IS_FINAL_DATE - JUST, True, True, True, True),
        (IS_FINAL_DATE, False, True, True, True),
        (SOURCE_DATE - JUST, False, True, True, True),
        (SOURCE_DATE, False, False, False, True),
        (HYPNOGRAM_DATE - JUST, False, False, False, True),
        (HYPNOGRAM_DATE, False, False, False, False),
        (datetime(2026, 11, 1, tzinfo=UTC), False, False, False, False),
    ],
)
def test_rules_at_each_side_of_each_date(
    instant: datetime,
    is_final: bool,
    legacy_source: bool,
    connection_source: bool,
    hypnogram: bool,
) -> None:
    rules = rules_at(instant)
    assert rules.is_final is is_final
    assert rules.legacy_source_fields is legacy_source
    assert rules.connection_source is connection_source
    for event_type in HYPNOGRAM_TYPES:
        assert rules.sends(event_type) is hypnogram
    assert rules.sends("daily.data.sleep_cycle.created")
    assert rules.withdrawn_event_types == (frozenset() if hypnogram else HYPNOGRAM_TYPES)


def test_rules_at_takes_the_instant_in_any_offset_and_refuses_naive_ones() -> None:
    from zoneinfo import ZoneInfo

    # 2024-06-29 22:30 in New York is already 2024-06-30 02:30 UTC.
    assert (
        rules_at(datetime(2024, 6, 29, 22, 30, tzinfo=ZoneInfo("America/New_York"))).is_final
        is False
    )
    with pytest.raises(ValueError, match="naive"):
        rules_at(datetime(2024, 7, 1))


# -- the scheduler applies what is due ------------------------------------------------------


def _applied(service: Service) -> list[str]:
    return sorted(service.webhook_queries.applied_cut_overs())


def _calendar_events(service: Service) -> list[tuple[str, str, str]]:
    return [
        (type(e).__qualname__, getattr(e, "key", ""), e.actor)
        for e in logged_events(service.ledger, CALENDAR_ID)
    ]


def test_each_cut_over_is_applied_once_its_date_has_come(settings: Settings) -> None:
    with freeze_time(IS_FINAL_DATE - timedelta(days=1)) as clock:
        service = build_service(settings)
        try:
            assert service.jobs.apply_cut_overs() == []
            assert service.ledger.find(CALENDAR_ID) is None  # nothing due: nothing written

            clock.move_to(IS_FINAL_DATE - JUST)
            assert service.jobs.apply_cut_overs() == []
            clock.move_to(IS_FINAL_DATE)
            assert service.jobs.apply_cut_overs() == [IS_FINAL_REMOVED]
            assert service.jobs.apply_cut_overs() == []

            clock.move_to(SOURCE_DATE - JUST)
            assert service.jobs.apply_cut_overs() == []
            clock.move_to(SOURCE_DATE + timedelta(hours=1))
            assert service.jobs.apply_cut_overs() == [
                CONNECTION_SOURCE_REMOVED,
                SOURCE_LEGACY_FIELDS_REMOVED,
            ]

            clock.move_to(HYPNOGRAM_DATE - JUST)
            assert service.jobs.apply_cut_overs() == []
            clock.move_to(HYPNOGRAM_DATE)
            assert service.jobs.apply_cut_overs() == [HYPNOGRAM_EVENTS_REMOVED]
            assert service.jobs.apply_cut_overs() == []

            applied = service.webhook_queries.applied_cut_overs()
            assert applied == {
                IS_FINAL_REMOVED: IS_FINAL_DATE,
                CONNECTION_SOURCE_REMOVED: SOURCE_DATE + timedelta(hours=1),
                SOURCE_LEGACY_FIELDS_REMOVED: SOURCE_DATE + timedelta(hours=1),
                HYPNOGRAM_EVENTS_REMOVED: HYPNOGRAM_DATE,
            }
            assert _calendar_events(service) == [
                ("DeprecationCalendar.Created", "", SCHEDULER),
                ("DeprecationCalendar.CutOverApplied", IS_FINAL_REMOVED, SCHEDULER),
                ("DeprecationCalendar.CutOverApplied", CONNECTION_SOURCE_REMOVED, SCHEDULER),
                ("DeprecationCalendar.CutOverApplied", SOURCE_LEGACY_FIELDS_REMOVED, SCHEDULER),
                ("DeprecationCalendar.CutOverApplied", HYPNOGRAM_EVENTS_REMOVED, SCHEDULER),
            ]
        finally:
            service.close()


def test_dates_that_passed_while_down_are_applied_at_the_next_start(settings: Settings) -> None:
    with freeze_time(IS_FINAL_DATE + timedelta(days=1)):
        service = build_service(settings)
        assert service.jobs.apply_cut_overs() == [IS_FINAL_REMOVED]
        service.close()
    # Down over two dates; the next start applies both, and only those.
    with freeze_time(HYPNOGRAM_DATE + timedelta(days=30)):
        service = build_service(settings)
        try:
            assert service.jobs.apply_cut_overs() == [
                CONNECTION_SOURCE_REMOVED,
                SOURCE_LEGACY_FIELDS_REMOVED,
                HYPNOGRAM_EVENTS_REMOVED,
            ]
            assert len(_calendar_events(service)) == 5
        finally:
            service.close()


def test_two_processes_apply_each_cut_over_once(settings: Settings) -> None:
    with freeze_time(HYPNOGRAM_DATE):
        first, second = build_service(settings), build_service(settings)
        try:
            stale = second.webhook_queries.applied_cut_overs()  # read before the first acts
            assert first.deprecations.apply_due(CTX, {}) == [c.key for c in deprecation_calendar()]
            assert stale == {}
            # The second process acts on its stale read: the calendar stream says no.
            assert second.deprecations.apply_due(CTX, stale) == []
            assert len(_calendar_events(second)) == 5
        finally:
            first.close()
            second.close()


def test_the_aggregate_refuses_a_cut_over_before_its_date() -> None:
    (first, *_) = deprecation_calendar()
    calendar = DeprecationCalendar.start(CTX, IS_FINAL_DATE - JUST)
    with pytest.raises(CutOverNotDue):
        calendar.apply_cut_over(CTX, IS_FINAL_DATE - JUST, first)
    assert calendar.apply_cut_over(CTX, IS_FINAL_DATE, first) is True
    assert calendar.apply_cut_over(CTX, IS_FINAL_DATE, first) is False


def test_the_applied_cut_overs_survive_a_rebuild(service: Service) -> None:
    assert len(service.jobs.apply_cut_overs()) == 4
    before = service.webhook_queries.applied_cut_overs()
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    assert service.webhook_queries.applied_cut_overs() == before
    assert service.jobs.apply_cut_overs() == []


def test_the_scheduler_applies_them_at_start(service: Service) -> None:
    scheduler = start_scheduler(service)
    try:
        deadline = time.monotonic() + 20
        while len(_applied(service)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _applied(service) == sorted(c.key for c in deprecation_calendar())
        assert {j.id for j in scheduler.get_jobs()} >= {"erasure-sweep", "deprecation-cut-overs"}
    finally:
        scheduler.shutdown(wait=True)


def test_the_cli_shows_and_applies_the_calendar(
    service: Service,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    assert main(["deprecations"]) == 0
    out = capsys.readouterr().out
    assert out.count("not applied") == 4 and "2024-06-30  historical_is_final_removed" in out
    assert main(["deprecations", "--apply"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("applied 4 cut-over(s)") and "not applied" not in out
    assert main(["deprecations", "--apply"]) == 0
    assert capsys.readouterr().out.startswith("applied 0 cut-over(s)")
    assert len(_applied(service)) == 4
