"""A lab report's text read into results (domain/labs/report_reading.py), without a PDF:
the table found by its header, cells cut into its columns, continuation lines, ranges,
flags and interpretations, the patient's labelled facts, the catalog's match."""

from __future__ import annotations

import pytest
from healthledger.adapters.composition import shipped_labs
from healthledger.domain.labs.report_reading import (
    NO_RESULTS,
    NO_TEXT,
    ReportRefused,
    read_report,
    reference_bounds,
)

pytestmark = pytest.mark.unit

CATALOG, _ = shipped_labs()
MARKERS = CATALOG.find_markers()
LABS = CATALOG.labs()

PAGE_ONE = """\
Quest Diagnostics                                   Ordered by Default team
Patient              Ada Lovelace                   Collected    2026-03-10
Date of birth        1985-12-10 (age 40)            Reported     2026-03-11
Specimen number      9662639669

 Test                       Code       Result     Unit        Reference     Flag    LOINC
                                                              range
 Glucose                    483        71.6       mg/dL       65-99                 2345-7
 Comprehensive Metabolic Panel
 eGFR                       10231-4    79.5       mL/min      >60                   98979-
 Comprehensive Metabolic Panel                                                      8
 AST                        822        767.1      U/L         10-40         H       1920-8
"""
PAGE_TWO = """\
 Test                       Code       Result     Unit        Reference     Flag    LOINC
                                                              range
 Comprehensive Metabolic Panel
 Potassium                  733        2.1        mmol/L      3.5-5.3       CRITICAL  2823-3


Performed by Quest Diagnostics. H: above the range.
"""


def test_a_table_across_pages_with_its_continuations() -> None:
    report = read_report([PAGE_ONE, PAGE_TWO], MARKERS, LABS)
    assert report["metadata"] == {
        "patient_first_name": "Ada",
        "patient_last_name": "Lovelace",
        "dob": "1985-12-10",
        "gender": None,
        "lab_name": "Quest Diagnostics",
        "date_reported": "2026-03-11",
        "date_collected": "2026-03-10",
        "specimen_number": "9662639669",
    }
    rows = {r["test_name"]: r for r in report["results"]}
    assert list(rows) == ["Glucose", "eGFR", "AST", "Potassium"]
    egfr = rows["eGFR"]
    # The LOINC cut over two lines is joined; the panel is the name's second line.
    assert [m["loinc_code"] for m in egfr["loinc_matches"]] == ["98979-8"]
    assert egfr["source_panel_name"] == "Comprehensive Metabolic Panel"
    assert (egfr["min_reference_range"], egfr["max_reference_range"]) == (60.0, None)
    assert (egfr["is_above_max_range"], egfr["is_below_min_range"]) == (False, False)
    assert rows["AST"]["interpretation"] == "abnormal" and rows["AST"]["flag"] == "H"
    # The panel line after the next page's header is the last result's (AST's), and the
    # footer after the blank lines is nobody's.
    assert rows["AST"]["source_panel_name"] == "Comprehensive Metabolic Panel"
    assert rows["Potassium"]["source_panel_name"] is None
    assert rows["Potassium"]["interpretation"] == "critical"
    assert rows["Potassium"]["is_below_min_range"] is True
    glucose = rows["Glucose"]
    assert glucose["interpretation"] == "normal" and glucose["type"] == "numeric"
    assert glucose["expected_result"]["slug"] == "glucose"
    assert glucose["expected_result"]["marker_name"] == "Comprehensive Metabolic Panel"


@pytest.mark.parametrize(
    ("printed", "bounds"),
    [
        ("65-99", (65.0, 99.0)),
        ("3.5 - 5.0", (3.5, 5.0)),
        ("0.40 \u2013 4.50", (0.4, 4.5)),
        ("<199", (None, 199.0)),
        ("< 5.7", (None, 5.7)),
        ("\u2264 5.6", (None, 5.6)),
        (">40", (40.0, None)),
        (">= 60", (60.0, None)),
        ("Negative", (None, None)),
        ("", (None, None)),
        (None, (None, None)),
    ],
)
def test_reference_ranges_as_labs_print_them(
    printed: str | None, bounds: tuple[float | None, float | None]
) -> None:
    assert reference_bounds(printed) == bounds


def test_values_flags_and_what_they_mean() -> None:
    page = """\
Analyte              Value        Flag     Units      Reference Interval
Glucose              112          HIGH     mg/dL      65 - 99
TSH                  0.21         L        mIU/L      0.40 - 4.50
Hemoglobin A1c       5.4                   %          < 5.7
HIV-1/2 Antibody     Negative                         Negative
Vitamin D            <5                    ng/mL      30 - 100
Comment              See note
Glucose, critical    600          A        mg/dL      65 - 99
"""
    rows = {r["test_name"]: r for r in read_report([page], MARKERS, LABS)["results"]}
    assert rows["Glucose"]["interpretation"] == "abnormal"
    assert rows["Glucose"]["is_above_max_range"] is True
    assert rows["TSH"]["interpretation"] == "abnormal"
    assert rows["TSH"]["is_below_min_range"] is True
    assert rows["Hemoglobin A1c"]["interpretation"] == "normal"
    assert rows["HIV-1/2 Antibody"]["type"] == "boolean"
    assert rows["HIV-1/2 Antibody"]["interpretation"] == "normal"
    assert rows["Vitamin D"]["type"] == "range"
    assert rows["Vitamin D"]["interpretation"] == "unknown"
    assert rows["Comment"]["type"] == "comment"
    assert rows["Comment"]["interpretation"] == "unknown"
    assert rows["Comment"]["loinc_matches"] == []
    # Unknown to the catalog by this name: its flag alone says abnormal.
    assert rows["Glucose, critical"]["interpretation"] == "abnormal"


def test_the_catalogs_critical_limits_make_a_result_critical() -> None:
    page = """\
Test            Result     Units     Range
Glucose         600        mg/dL     65-99
"""
    (glucose,) = read_report([page], MARKERS, LABS)["results"]
    assert glucose["interpretation"] == "critical"


def test_a_report_without_text_or_without_a_table_is_refused() -> None:
    with pytest.raises(ReportRefused) as empty:
        read_report(["", "   \n"], MARKERS, LABS)
    assert (empty.value.code, empty.value.failure_reason) == (NO_TEXT, "low_quality")
    with pytest.raises(ReportRefused) as letter:
        read_report(["Dear patient,\nYour results are normal.\n"], MARKERS, LABS)
    assert (letter.value.code, letter.value.failure_reason) == (NO_RESULTS, "low_quality")
    # Nothing of the report in the refusal.
    assert "patient" not in str(letter.value).casefold()


def test_the_patient_as_last_first_and_us_dates() -> None:
    page = """\
RIVERSIDE CLINICAL LABORATORY
Patient Name: LOVELACE, ADA          DOB: 12/10/1985        Sex: F
Accession No: RC-1                   Collected: 03/01/2026

Test        Result    Units    Reference Range
TSH         1.2       mIU/L    0.4-4.5
"""
    meta = read_report([page], MARKERS, LABS)["metadata"]
    assert (meta["patient_first_name"], meta["patient_last_name"]) == ("Ada", "Lovelace")
    assert (meta["dob"], meta["gender"], meta["specimen_number"]) == (
        "1985-12-10",
        "female",
        "RC-1",
    )
    assert meta["date_collected"] == "2026-03-01" and meta["date_reported"] is None
    assert meta["lab_name"] == "RIVERSIDE CLINICAL LABORATORY"
