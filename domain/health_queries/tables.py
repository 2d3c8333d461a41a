"""The tables an aggregate query reads and their columns, with the names the production
service's official client enumerates (`vital.types`: SleepColumnExprSleep,
ActivityColumnExprActivity, ... and the timeseries expressions' fields), so that what the
client sends is exactly what we accept. `tests/unit/test_health_query_language.py` holds
these lists to the client's.

Each column has a kind, which decides the functions that apply to it and how a `where`
compares it. How each column is computed from the stored data is the engine's business
(`adapters/answers/health_queries.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    NUMBER = "number"
    INTEGER = "integer"
    TEXT = "text"
    TIMESTAMP = "timestamp"
    DATE = "date"
    BOOLEAN = "boolean"


NUMERIC = frozenset({Kind.NUMBER, Kind.INTEGER})

# The functions of a select, and the kinds of column each applies to.
FUNCTIONS: dict[str, frozenset[Kind]] = {
    "min": frozenset({Kind.NUMBER, Kind.INTEGER, Kind.TIMESTAMP, Kind.DATE}),
    "max": frozenset({Kind.NUMBER, Kind.INTEGER, Kind.TIMESTAMP, Kind.DATE}),
    "mean": NUMERIC,
    "median": NUMERIC,
    "stddev": NUMERIC,
    "sum": NUMERIC,
    "count": frozenset(Kind),
    "oldest": frozenset(Kind),
    "newest": frozenset(Kind),
}

# The name every table's index (its time) has in a result.
INDEX_OUTPUT = "timestamp"
# The index among a table's columns: not a column a caller names, but `{"index": table}`.
INDEX = "__index"

N, INT, T, TS, D, B = Kind.NUMBER, Kind.INTEGER, Kind.TEXT, Kind.TIMESTAMP, Kind.DATE, Kind.BOOLEAN

_SUMMARY_SOURCE = {
    "source_type": T,
    "source_provider": T,
    "source_app_id": T,
    "source_device_id": T,
}

SLEEP_COLUMNS: dict[str, Kind] = {
    "id": T,
    "session_start": TS,
    "session_end": TS,
    "state": T,
    "type": T,
    "duration_second": INT,
    "stage_asleep_second": INT,
    "stage_awake_second": INT,
    "stage_light_second": INT,
    "stage_rem_second": INT,
    "stage_deep_second": INT,
    "stage_unknown_second": INT,
    "latency_second": INT,
    "heart_rate_minimum": N,
    "heart_rate_mean": N,
    "heart_rate_maximum": N,
    "heart_rate_dip": N,
    "heart_rate_resting": N,
    "efficiency": N,
    "hrv_mean_rmssd": N,
    "hrv_mean_sdnn": N,
    "skin_temperature": N,
    "skin_temperature_delta": N,
    "respiratory_rate": N,
    "score": N,
    **_SUMMARY_SOURCE,
    "time_zone": T,
}

ACTIVITY_COLUMNS: dict[str, Kind] = {
    "date": D,
    "calories_total": N,
    "calories_active": N,
    "steps": INT,
    "distance_meter": N,
    "floors_climbed": INT,
    "duration_active_second": INT,
    "intensity_sedentary_second": INT,
    "intensity_low_second": INT,
    "intensity_medium_second": INT,
    "intensity_high_second": INT,
    "heart_rate_mean": N,
    "heart_rate_minimum": N,
    "heart_rate_maximum": N,
    "heart_rate_resting": N,
    "heart_rate_mean_walking": N,
    "wheelchair_use": B,
    "wheelchair_push": INT,
    **_SUMMARY_SOURCE,
    "time_zone": T,
    "time_zone_offset": INT,
}

WORKOUT_COLUMNS: dict[str, Kind] = {
    "session_start": TS,
    "session_end": TS,
    "title": T,
    "sport_name": T,
    "sport_slug": T,
    "duration_active_second": INT,
    "heart_rate_mean": N,
    "heart_rate_minimum": N,
    "heart_rate_maximum": N,
    **{f"heart_rate_zone_{zone}": INT for zone in range(1, 7)},
    "distance_meter": N,
    "calories": N,
    "elevation_gain_meter": N,
    "elevation_maximum_meter": N,
    "elevation_minimum_meter": N,
    "speed_mean": N,
    "speed_maximum": N,
    "power_source": T,
    "power_mean": N,
    "power_maximum": N,
    "power_weighted_mean": N,
    "steps": INT,
    "map_polyline": T,
    "map_summary_polyline": T,
    **_SUMMARY_SOURCE,
    "external_id": T,
    "time_zone": T,
}

BODY_COLUMNS: dict[str, Kind] = {
    "measured_at": TS,
    "weight_kilogram": N,
    "fat_mass_percentage": N,
    "water_percentage": N,
    "muscle_mass_percentage": N,
    "visceral_fat_index": N,
    "bone_mass_percentage": N,
    "body_mass_index": N,
    "lean_body_mass_kilogram": N,
    "waist_circumference_centimeter": N,
    **_SUMMARY_SOURCE,
    "time_zone": T,
}

_NUTRIENTS = [
    "calories",
    "carbohydrate_gram",
    "protein_gram",
    "alcohol_gram",
    "water_gram",
    "fibre_gram",
    "sugar_gram",
    "cholesterol_gram",
    "saturated_fat_gram",
    "monounsaturated_fat_gram",
    "polyunsaturated_fat_gram",
    "omega3_fat_gram",
    "omega6_fat_gram",
    "total_fat_gram",
    "sodium_milligram",
    "potassium_milligram",
    "calcium_milligram",
    "phosphorus_milligram",
    "magnesium_milligram",
    "iron_milligram",
    "zinc_milligram",
    "fluoride_milligram",
    "chloride_milligram",
    "vitamin_a_milligram",
    "vitamin_b1_milligram",
    "riboflavin_milligram",
    "niacin_milligram",
    "pantothenic_acid_milligram",
    "vitamin_b6_milligram",
    "biotin_microgram",
    "vitamin_b12_microgram",
    "vitamin_c_milligram",
    "vitamin_d_microgram",
    "vitamin_e_milligram",
    "vitamin_k_microgram",
    "folic_acid_microgram",
    "chromium_microgram",
    "copper_milligram",
    "iodine_microgram",
    "manganese_milligram",
    "molybdenum_microgram",
    "selenium_microgram",
]

MEAL_COLUMNS: dict[str, Kind] = {
    **dict.fromkeys(_NUTRIENTS, N),
    "date": D,
    "name": T,
    **_SUMMARY_SOURCE,
}

PROFILE_COLUMNS: dict[str, Kind] = {
    "height_centimeter": N,
    "birth_date": D,
    "wheelchair_use": B,
    "gender": T,
    "sex": T,
    **_SUMMARY_SOURCE,
    "created_at": TS,
    "updated_at": TS,
}

# A timeseries sample's columns, by the family of its resource (the client's
# DiscreteTimeseriesExpr, IntervalTimeseriesExpr, BloodPressureTimeseriesExpr,
# TemperatureTimeseriesExpr, WorkoutDurationTimeseriesExpr, NoteTimeseriesExpr).
_SERIES_COMMON: dict[str, Kind] = {
    "source_provider": T,
    "source_type": T,
    "source_app_id": T,
    "source_workout_id": T,
    "source_sport": T,
    "timezone_offset": INT,
    "type": T,
}
SERIES_FIELDS: dict[str, dict[str, Kind]] = {
    "discrete": {**_SERIES_COMMON, "value": N},
    "interval": {**_SERIES_COMMON, "duration": N, "value": N},
    "blood_pressure": {**_SERIES_COMMON, "systolic": N, "diastolic": N},
    "temperature": {**_SERIES_COMMON, "duration": N, "value": N, "sensor_location": T},
    "workout_duration": {**_SERIES_COMMON, "duration": N, "value": N, "intensity": T},
    "note": {**_SERIES_COMMON, "tags": T, "content": T},
}
DISCRETE_SERIES = [
    "glucose",
    "heartrate",
    "hrv",
    "ige",
    "igg",
    "cholesterol",
    "weight",
    "fat",
    "blood_oxygen",
    "electrocardiogram_voltage",
    "respiratory_rate",
    "stress_level",
]
INTERVAL_SERIES = [
    "steps",
    "distance",
    "vo2_max",
    "heart_rate_alert",
    "stand_hour",
    "sleep_breathing_disturbance",
    "insulin_injection",
    "water",
    "caffeine",
    "mindfulness_minutes",
    "calories_active",
    "floors_climbed",
    "calories_basal",
    "afib_burden",
    "stand_duration",
    "sleep_apnea_alert",
    "wheelchair_push",
    "forced_expiratory_volume_1",
    "forced_vital_capacity",
    "peak_expiratory_flow_rate",
    "inhaler_usage",
    "fall",
    "uv_exposure",
    "daylight_exposure",
    "handwashing",
    "basal_body_temperature",
    "body_mass_index",
    "lean_body_mass",
    "waist_circumference",
    "heart_rate_recovery_one_minute",
    "workout_swimming_stroke",
    "workout_distance",
    "carbohydrates",
]
SERIES_FAMILY: dict[str, str] = {
    **dict.fromkeys(DISCRETE_SERIES, "discrete"),
    **dict.fromkeys(INTERVAL_SERIES, "interval"),
    "blood_pressure": "blood_pressure",
    "body_temperature": "temperature",
    "body_temperature_delta": "temperature",
    "workout_duration": "workout_duration",
    "note": "note",
}
SERIES_FIELD_NAMES = sorted({name for fields in SERIES_FIELDS.values() for name in fields})
SOURCE_FIELDS = (
    "source_provider",
    "source_type",
    "source_app_id",
    "source_workout_id",
    "source_sport",
)


@dataclass(frozen=True)
class Table:
    """A table of one query: a summary table, or the timeseries of one resource. `resource`
    is the stored resource it is computed from."""

    name: str
    resource: str
    columns: dict[str, Kind]

    @property
    def label(self) -> str:
        return f"timeseries {self.resource}" if self.name == "timeseries" else self.name


# Summary tables: name -> (stored resource, columns).
SUMMARY_TABLES: dict[str, Table] = {
    "sleep": Table("sleep", "sleep", SLEEP_COLUMNS),
    "activity": Table("activity", "activity", ACTIVITY_COLUMNS),
    "workout": Table("workout", "workouts", WORKOUT_COLUMNS),
    "body": Table("body", "body", BODY_COLUMNS),
    "meal": Table("meal", "meal", MEAL_COLUMNS),
    "profile": Table("profile", "profile", PROFILE_COLUMNS),
}
INDEX_TABLES = (*SUMMARY_TABLES, "timeseries")


def series_table(resource: str) -> Table:
    return Table("timeseries", resource, SERIES_FIELDS[SERIES_FAMILY[resource]])
