"""``--rate``: parsing and the send schedule (pure; the broker side is in tests/integration/tuning)."""

from __future__ import annotations

import pytest

from pipeline.tuning.publish import Rate, RateError, parse_rate, schedule
from topics.records import Turn


def turns(*ts: int | None) -> list[Turn]:
    return [Turn("s", "user", "x", ts_ms=t) for t in ts]


@pytest.mark.parametrize(
    ("text", "rate", "described"),
    [
        ("original", Rate(speed=1.0), "the original pace"),
        (" Original ", Rate(speed=1.0), "the original pace"),
        ("10x", Rate(speed=10.0), "10x the original pace"),
        ("0.5x", Rate(speed=0.5), "0.5x the original pace"),
        ("500", Rate(per_second=500.0), "500 turns/s"),
        ("2.5", Rate(per_second=2.5), "2.5 turns/s"),
    ],
)
def test_rates(text: str, rate: Rate, described: str) -> None:
    assert parse_rate(text) == rate
    assert rate.describe() == described


@pytest.mark.parametrize("text", ["fast", "0", "-3", "x", "inf", "nan", "0x"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(RateError, match="--rate"):
        parse_rate(text)


def test_a_fixed_rate_spaces_records_evenly() -> None:
    assert schedule(turns(None, None, None, None), Rate(per_second=4)) == [0.0, 0.25, 0.5, 0.75]


def test_the_original_pace_follows_ts_relative_to_the_first_one() -> None:
    assert schedule(turns(10_000, 10_500, 12_000), Rate(speed=1)) == [0.0, 0.5, 2.0]
    assert schedule(turns(10_000, 10_500, 12_000), Rate(speed=4)) == [0.0, 0.125, 0.5]


def test_records_without_ts_or_with_an_earlier_ts_follow_the_previous_one() -> None:
    assert schedule(turns(None, 1_000, None, 3_000, 2_000, 4_000), Rate(speed=1)) == [0.0, 0.0, 0.0, 2.0, 2.0, 3.0]


def test_the_original_pace_needs_some_ts() -> None:
    with pytest.raises(RateError, match="needs a 'ts'"):
        schedule(turns(None, None), Rate(speed=1))
    assert schedule([], Rate(speed=1)) == []
