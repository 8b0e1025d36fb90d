"""Pure parts of the stats: rounding, JS number printing, the days fallback, the rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sinks.stats import (
    STATS_NOTE,
    ArmStats,
    UsageStats,
    format_stats,
    js_number,
    normalize_days,
    precision,
    stats_json,
)

CASES = Path(__file__).parents[2] / "integration" / "sinks" / "reference_cases.jsonl"


def _case(case_id: str) -> dict[str, Any]:
    for line in CASES.read_text(encoding="utf-8").splitlines():
        obj: dict[str, Any] = json.loads(line)
        if obj["id"] == case_id:
            return obj
    raise KeyError(case_id)


@pytest.mark.parametrize("case_id", ["F03_format_stats", "F04_format_stats_empty"])
def test_reference_rendering(case_id: str) -> None:
    case = _case(case_id)
    assert format_stats(case["result"]) == case["expect_text"]
    assert format_stats(UsageStats.from_dict(case["result"])) == case["expect_text"]


@pytest.mark.parametrize(
    ("used", "volunteered", "expected"),
    [
        (1, 16, 0.063),  # exact tie 0.0625 rounds up, as JS toFixed (Python round gives 0.062)
        (1, 3, 0.333),
        (2, 3, 0.667),
        (1, 2, 0.5),
        (2, 2, 1.0),
        (0, 5, 0.0),
        (0, 0, 0.0),
        (5, 0, 0.0),
        (1, 8, 0.125),
        (3, 16, 0.188),  # 0.1875 exact -> up
        (1, 1000, 0.001),
        (1, 2001, 0.0),  # 0.00049975 -> 0.000
        (1, 1999, 0.001),
    ],
)
def test_precision_half_up(used: int, volunteered: int, expected: float) -> None:
    assert precision(used, volunteered) == expected


def test_precision_uses_the_exact_binary_value() -> None:
    # 1/2000 is not exactly 0.0005: its double is a hair above, so it rounds up (JS toFixed(3) gives 0.001)
    from decimal import Decimal

    assert Decimal(1 / 2000) > Decimal("0.0005")
    assert precision(1, 2000) == 0.001


@pytest.mark.parametrize(
    ("value", "text"), [(1.0, "1"), (0.0, "0"), (0.5, "0.5"), (0.333, "0.333"), (0.063, "0.063"), (0.1, "0.1")]
)
def test_js_number(value: float, text: str) -> None:
    assert js_number(value) == text


@pytest.mark.parametrize(
    ("days", "expected"),
    [(30, 30), (7.9, 7), (-5, 30), (float("nan"), 30), (0, 30), (float("inf"), 30), ("7", 30), (True, 30),
     (None, 30), (0.5, 0)],
)
def test_normalize_days(days: Any, expected: int) -> None:
    assert normalize_days(days) == expected


def test_json_rendering_matches_js_stringify() -> None:
    stats = UsageStats(days=7, by_arm=[ArmStats("alias", "op", 2, 2, 1.0), ArmStats("title", "op", 3, 1, 0.333)])
    text = stats_json(stats)
    assert text.endswith("}\n")
    obj = json.loads(text)
    assert list(obj) == ["days", "approximate", "note", "total_volunteered", "total_used", "by_arm"]
    assert obj["note"] == STATS_NOTE and obj["total_volunteered"] == 5 and obj["total_used"] == 3
    assert '"precision": 1\n' in text and '"precision": 0.333\n' in text
    assert '\n  "days": 7,\n' in text
